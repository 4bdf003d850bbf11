"""Hands a tuning run's configurations to its workers, one at a time each, and collects the answers.

With one worker a configuration is measured in the calling thread as soon as it is submitted (the
single-GPU path, unchanged). With several, each worker gets a thread of its own; ``submit`` returns
at once while a worker is free and otherwise waits for the first answer, so every device stays busy
while the strategy proposes. A worker that dies (:class:`~kernelopt_mcp.tune.workers.WorkerLost`)
is dropped and its configuration goes to another: no answer already recorded is lost, and the row
of the retried configuration says so. Only when every worker is gone does the run fail.
"""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from ..errors import KerneloptError
from ..evaluation.candidate import Candidate, EvaluateOptions
from ..evaluation.outcomes import EvaluationResult
from .space import Config, config_key
from .workers import Worker, WorkerLost

__all__ = ["Dispatcher", "Done"]


@dataclass(frozen=True)
class Done:
    """One configuration's answer, and where and how it was measured."""

    index: int
    config: Config
    result: EvaluationResult
    worker: str | None  # None: from the cache
    cached: bool = False
    seconds: float = 0.0
    note: str = ""  # e.g. a lost worker's retry, put before the result's message


@dataclass
class _Job:
    index: int
    config: Config
    candidate: Candidate
    beat_ms: float | None
    started: float
    note: str = ""


class Dispatcher:
    """One configuration per worker at a time; answers come back in the order they finish."""

    def __init__(self, workers: list[Worker], options: EvaluateOptions) -> None:
        if not workers:
            raise KerneloptError("no worker to measure on: give at least one device")
        self.free: list[Worker] = list(workers)
        self.options = options
        self.notes: list[str] = []
        self._index = 0
        self._running: dict[Future[EvaluationResult], tuple[_Job, Worker]] = {}
        self._retry: list[_Job] = []  # a lost worker's jobs, for the next worker free
        self._pool = (ThreadPoolExecutor(max_workers=len(workers), thread_name_prefix="tune-worker")
                      if len(workers) > 1 else None)

    @property
    def in_flight(self) -> int:
        return len(self._running)

    @property
    def pending(self) -> set[str]:
        """The keys of the configurations being measured now."""
        return {config_key(job.config) for job, _ in self._running.values()}

    def next_index(self) -> int:
        index, self._index = self._index, self._index + 1
        return index

    def submit(self, index: int, config: Config, candidate: Candidate, beat_ms: float | None) -> list[Done]:
        """Measure ``config``; the answers that arrived meanwhile (with one worker: this one's)."""
        job = _Job(index, config, candidate, beat_ms, time.monotonic())
        if self._pool is None:
            return self._inline(job)
        done: list[Done] = []
        while not self.free:
            if not self._running:  # every worker lost (bounded: each pass waits for one answer)
                raise KerneloptError(f"every worker was lost; {'; '.join(self.notes)}")
            done.extend(self._collect(block=True))
        self._start(job)
        return done + self._collect(block=False)

    def drain(self) -> list[Done]:
        """Wait for every configuration still being measured."""
        done: list[Done] = []
        while self._running:
            done.extend(self._collect(block=True))
        return done

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def _inline(self, job: _Job) -> list[Done]:
        worker = self.free[0]
        result = worker.evaluate(job.candidate, self.options, job.beat_ms)
        return [Done(job.index, job.config, result, worker.label, seconds=time.monotonic() - job.started)]

    def _start(self, job: _Job) -> None:
        worker = self.free.pop(0)
        assert self._pool is not None
        future = self._pool.submit(worker.evaluate, job.candidate, self.options, job.beat_ms)
        self._running[future] = (job, worker)

    def _collect(self, *, block: bool) -> list[Done]:
        if not self._running:
            return []
        finished, _ = wait(list(self._running), timeout=None if block else 0, return_when=FIRST_COMPLETED)
        done: list[Done] = []
        for future in finished:
            job, worker = self._running.pop(future)
            try:
                result = future.result()
            except WorkerLost as exc:
                note = f"{worker.label} was lost ({exc}); config {config_key(job.config)} retried on another worker"
                self.notes.append(note)
                job.note += f"retried: {worker.label} was lost. "
                self._retry.append(job)
                continue
            self.free.append(worker)
            done.append(Done(job.index, job.config, result, worker.label, seconds=time.monotonic() - job.started,
                             note=job.note))
        while self._retry and self.free:
            self._start(self._retry.pop(0))
        if self._retry and not self._running:
            raise KerneloptError(f"every worker was lost; {'; '.join(self.notes)}")
        return done
