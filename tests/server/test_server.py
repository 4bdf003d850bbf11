"""The MCP server through the SDK's own clients: in-memory, stdio, and the MCP Inspector CLI.

No GPU here. Two stand-ins for the native harness, from tests/fakegpu.py: "nogpu" answers like a
machine without a driver; "fake" is a pretend H200 that runs vector_add-style kernels in NumPy,
with markers in the kernel source that make it hang, crash, return a wrong element or be fast.
The real harness under the same server is exercised by tests/gpu/test_server_gpu.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakegpu import (
    ADD_LAUNCH,
    TINY_SPEC,
    fake_processes,
    in_memory_server,
    kernel,
    server_command,
    write_harness,
    write_tiny_workload,
)
from fakegpu import tool_text as text
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from kernelopt_mcp.config import Settings, bundled_workloads_dir
from kernelopt_mcp.server_config import ServerConfig

REPO = Path(__file__).resolve().parents[2]
TOOLS = {
    "gpu_properties", "compile", "validate", "benchmark", "list_workloads", "describe_workload", "create_workload",
    "ncu_profile", "docs_search", "autotune",
}
WRITERS = {"create_workload", "freeze_workload", "replay_requests"}  # they replace files they wrote before

@pytest.fixture
def tiny_dir(tmp_path: Path) -> Path:
    """A configured workload directory with tiny_add (NumPy oracle + CUDA reference)."""
    return write_tiny_workload(tmp_path / "extra")


def make_config(tmp_path: Path, tiny_dir: Path, mode: str) -> ServerConfig:
    settings = Settings(harness=write_harness(tmp_path, mode),
                        workload_dirs=(bundled_workloads_dir(), tiny_dir), timeout_s=20)
    return ServerConfig(settings=settings, workspace=tmp_path / "ws")


@pytest.fixture
def fake_config(tmp_path: Path, tiny_dir: Path) -> ServerConfig:
    return make_config(tmp_path, tiny_dir, "fake")


@pytest.fixture
def nogpu_config(tmp_path: Path, tiny_dir: Path) -> ServerConfig:
    return make_config(tmp_path, tiny_dir, "nogpu")


@asynccontextmanager
async def _client(config: ServerConfig) -> AsyncIterator[Client]:
    async with in_memory_server(config) as (client, _):
        yield client


@pytest.fixture
async def fake(fake_config: ServerConfig) -> AsyncIterator[Client]:
    async with _client(fake_config) as client:
        yield client


@pytest.fixture
async def nogpu(nogpu_config: ServerConfig) -> AsyncIterator[Client]:
    async with _client(nogpu_config) as client:
        yield client


pytestmark = pytest.mark.anyio


# --- listing, schemas, annotations -----------------------------------------------------------


# --- compile -------------------------------------------------------------------------------


async def test_compile_reports_resources(nogpu: Client) -> None:
    r = await nogpu.call_tool("compile", {"source": kernel()})
    assert not r.is_error, text(r)
    out = r.structured_content
    assert out["status"] == "ok" and out["arch"] == "sm_90" and "no GPU" in out["arch_from"]
    assert out["kernels"]["vector_add"]["registers"] > 0 and out["kernels"]["vector_add"]["param_bytes"] == [8, 8, 8, 4]
    assert "kernel vector_add" in text(r) and out["log"] == ""
    assert out["confinement"].startswith("landlock abi "), out["confinement"]  # a client can see how NVRTC ran


async def test_compile_error_is_a_result_with_line_numbers(nogpu: Client) -> None:
    r = await nogpu.call_tool("compile", {"source": 'extern "C" __global__ void k(float* x) {\n  x[0] = y;\n}\n',
                                          "arch": "sm_80"})
    assert not r.is_error
    out = r.structured_content
    assert out["status"] == "error" and out["arch"] == "sm_80" and out["arch_from"] == "argument"
    assert out["diagnostics"][0]["line"] == 2 and "undefined" in out["diagnostics"][0]["message"]
    assert "line 2: error" in text(r)


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        ({}, "exactly one of `source`"),
        ({"source": "x", "path": "k.cu"}, "exactly one of `source`"),
        ({"source": kernel(), "arch": "90"}, "arch"),
        ({"source": kernel(), "options": ["-rdc=true"]}, "not allowed"),
        ({"source": kernel(), "options": "-I/etc"}, "options"),
        ({"source": kernel(), "bogus": 1}, None),
    ],
)
async def test_compile_rejects_bad_arguments_readably(nogpu: Client, args: dict[str, Any], expect: str | None) -> None:
    r = await nogpu.call_tool("compile", args)
    if expect is None:  # unknown arguments are ignored by the SDK's argument model
        assert not r.is_error
        return
    assert r.is_error and expect in text(r), text(r)


async def test_compile_paths_are_confined_to_the_roots(
    nogpu: Client, nogpu_config: ServerConfig, tmp_path: Path
) -> None:
    ws = nogpu_config.workspace
    (ws / "kernels").mkdir(parents=True)
    (ws / "kernels" / "add.cu").write_text(kernel())
    r = await nogpu.call_tool("compile", {"path": "kernels/add.cu"})
    assert not r.is_error and r.structured_content["status"] == "ok", text(r)
    bundled = bundled_workloads_dir() / "vector_add" / "initial.cu"
    r = await nogpu.call_tool("compile", {"path": str(bundled)})
    assert not r.is_error and r.structured_content["status"] == "ok", text(r)

    outside = tmp_path / "outside.cu"
    outside.write_text(kernel())
    (ws / "kernels" / "sneaky.cu").symlink_to(outside)
    for path in (str(outside), "../outside.cu", "kernels/sneaky.cu", "/etc/passwd"):
        r = await nogpu.call_tool("compile", {"path": path})
        assert r.is_error and "outside the directories this server may read" in text(r), (path, text(r))
    r = await nogpu.call_tool("compile", {"path": "kernels/missing.cu"})
    assert r.is_error and "no such file" in text(r)


# --- workloads -----------------------------------------------------------------------------


async def test_list_and_describe_workloads(nogpu: Client) -> None:
    r = await nogpu.call_tool("list_workloads", {})
    rows = {w["name"]: w for w in r.structured_content["workloads"]}
    assert {"vector_add", "sgemm", "tiny_add"} <= set(rows)
    assert rows["vector_add"]["origin"] == "bundled" and rows["tiny_add"]["origin"] == "configured"

    r = await nogpu.call_tool("describe_workload", {"name": "vector_add"})
    d = r.structured_content
    assert d["c_prototype"] == 'extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)'
    assert [c["name"] for c in d["cases"]] == ["one", "odd_1000003", "n_2e25", "n_2e27"]
    assert d["cases"][1]["shapes"] == {"a": [1000003], "b": [1000003], "c": [1000003]}
    assert d["initial_launch"]["default"]["block"] == [128] and "vector_add" in d["reference_cu"]
    assert (d["tolerances"]["c"] == {"rtol": 1e-6, "atol": 1e-7, "absolute": False, "source": "workload"}
            and d["cost"]["bytes"] == "12 * n")
    assert "--- initial.cu ---" in text(r) and "kernel: extern" in text(r)


@pytest.mark.parametrize("name", ["nope", "../vector_add", "/etc"])
async def test_unknown_workload_is_a_clear_error(nogpu: Client, name: str) -> None:
    r = await nogpu.call_tool("describe_workload", {"name": name})
    assert r.is_error and ("no workload" in text(r) or "pattern" in text(r)), text(r)
    r = await nogpu.call_tool("validate", {"workload": name, "launch": ADD_LAUNCH, "source": kernel()})
    assert r.is_error


# --- no GPU --------------------------------------------------------------------------------


async def test_no_gpu_gives_a_clear_error_and_the_server_lives_on(nogpu: Client) -> None:
    for tool, args in [
        ("gpu_properties", {}),
        ("validate", {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel()}),
        ("benchmark", {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel(), "iterations": 5}),
    ]:
        r = await nogpu.call_tool(tool, args)
        assert r.is_error and "no usable CUDA device" in text(r) and "compile" in text(r), text(r)
    r = await nogpu.call_tool("compile", {"source": kernel()})
    assert not r.is_error and r.structured_content["status"] == "ok"


def _installed_harness() -> Path | None:
    from kernelopt_mcp.errors import ToolchainNotFound
    from kernelopt_mcp.evaluation.harness import find_harness

    try:
        return find_harness()
    except ToolchainNotFound:
        return None


@pytest.mark.skipif(_installed_harness() is None, reason="kernelopt-harness is not installed (pip install .)")
async def test_the_real_harness_without_a_gpu_is_a_clear_error(tmp_path: Path) -> None:
    from kernelopt_mcp.evaluation.device import cuda_device_count

    if cuda_device_count():
        pytest.skip("a GPU is present: tests/gpu covers the real harness")
    config = ServerConfig(settings=Settings(harness=_installed_harness()), workspace=tmp_path / "ws")
    async with _client(config) as client:
        r = await client.call_tool("validate", {"workload": "vector_add", "launch": ADD_LAUNCH, "source": kernel()})
        assert r.is_error and "no usable CUDA device" in text(r), text(r)
        r = await client.call_tool("compile", {"source": kernel()})
        assert r.structured_content["status"] == "ok"


# --- validate and benchmark on the pretend GPU ---------------------------------------------


async def test_gpu_properties_with_peaks(fake: Client) -> None:
    r = await fake.call_tool("gpu_properties", {})
    assert not r.is_error, text(r)
    out = r.structured_content
    assert out["device"]["arch"] == "sm_90" and out["peaks"]["fp32_flops_per_s"] > 60e12
    assert out["peaks"]["measured"]["device_to_device_copy_bytes_per_s"] == 4.2e12
    assert "NVIDIA H200 (fake)" in text(r)


async def test_gpu_properties_when_the_driver_withholds_some(tmp_path: Path, tiny_dir: Path) -> None:
    async with _client(make_config(tmp_path, tiny_dir, "sparse")) as client:
        r = await client.call_tool("gpu_properties", {})
        assert not r.is_error, text(r)
        assert r.structured_content["device"]["clock_khz"] is None and "unknown" in text(r)
        assert r.structured_content["peaks"]["fp32_flops_per_s"] is None


async def test_validate_passes_with_progress_and_hides_the_seed(fake: Client) -> None:
    messages: list[str] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    r = await fake.call_tool(
        "validate", {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel()}, progress_callback=progress
    )
    assert not r.is_error, text(r)
    out = r.structured_content
    assert out["status"] == "ok" and out["cases_passed"] == out["cases_total"] == 3 and out["mode"] == "validate"
    assert all("timing" not in c for c in out["cases"]) and "score_ms" not in out
    assert any("preparing tiny_add" in m for m in messages) and any("validating odd_1001" in m for m in messages)
    assert "seed" not in json.dumps(out) and "seed" not in text(r)
    assert "NumPy oracle" in out["expected_from"]


async def test_validate_reports_a_mismatch_with_indices(fake: Client) -> None:
    r = await fake.call_tool("validate", {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel("WRONG")})
    assert not r.is_error
    out = r.structured_content
    assert out["status"] == "mismatch"
    case = next(c for c in out["cases"] if c["name"] == "odd_1001")
    check = case["outputs"][0]
    assert check["mismatches"] == 1 and check["first_mismatches"][0]["index"] == [500]
    assert "expected" in text(r) and "odd_1001" in text(r)


async def test_validate_compile_error_comes_back_with_lines(fake: Client) -> None:
    r = await fake.call_tool("validate", {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": "extern \"C\" "
                                          "__global__ void vector_add(\n int x) { y; }"})
    out = r.structured_content
    assert out["status"] == "compile_error" and out["compile"]["diagnostics"][0]["line"] == 2, text(r)
    r = await fake.call_tool("validate", {"workload": "tiny_add", "launch": ADD_LAUNCH,
                                          "source": kernel().replace("vector_add", "other")})
    assert r.structured_content["status"] == "compile_error" and "no kernel named 'vector_add'" in text(r)


async def test_bad_launch_is_refused_by_the_schema_or_reported_per_case(fake: Client) -> None:
    r = await fake.call_tool("validate", {"workload": "tiny_add", "launch": {"grid": [0], "block": [256]},
                                          "source": kernel()})
    assert r.is_error and "grid" in text(r)
    r = await fake.call_tool("validate", {"workload": "tiny_add", "launch": {"grid": [1], "block": [2048]},
                                          "source": kernel()})
    assert not r.is_error and r.structured_content["status"] == "invalid_launch" and "1024" in text(r)


async def test_benchmark_scores_against_the_reference(fake: Client) -> None:
    r = await fake.call_tool(
        "benchmark", {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel("FAST"), "warmup": 1,
                      "iterations": 5}
    )
    assert not r.is_error, text(r)
    out = r.structured_content
    assert out["status"] == "ok" and out["mode"] == "benchmark"
    perf = next(c for c in out["cases"] if c["kind"] == "performance")
    assert perf["timing"]["iterations"] == 5 and perf["timing"]["warmup"] == 1
    assert out["speedup"] == pytest.approx(2.0, rel=0.05) and out["score_ms"] == pytest.approx(0.05, rel=0.05)
    assert perf["bytes_per_s"] > 0 and "times_ms" not in json.dumps(out)
    assert "speedup 2" in text(r)
    for bad in ({"warmup": 101}, {"iterations": 0}, {"iterations": 1001}):
        r = await fake.call_tool("benchmark", {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel(), **bad})
        assert r.is_error and next(iter(bad)) in text(r)


async def test_a_crashing_kernel_then_a_good_one(fake: Client) -> None:
    r = await fake.call_tool("validate", {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel("CRASH")})
    out = r.structured_content
    assert out["status"] == "runtime_error" and "CUDA_ERROR_ILLEGAL_ADDRESS" in text(r)
    assert [c["status"] for c in out["cases"]][1:] == ["skipped", "skipped"]
    r = await fake.call_tool("validate", {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel()})
    assert r.structured_content["status"] == "ok", text(r)


async def test_cancelling_a_call_kills_the_harness(fake: Client, tmp_path: Path) -> None:
    marker = str(tmp_path / "fake_harness.py")
    await _cancel_a_hanging_validate_then_validate(fake, marker, start_timeout_s=30)


async def _cancel_a_hanging_validate_then_validate(client: Client, marker: str, start_timeout_s: float) -> None:
    """Start a validate of a hanging kernel, cancel the call once its harness runs, check that
    the harness is gone, and that a good kernel then validates in the same session."""
    running = anyio.Event()

    async def progress(done: float, total: float | None, message: str | None) -> None:
        if message and "candidate: validating" in message:
            running.set()

    async with anyio.create_task_group() as tg:
        async def call() -> None:
            await client.call_tool("validate", {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel("HANG")},
                                   progress_callback=progress)

        tg.start_soon(call)
        with anyio.fail_after(start_timeout_s):
            await running.wait()
        await anyio.sleep(0.5)
        assert fake_processes(marker), "the harness should be running the hanging kernel"
        tg.cancel_scope.cancel()
    with anyio.fail_after(10):
        while fake_processes(marker):
            await anyio.sleep(0.1)
    r = await client.call_tool("validate", {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel()})
    assert r.structured_content["status"] == "ok", text(r)


async def test_gpu_jobs_queue_and_report_their_position(fake: Client) -> None:
    messages: list[list[str]] = [[], []]
    results: list[Any] = [None, None]

    async def run(i: int) -> None:
        async def progress(done: float, total: float | None, message: str | None) -> None:
            messages[i].append(message or "")

        results[i] = await fake.call_tool(
            "benchmark", {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel(), "iterations": 3},
            progress_callback=progress,
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, 0)
        await anyio.sleep(0.05)
        tg.start_soon(run, 1)
    assert all(r.structured_content["status"] == "ok" for r in results)
    assert any("1 job(s) ahead" in m for m in messages[0] + messages[1]), messages


async def test_the_hidden_inputs_cannot_be_read_even_under_a_root(tmp_path: Path, tiny_dir: Path) -> None:
    import tempfile

    config = make_config(tmp_path, tiny_dir, "fake")
    config = ServerConfig(settings=config.settings, workspace=config.workspace,
                          extra_roots=(Path(tempfile.gettempdir()).resolve(),))
    async with in_memory_server(config) as (client, service):
        r = await client.call_tool("validate", {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel()})
        assert r.structured_content["status"] == "ok"
        workdir = service.state.private_dir
        manifest = next(workdir.rglob("input_cases.json"))
        r = await client.call_tool("compile", {"path": str(manifest)})
        assert r.is_error and "hidden" in text(r), text(r)


async def test_long_waits_and_launches_send_heartbeats(fake: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    import kernelopt_mcp.gpu_queue

    monkeypatch.setattr(kernelopt_mcp.gpu_queue, "HEARTBEAT_S", 0.2)
    await fake.call_tool("validate", {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel()})  # prepare
    messages: list[list[str]] = [[], [], []]
    heard = [anyio.Event() for _ in messages]

    async def run(i: int) -> None:
        async def progress(done: float, total: float | None, message: str | None) -> None:
            messages[i].append(message or "")
            heard[i].set()

        r = await fake.call_tool("validate", {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel("SLOW")},
                                 progress_callback=progress)
        assert r.structured_content["status"] == "ok"

    async with anyio.create_task_group() as tg:
        for i in range(3):
            tg.start_soon(run, i)
            with anyio.fail_after(30):  # each call is in the queue (or running) before the next starts
                await heard[i].wait()
    assert any("still running" in m for m in messages[0]), messages[0]
    queued = [m for m in messages[2] if m.startswith("queued")]
    assert (queued[0].startswith("queued for the GPU: 2 job(s) ahead")
            and any(" 1 job(s) ahead" in m for m in queued)), queued


# --- create_workload -----------------------------------------------------------------------


async def test_create_workload_then_validate_it(fake: Client, fake_config: ServerConfig) -> None:
    spec = json.loads(json.dumps(TINY_SPEC)) | {"name": "my_add"}
    r = await fake.call_tool("create_workload", {"spec": spec, "reference_cu": kernel(), "initial_cu": kernel()})
    assert not r.is_error, text(r)
    out = r.structured_content
    assert out["name"] == "my_add" and not out["replaced"] and "not independently checked" in text(r)
    stored = fake_config.workspace / "workloads" / "my_add"
    assert json.loads((stored / "workload.json").read_text())["reference"]["python"] is None

    listed = {w["name"]: w for w in (await fake.call_tool("list_workloads", {})).structured_content["workloads"]}
    assert listed["my_add"]["origin"] == "created"
    r = await fake.call_tool("validate", {"workload": "my_add", "launch": ADD_LAUNCH, "source": kernel("WRONG")})
    assert (r.structured_content["status"] == "mismatch"
            and "CUDA reference only" in r.structured_content["expected_from"])

    r = await fake.call_tool("create_workload", {"spec": spec, "reference_cu": kernel()})
    assert r.is_error and "overwrite" in text(r)
    spec["cases"] = spec["cases"][:2] + [{"name": "n_8192", "kind": "performance", "scalars": {"n": 8192}}]
    r = await fake.call_tool("create_workload", {"spec": spec, "overwrite": True})
    assert not r.is_error and r.structured_content["replaced"], text(r)
    assert (stored / "reference.cu").read_text() == kernel()
    d = (await fake.call_tool("describe_workload", {"name": "my_add"})).structured_content
    assert d["origin"] == "created" and d["cases"][-1]["name"] == "n_8192"


def _spec(**changes: Any) -> dict[str, Any]:
    spec = json.loads(json.dumps(TINY_SPEC)) | {"name": "bad_add"}
    for key, value in changes.items():
        spec[key] = value
    return spec


@pytest.mark.parametrize(
    ("spec", "sources", "expect"),
    [
        (_spec(reference={"python": "reference.py", "launch": {"grid": [1], "block": [1]}}), {},
         "NumPy oracle cannot be created"),
        # a client's reference.cu named as a PyTorch problem would be run as Python in the reference child
        (_spec(reference={"torch": "reference.cu", "launch": {"grid": [1], "block": [1]}}), {},
         "spec.reference.torch: a PyTorch reference"),
        (_spec(inputs={"a": {"generator": "file", "path": "/etc/passwd"}, "b": {"generator": "normal"}}),
         {}, "data files"),
        (_spec(name="vector_add"), {}, "bundled workload"),
        (_spec(cases=[{"name": "huge", "kind": "performance", "scalars": {"n": 2**30}}]), {}, "GiB"),
        (_spec(cases=[{"name": f"c{i}", "kind": "correctness", "scalars": {"n": 1}} for i in range(65)]), {}, "cases"),
        (_spec(cases=[{"name": "x", "kind": "correctness", "scalars": {"m": 1}}]), {}, "scalars n have no value"),
        (_spec(signature={"entry": "vector_add", "params": []}), {}, "signature.params"),
        (_spec(), {"reference_cu": "this is not C++"}, "does not compile"),
        (_spec(), {"reference_cu": kernel().replace("vector_add", "wrong_name")}, "no kernel 'vector_add'"),
        (_spec(), {"reference_cu": None}, "reference_cu is required"),
        (_spec(initial=None), {"initial_cu": kernel()}, "spec.initial is missing"),
    ],
)
async def test_create_workload_refusals(fake: Client, spec: dict[str, Any], sources: dict[str, Any],
                                        expect: str) -> None:
    args = {"spec": spec, "reference_cu": kernel(), "initial_cu": kernel() if spec.get("initial") else None} | sources
    r = await fake.call_tool("create_workload", {k: v for k, v in args.items() if v is not None})
    assert r.is_error and expect in text(r), text(r)


# --- resources and prompts -----------------------------------------------------------------


async def test_resources_are_read_only_views(nogpu: Client, nogpu_config: ServerConfig) -> None:
    uris = {str(r.uri) for r in (await nogpu.list_resources()).resources}
    assert {"kernelopt://workloads/vector_add/workload.json", "kernelopt://workloads/sgemm/initial.cu",
            "kernelopt://schema/workload", "kernelopt://runs"} <= uris
    spec = json.loads((await nogpu.read_resource("kernelopt://workloads/vector_add/workload.json")).contents[0].text)
    assert spec["name"] == "vector_add"
    schema = json.loads((await nogpu.read_resource("kernelopt://schema/workload")).contents[0].text)
    assert schema["title"] == "kernelopt workload"
    assert json.loads((await nogpu.read_resource("kernelopt://runs")).contents[0].text)["files"] == []

    run = nogpu_config.runs_dir / "run-001"
    run.mkdir(parents=True)
    (run / "summary.json").write_text('{"best": 1}')
    assert (json.loads((await nogpu.read_resource("kernelopt://runs/run-001/summary.json")).contents[0].text)
            == {"best": 1})
    for uri in ("kernelopt://runs/../workloads/x", "kernelopt://workloads/vector_add/secret.txt",
                "kernelopt://workloads/nope/workload.json"):
        with pytest.raises(MCPError):
            await nogpu.read_resource(uri)


async def test_optimize_kernel_prompt(nogpu: Client) -> None:
    prompts = {p.name: p for p in (await nogpu.list_prompts()).prompts}
    assert "optimize_kernel" in prompts and prompts["optimize_kernel"].arguments[0].name == "workload"
    r = await nogpu.get_prompt("optimize_kernel", {"workload": "softmax"})
    body = r.messages[0].content.text
    for word in ("describe_workload(\"softmax\")", "compile", "validate", "benchmark", "geometric mean", "every case"):
        assert word in body


# --- a real client over stdio, and the MCP Inspector ---------------------------------------


async def test_stdio_session_with_the_sdk_client(tmp_path: Path, tiny_dir: Path) -> None:
    harness = write_harness(tmp_path, "fake")
    cmd = server_command("--workspace", str(tmp_path / "ws"), "--harness", str(harness))
    env = {"KERNELOPT_WORKLOADS": str(tiny_dir), "PYTHONPATH": str(REPO)}
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=env, cwd=str(REPO))
    messages: list[str] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    async with Client(params, read_timeout_seconds=120) as client:
        assert client.server_info and client.server_info.name == "kernelopt"
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        r = await client.call_tool("compile", {"source": kernel()})
        assert r.structured_content["status"] == "ok", text(r)
        r = await client.call_tool(
            "benchmark", {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel(), "iterations": 3},
            progress_callback=progress,
        )
        assert r.structured_content["status"] == "ok", text(r)
    assert any("timing n_4096" in m for m in messages), messages


def inspector() -> list[str] | None:
    local = REPO / "build" / "inspector" / "node_modules" / ".bin" / "mcp-inspector"
    if local.exists():
        return [str(local)]
    if shutil.which("npx"):
        return ["npx", "--yes", "@modelcontextprotocol/inspector@2.12.0"]
    return None


@pytest.mark.skipif(inspector() is None, reason="node/npx not installed: the MCP Inspector CLI cannot run")
def test_mcp_inspector_lists_the_tools_and_calls_compile(tmp_path: Path) -> None:
    # -e: the Inspector hands its server only a default environment; this tree's package is the one under test
    base = [*inspector(), "--cli", "-e", f"PYTHONPATH={REPO}",  # type: ignore[misc]
            *server_command("--workspace", str(tmp_path / "ws"), "--harness", "/nonexistent")]
    env = {**os.environ, "HOME": str(tmp_path), "MCP_CATALOG_PATH": str(tmp_path / "catalog.json"),
           "PYTHONPATH": str(REPO)}

    def run(*args: str) -> dict[str, Any]:
        proc = subprocess.run([*base, *args], capture_output=True, text=True, timeout=180, env=env, cwd=REPO)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout)

    listed = run("--method", "tools/list")
    assert {t["name"] for t in listed["tools"]} == TOOLS
    called = run("--method", "tools/call", "--tool-name", "compile", "--tool-arg", f"source={kernel()}",
                 "--tool-arg", "arch=sm_90")
    assert called["isError"] is False and called["structuredContent"]["status"] == "ok"
    assert "kernel vector_add" in called["content"][0]["text"]


async def test_stdio_cancellation_kills_the_harness(tmp_path: Path, tiny_dir: Path) -> None:
    """What tests/gpu does with the real harness, over a real pipe: the client's cancel reaches the server."""
    harness = write_harness(tmp_path, "fake")
    cmd = server_command("--workspace", str(tmp_path / "ws"), "--harness", str(harness))
    params = StdioServerParameters(command=cmd[0], args=cmd[1:],
                                   env={"KERNELOPT_WORKLOADS": str(tiny_dir), "PYTHONPATH": str(REPO)}, cwd=str(REPO))
    marker = str(tmp_path / "fake_harness.py")
    async with Client(params, read_timeout_seconds=120) as client:
        await _cancel_a_hanging_validate_then_validate(client, marker, start_timeout_s=60)

