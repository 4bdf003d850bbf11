"""What an evaluation found: statuses, per-case results and the whole candidate's result.

Outcomes are data: a kernel that does not compile, faults, hangs or computes the wrong thing
gives an :class:`EvaluationResult` whose :class:`Status` says which, with the details a model
needs to fix it. The statuses themselves, with their severity and meaning, are one table in
``kernelopt_mcp.status``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from ..compiler import CompileResult
from ..status import Status
from ..workload import Tolerance
from .clocks import ClockSample
from .compare import OutputComparison
from .roofline import CaseRoofline, Peaks, case_cost, case_roofline, flops_bound, tensor_operands
from .stats import TimingStats

if TYPE_CHECKING:
    from ..workload import Workload


class CudaErrorInfo(BaseModel):
    call: str | None = None
    cuda_error: str | None = None
    code: int | None = None
    message: str | None = None


class CaseResult(BaseModel):
    name: str
    kind: str
    status: Status
    message: str = ""
    launch: dict[str, Any] | None = None
    outputs: list[OutputComparison] = Field(default_factory=list)
    error: CudaErrorInfo | None = None
    guard_violations: list[dict[str, Any]] = Field(default_factory=list)
    modified_inputs: list[dict[str, Any]] = Field(default_factory=list)
    occupancy_blocks_per_sm: int | None = None
    timing: TimingStats | None = None
    roofline: CaseRoofline | None = Field(None, description="achieved rates against the device's peaks")
    determinism: list[dict[str, Any]] = Field(
        default_factory=list, description="bytes that differed between two launches on the same inputs, per output"
    )
    timed_check: list[OutputComparison] = Field(
        default_factory=list, description="outputs of the launch after timing, on inputs from a hidden seed"
    )
    fresh_inputs: list[str] = Field(
        default_factory=list,
        description="input buffers drawn afresh on the device for the timed launches (the others kept their bytes)",
    )
    checked_launches: int = Field(
        0,
        description="timed launches (and the confirm launch) whose outputs the CUDA reference checked on their inputs"
    )
    reference_checks: list[dict[str, Any]] = Field(
        default_factory=list,
        description="per checked launch and output: sample index, time, mismatches and errors against the reference",
    )
    confirm_launch_ms: float | None = Field(
        None, description="one more launch on fresh inputs after timing, prepared like a timed one and timed alone"
    )
    reference_median_ms: float | None = None
    speedup: float | None = Field(None, description="reference median / this median")
    flops_per_s: float | None = None
    bytes_per_s: float | None = None
    wall_ms: float | None = Field(
        None, description="host wall time of this case's harness requests (validation, then timing with its checks)"
    )


class PhaseTimes(BaseModel):
    """Where an evaluation's host wall time went (not kernel time: see each case's ``timing``)."""

    compile_ms: float = Field(0.0, description="compiling the candidate (next to nothing on a compile-cache hit)")
    validate_ms: float = Field(0.0, description="phase 1: one validation request per case")
    timing_ms: float = Field(0.0, description="phase 2: the timed requests, with fresh inputs and checked launches")
    total_ms: float = Field(0.0, description="the whole evaluation, bookkeeping included")
    requests: int = Field(0, description="harness requests sent")
    harness_ms: float = Field(
        0.0, description="the requests' round trips: the harness's whole time (the kernels' included) and the pipe"
    )
    python_ms: float = Field(0.0, description="building, storing and interpreting the requests in Python")
    harness_steps_ms: dict[str, float] = Field(
        default_factory=dict,
        description="the harness's own steps summed over the requests (native_harness/PROTOCOL.md, steps_ms): "
        "where its time went; the kernels' own time is inside validation_launch and timing",
    )

    def add_request(self, round_trip_ms: float, python_ms: float, answer: Mapping[str, Any] | None) -> None:
        """Count one harness request: its round trip, the Python time around it, and the
        steps the harness reports for it and for its cases (an answer without them adds none)."""
        self.requests += 1
        self.harness_ms += round_trip_ms
        self.python_ms += python_ms
        if not isinstance(answer, Mapping):
            return
        found, cases = [answer.get("steps_ms")], answer.get("cases")
        if isinstance(cases, list):
            found += [c.get("steps_ms") for c in cases if isinstance(c, Mapping)]
        for steps in found:
            if not isinstance(steps, Mapping):
                continue
            for name, ms in steps.items():
                # "cases" is the sum of the cases' own steps, which are added one by one
                if name != "cases" and isinstance(ms, int | float) and not isinstance(ms, bool):
                    self.harness_steps_ms[name] = self.harness_steps_ms.get(name, 0.0) + float(ms)

    def text(self) -> str:
        line = (f"host time {self.total_ms / 1e3:.3g} s: compile {self.compile_ms:.0f} ms, validation "
                f"{self.validate_ms:.0f} ms, timing and its checks {self.timing_ms:.0f} ms")
        if self.requests:
            line += f"; {self.requests} harness requests, {self.harness_ms:.0f} ms in the harness"
        return line


class EvaluationResult(BaseModel):
    status: Status
    message: str
    workload: str
    candidate: str
    source_hash: str | None = None
    seed: int | None = Field(
        None, description="the input seed; None where it is private (the MCP server's results, cached results)"
    )
    device: str | None = Field(None, description="the GPU's model name")
    device_ordinal: int | None = Field(None, description="the CUDA ordinal of the GPU it ran on, on its machine")
    device_uuid: str | None = Field(None, description="that GPU's UUID (which physical GPU, across machines)")
    arch: str
    compile: CompileResult | None = None
    cases: list[CaseResult] = Field(default_factory=list)
    score_ms: float | None = Field(None, description="geometric mean of performance-case median latencies")
    reference_score_ms: float | None = None
    speedup: float | None = Field(None, description="reference score / this score")
    expected_from: str = ""
    inputs_from: str = Field("", description="where the inputs were made: NumPy on the host, or drawn on the device")
    notes: list[str] = Field(default_factory=list)
    checks: list[str] = Field(
        default_factory=list, description="the integrity checks this evaluation ran (see README: Integrity)"
    )
    tolerances: dict[str, Tolerance] = Field(
        default_factory=dict, description="per output: the rtol / atol it was judged by and where they come from"
    )
    clocks: ClockSample | None = Field(None, description="GPU clocks and throttle reasons right after timing (NVML)")
    clocks_note: str | None = Field(None, description="why clocks are missing, when they are")
    phases: PhaseTimes | None = Field(None, description="where the evaluation's host wall time went")
    stopped_early: str | None = Field(
        None, description="why timing stopped before every performance case was timed: the candidate cannot beat "
        "the score it was asked to beat (every case passed validation; score_ms is then None)"
    )
    score_bound_ms: float | None = Field(
        None, description="with stopped_early: the least score the candidate could still have reached "
        "(>= the score to beat)"
    )

    @property
    def ok(self) -> bool:
        return self.status is Status.ok


def worst(statuses: list[Status]) -> Status:
    """The most serious of ``statuses`` (``ok`` for none)."""
    return min(statuses, key=lambda s: s.severity, default=Status.ok)


def result_roofline(result: EvaluationResult, workload: Workload, peaks: Peaks) -> list[CaseRoofline]:
    """Roofline figures of every timed case of an evaluation result."""
    out = []
    operands = tensor_operands(workload)
    for cr in result.cases:
        if cr.timing is None:
            continue
        bytes_, flops = case_cost(workload, workload.spec.case(cr.name))
        out.append(case_roofline(
            cr.name, cr.timing.median_ms, bytes_=bytes_, flops=flops, peaks=peaks, flush_l2=cr.timing.flush_l2,
            operands=operands, flops_bound=flops_bound(workload),
        ))
    return out
