"""The tuning dispatcher: every worker busy at once, and a worker that dies loses no answer (its job
is retried on another and the row says so). The workers are stand-ins for GPUs."""

from __future__ import annotations

import threading
import time

import pytest

from kernelopt_mcp.errors import KerneloptError
from kernelopt_mcp.evaluation.candidate import Candidate, EvaluateOptions
from kernelopt_mcp.evaluation.outcomes import EvaluationResult, Status
from kernelopt_mcp.launch import LaunchSpec
from kernelopt_mcp.tune.dispatch import Dispatcher
from kernelopt_mcp.tune.workers import WorkerLost, same_model

LAUNCH = LaunchSpec.model_validate({"default": {"grid": [1], "block": [32]}})


class Pretend:
    """A GPU that takes ``seconds`` per candidate; ``dies_on``: the call (1-based) on which it is lost."""

    def __init__(self, label: str, model: str = "H200", seconds: float = 0.2, dies_on: int | None = None) -> None:
        self.label, self.model, self.seconds, self.dies_on = label, model, seconds, dies_on
        self.calls = 0
        self.busy = 0
        self.overlap = threading.Event()

    def evaluate(self, candidate: Candidate, options: EvaluateOptions, beat_ms: float | None) -> EvaluationResult:
        self.calls += 1
        time.sleep(self.seconds)
        if self.calls == self.dies_on:
            raise WorkerLost("the actor's process exited")
        return EvaluationResult(status=Status.ok, message="ok", workload="w", candidate=candidate.name, arch="sm_90",
                                score_ms=1.0, device=self.model)

    def close(self) -> None:
        pass


def run(dispatch: Dispatcher, n: int) -> list:
    done = []
    for i in range(n):
        done += dispatch.submit(dispatch.next_index(), {"I": i}, Candidate("", LAUNCH, [], f"c{i}"), None)
    return done + dispatch.drain()


def test_every_worker_is_busy_at_once() -> None:
    workers = [Pretend("a"), Pretend("b"), Pretend("c")]
    start = time.monotonic()
    done = run(Dispatcher(workers, EvaluateOptions()), 6)
    elapsed = time.monotonic() - start
    assert sorted(d.index for d in done) == list(range(6))
    assert [w.calls for w in workers] == [2, 2, 2]
    assert elapsed < 6 * 0.2 * 0.75, elapsed  # serial would take 1.2 s


def test_a_lost_worker_loses_no_answer_and_its_job_is_retried_elsewhere() -> None:
    lost = Pretend("ray actor 1", dies_on=2)
    dispatch = Dispatcher([Pretend("ray actor 0"), lost], EvaluateOptions())
    done = run(dispatch, 5)
    assert sorted(d.index for d in done) == list(range(5))  # every configuration answered once
    retried = [d for d in done if d.note]
    assert (len(retried) == 1 and "retried: ray actor 1 was lost" in retried[0].note
            and retried[0].worker == "ray actor 0")
    assert lost.calls == 2 and any("ray actor 1 was lost" in n for n in dispatch.notes)


def test_when_every_worker_is_lost_the_run_fails_saying_why() -> None:
    dispatch = Dispatcher([Pretend("a", dies_on=1), Pretend("b", dies_on=1)], EvaluateOptions())
    with pytest.raises(KerneloptError, match="every worker was lost"):
        run(dispatch, 3)


def test_workers_of_another_model_are_left_out() -> None:
    kept, notes = same_model([Pretend("device 0", "H200"), Pretend("device 1", "A100"), Pretend("device 2", "H200")])
    assert [w.label for w in kept] == ["device 0", "device 2"]
    assert notes == ["device 1 (A100) not used: its scores would be ranked against H200's"]
