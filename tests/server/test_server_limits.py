"""Long jobs cannot starve the server: compiles wait for their turn in the event loop (never on
anyio's shared worker threads), queues are bounded with "busy, retry", clients take turns on the
GPU, and a GPU call stops at the server's cap.

Real NVRTC compiles of a compile bomb (tests/adversarial) make the compile pool busy: one worker,
a few seconds each. The pretend GPU (tests/fakegpu.py) runs the GPU jobs.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from fakegpu import ADD_LAUNCH, fake_processes, in_memory_server, kernel, write_harness, write_tiny_workload
from fakegpu import tool_text as text
from mcp import Client

from kernelopt_mcp.admission import QueueBounds
from kernelopt_mcp.compile_pool import default_pool
from kernelopt_mcp.config import Settings, bundled_workloads_dir
from kernelopt_mcp.errors import ServerBusy
from kernelopt_mcp.launch import LaunchSpec
from kernelopt_mcp.server.entry import build_parser, config_from_args
from kernelopt_mcp.server_config import CLIENT_ID, ServerConfig
from kernelopt_mcp.service import KerneloptService

pytestmark = pytest.mark.anyio
BOMB = (Path(__file__).parents[1] / "adversarial" / "vector_add_compile_bomb.cu").read_text()
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tune"
COMPILE_S = 3.0  # each bomb holds the pool's one worker this long
ADD_LAUNCH_SPEC = LaunchSpec.model_validate(ADD_LAUNCH)


def bomb(i: int) -> str:
    return f"// flood {i}\n{BOMB}"  # a distinct source: never a cache hit


def make_config(tmp_path: Path, **kwargs: Any) -> ServerConfig:
    settings = Settings(
        harness=write_harness(tmp_path, "fake"),
        workload_dirs=(bundled_workloads_dir(), write_tiny_workload(tmp_path / "extra")),
        timeout_s=20, iterations=3, warmup=1, compile_timeout_s=COMPILE_S, compile_max_workers=1,
    )
    return ServerConfig(settings=settings, workspace=tmp_path / "ws", extra_roots=(FIXTURES,), **kwargs)


@pytest.fixture
async def few_shared_threads() -> AsyncIterator[None]:
    """anyio's shared worker threads cut from 40 to 4: the same starvation, ten times cheaper."""
    limiter = anyio.to_thread.current_default_thread_limiter()
    before = limiter.total_tokens
    limiter.total_tokens = 4
    yield
    limiter.total_tokens = before


async def _compiling() -> None:
    """Until a bomb holds the compile pool's worker (the flood is provably under way)."""
    with anyio.fail_after(60):
        while default_pool()._busy < 1:
            await anyio.sleep(0.05)


async def _flood(client: Client, n: int, done: list[Any]) -> None:
    async with anyio.create_task_group() as tg:
        for i in range(n):
            async def one(i: int = i) -> None:
                done.append(await client.call_tool("compile", {"source": bomb(i)}))

            tg.start_soon(one)


async def test_other_calls_answer_within_a_second_while_compiles_flood(
    tmp_path: Path, few_shared_threads: None
) -> None:
    async with in_memory_server(make_config(tmp_path)) as (client, _):
        cached = await client.call_tool("compile", {"source": kernel()})  # in the compile cache from now on
        assert cached.structured_content["status"] == "ok", text(cached)
        done: list[Any] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_flood, client, 8, done)  # more than the shared threads: each would hold one
            await _compiling()
            await anyio.sleep(0.5)  # every flood call has reached the server
            with anyio.fail_after(1.0):
                listed = await client.call_tool("list_workloads", {})
                hit = await client.call_tool("compile", {"source": kernel()})
            assert not listed.is_error and "tiny_add" in text(listed)
            assert hit.structured_content["cache_hit"] is True, text(hit)
            assert not done, "the flood should still be compiling (8 x 3 s on one worker)"
            tg.cancel_scope.cancel()  # the waiting compiles leave their queue; the running one ends at its limit


async def test_a_compile_past_the_queue_is_refused_at_once_and_a_cancelled_one_frees_its_place(tmp_path: Path) -> None:
    config = make_config(tmp_path, queue_bounds=QueueBounds(per_client=2, total=64))
    async with in_memory_server(config) as (client, service):
        done: list[Any] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_flood, client, 1, done)
            await _compiling()
            scopes: list[anyio.CancelScope] = []

            async def wait_in_queue(i: int) -> None:
                with anyio.CancelScope() as scope:
                    scopes.append(scope)
                    done.append(await client.call_tool("compile", {"source": bomb(100 + i)}))

            for i in range(2):
                tg.start_soon(wait_in_queue, i)
            with anyio.fail_after(10):
                while sum(service.state.rooms["compile"].waiting.values()) < 2:
                    await anyio.sleep(0.05)
            with anyio.fail_after(1.0):
                busy = await client.call_tool("compile", {"source": bomb(200)})
            assert (busy.is_error
                    and "the server is busy: 2 compiles are waiting (2 of them yours" in text(busy)), text(busy)
            assert "retry in ~" in text(busy)
            for scope in scopes:  # both waiting calls are cancelled by the client
                scope.cancel()
            with anyio.fail_after(10):
                while service.state.rooms["compile"].waiting:
                    await anyio.sleep(0.05)
            tg.start_soon(wait_in_queue, 2)  # their places are free again
            with anyio.fail_after(10):
                while not service.state.rooms["compile"].waiting:
                    await anyio.sleep(0.05)
            assert not done
            tg.cancel_scope.cancel()


async def test_queue_bounds_are_per_client_and_in_all(tmp_path: Path) -> None:
    service = KerneloptService(make_config(tmp_path, queue_bounds=QueueBounds(per_client=1, total=2)))
    started: list[str] = []
    try:
        async with anyio.create_task_group() as tg:
            async def compile_as(client: str, i: int) -> None:
                CLIENT_ID.set(client)
                started.append(client)
                await service.checks.compile(bomb(300 + i), None, "sm_90", None)

            tg.start_soon(compile_as, "a", 0)
            await _compiling()
            tg.start_soon(compile_as, "a", 1)  # waits: a's one place
            with anyio.fail_after(10):
                while service.state.rooms["compile"].waiting["a"] < 1:
                    await anyio.sleep(0.05)
            CLIENT_ID.set("a")
            with pytest.raises(ServerBusy, match=r"1 compiles are waiting \(1 of them yours"):
                await service.checks.compile(bomb(302), None, "sm_90", None)
            tg.start_soon(compile_as, "b", 3)  # another client still has a place
            with anyio.fail_after(10):
                while service.state.rooms["compile"].waiting["b"] < 1:
                    await anyio.sleep(0.05)
            CLIENT_ID.set("c")
            with pytest.raises(ServerBusy,
                               match=r"2 compiles are waiting \(0 of them yours; at most 1 per client and 2 in all"):
                await service.checks.compile(bomb(304), None, "sm_90", None)
            tg.cancel_scope.cancel()
    finally:
        service.close()


async def test_clients_take_turns_on_the_gpu(tmp_path: Path) -> None:
    service = KerneloptService(make_config(tmp_path))
    finished: list[str] = []
    try:
        async def job(client: str, label: str, source: str, state: list[str]) -> None:
            CLIENT_ID.set(client)

            async def notify(message: str) -> None:
                state.append(message)

            out = await service.checks.evaluate("tiny_add", source, None, ADD_LAUNCH_SPEC, None,
                                                benchmark=False, notify=notify)
            assert out.status == "ok", out
            finished.append(label)

        await job("a", "warm-up", kernel("SLOW"), [])  # prepared and compiled: every job below only runs
        finished.clear()
        async with anyio.create_task_group() as tg:
            for client, label in [("a", "a1"), ("a", "a2"), ("a", "a3"), ("b", "b1"), ("b", "b2")]:
                state: list[str] = []
                tg.start_soon(job, client, label, kernel("SLOW"), state)
                with anyio.fail_after(30):  # running (a1) or queued before the next one comes
                    while not any(m.startswith(("queued", "running", "candidate")) for m in state):
                        await anyio.sleep(0.02)
        assert finished == ["a1", "b1", "a2", "b2", "a3"]
    finally:
        service.close()


async def test_a_gpu_call_past_the_cap_is_stopped_with_a_clear_error(tmp_path: Path) -> None:
    async with in_memory_server(make_config(tmp_path)) as (client, service):
        ok = await client.call_tool("validate", {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel()})
        assert ok.structured_content["status"] == "ok", text(ok)  # prepared: the capped call is the kernel alone
        service.config = replace(service.config, gpu_call_max_s=2.0)
        with anyio.fail_after(15):  # the hanging kernel would sleep an hour; the harness's own limit is 20 s
            r = await client.call_tool("validate",
                                       {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel("HANG")})
        assert r.is_error, text(r)
        assert "ran past this server's cap of 2 s per call" in text(r) and "--gpu-call-max-s" in text(r), text(r)
        assert not fake_processes(str(tmp_path / "fake_harness.py") + "\0serve"), "the harness should be killed"
        again = await client.call_tool("validate", {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel()})
        assert again.structured_content["status"] == "ok", text(again)


async def test_autotune_budget_is_capped_to_the_gpu_call_cap(tmp_path: Path) -> None:
    async with in_memory_server(make_config(tmp_path, gpu_call_max_s=40.0)) as (client, _):
        args = {"workload": "tiny_add", "tunable_path": str(FIXTURES / "add.json"), "budget_evals": 3, "budget_s": 900}
        r = await client.call_tool("autotune", args)
        assert not r.is_error, text(r)
        assert any(n.startswith("budget_s capped to 30 s (asked 900 s)") and "--gpu-call-max-s" in n
                   for n in r.structured_content["notes"]), r.structured_content
        saved = json.loads((Path(r.structured_content["saved_to"]) / "tune.json").read_text())
        assert saved["budget_s"] == 30


@pytest.mark.parametrize(("argv", "env", "cap"), [
    ([], {}, 0.0),  # one user's stdio server: no cap
    (["--http"], {}, 600.0),  # a shared server: capped by default
    (["--http", "--gpu-call-max-s", "0"], {}, 0.0),
    ([], {"KERNELOPT_MCP_GPU_CALL_MAX_S": "7200"}, 7200.0),
])
def test_gpu_call_cap_and_queue_bounds_from_flags_and_environment(
    argv: list[str], env: dict[str, str], cap: float
) -> None:
    config = config_from_args(build_parser().parse_args(argv), env)
    assert config.gpu_call_max_s == cap and config.queue_bounds == QueueBounds(16, 64)
    bounds = config_from_args(build_parser().parse_args(["--max-waiting-per-client", "2"]),
                              {"KERNELOPT_MCP_MAX_WAITING": "5"})
    assert bounds.queue_bounds == QueueBounds(2, 5)
    with pytest.raises(SystemExit, match="at least 1"):
        config_from_args(build_parser().parse_args(["--max-waiting", "0"]), {})
