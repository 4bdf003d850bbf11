"""Where a tuning run's measurements happen: one worker per GPU, each with its own prepared session.

A worker evaluates one candidate at a time on its own device: a local one owns a harness process
and a :class:`~kernelopt_mcp.evaluation.session.Session` on one ordinal of this machine; a Ray one
(:mod:`kernelopt_mcp.tune.ray_workers`) is an actor pinned to one GPU of a cluster. Each session
times the reference on its own device, so every score a worker returns is judged against a
reference timed where the candidate ran. Scores from several workers are ranked together only when
their devices are the same model (:func:`same_model`): a run on a mixed machine uses the devices of
the first one's model and says which it left out.
"""

from __future__ import annotations

import threading
from typing import Protocol

from ..errors import KerneloptError
from ..evaluation.candidate import Candidate, EvaluateOptions
from ..evaluation.evaluate import evaluate, prepare
from ..evaluation.outcomes import EvaluationResult
from ..evaluation.session import Session

__all__ = ["LocalWorker", "Worker", "WorkerLost", "prepare_first", "same_model"]


class WorkerLost(KerneloptError):
    """A worker died (its process or node is gone) before answering: its job runs on another."""


class Worker(Protocol):
    """One GPU that evaluates candidates, one at a time."""

    label: str  # where it runs, for notes and the summary ("device 1", "ray actor on node ... GPU 0")
    model: str  # the device's model name: scores are only ranked against the same model

    def prepare(self) -> float | None:
        """Prepare the session (inputs, expected outputs, the reference timed); the reference's score."""
        ...

    def evaluate(self, candidate: Candidate, options: EvaluateOptions, beat_ms: float | None) -> EvaluationResult:
        """Validate and time ``candidate`` on this worker's device (WorkerLost if the worker died)."""
        ...

    def close(self) -> None: ...


class LocalWorker:
    """A device of this machine through a prepared session (prepared on first use, in the calling
    thread, so several devices prepare at once)."""

    def __init__(self, session: Session, owned: bool = False) -> None:
        self.session = session
        self.owned = owned  # close the session (and its harness) with the worker
        device = session.device
        self.model = device.name if device else "unknown device"
        harness = getattr(session, "harness", None)  # a session that only simulates has none
        self.label = f"device {harness.device if harness is not None else 0}"
        self._lock = threading.Lock()

    def prepare(self) -> float | None:
        with self._lock:
            prepare(self.session)
        reference = self.session.reference_result
        return reference.score_ms if reference is not None else None

    def evaluate(self, candidate: Candidate, options: EvaluateOptions, beat_ms: float | None) -> EvaluationResult:
        with self._lock:
            prepare(self.session)
            return evaluate(self.session, candidate, options, beat_ms=beat_ms)

    def close(self) -> None:
        if self.owned:
            self.session.close()
            closer = getattr(self.session.harness, "close", None)
            if closer is not None:
                closer()


def same_model(workers: list[Worker]) -> tuple[list[Worker], list[str]]:
    """The workers whose device is the first one's model, and a note for each left out."""
    if not workers:
        return [], []
    model = workers[0].model
    kept = [w for w in workers if w.model == model]
    notes = [f"{w.label} ({w.model}) not used: its scores would be ranked against {model}'s"
             for w in workers if w.model != model]
    return kept, notes


def prepare_first(workers: list[Worker]) -> tuple[float | None, list[Worker], list[str]]:
    """Prepare the first worker that answers: (its reference score, the workers still alive, a
    note for each lost on the way). Raises KerneloptError when none answers."""
    alive: list[Worker] = list(workers)
    notes: list[str] = []
    while alive:
        try:
            return alive[0].prepare(), alive, notes
        except WorkerLost as exc:
            notes.append(f"{alive[0].label} was lost while preparing ({exc}); the run went on without it")
            alive.pop(0)
    raise KerneloptError(f"every worker was lost; {'; '.join(notes)}")
