"""A run's state: what the loop has learned and decided so far, and what finalize writes out.

The loop (``loop.Optimizer``) and the candidate evaluation (``evaluator.Evaluator``) write it;
``finalize`` reads it (summary.json, best.cu, the heatmap), and so does ``cli.execute`` once the
loop has ended, however it ended. It holds nothing of how the loop goes about its work (the
proposals in flight, the GPU semaphore, the prompts' texts): those stay in the loop.

Every event is kept in ``history`` and appended to history.jsonl at once (:meth:`RunState.record`),
so a killed run keeps each event up to the kill.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .records import CandidateRecord, DuplicateEvent, Event, StepEvent

if TYPE_CHECKING:
    from .freeze import FrozenWorkload
    from .model import ModelClient
    from .options import OptimizeOptions
    from .parts import Parts
    from .rundir import RunDir
    from .toolbox import DeviceInfo, Toolbox


@dataclass
class RunState:
    """One run of ``kernelopt optimize`` (a resumed run: what its records hold, then what it adds)."""

    opts: OptimizeOptions
    run: RunDir
    parts: Parts | None = None  # from preflight(), else loaded by the loop; the generated ones once generated
    started: float = field(default_factory=time.time)  # epoch s (a resumed run: when it first started)
    records: list[CandidateRecord] = field(default_factory=list)  # every candidate evaluated, in order
    history: list[Event] = field(default_factory=list)
    lanes: dict[int | None, str] = field(default_factory=lambda: {None: "begin"})  # the graph node each lane is at
    duplicates: list[DuplicateEvent] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # summary.json's notes: what the run could not do
    resumes: list[dict[str, Any]] = field(default_factory=list)  # each --resume of this run (summary.json's "resumes")
    iterations_used: int = 0
    stop_reason: str = ""
    model: ModelClient | None = None
    tools: Toolbox | None = None
    frozen: FrozenWorkload | None = None
    device: DeviceInfo | None = None
    arch: str = "sm_90"

    # --- the candidates ------------------------------------------------------------------

    def best(self) -> CandidateRecord | None:
        """The fastest candidate (geometric mean) that passes every case; the reference does not compete."""
        valid = [r for r in self.records if r.valid and r.kind != "reference"]
        timed = [r for r in valid if r.score_ms]
        if timed:
            return min(timed, key=lambda r: r.score_ms or 0.0)
        return valid[0] if valid else None

    def reference(self) -> CandidateRecord | None:
        refs = [r for r in self.records if r.kind == "reference" and r.valid]
        return refs[-1] if refs else None

    def initial(self) -> CandidateRecord | None:
        """The first evaluation of the starting kernel, valid or not."""
        return next((r for r in self.records if r.kind == "initial"), None)

    def last_candidate(self, slot: int | None = None) -> CandidateRecord | None:
        """The newest candidate (of the --candidates lane ``slot``: its own, else the baseline's newest)."""
        if slot is not None:
            own = [r for r in self.records if r.slot == slot]
            if own:
                return own[-1]
            base = [r for r in self.records if r.iteration is None]
            return base[-1] if base else None
        return self.records[-1] if self.records else None

    def checks_in_force(self) -> list[str]:
        """The checks of the newest evaluation that reported any (what the model may be told)."""
        return next((r.checks for r in reversed(self.records) if r.checks), [])

    # --- the history ---------------------------------------------------------------------

    def record(self, event: Event) -> None:
        """Keep an event and append it to history.jsonl at once (durable before the loop goes on)."""
        self.history.append(event)
        self.run.append_jsonl("history.jsonl", event.model_dump(mode="json"))

    def event(self, node: str, message: str, *, lane: int | None = None) -> None:
        """The loop enters ``node`` of the graph; ``lane``: the --candidates lane taking the route."""
        came_from = self.lanes.get(lane, self.lanes[None])
        self.lanes[lane] = node
        if lane is not None:
            self.lanes[None] = node  # the main lane follows the newest step (finalize comes from it)
        self.record(StepEvent(node=node, came_from=came_from, message=message))
