"""A kernel cannot make NVRTC read (and its log quote) files outside the CUDA headers."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelopt_mcp.compiler import CompileCache, compile_kernel
from kernelopt_mcp.source_policy import include_problem

KERNEL = 'extern "C" __global__ void k(float* a) { a[0] = 1.0f; }\n'


@pytest.mark.parametrize("directive", [
    '#include "/etc/passwd"',
    "#include </etc/passwd>",
    '#include "../../../../etc/passwd"',
    "#include <cuda/../../../../../etc/passwd>",
    '#define P "/etc/passwd"\n#include P',
    '# /* hidden */ include "/etc/passwd"',
    '/* a comment first */ #include "/etc/passwd"',
    '#\\\ninclude "/etc/passwd"',
    '%:include "/etc/passwd"',
    '??=include "/etc/passwd"',
    "\f#\vinclude </etc/shadow>",
    "#include_next <cuda_fp16.h>",
    '#import "x.h"',
    '#embed "/etc/passwd"',
    'const char* s = R"x( " /* )x";\n#include "/etc/passwd"\n// */',
])
def test_refused(directive: str) -> None:
    found = include_problem(directive + "\n" + KERNEL)
    assert found is not None, directive
    line, message = found
    assert line >= 1 and "is not allowed" in message


@pytest.mark.parametrize("source", [
    "#include <cuda_fp16.h>\n#include <mma.h>\n#include <cooperative_groups/reduce.h>\n",
    '#include "cuda_bf16.h"\n',
    '// #include "/etc/passwd" in a comment is not a directive\n',
    '/*\n#include "/etc/passwd"\n*/\n',
    'const char* s = "#include \\"/etc/passwd\\"";\n',
    "",
])
def test_allowed(source: str) -> None:
    assert include_problem(source + KERNEL) is None


def test_the_compiler_refuses_before_nvrtc_reads_the_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret.h"
    secret.write_text("THE-SECRET-VALUE\n")
    result = compile_kernel(f'#include "{secret}"\n' + KERNEL, cache=CompileCache())
    assert not result.ok
    assert "THE-SECRET-VALUE" not in result.log and "THE-SECRET-VALUE" not in result.summary()
    assert result.diagnostics[0].line == 1 and "absolute paths" in result.diagnostics[0].message


def test_a_relative_include_finds_nothing_outside_the_headers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker compiles in an empty directory, so a quoted name never reaches the server's cwd."""
    (tmp_path / "near.h").write_text("THE-SECRET-VALUE\n")
    monkeypatch.chdir(tmp_path)
    result = compile_kernel('#include "near.h"\n' + KERNEL, cache=CompileCache())
    assert not result.ok and "THE-SECRET-VALUE" not in result.log
    assert "cannot open source file" in result.log or "not found" in result.log.lower(), result.log
