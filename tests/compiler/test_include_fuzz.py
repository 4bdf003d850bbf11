"""Fuzz the preprocessor and lexer against the real NVRTC: no byte of a secret ever comes out.

A secret (a random token) is planted in a file outside every directory the compiler may read
and in the server's environment (/proc/self/environ). A generated corpus spells an include of
them every way we know to fool a source scanner: line endings (\\r, \\r\\n, \\f, \\v), a BOM,
digraphs and trigraphs, line splices, raw strings, digit separators, _Pragma, #embed,
__has_include, macro-built include names (object macros, stringizing, token pasting) and very
long lines. Each source is compiled with the scanner on (the real path) and off (only the
operating system's confinement stands), and the oracle reads everything compile_kernel gives
back: the result as JSON, its log, summary, PTX and CUBIN, or the error it raised. A few run
through the MCP `compile` tool too.
"""

from __future__ import annotations

import itertools
import os
import random
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakegpu import in_memory_server, tool_text, write_harness

from kernelopt_mcp import compiler
from kernelopt_mcp.compile_options import CompileLimits
from kernelopt_mcp.compiler import CompileCache, compile_kernel
from kernelopt_mcp.config import Settings, bundled_workloads_dir
from kernelopt_mcp.errors import KerneloptError
from kernelopt_mcp.server_config import ServerConfig

KERNEL = 'extern "C" __global__ void k(float* x) { x[0] = 1; }\n'
CORPUS_SIZE = 250
MCP_CASES = 12


@pytest.fixture(scope="module")
def secret(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The token, in a file outside all roots, written so that NVRTC, could it read the file,
    would put it in the log (a failed static_assert, #error) or in the PTX (a symbol)."""
    token = "SECRET" + secrets.token_hex(12)
    path = tmp_path_factory.mktemp("outside") / "secret.h"
    path.write_text(
        f"// {token}\n__device__ int {token} = 1;\n"
        f'static_assert(sizeof(int) == 0, "{token}");\n#error {token}\n{token}\n'
    )
    old = os.environ.get("KERNELOPT_FUZZ_SECRET")
    os.environ["KERNELOPT_FUZZ_SECRET"] = token  # the server's environment holds it too
    try:
        yield token, path
    finally:
        if old is None:
            os.environ.pop("KERNELOPT_FUZZ_SECRET", None)
        else:
            os.environ["KERNELOPT_FUZZ_SECRET"] = old


def targets(path: Path) -> list[str]:
    """Ways to name the secret: absolute, relative to the worker's scratch directory, environ."""
    relative = os.path.relpath(path, Path(tempfile.gettempdir()) / "kernelopt-nvrtc-x")
    return [str(path), relative, "/proc/self/environ", "/proc/self/cwd/../../" + str(path).lstrip("/"),
            "/proc/self/root" + str(path)]


def spellings(target: str) -> list[str]:
    """Directive bodies (after the '#') that name ``target``; some need lines before them."""
    quoted = f'"{target}"'
    return [
        f"include {quoted}",
        f"include <{target}>",
        f'define P {quoted}\n#include P',
        f"define S(x) #x\n#define XS(x) S(x)\n#include XS({target})",
        f'define CAT(a, b) a##b\n#define Q CAT(PA, TH)\n#define PATH {quoted}\n#include Q',
        f"if __has_include({quoted})\n#include {quoted}\n#endif",
        f"include_next {quoted}",
        f"embed {quoted}",
        f"import {quoted}",
        f'line 1 "kernel.cu"\n#include {quoted}',
    ]


HASHES = ["#", "%:", "??=", "# ", "#/* c */", "#\\\n", "#\t", "\\\n#"]
LEADS = ["", "\r", "\f", "\v", " \t", "\ufeff", "/**/", "\r\n"]
NEWLINES = ["\n", "\r\n", "\r"]
CONTEXTS = [
    ("", ""),
    ("__device__ int a = 1'2; __device__ const char* b = \"'/*\";\n", "\n// */\n"),
    ('__device__ const char* s = R"x( " /* )x";\n', "\n// */\n"),
    ("// a comment that continues \\\n", "\n"),
    ("// " + "x" * 200_000 + "\n", "\n"),
    ('_Pragma("once") _Pragma("push_macro(\\"k\\")")\n', '\n_Pragma("pop_macro(\\"k\\")")\n'),
    ("/* unterminated? no: */ __device__ char c = '\\'';\n", "\n"),
]


def corpus(path: Path, size: int) -> list[str]:
    rng = random.Random(13)
    every = list(itertools.product(targets(path), range(10), HASHES, LEADS, NEWLINES, range(len(CONTEXTS))))
    picked = rng.sample(every, size)
    # every spelling, lead, hash and context at least once with the absolute path
    picked += [(str(path), i, "#", "", "\n", 0) for i in range(10)]
    picked += [(str(path), 0, h, lead, "\n", 0) for h in HASHES for lead in LEADS[:3]]
    picked += [(str(path), 0, "#", "\r", "\n", c) for c in range(len(CONTEXTS))]
    sources = []
    for target, spelling, hash_, lead, newline, context in picked:
        before, after = CONTEXTS[context]
        body = spellings(target)[spelling].replace("\n#", "\n" + lead + hash_)
        text = before + lead + hash_ + body + after + KERNEL
        sources.append(text.replace("\n", newline) if newline != "\n" else text)
    return sources


def leaks(token: str, source: str, scanner: bool, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """Where ``token`` came out of compiling ``source``, or None."""
    with monkeypatch.context() as m:
        if not scanner:
            m.setattr(compiler, "include_problem", lambda s: None)
        try:
            r = compile_kernel(source, cache=CompileCache(), limits=CompileLimits(timeout_s=60))
        except (KerneloptError, ValueError) as exc:
            return "exception" if token in str(exc) else None
    outputs = {
        "json": r.model_dump_json(), "log": r.log, "summary": r.summary(), "ptx": r.ptx or "",
        "diagnostics": " ".join(d.message for d in r.diagnostics),
    }
    found = [name for name, text in outputs.items() if token in text]
    if r.cubin and token.encode() in r.cubin:
        found.append("cubin")
    return ", ".join(found) or None


@pytest.mark.parametrize("scanner", [True, False], ids=["scanner-on", "scanner-off"])
def test_no_secret_comes_out_of_any_compile(
    secret: tuple[str, Path], scanner: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    token, path = secret
    bad = {}
    for i, source in enumerate(corpus(path, CORPUS_SIZE)):
        where = leaks(token, source, scanner, monkeypatch)
        if where:
            bad[i] = (where, source[:200])
    assert not bad, bad


def test_the_oracle_sees_a_leak(secret: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The oracle is not blind: the token in the kernel's own source comes back in its log."""
    token, _ = secret
    own = f'#error {token}\n' + KERNEL
    assert leaks(token, own, True, monkeypatch) is not None


@pytest.mark.anyio
@pytest.mark.parametrize("scanner", [True, False], ids=["scanner-on", "scanner-off"])
async def test_no_secret_comes_out_of_the_mcp_compile_tool(
    secret: tuple[str, Path], scanner: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token, path = secret
    if not scanner:
        monkeypatch.setattr(compiler, "include_problem", lambda s: None)
    settings = Settings(harness=write_harness(tmp_path, "nogpu"),
                        workload_dirs=(bundled_workloads_dir(),), timeout_s=20)
    config = ServerConfig(settings=settings, workspace=tmp_path / "ws")
    sources = corpus(path, CORPUS_SIZE)[-MCP_CASES:]
    async with in_memory_server(config) as (client, _):
        for source in sources:
            r = await client.call_tool("compile", {"source": source})
            seen = tool_text(r) + repr(r.structured_content)
            assert token not in seen, source[:200]
