"""No file a client names can stall the server (issue 13, item 3).

With a FIFO named tune_fifo.json under a root, `autotune {"tunable_path": "tune_fifo.json"}`
blocked the event loop (the file was opened in the async handler, and opening a FIFO for reading
waits for a writer): tools/list got no answer. A 300 MB JSON file blocked it ~1 s. Here each bad
call runs while tools/list is asked, with a deadline; a thread opens the FIFO's other end after a
few seconds, so a server that did block comes back and the deadline reports it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakegpu import ADD_LAUNCH, in_memory_server, released_fifo, write_harness, write_tiny_workload
from fakegpu import tool_text as text

from kernelopt_mcp.config import Settings, bundled_workloads_dir
from kernelopt_mcp.server_config import ServerConfig

pytestmark = pytest.mark.anyio
ANSWER_WITHIN_S = 1.0
RELEASE_AFTER_S = 3.0


@pytest.fixture
def config(tmp_path: Path) -> ServerConfig:
    settings = Settings(harness=write_harness(tmp_path, "fake"), timeout_s=20,
                        workload_dirs=(bundled_workloads_dir(), write_tiny_workload(tmp_path / "extra")))
    return ServerConfig(settings=settings, workspace=tmp_path / "ws")



def huge(path: Path, size: int = 300 * 2**20) -> Path:
    """A 300 MB file (sparse: no disk) starting like JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(b'{"params": {"A": [1]}, "pad": "')
        f.truncate(size)
    return path


async def answers_while(client: Any, tool: str, args: dict[str, Any]) -> str:
    """Call ``tool``; while it is in flight the event loop never stalls for ANSWER_WITHIN_S (a
    ticker task measures the longest gap between its ticks) and tools/list answers within it.
    Returns the bad call's error text (it must be a clear tool error, not a crash)."""
    outcome: dict[str, Any] = {}
    longest_gap = 0.0

    async def ticker() -> None:
        nonlocal longest_gap
        last = time.monotonic()
        while "result" not in outcome:
            await anyio.sleep(0.02)
            now = time.monotonic()
            longest_gap, last = max(longest_gap, now - last), now

    async def bad_call() -> None:
        outcome["result"] = await client.call_tool(tool, args)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        tg.start_soon(bad_call)
        await anyio.sleep(0.1)  # the bad call reaches the server
        started = time.monotonic()
        tools = await client.list_tools()
        assert time.monotonic() - started < ANSWER_WITHIN_S, "tools/list waited for the bad call"
        assert "compile" in {t.name for t in tools.tools}
    assert longest_gap < ANSWER_WITHIN_S, f"the event loop stalled for {longest_gap:.1f} s during {tool}"
    result = outcome["result"]
    assert result.is_error, text(result)
    assert text(result).strip() != f"Error executing tool {tool}", "a crash, not a clear error"
    return text(result)


async def test_fifos_and_huge_files_named_by_tools_do_not_stall_the_server(config: ServerConfig) -> None:
    ws = config.workspace
    async with in_memory_server(config) as (client, _):
        with released_fifo(after_s=RELEASE_AFTER_S, path=ws / "tune_fifo.json"):
            err = await answers_while(client, "autotune", {"workload": "tiny_add", "tunable_path": "tune_fifo.json"})
            assert "not a regular file" in err
        huge(ws / "huge.json")
        err = await answers_while(client, "autotune", {"workload": "tiny_add", "tunable_path": "huge.json"})
        assert "larger than" in err
        with released_fifo(after_s=RELEASE_AFTER_S, path=ws / "k.cu"):
            err = await answers_while(client, "compile", {"path": "k.cu"})
            assert "not a regular file" in err and "regular .cu file" in err
        with released_fifo(after_s=RELEASE_AFTER_S, path=ws / "v.cu"):
            err = await answers_while(client, "validate",
                                      {"workload": "tiny_add", "path": "v.cu", "launch": ADD_LAUNCH})
            assert "not a regular file" in err
        huge(ws / "big.cu")
        err = await answers_while(client, "compile", {"path": "big.cu"})
        assert "larger than" in err
        # a tunable.json whose source is a FIFO
        (ws / "t.json").write_text('{"source": "t_fifo.cu", "params": {"A": [1]}}')
        with released_fifo(after_s=RELEASE_AFTER_S, path=ws / "t_fifo.cu"):
            err = await answers_while(client, "autotune", {"workload": "tiny_add", "tunable_path": "t.json"})
            assert "not a regular file" in err


async def test_fifo_resources_fail_at_once(config: ServerConfig) -> None:
    runs = config.runs_dir
    async with in_memory_server(config) as (client, _):
        with released_fifo(after_s=RELEASE_AFTER_S, path=runs / "x" / "fifo.json"):
            with anyio.fail_after(ANSWER_WITHIN_S * 2):  # a worker thread blocked on it would wait RELEASE_AFTER_S
                with pytest.raises(Exception, match="not a regular file"):
                    await client.read_resource("kernelopt://runs/x/fifo.json")
        huge(runs / "x" / "big.json")
        with pytest.raises(Exception, match="larger than"):
            await client.read_resource("kernelopt://runs/x/big.json")
        (runs / "x" / "ok.json").write_text('{"ok": 1}')
        r = await client.read_resource("kernelopt://runs/x/ok.json")
        assert '"ok": 1' in r.contents[0].text
