"""One GPU job at a time per device: a queue fair across clients, progress, cancellation, a time cap.

The MCP server runs the synchronous library in worker threads. :func:`run_on_device` gives a
job the device alone (a waiting job hears how many are ahead), forwards its progress as
notifications with a heartbeat, and when the caller is cancelled, or the job runs past the
server's per-call cap, kills the harness at once and keeps it from restarting until the job has
unwound, so nothing is left running on the GPU.

The queue takes clients in turn (each client's own jobs first come first served): the next job is
the oldest of the client served least recently, so one client's 60 queued benchmarks delay
another client's next job by one job, not 60. The queue is bounded per client and in all
(:func:`kernelopt_mcp.admission.admit`): past a bound a job is refused at once, never queued.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from .admission import QueueBounds, RecentTimes, admit
from .errors import GpuCallTooLong, HarnessCancelled
from .evaluation.device import DeviceInfo
from .evaluation.harness import HarnessProcess
from .evaluation.session import Session

__all__ = ["DeviceSlot", "GpuQueue", "Notify", "ProgressFn", "Step", "pick_device", "run_on_device"]

T = TypeVar("T")
Notify = Callable[[str], Awaitable[None]]
ProgressFn = Callable[[str, int, int], None]


class Step(str):
    """A progress message that also says how far its phase is: ``done`` of ``total`` (cases,
    configurations; total 0 when unknown). A ``str``, so every Notify takes it as a message."""

    done: int
    total: int

    def __new__(cls, message: str, done: int, total: int) -> Step:
        step = super().__new__(cls, message)
        step.done, step.total = done, total
        return step


HEARTBEAT_S = 10.0  # progress at least this often while a job waits or runs
TYPICAL_GPU_JOB_S = 30.0  # the retry estimate's guess until jobs have run


@dataclass(eq=False)
class _Ticket:
    client: str
    handed: anyio.Event = field(default_factory=anyio.Event)


class GpuQueue:
    """One job at a time; clients take turns, each client's jobs in the order they came.

    Args:
        bounds: jobs that may wait, per client and in all (the running one not counted).
    """

    def __init__(self, bounds: QueueBounds | None = None) -> None:
        self.bounds = bounds or QueueBounds()
        self.times = RecentTimes(TYPICAL_GPU_JOB_S)
        self._busy = False
        self._waiting: dict[str, deque[_Ticket]] = {}
        self._served: dict[str, int] = {}  # client -> when its last job started (a counter)
        self._clock = itertools.count()
        self.served_order: list[str] = []  # clients in the order their jobs started (tests read it)

    def load(self) -> tuple[bool, int]:
        """(whether a job holds the device, how many wait): a free device sorts first."""
        return self._busy, sum(len(queue) for queue in self._waiting.values())

    def waiting(self) -> Counter[str]:
        """Jobs waiting now, by client."""
        return Counter({client: len(queue) for client, queue in self._waiting.items() if queue})

    def _order(self) -> list[_Ticket]:
        """The waiting jobs in the order they will start, if no other job comes."""
        queues = {client: list(queue) for client, queue in self._waiting.items() if queue}
        served = dict(self._served)
        order: list[_Ticket] = []
        step = itertools.count(max(served.values(), default=0) + 1)
        while queues:
            client = min(queues, key=lambda c: served.get(c, -1))  # dicts keep arrival order for ties
            order.append(queues[client].pop(0))
            served[client] = next(step)
            if not queues[client]:
                del queues[client]
        return order

    def _hand_over(self) -> None:
        """Give the device to the next job in turn, or mark it free."""
        order = self._order()
        if not order:
            self._busy = False
            return
        ticket = order[0]
        self._waiting[ticket.client].popleft()
        if not self._waiting[ticket.client]:
            del self._waiting[ticket.client]
        self._served[ticket.client] = next(self._clock)
        self.served_order.append(ticket.client)
        ticket.handed.set()  # the device stays busy: it passes straight to this job

    @asynccontextmanager
    async def turn(self, notify: Notify, client: str) -> AsyncIterator[None]:
        """Hold the device for ``client``'s job; refused at once (ServerBusy) when the queue is full."""
        if not self._busy:
            self._busy = True
            self._served[client] = next(self._clock)
            self.served_order.append(client)
        else:
            admit("GPU jobs", self.waiting(), client, self.bounds, self.times, 1)
            ticket = _Ticket(client)
            self._waiting.setdefault(client, deque()).append(ticket)

            async def report() -> None:
                while True:
                    order = self._order()
                    if ticket not in order:  # handed the device as this heartbeat fell due: nothing to say
                        return
                    ahead = order.index(ticket) + 1  # the running job, then those before it in turn
                    await notify(
                        f"queued for the GPU: {ahead} job(s) ahead (one GPU job runs at a time; clients take turns)"
                    )
                    await anyio.sleep(HEARTBEAT_S)

            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(report)
                    await ticket.handed.wait()
                    tg.cancel_scope.cancel()
            except BaseException:
                if ticket.handed.is_set():  # handed the device, then cancelled: pass it on
                    self._hand_over()
                else:
                    queue = self._waiting.get(client)
                    if queue is not None and ticket in queue:
                        queue.remove(ticket)
                        if not queue:
                            del self._waiting[client]
                raise
        start = time.monotonic()
        try:
            yield
        finally:
            self.times.add(time.monotonic() - start)
            self._hand_over()


@dataclass
class DeviceSlot:
    """A device's queue, harness and prepared sessions (touched only while holding the queue).

    Sessions are per device: each device times the reference itself, so a candidate is only ever
    compared with a reference timed on the device (and model) it ran on."""

    ordinal: int
    queue: GpuQueue = field(default_factory=GpuQueue)
    info: DeviceInfo | None = None
    # a GPU of a Ray cluster (ray_devices.RayDevice): its harness and sessions live in its actor
    remote: Any = None
    harness: HarnessProcess | None = None
    sessions: OrderedDict[str, Session] = field(default_factory=OrderedDict)
    # the job's worker thread: its own, never one of anyio's shared threads that short calls need
    thread: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(1))


def pick_device(slots: list[DeviceSlot]) -> DeviceSlot:
    """The device a new job queues for: a free one, else the one with the fewest jobs waiting
    (ties: the lowest ordinal). Every job then runs on one device from start to end."""
    return min(slots, key=lambda slot: (*slot.queue.load(), slot.ordinal))


async def run_on_device(
    dev: DeviceSlot, start_harness: Callable[[], HarnessProcess], fn: Callable[[DeviceSlot, ProgressFn], T],
    notify: Notify, *, client: str, max_s: float = 0.0, cap_name: str = "the per-call cap",
) -> T:
    """Run ``fn(dev, progress)`` in a worker thread, alone on the device, in ``client``'s turn.

    Progress from the thread becomes ``notify`` calls. If the caller is cancelled, or the job
    runs more than ``max_s`` seconds (0: no cap), the harness is killed at once and kept from
    restarting, the thread unwinds, and only then is the device free for the next job.
    ``start_harness`` makes the device's harness the first time.

    Raises:
        ServerBusy: the queue is full (nothing was queued).
        GpuCallTooLong: the job ran past ``max_s`` (``cap_name`` says which setting sets it).
    """
    async with dev.queue.turn(notify, client):
        if dev.harness is None and dev.remote is None:
            dev.harness = start_harness()
        harness = dev.harness
        if harness is not None:
            harness.rearm()
        send, receive = anyio.create_memory_object_stream[str](math.inf)
        finished = False

        def progress(message: str, done: int, total: int) -> None:
            if harness is not None and harness.cancelled:
                raise HarnessCancelled("the call was cancelled")
            try:
                anyio.from_thread.run_sync(send.send_nowait, Step(message, done, total))
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
                if not finished and harness is not None:  # a Ray actor's call runs to its end
                    harness.cancel()

        over = [False]

        async def cap() -> None:  # the GPU is shared: no call holds it past the operator's cap
            await anyio.sleep(max_s)
            if not finished and harness is not None:
                over[0] = True
                harness.cancel()

        outcome: tuple[bool, Any] = (False, None)
        async with anyio.create_task_group() as tg:
            tg.start_soon(forward)
            tg.start_soon(kill_on_cancel)
            tg.start_soon(heartbeat)
            if max_s > 0:
                tg.start_soon(cap)
            await notify(last[0])
            try:
                outcome = (True, await anyio.to_thread.run_sync(partial(fn, dev, progress), limiter=dev.thread))
            except Exception as exc:  # re-raised below, outside the task group
                outcome = (False, exc)
            finally:
                finished = True
                send.close()
                tg.cancel_scope.cancel()
        await anyio.lowlevel.checkpoint_if_cancelled()
        if over[0]:
            raise GpuCallTooLong(
                f"the GPU job ran past this server's cap of {max_s:g} s per call and was stopped ({cap_name}); "
                "split the work into shorter calls: fewer or smaller cases, fewer iterations, a smaller autotune "
                "budget_s or budget_evals"
            )
        ok, value = outcome
        if not ok:
            raise value
        return value
