"""What a run records about each candidate it evaluated (written to summary.json and candidates/)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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

    @property
    def valid(self) -> bool:
        return self.status == "ok"

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
