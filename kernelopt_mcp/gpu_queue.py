"""One GPU job at a time per device: a first-come-first-served queue, progress, cancellation.

The MCP server runs the synchronous library in worker threads. :func:`run_on_device` gives a
job the device alone (a waiting job hears how many are ahead), forwards its progress as
notifications with a heartbeat, and when the caller is cancelled kills the harness at once and
keeps it from restarting until the job has unwound, so nothing is left running on the GPU.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from .errors import HarnessCancelled
from .evaluation.harness import HarnessProcess
from .evaluation.session import Session

__all__ = ["DeviceSlot", "GpuQueue", "Notify", "ProgressFn", "run_on_device"]

T = TypeVar("T")
Notify = Callable[[str], Awaitable[None]]
ProgressFn = Callable[[str, int, int], None]
HEARTBEAT_S = 10.0  # progress at least this often while a job waits or runs


class GpuQueue:
    """One job at a time, first come first served; a waiting job hears how many are ahead."""

    def __init__(self) -> None:
        self._lock = anyio.Lock()
        self._queue: list[object] = []

    @asynccontextmanager
    async def turn(self, notify: Notify) -> AsyncIterator[None]:
        ticket = object()
        self._queue.append(ticket)
        acquired = False

        async def report() -> None:
            while True:
                ahead = self._queue.index(ticket) + 1  # the running job, then those queued earlier
                await notify(f"queued for the GPU: {ahead} job(s) ahead (one GPU job runs at a time)")
                await anyio.sleep(HEARTBEAT_S)

        try:
            async with anyio.create_task_group() as tg:
                if self._lock.locked():
                    tg.start_soon(report)
                await self._lock.acquire()
                acquired = True
                tg.cancel_scope.cancel()
        except BaseException:
            if acquired:  # cancelled (or the report failed) right after the lock was taken
                self._lock.release()
            raise
        finally:
            self._queue.remove(ticket)
        try:
            yield
        finally:
            self._lock.release()


@dataclass
class DeviceSlot:
    """A device's queue, harness and prepared sessions (touched only while holding the queue)."""

    ordinal: int
    queue: GpuQueue = field(default_factory=GpuQueue)
    harness: HarnessProcess | None = None
    sessions: OrderedDict[str, Session] = field(default_factory=OrderedDict)


async def run_on_device(
    dev: DeviceSlot, start_harness: Callable[[], HarnessProcess], fn: Callable[[DeviceSlot, ProgressFn], T],
    notify: Notify,
) -> T:
    """Run ``fn(dev, progress)`` in a worker thread, alone on the device.

    Progress from the thread becomes ``notify`` calls. If the caller is cancelled, the
    harness is killed at once and kept from restarting, the thread unwinds, and only then
    is the device free for the next job. ``start_harness`` makes the device's harness the
    first time.
    """
    async with dev.queue.turn(notify):
        if dev.harness is None:
            dev.harness = start_harness()
        harness = dev.harness
        harness.rearm()
        send, receive = anyio.create_memory_object_stream[str](math.inf)
        finished = False

        def progress(message: str, done: int, total: int) -> None:
            if harness.cancelled:
                raise HarnessCancelled("the call was cancelled")
            try:
                anyio.from_thread.run_sync(send.send_nowait, message)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, RuntimeError):
                pass

        last = ["running on the GPU"]

        async def forward() -> None:
            async with receive:
                async for message in receive:
                    last[0] = message
                    await notify(message)

        async def heartbeat() -> None:  # a long launch sends no progress; clients may time out
            start = anyio.current_time()
            while True:
                await anyio.sleep(HEARTBEAT_S)
                await notify(f"{last[0]} (still running, {anyio.current_time() - start:.0f} s)")

        async def kill_on_cancel() -> None:
            try:
                await anyio.sleep_forever()
            finally:
                if not finished:
                    harness.cancel()

        outcome: tuple[bool, Any] = (False, None)
        async with anyio.create_task_group() as tg:
            tg.start_soon(forward)
            tg.start_soon(kill_on_cancel)
            tg.start_soon(heartbeat)
            await notify(last[0])
            try:
                outcome = (True, await anyio.to_thread.run_sync(partial(fn, dev, progress)))
            except Exception as exc:  # re-raised below, outside the task group
                outcome = (False, exc)
            finally:
                finished = True
                send.close()
                tg.cancel_scope.cancel()
        await anyio.lowlevel.checkpoint_if_cancelled()
        ok, value = outcome
        if not ok:
            raise value
        return value
