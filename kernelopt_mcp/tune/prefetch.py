"""Compile ahead while the GPU measures: a configuration's compile overlaps the previous
configuration's GPU work, so the GPU does not wait for NVRTC.

The tuner measures one configuration at a time: compile (NVRTC, in a worker process), then
validate and time on the GPU. The next configurations of an ordered strategy (exhaustive,
random) are known in advance, so their compiles start in background threads while the current
one runs on the GPU; the evaluation then finds each CUBIN in the session's compile cache. A
compile that is still running when its configuration comes up is waited for, never started twice.
Several compile at once (:func:`ahead_workers`), and the queue reaches well ahead
(``lookahead``): on the H200 machine sgemm's configurations took 0.3-2 s each to compile and
~0.28 s each on the GPU with the precision rule, so with one compile at a time, or a queue only
as long as the workers, the GPU waited for every slow compile (24 configurations: 16.5 s, of them
~7 s on the GPU). Nothing here touches the GPU or changes what is measured: without a compile
cache it does nothing.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..compiler import compile_kernel
from ..evaluation.candidate import Candidate
from ..evaluation.session import Session

#: compiles ahead at most at once (the compile pool's memory budget may allow fewer)
MAX_AHEAD_WORKERS = 4
#: configurations queued per worker: a slow compile is started this far ahead of its turn
QUEUE_PER_WORKER = 4


def ahead_workers(cpus: int | None = None) -> int:
    """Compiles to run at once ahead of the GPU: one core is left to the thread that drives the
    GPU, and at most :data:`MAX_AHEAD_WORKERS`."""
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(MAX_AHEAD_WORKERS, cpus - 1))


class CompileAhead:
    """Compiles candidates of ``session`` in the background, ``workers`` at once (the compile
    pool's own limits still bound the workers and their memory). ``lookahead``: how many of the
    next configurations to start: a queue of :data:`QUEUE_PER_WORKER` per worker, so that a
    slow compile begins several measurements before its turn."""

    def __init__(self, session: Session, workers: int | None = None) -> None:
        self.session = session
        self.enabled = session.compile_cache is not None
        self.workers = ahead_workers() if workers is None else max(1, workers)
        self.lookahead = QUEUE_PER_WORKER * self.workers
        self._pool = (ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="compile-ahead")
                      if self.enabled else None)
        self._pending: dict[str, Future[Any]] = {}
        self.started = 0

    def start(self, key: str, candidate: Candidate) -> None:
        """Begin compiling ``candidate`` (known by ``key``) unless it already began."""
        if self._pool is None or key in self._pending:
            return
        s = self.session
        self._pending[key] = self._pool.submit(
            compile_kernel, candidate.source, s.arch, candidate.all_compile_options, cache=s.compile_cache,
            limits=s.compile_limits,
        )
        self.started += 1

    def wait(self, key: str) -> None:
        """Let a compile of ``key`` that began finish (its result lands in the cache), so the
        evaluation does not compile it a second time. Errors are the evaluation's to report."""
        future = self._pending.pop(key, None)
        if future is not None:
            try:
                future.result()
            except Exception:  # noqa: BLE001 (the evaluation compiles again and reports it)
                pass

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pending.clear()
