"""Progress notifications as a client gets them: always increasing, with a total where the size of
the work is known (the cases validated or timed), through the SDK's in-memory client on the
pretend GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakegpu import ADD_LAUNCH, in_memory_server, kernel, write_tiny_workload
from fakegpu import tool_text as text
from test_server import make_config

pytestmark = pytest.mark.anyio


async def test_benchmark_progress_has_a_total_and_only_increases(tmp_path: Path) -> None:
    config = make_config(tmp_path, write_tiny_workload(tmp_path / "extra"), "fake")
    seen: list[tuple[float, float | None, str]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total, message or ""))

    async with in_memory_server(config) as (client, _):
        r = await client.call_tool("benchmark", {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel(),
                                                 "iterations": 3}, progress_callback=progress)
    assert r.structured_content["status"] == "ok", text(r)
    values = [done for done, _, _ in seen]
    assert values == sorted(set(values)), seen  # MCP: progress increases with every notification
    counted = [(done, total, m) for done, total, m in seen if "validating odd_1001" in m or "timing n_4096" in m]
    assert counted and all(total is not None and total >= done for done, total, _ in counted), seen
    # the last case validated: no validation step left in its phase
    last = next((done, total) for done, total, m in reversed(seen) if "validating" in m and "cases" not in m)
    assert last[1] is not None and last[1] - last[0] <= 1, seen
