"""Property-based tests of every MCP tool's arguments, through the SDK's in-memory Client.

Each example starts the server against the pretend H200 (tests/fakegpu.py, no GPU) with docs
search offline, calls one tool with generated arguments (wrong types, missing and extra fields,
huge sources, hostile and absolute paths, symlinks out of the workspace, weird workload names),
then a good call. The properties:

- the hostile call returns a result or an error result whose text says what was wrong (the SDK
  answers a crash with the bare "Error executing tool <name>", which fails the test);
- the server keeps answering: the good call after it succeeds;
- nothing hangs: every call has a deadline;
- nothing is written outside the workspace: the sandbox around it (the symlink targets, the
  configured workload directory, the fake harness) and the bundled workloads are unchanged.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakegpu import (
    ADD_LAUNCH,
    TINY_SPEC,
    in_memory_server,
    kernel,
    write_harness,
    write_tiny_workload,
)
from fakegpu import tool_text as _text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_properties import HOSTILE_PATHS, json_scalars, mutated_specs

from kernelopt_mcp.config import Settings, bundled_workloads_dir
from kernelopt_mcp.server_config import ServerConfig

CALL_DEADLINE_S = 60
HUGE_SOURCE = "// " + "x" * (600 * 1024) + "\n" + kernel()

settings_cheap = settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
settings_gpu = settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


@dataclass(frozen=True)
class Sandbox:
    base: Path
    workspace: Path
    outside: Path
    config: ServerConfig


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    """A workspace with kernels, symlinks out of it, a fifo; a directory outside it with a kernel."""
    base = tmp_path_factory.mktemp("server_props")
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.cu").write_text(kernel())
    ws = base / "ws"
    kernels = ws / "kernels"
    kernels.mkdir(parents=True)
    (kernels / "ok.cu").write_text(kernel())
    (kernels / "binary.cu").write_bytes(b"\xff\xfe\x00\x01" * 100)
    (kernels / "link_out.cu").symlink_to(outside / "secret.cu")
    (kernels / "link_dir").symlink_to(outside)
    (kernels / "link_etc").symlink_to("/etc/passwd")
    (kernels / "link_zero.cu").symlink_to("/dev/zero")
    (kernels / "loop.cu").symlink_to(kernels / "loop.cu")
    os.mkfifo(kernels / "fifo.cu")
    extra = write_tiny_workload(base / "extra")
    settings_ = Settings(
        harness=write_harness(base, "fake"), workload_dirs=(bundled_workloads_dir(), extra), timeout_s=20,
        docs_offline=True, arch="sm_90",  # compiles need no device probe: examples stay quick
    )
    return Sandbox(base, ws, outside, ServerConfig(settings=settings_, workspace=ws))


def _tree(root: Path, skip: Path | None = None) -> dict[str, tuple[int, int, bool]]:
    """Every entry under ``root`` (symlinks not followed): size, mtime and whether it is a link."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if skip is not None and (here == skip or skip in here.parents):
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            if name in ("harness-env.jsonl", "harness-requests.jsonl"):
                continue  # the pretend GPU's own logs: the environments it was started with, the requests it served
            st_ = (here / name).lstat()
            if skip is not None and here / name == skip:
                continue  # the workspace's own mtime changes when the server writes into it
            out[str((here / name).relative_to(root))] = (st_.st_size, st_.st_mtime_ns, (here / name).is_symlink())
    return out



GOOD_CALL = ("compile", {"source": kernel()})


def _run(config: ServerConfig, name: str, args: Any) -> list[Any]:
    """The hostile call, then a good one, on a fresh server; every call under a deadline."""

    async def main() -> list[Any]:
        async with in_memory_server(config) as (client, _):
            out = []
            for tool, arguments in ((name, args), GOOD_CALL):
                with anyio.fail_after(CALL_DEADLINE_S):
                    out.append(await client.call_tool(tool, arguments))
            return out

    return anyio.run(main)


def _check(sandbox: Sandbox, name: str, args: Any) -> Any:
    outside_before = _tree(sandbox.base, skip=sandbox.workspace)
    bundled_before = _tree(bundled_workloads_dir())
    hostile, good = _run(sandbox.config, name, args)
    if hostile.is_error:
        message = _text(hostile).strip()
        bare = f"Error executing tool {name}"
        assert message and message != bare, f"{name} crashed on {str(args)[:300]!r}: {message!r}"
        assert "Traceback" not in message
    assert not good.is_error, f"the server stopped answering after {name}({str(args)[:200]}): {_text(good)}"
    assert _tree(sandbox.base, skip=sandbox.workspace) == outside_before, "something was written outside the workspace"
    assert _tree(bundled_workloads_dir()) == bundled_before, "a bundled workload changed"
    return hostile


# --- arguments ---------------------------------------------------------------------------------

WORKLOAD_NAMES = [
    "tiny_add", "vector_add", "../tiny_add", "tiny_add/../sgemm", "tiny_add\n", "", "\u00e9", "a" * 1000, "__init__",
    "/etc/passwd", "workloads", "nope", "CON", ".", "tiny add",
]
SANDBOX_PATHS = [
    "kernels/ok.cu", "kernels/binary.cu", "kernels/link_out.cu", "kernels/link_dir/secret.cu", "kernels/link_etc",
    "kernels/link_zero.cu", "kernels/loop.cu", "kernels/fifo.cu", "kernels", "../outside/secret.cu",
    "kernels/missing.cu",
    "~/.bashrc", "/dev/zero", "/proc/self/environ",
]
hostile_strings = st.one_of(
    st.sampled_from(HOSTILE_PATHS + SANDBOX_PATHS + WORKLOAD_NAMES), st.text(max_size=50),
    st.just(HUGE_SOURCE), st.just(kernel("HANG")), st.just(kernel("CRASH")),
)
# shallow: a deeply nested argument is refused by the JSON layer before any tool sees it
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=10), inner, max_size=3)),
    max_leaves=8,
)
hostile_values = st.one_of(hostile_strings, json_values)

VALID: dict[str, dict[str, Any]] = {
    "gpu_properties": {},
    "list_workloads": {},
    "describe_workload": {"name": "tiny_add"},
    "compile": {"source": kernel(), "options": ["-DX=1"]},
    "docs_search": {"query": "shared memory bank conflicts", "offline": True, "limit": 3},
    "ncu_profile": {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH},
    "validate": {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel()},
    "benchmark": {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel(), "warmup": 1, "iterations": 2},
}
# keys each tool knows, so mutations also target the optional ones
KEYS = {
    "compile": ["source", "path", "arch", "options"],
    "docs_search": ["query", "arch", "limit", "offline"],
    "ncu_profile": ["workload", "source", "path", "launch", "compile_options", "case", "clock_control", "section_set"],
    "validate": ["workload", "launch", "source", "path", "compile_options"],
    "benchmark": ["workload", "launch", "source", "path", "compile_options", "warmup", "iterations"],
    "describe_workload": ["name"],
    "gpu_properties": [],
    "list_workloads": [],
}


@st.composite
def tool_arguments(draw: st.DrawFn, tool: str) -> dict[str, Any]:
    args = copy.deepcopy(VALID[tool])
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["replace", "replace", "drop", "extra"]))
        keys = KEYS[tool]
        if op == "extra" or not keys:
            args[draw(st.text(min_size=1, max_size=20))] = draw(hostile_values)
        elif op == "drop":
            args.pop(draw(st.sampled_from(keys)), None)
        else:
            key = draw(st.sampled_from(keys))
            if key == "path":
                args.pop("source", None)
            args[key] = draw(hostile_values)
    return args


@pytest.mark.parametrize("tool", ["gpu_properties", "list_workloads", "describe_workload", "compile", "docs_search",
                                  "ncu_profile"])
def test_cheap_tools_answer_any_arguments(sandbox: Sandbox, tool: str) -> None:
    @settings_cheap
    @given(tool_arguments(tool))
    def prop(args: dict[str, Any]) -> None:
        _check(sandbox, tool, args)

    prop()


@pytest.mark.parametrize("tool", ["validate", "benchmark"])
def test_gpu_tools_answer_any_arguments_on_the_fake_harness(sandbox: Sandbox, tool: str) -> None:
    @settings_gpu
    @given(tool_arguments(tool))
    def prop(args: dict[str, Any]) -> None:
        _check(sandbox, tool, args)

    prop()


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from(SANDBOX_PATHS + HOSTILE_PATHS), st.sampled_from(["compile", "validate", "ncu_profile"]))
def test_paths_outside_the_roots_are_refused_and_inside_ones_read(sandbox: Sandbox, path: str, tool: str) -> None:
    args = {k: v for k, v in VALID[tool].items() if k != "source"} | {"path": path}
    result = _check(sandbox, tool, args)
    if path == "kernels/ok.cu" and tool == "compile":
        assert not result.is_error, _text(result)
    if path in ("kernels/link_out.cu", "kernels/link_dir/secret.cu", "kernels/link_etc", "../outside/secret.cu",
                "/etc/passwd", "/etc/shadow", "../../etc/passwd", "/dev/zero", "kernels/link_zero.cu"):
        assert result.is_error and "outside the directories" in _text(result), _text(result)


def _created_spec() -> dict[str, Any]:
    spec = json.loads(json.dumps(TINY_SPEC))
    spec["name"] = "prop_created"
    return spec


@st.composite
def create_arguments(draw: st.DrawFn) -> dict[str, Any]:
    args: dict[str, Any] = {"spec": _created_spec(), "reference_cu": kernel(), "overwrite": True}
    choice = draw(st.sampled_from(["spec", "spec", "args"]))
    if choice == "spec":
        spec = draw(mutated_specs(json_values))
        spec["name"] = draw(st.sampled_from(["prop_created", "vector_add", "tiny_add", "../x", "a" * 65])
                            | st.text(max_size=20))
        if draw(st.booleans()):
            spec["inputs"] = {"a": {"generator": "file", "path": draw(st.sampled_from(HOSTILE_PATHS))}}
        args["spec"] = spec
    else:
        key = draw(st.sampled_from(["spec", "reference_cu", "initial_cu", "overwrite", "extra"]))
        args[key] = draw(hostile_values)
    return args


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(create_arguments())
def test_create_workload_answers_any_spec_and_writes_only_into_the_workspace(
    sandbox: Sandbox, args: dict[str, Any]
) -> None:
    result = _check(sandbox, "create_workload", args)
    if not result.is_error:
        created = Path(result.structured_content["path"]).resolve()
        assert created.is_relative_to((sandbox.workspace / "workloads").resolve()), created
