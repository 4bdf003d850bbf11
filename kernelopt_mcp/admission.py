"""Waiting rooms for the server's long jobs: each kind (compiles, workload builds, documentation
fetches, device probes) runs on worker threads of its own and waits for them in the event loop.

anyio runs blocking calls on worker threads drawn from one shared limiter (40 by default). A long
job that took one of those threads and then waited inside it (a compile waiting for the compile
pool's memory budget) would hold it, uncancellable, and 40 of them would leave no thread for a
cheap call such as ``list_workloads``. Here a job first waits for a token of its own kind's
limiter in the event loop, where waiting costs no thread and a cancelled call simply leaves the
queue, and only then takes a thread, counted against that limiter, never the shared one.

The queue in front of each kind is bounded per client and overall (:class:`QueueBounds`): past a
bound a call is refused at once with :class:`~kernelopt_mcp.errors.ServerBusy`, saying how many
wait and when to retry, instead of joining a queue that would keep it waiting for an hour. The
GPU queue (:mod:`kernelopt_mcp.gpu_queue`) applies the same bounds with :func:`admit`.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio
import anyio.to_thread

from .errors import ServerBusy

__all__ = [
    "DEFAULT_MAX_WAITING", "DEFAULT_MAX_WAITING_PER_CLIENT", "ROOMS", "QueueBounds", "RecentTimes",
    "WaitingRoom", "admit",
    "server_rooms",
]

T = TypeVar("T")
DEFAULT_MAX_WAITING_PER_CLIENT = 16  # kernelopt optimize --candidates 16 waits with 15 GPU jobs
DEFAULT_MAX_WAITING = 64
# The server's long jobs other than GPU jobs: kind -> (what waits, plural; how many run at once; a
# typical run in seconds, for the retry estimate until jobs have been timed). Compiles run as many
# at once as the compile pool does (0 here).
ROOMS = {
    "compile": ("compiles", 0, 5.0),
    "build": ("workload builds (create_workload, freeze_workload)", 2, 30.0),
    "docs": ("documentation searches", 2, 10.0),
    "probe": ("device probes", 1, 2.0),
}


@dataclass(frozen=True)
class QueueBounds:
    """Jobs of one kind that may wait at once: per client (``server_config.CLIENT_ID``) and in all."""

    per_client: int = DEFAULT_MAX_WAITING_PER_CLIENT
    total: int = DEFAULT_MAX_WAITING

    def __post_init__(self) -> None:
        if self.per_client < 1 or self.total < 1:
            raise ValueError(f"queue bounds must be at least 1 (per client {self.per_client}, in all {self.total})")


class RecentTimes:
    """How long the last jobs of a kind ran: the basis of the "retry in N s" estimate."""

    def __init__(self, typical_s: float) -> None:
        self._default_s = typical_s
        self._recent: deque[float] = deque(maxlen=32)

    def add(self, seconds: float) -> None:
        self._recent.append(seconds)

    def typical_s(self) -> float:
        """The median of the recent run times, or the kind's default before any ran."""
        return statistics.median(self._recent) if self._recent else self._default_s

    def retry_after_s(self, waiting: int, capacity: int) -> int:
        """Seconds until the jobs waiting now should have started, at the recent pace (at least 1)."""
        return max(1, math.ceil(self.typical_s() * (waiting / max(1, capacity) + 1)))


def admit(
    noun: str, waiting: Counter[str], client: str, bounds: QueueBounds, times: RecentTimes, capacity: int
) -> None:
    """Refuse a new job of ``client`` at once when its kind's queue is full.

    Args:
        noun: the jobs, plural, for the message ("compiles", "GPU jobs").
        waiting: jobs waiting now, by client.

    Raises:
        ServerBusy: ``client`` has ``bounds.per_client`` jobs waiting, or all clients ``bounds.total``.
    """
    total, mine = sum(waiting.values()), waiting[client]
    if mine < bounds.per_client and total < bounds.total:
        return
    retry = times.retry_after_s(total, capacity)
    raise ServerBusy(
        f"the server is busy: {total} {noun} are waiting ({mine} of them yours; at most {bounds.per_client} "
        f"per client and {bounds.total} in all may wait); retry in ~{retry} s",
        retry_after_s=retry,
    )


class WaitingRoom:
    """At most ``capacity`` jobs of a kind run at once, each on a worker thread of the kind's own;
    the rest wait in the event loop (cancellable), at most ``bounds`` of them.

    Args:
        noun: the jobs, plural, for messages.
        capacity: jobs that run at once (a compile room: as many as the compile pool runs).
        typical_s: the retry estimate's run time until jobs have been timed.
    """

    def __init__(self, noun: str, capacity: int, bounds: QueueBounds, typical_s: float) -> None:
        self.noun = noun
        self.capacity = max(1, capacity)
        self.bounds = bounds
        self.times = RecentTimes(typical_s)
        self.waiting: Counter[str] = Counter()
        self._turns = anyio.CapacityLimiter(self.capacity)  # who may run (waiting here costs no thread)
        self._threads = anyio.CapacityLimiter(self.capacity)  # their worker threads, never the shared ones

    async def run(self, fn: Callable[[], T], client: str) -> T:
        """``fn()`` on a worker thread once a turn is free; refused at once (ServerBusy) when the
        queue is full. Cancelling the call while it waits frees its place; once ``fn`` runs, the
        call returns when ``fn`` does (a thread cannot be interrupted)."""
        if self._turns.available_tokens < 1 or self.waiting:  # someone would be ahead: a place in the queue
            admit(self.noun, self.waiting, client, self.bounds, self.times, self.capacity)
        self.waiting[client] += 1
        try:
            await self._turns.acquire()
        finally:
            self.waiting[client] -= 1
            if self.waiting[client] <= 0:
                del self.waiting[client]
        try:
            start = time.monotonic()
            result = await anyio.to_thread.run_sync(fn, limiter=self._threads)
            self.times.add(time.monotonic() - start)
            return result
        finally:
            self._turns.release()

    @property
    def running(self) -> int:
        """Jobs holding a turn now."""
        return self.capacity - int(self._turns.available_tokens)


def server_rooms(compile_capacity: int, bounds: QueueBounds) -> dict[str, WaitingRoom]:
    """A waiting room for each kind of :data:`ROOMS`; compiles: ``compile_capacity`` at once."""
    return {
        kind: WaitingRoom(noun, capacity or compile_capacity, bounds, typical_s)
        for kind, (noun, capacity, typical_s) in ROOMS.items()
    }
