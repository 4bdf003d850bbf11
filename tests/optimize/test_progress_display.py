"""The live progress line with several activities at once (--candidates N: model requests in flight
while the GPU evaluates): one status line for all of them, never two live displays."""

from __future__ import annotations

import io

import anyio
from rich.console import Console

from kernelopt_agent.progress import Display


def test_overlapping_activities_share_one_status_line() -> None:
    out = io.StringIO()
    display = Display(Console(file=out, force_terminal=True, width=120))
    lines: list[str] = []

    async def lane(name: str, started: anyio.Event, release: anyio.Event) -> None:
        with display.activity(name):
            started.set()
            await release.wait()

    async def main() -> None:
        events = [(anyio.Event(), anyio.Event()) for _ in range(3)]
        async with anyio.create_task_group() as tg:
            for i, (started, release) in enumerate(events):
                tg.start_soon(lane, f"candidate {i + 1}: asking the model", started, release)
                await started.wait()
            lines.append(display._line())
            display.progress("compiling")
            for _, release in events:
                release.set()
                await anyio.sleep(0)

    anyio.run(main)
    assert "candidate 3: asking the model (+2 more under way)" in lines[0]
    assert display._status is None and display._active == []  # the last one out stopped the line
