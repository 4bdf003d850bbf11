"""The MCP server on a real GPU, driven over stdio by the SDK's client, as an MCP client would.

Run with --run-gpu. Each test starts its own server process (`kernelopt-mcp` when installed,
else `python -m kernelopt_mcp.server`) with the real harness.
"""

from __future__ import annotations

import time
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakegpu import stdio_server
from fakegpu import tool_text as text

pytestmark = pytest.mark.gpu

LAUNCH = {"default": {"grid": ["ceil_div(n, 256)"], "block": [256]}}
FAST = {"warmup": 1, "iterations": 5}


def kernel(body: str = "if (i < n) c[i] = a[i] + b[i];") -> str:
    return (
        'extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {\n'
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    " + body + "\n}\n"
    )


# Correct but slow (64 scattered extra loads per element, multiplied by zero), so timing 1100
# launches takes seconds: long enough to cancel in the middle of a harness request.
SLOW = kernel(
    "if (i < n) { float s = 0.0f; for (int k = 1; k <= 64; ++k) s += a[(i + k * 7919) % n] * 0.0f;"
    " c[i] = a[i] + b[i] + s; }"
)



def server(harness: Path, workspace: Path) -> AbstractAsyncContextManager[Any]:
    return stdio_server("--harness", str(harness), "--workspace", str(workspace))


def harness_children(workspace: Path) -> list[int]:
    """Live kernelopt-harness processes whose parent is the server started with ``workspace``."""
    procs: dict[int, tuple[int, bytes, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        procs[int(entry.name)] = (int(fields[1]), cmdline, fields[0])
    servers = {pid for pid, (_, cmd, _) in procs.items() if str(workspace).encode() in cmd}
    assert servers, "the server process was not found"
    return [
        pid for pid, (ppid, cmd, state) in procs.items()
        if ppid in servers and b"kernelopt-harness" in cmd and state != "Z"
    ]


def test_stdio_session_validates_and_benchmarks_vector_add(harness_binary: Path, tmp_path: Path) -> None:
    async def session() -> None:
        async with server(harness_binary, tmp_path / "ws") as client:
            gpu = await client.call_tool("gpu_properties", {})
            assert not gpu.is_error, text(gpu)
            arch = gpu.structured_content["device"]["arch"]
            described = (await client.call_tool("describe_workload", {"name": "vector_add"})).structured_content
            args = {"workload": "vector_add", "source": described["initial_cu"], "launch": described["initial_launch"]}

            messages: list[str] = []

            async def progress(done: float, total: float | None, message: str | None) -> None:
                messages.append(message or "")

            r = await client.call_tool("validate", args, progress_callback=progress)
            out = r.structured_content
            assert out["status"] == "ok" and out["arch"] == arch, text(r)
            assert out["cases_passed"] == out["cases_total"] == len(described["cases"])
            assert any("preparing vector_add" in m for m in messages)

            r = await client.call_tool("benchmark", {**args, **FAST})
            out = r.structured_content
            assert out["status"] == "ok", text(r)
            assert out["score_ms"] > 0 and out["reference_score_ms"] > 0 and out["speedup"] > 0
            perf = [c for c in out["cases"] if c["kind"] == "performance"]
            assert perf and all(c["timing"]["iterations"] == 5 and c["timing"]["warmup"] == 1 for c in perf)
            assert all(0 < c["bytes_per_s"] < 6e12 for c in perf), "faster than HBM: skipped work?"
            assert "speedup" in text(r)

    anyio.run(session)


def test_a_crashing_kernel_then_a_good_one_in_the_same_session(harness_binary: Path, tmp_path: Path) -> None:
    async def session() -> None:
        async with server(harness_binary, tmp_path / "ws") as client:
            bad = kernel("if (i < n) { ((float*)0x10)[i] = 1.0f; c[i] = a[i] + b[i]; }")
            r = await client.call_tool("validate", {"workload": "vector_add", "source": bad, "launch": LAUNCH})
            assert not r.is_error, text(r)
            assert r.structured_content["status"] == "runtime_error"
            assert "CUDA_ERROR_ILLEGAL_ADDRESS" in text(r)
            r = await client.call_tool("benchmark",
                                       {"workload": "vector_add", "source": kernel(), "launch": LAUNCH, **FAST})
            assert r.structured_content["status"] == "ok", text(r)

    anyio.run(session)


def test_a_cancelled_benchmark_leaves_no_harness_behind(harness_binary: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"

    async def session() -> None:
        async with server(harness_binary, workspace) as client:
            timing = anyio.Event()

            async def progress(done: float, total: float | None, message: str | None) -> None:
                if message and "candidate: timing" in message:
                    timing.set()

            completed = False
            async with anyio.create_task_group() as tg:
                async def call() -> None:
                    nonlocal completed
                    await client.call_tool(
                        "benchmark",
                        {"workload": "vector_add", "source": SLOW, "launch": LAUNCH, "warmup": 100, "iterations": 1000},
                        progress_callback=progress,
                    )
                    completed = True

                tg.start_soon(call)
                with anyio.fail_after(300):
                    await timing.wait()
                await anyio.sleep(0.5)
                assert harness_children(workspace), "the harness should be timing the kernel now"
                tg.cancel_scope.cancel()
            assert not completed, "the benchmark finished before it could be cancelled"

            deadline = time.monotonic() + 15
            while harness_children(workspace):
                assert time.monotonic() < deadline, "a harness process survived the cancellation"
                await anyio.sleep(0.2)

            r = await client.call_tool("validate", {"workload": "vector_add", "source": kernel(), "launch": LAUNCH})
            assert r.structured_content["status"] == "ok", text(r)

    anyio.run(session)
