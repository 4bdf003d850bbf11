"""What a run records: each candidate it evaluated, and the typed events of ``history.jsonl``.

Every event the loop writes is one of the pydantic models below (``event`` tells them apart).
The loop appends each event to ``history.jsonl`` as it happens (one JSON object a line, flushed
and fsynced, so a killed run keeps every event up to the kill) and writes the whole list to
``history.json`` atomically at checkpoints (after the baseline, at each iteration's end, at
finalize) for readers that want one document. :func:`read_history` reads either back as typed
events: ``kernelopt runs show`` and ``--resume`` use it.

Events:
    step                 the loop entered a node of ``kernelopt graph`` (``came_from``: the node before)
    candidate            a candidate was evaluated (its verdict, score, per-case latencies, files)
    duplicate            a proposal identical to an earlier candidate (same source, launch, options): not evaluated
    no_proposal          an iteration's model answers gave no usable proposal (refused, unparseable)
    unparseable_answer   one answer that could not be parsed (the model was asked again)
    tune                 an autotune call (tunable.json or a proposal's tunables)
    profile              an ncu_profile call on a valid candidate
    profile_unavailable  ncu cannot run on the server (said once; nothing more is profiled)
    stop                 a budget stopped the loop (--max-tokens, --max-cost)
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError


@dataclass
class CandidateRecord:
    index: int
    label: str
    kind: str  # reference | initial | proposal | repair | untuned | tuned
    iteration: int | None
    source: str
    launch: dict[str, Any]
    compile_options: list[str] = field(default_factory=list)
    rationale: str = ""
    status: str = "pending"
    score_ms: float | None = None
    speedup: float | None = None
    case_ms: dict[str, float] = field(default_factory=dict)
    case_status: dict[str, str] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)  # the integrity checks its evaluation ran (the result's own list)
    message: str = ""
    feedback: str = ""
    profile_case: str = ""
    profile_text: str = ""
    profile_files: list[str] = field(default_factory=list)
    model_calls: list[int] = field(default_factory=list)
    tool_call: int | None = None
    seconds: float = 0.0
    slot: int | None = None  # which of --candidates N proposals of its iteration (1..N); None for N = 1
    host_ms: dict[str, float] = field(default_factory=dict)  # the evaluation's phases: compile, validate, timing, total
    device: str | None = None  # the GPU that evaluated it: "<ordinal> <uuid>" (a server may have several)
    pytorch: dict[str, Any] | None = None  # an imported problem's eager / torch.compile times beside it (pytorch_times)

    @property
    def valid(self) -> bool:
        return self.status == "ok"

    def versus_pytorch(self) -> str:
        """ "1.52x vs PyTorch eager, 0.91x vs torch.compile" (what was measured; "" without)."""
        p = self.pytorch or {}
        parts = [f"{p[k]:.2f}x vs {name}"
                 for k, name in (("speedup_eager", "PyTorch eager"), ("speedup_compile", "torch.compile"))
                 if p.get(k)]
        return ", ".join(parts)

    @property
    def dir(self) -> str:
        return f"candidates/{self.label}"

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("source")
        data.pop("feedback")
        data["valid"] = self.valid
        data["files"] = {k: f"{self.dir}/{k}" for k in ("source.cu", "launch.json", "request.json", "result.json")}
        return data

    def as_event(self) -> CandidateEvent:
        return CandidateEvent.model_validate(self.as_json())


PYTORCH_FIELDS = ("eager_ms", "compile_ms", "speedup_eager", "speedup_compile", "mode", "torch_version", "device_name",
                  "eager_note", "compile_note", "note", "cached")


def pytorch_times(beside: Any) -> dict[str, Any] | None:
    """The summary of a benchmark result's ``torch_baseline`` (PyTorch eager and torch.compile beside
    an imported problem's candidate) a run records: its geometric means, speedups and notes."""
    if not isinstance(beside, dict):
        return None
    return {k: beside[k] for k in PYTORCH_FIELDS if beside.get(k) is not None}


# --- history events --------------------------------------------------------------------------


class Event(BaseModel):
    """Fields every event has; unknown fields are kept (older or newer runs read back whole)."""

    model_config = ConfigDict(extra="allow")

    time: float = Field(default_factory=time.time)


class StepEvent(Event):
    event: Literal["step"] = "step"
    node: str  # a node of kernelopt_agent.graph.NODES
    came_from: str | None = None  # the node before (the edge taken is came_from -> node)
    message: str = ""


class CandidateEvent(Event):
    event: Literal["candidate"] = "candidate"
    index: int
    label: str
    kind: str
    iteration: int | None = None
    slot: int | None = None
    launch: dict[str, Any] = Field(default_factory=dict)
    compile_options: list[str] = Field(default_factory=list)
    rationale: str = ""
    status: str
    valid: bool
    score_ms: float | None = None
    speedup: float | None = None
    case_ms: dict[str, float] = Field(default_factory=dict)
    case_status: dict[str, str] = Field(default_factory=dict)
    checks: list[str] = Field(default_factory=list)
    message: str = ""
    profile_case: str = ""
    profile_text: str = ""
    profile_files: list[str] = Field(default_factory=list)
    model_calls: list[int] = Field(default_factory=list)
    tool_call: int | None = None
    seconds: float = 0.0
    host_ms: dict[str, float] = Field(
        default_factory=dict, description="where the server's evaluation spent its wall time (compile_ms, validate_ms, "
        "timing_ms, total_ms); seconds also counts the tool call around it"
    )
    device: str | None = Field(None,
                               description="the GPU that evaluated it: its ordinal on the server's machine and UUID")
    pytorch: dict[str, Any] | None = Field(
        None, description="an imported PyTorch problem: eager and torch.compile geometric means (ms), the speedups "
        "over each (their time / ours), torch.compile's mode, torch's version, and why a time is missing"
    )
    files: dict[str, str] = Field(default_factory=dict)


class DuplicateEvent(Event):
    event: Literal["duplicate"] = "duplicate"
    iteration: int
    slot: int | None = None
    same_as: str  # the label of the candidate it repeats
    model_calls: list[int] = Field(default_factory=list)


class NoProposalEvent(Event):
    event: Literal["no_proposal"] = "no_proposal"
    iteration: int
    slot: int | None = None
    status: str  # refused | unparseable
    message: str = ""
    model_calls: list[int] = Field(default_factory=list)


class UnparseableAnswerEvent(Event):
    event: Literal["unparseable_answer"] = "unparseable_answer"
    iteration: int
    slot: int | None = None
    model_call: int
    message: str = ""


class TuneEvent(Event):
    event: Literal["tune"] = "tune"
    label: str
    is_error: bool
    status: str | None = None
    best_params: dict[str, Any] | None = None
    counts: dict[str, Any] | None = None


class ProfileEvent(Event):
    event: Literal["profile"] = "profile"
    label: str
    case: str
    is_error: bool
    files: list[str] = Field(default_factory=list)


class ProfileUnavailableEvent(Event):
    event: Literal["profile_unavailable"] = "profile_unavailable"
    label: str
    message: str = ""


class StopEvent(Event):
    event: Literal["stop"] = "stop"
    reason: str


HistoryEvent = Annotated[
    StepEvent | CandidateEvent | DuplicateEvent | NoProposalEvent | UnparseableAnswerEvent | TuneEvent | ProfileEvent
    | ProfileUnavailableEvent | StopEvent,
    Field(discriminator="event"),
]
EVENT_ADAPTER: TypeAdapter[HistoryEvent] = TypeAdapter(HistoryEvent)


class OtherEvent(Event):
    """An event this version does not know (a newer run's), kept as it was."""

    event: str


@dataclass
class History:
    """A run's events as read back, and what could not be read (``problems``)."""

    events: list[Event]
    source: str  # history.jsonl | history.json | "" (none)
    problems: list[str] = field(default_factory=list)

    def of(self, kind: type[Event]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    @property
    def candidates(self) -> list[CandidateEvent]:
        return self.of(CandidateEvent)


def parse_event(data: Any) -> Event:
    """One event from its JSON form.

    Raises:
        ValueError: not an object with an ``event`` field, or a known event with bad fields.
    """
    if not isinstance(data, dict) or not isinstance(data.get("event"), str):
        raise ValueError("an event is a JSON object with an 'event' field")
    try:
        return EVENT_ADAPTER.validate_python(data)
    except ValidationError as exc:
        if any(e["type"] == "union_tag_invalid" for e in exc.errors()):
            return OtherEvent.model_validate(data)
        raise ValueError(str(exc).splitlines()[0] + ": " + "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False)[:3])) from None


def read_history(run_path: Path) -> History:
    """The run's events: ``history.jsonl`` (every event up to the last one written, also after a kill)
    or, for runs older than it, ``history.json``. A torn last line (a kill mid-write) is skipped and noted."""
    jsonl = run_path / "history.jsonl"
    if jsonl.is_file():
        events: list[Event] = []
        problems: list[str] = []
        lines = jsonl.read_text(encoding="utf-8", errors="replace").splitlines()
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                events.append(parse_event(json.loads(line)))
            except (json.JSONDecodeError, ValueError) as exc:
                torn = number == len(lines)
                problems.append(f"history.jsonl line {number}: " + ("cut short (the run was killed mid-write)"
                                                                     if torn else f"unreadable: {exc}"))
        return History(events, "history.jsonl", problems)
    try:
        data = json.loads((run_path / "history.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return History([], "")
    except (OSError, json.JSONDecodeError) as exc:
        return History([], "history.json", [f"history.json unreadable: {exc}"])
    out: list[Event] = []
    problems = []
    for i, item in enumerate(data if isinstance(data, list) else []):
        try:
            out.append(parse_event(item))
        except ValueError as exc:
            problems.append(f"history.json entry {i}: {exc}")
    return History(out, "history.json", problems)
