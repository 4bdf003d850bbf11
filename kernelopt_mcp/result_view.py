"""An evaluation's result as a client reads it: the ``benchmark`` and ``validate`` tools' structured
output (``kernelopt_mcp.results.EvaluationOutput``), typed for the fields a client uses.

The orchestrator (``kernelopt optimize``) may import only the library's data layer, so it cannot
import ``results`` (which builds the output from the evaluation's objects). This view is the
contract it reads instead: every field optional, with the value a client takes when a result
leaves it out, and any other field kept as it came (``extra="allow"``). A test ties each field to
the server's model (the same name, a type that takes what the server writes), so a rename there
fails that test rather than reading as a default here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

UNKNOWN_STATUS = "unknown"  # what a result without a status reads as


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class TimingView(_Open):
    """A case's timing (``results.Timing``): its median is what a run ranks by."""

    median_ms: float | None = None


class CaseView(_Open):
    """One case of the result (``results.CaseOutput``)."""

    name: str = ""
    kind: str = ""
    status: str = UNKNOWN_STATUS
    timing: TimingView | None = None


class CompileView(_Open):
    """The compile of the candidate (``compile_report.CompileOutput``)."""

    nvrtc_version: str | None = None


class EvaluationView(_Open):
    """The ``benchmark`` / ``validate`` result as a client reads it.

    ``torch_baseline`` and ``phases`` stay plain JSON objects: a client records them as they came
    (the fields it keeps are picked where it records them).
    """

    status: str = UNKNOWN_STATUS
    message: str = ""
    score_ms: float | None = None
    speedup: float | None = None
    checks: list[str] = Field(default_factory=list)
    phases: dict[str, Any] | None = None
    device_ordinal: int | None = None
    device_uuid: str | None = None
    cases: list[CaseView] = Field(default_factory=list)
    compile: CompileView | None = None
    expected_from: str = ""
    torch_baseline: dict[str, Any] | None = None

