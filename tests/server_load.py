"""A load test of one kernelopt-mcp HTTP server: many concurrent clients, each its own MCP
session on loopback, doing the same and different work at once (issue 13, item 8: on the H200, 8
clients benchmarking one kernel plus a hang, a trap and a client that disconnects crashed one
benchmark with "Error executing tool benchmark" in 1 of 3 runs).

Used by tests/server/test_server_load.py (the pretend GPU of tests/fakegpu.py) and
tests/gpu/test_server_load_gpu.py (the real harness): the kernels below carry both the pretend
GPU's markers and the real behaviour (a hang spins, a trap traps).

What must hold: every call gets a result or a clear tool error (never the SDK's bare "Error
executing tool <name>", which is what an unhandled exception becomes), identical work agrees,
and the server answers tools/list (and runs a kernel) afterwards.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
from fakegpu import stop_server, wait_for_port
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

REPO = Path(__file__).resolve().parent.parent
TOKEN = "load-test-token-9d41"
LAUNCH = {"default": {"grid": ["ceil_div(n, 256)"], "block": [256]}}


def kernel(body: str, fake_mode: str = "") -> str:
    """vector_add with ``body``; ``fake_mode`` is the pretend GPU's marker for the same behaviour."""
    marker = f'__device__ char ko_fake_mode[] = "KO_FAKE_{fake_mode}";\n' if fake_mode else ""
    return (
        marker + 'extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {\n'
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    " + body + "\n}\n"
    )


OK = kernel("if (i < n) c[i] = a[i] + b[i];")
GRID_STRIDE = kernel("for (int j = i; j < n; j += gridDim.x * blockDim.x) c[j] = a[j] + b[j];")  # same sums, other code
WRONG = kernel("if (i < n) c[i] = a[i] - b[i];", "WRONG")
# spins on a global flag nothing sets (NVRTC removes a loop on a volatile local: it finished on the H200)
HANG = "__device__ volatile int ko_release = 0;\n" + kernel("while (ko_release == 0) { } if (i < "
                                                            "n) c[i] = a[i] + b[i];", "HANG")
TRAP = kernel('asm volatile("trap;"); if (i < n) c[i] = a[i] + b[i];', "CRASH")
# correct but slow on the GPU (and on the pretend one): a call long enough to walk away from
SLOW = kernel(
    "if (i < n) { float s = 0.0f; for (int k = 1; k <= 64; ++k) s += a[(i + k * 7919) % n] * 0.0f;"
    " c[i] = a[i] + b[i] + s; }", "SLOW",
)


CREATED_SPEC: dict[str, Any] = {
    "name": "load_created_add", "description": "c = a + b, created by several clients at once",
    "signature": {"entry": "vector_add", "params": [
        {"kind": "buffer", "name": "a", "dtype": "float32", "role": "in", "shape": ["n"]},
        {"kind": "buffer", "name": "b", "dtype": "float32", "role": "in", "shape": ["n"]},
        {"kind": "buffer", "name": "c", "dtype": "float32", "role": "out", "shape": ["n"]},
        {"kind": "scalar", "name": "n", "dtype": "int32"},
    ]},
    "inputs": {"a": {"generator": "uniform"}, "b": {"generator": "normal"}},
    "cases": [{"name": "small", "kind": "correctness", "scalars": {"n": 1000}}],
    "reference": {"launch": LAUNCH},
}


def variant(k: int) -> str:
    """A different kernel that compiles (different work for `compile`; not a + b exactly)."""
    return kernel(f"if (i < n) c[i] = a[i] * {k + 1}.0f + b[i] - {k}.0f * a[i] - a[i] * 1.0f + a[i];")


@dataclass
class LoadPlan:
    workload: str
    same_benchmarks: int = 8  # clients benchmarking the very same kernel
    compiles: int = 3
    validates: int = 2
    timing: dict[str, int] = field(default_factory=lambda: {"warmup": 2, "iterations": 20})
    agree_within: float = 0.0  # max/min - 1 of the identical benchmarks' scores
    budget_s: float = 240.0  # the whole load, start to finish
    disconnect_after_s: float = 1.0
    creates: int = 3  # clients creating one new workload name at once


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def http_server(workspace: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """kernelopt-mcp over HTTP on loopback (a token required), as a subprocess; yields its URL."""
    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if k != "KERNELOPT_MCP_TOKEN"}
    full_env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                    KERNELOPT_MCP_TOKEN=TOKEN, **(env or {}))
    log = open(workspace.parent / f"server-{port}.log", "w+")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelopt_mcp.server", "--http", "--host", "127.0.0.1", "--port", str(port),
         "--workspace", str(workspace), *args],
        env=full_env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(proc, port, lambda: (log.seek(0), log.read()[-4000:])[1])
        yield f"http://127.0.0.1:{port}/mcp"
        assert proc.poll() is None, "the server died under load"
    finally:
        stop_server(proc, 20)
        log.close()


def text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


async def call(url: str, tool: str, args: dict[str, Any], go: anyio.Event | None = None,
               ready: list[str] | None = None) -> Any:
    """One client session (its own HTTP connection and MCP session) making one call; with ``go``,
    the session is opened first (and counted in ``ready``) and the call waits for ``go``, so that
    every client calls at the same moment."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=600) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        if go is not None and ready is not None:
            ready.append(tool)
            await go.wait()
        return await client.call_tool(tool, args)


def check_clear(tool: str, result: Any) -> None:
    """A result, or a tool error that says something (a crash reads "Error executing tool <tool>" only)."""
    body = text(result).strip()
    assert body != f"Error executing tool {tool}", f"{tool}: an unhandled exception in the server"
    if result.is_error:
        assert len(body) > len(f"Error executing tool {tool}: ") + 5, body


async def run_load(url: str, plan: LoadPlan) -> dict[str, Any]:
    """Run every client at once; return name -> result (and check what each must be)."""
    results: dict[str, Any] = {}
    bench = {"workload": plan.workload, "source": OK, "launch": LAUNCH, **plan.timing}
    jobs: list[tuple[str, str, dict[str, Any]]] = []
    jobs += [(f"bench_same_{i}", "benchmark", bench) for i in range(plan.same_benchmarks)]
    jobs += [(f"compile_{i}", "compile", {"source": variant(i)}) for i in range(plan.compiles)]
    jobs += [
        (f"validate_{i}", "validate",
         {"workload": plan.workload, "source": GRID_STRIDE if i % 2 else OK,
          "launch": {"default": {"grid": [f"ceil_div(n, {64 << i})"], "block": [64 << i]}}})
        for i in range(plan.validates)
    ]
    jobs += [
        ("validate_wrong", "validate", {"workload": plan.workload, "source": WRONG, "launch": LAUNCH}),
        ("hang", "validate", {"workload": plan.workload, "source": HANG, "launch": LAUNCH}),
        ("trap", "validate", {"workload": plan.workload, "source": TRAP, "launch": LAUNCH}),
        ("describe", "describe_workload", {"name": plan.workload}),
        ("list", "list_workloads", {}),
    ]
    jobs += [(f"create_{i}", "create_workload", {"spec": CREATED_SPEC, "reference_cu": OK})
             for i in range(plan.creates)]

    go, ready = anyio.Event(), []

    async def one(name: str, tool: str, args: dict[str, Any]) -> None:
        results[name] = await call(url, tool, args, go, ready)

    async def walk_away() -> None:
        await go.wait()
        await anyio.sleep(0.2)  # behind the others in the GPU queue, then running when it leaves
        with anyio.move_on_after(plan.disconnect_after_s):
            await call(url, "benchmark", {"workload": plan.workload, "source": SLOW, "launch": LAUNCH, **plan.timing})
        results["disconnect"] = "left"

    with anyio.fail_after(plan.budget_s):
        async with anyio.create_task_group() as tg:
            for name, tool, args in jobs:
                tg.start_soon(one, name, tool, args)
            tg.start_soon(walk_away)
            while len(ready) < len(jobs):  # every session open: then all call at once
                await anyio.sleep(0.05)
            go.set()

    for name, tool, _ in jobs:
        check_clear(tool, results[name])
    scores = []
    for i in range(plan.same_benchmarks):
        out = results[f"bench_same_{i}"]
        assert not out.is_error and out.structured_content["status"] == "ok", text(out)
        scores.append(out.structured_content["score_ms"])
    assert max(scores) / min(scores) - 1 <= plan.agree_within, f"identical benchmarks disagree: {scores}"
    for i in range(plan.compiles):
        assert results[f"compile_{i}"].structured_content["status"] == "ok", text(results[f"compile_{i}"])
    for i in range(plan.validates):
        assert results[f"validate_{i}"].structured_content["status"] == "ok", text(results[f"validate_{i}"])
    assert results["validate_wrong"].structured_content["status"] == "mismatch", text(results["validate_wrong"])
    assert results["hang"].structured_content["status"] == "timeout", text(results["hang"])
    assert results["trap"].structured_content["status"] == "runtime_error", text(results["trap"])
    assert results["disconnect"] == "left"
    created = [results[f"create_{i}"] for i in range(plan.creates)]
    assert sum(not r.is_error for r in created) == 1, [text(r) for r in created]  # one name, one winner
    assert all("already exists" in text(r) for r in created if r.is_error), [text(r) for r in created]
    return results


async def still_serves(url: str, plan: LoadPlan) -> None:
    """After the load: tools/list answers and a kernel still runs (the harness came back)."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        with anyio.fail_after(10):
            names = {t.name for t in (await client.list_tools()).tools}
        assert {"compile", "validate", "benchmark"} <= names
        r = await client.call_tool("validate", {"workload": plan.workload, "source": OK, "launch": LAUNCH})
        assert not r.is_error and r.structured_content["status"] == "ok", text(r)
