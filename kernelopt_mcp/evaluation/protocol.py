"""The harness's JSON contract as types (native_harness/PROTOCOL.md): requests and answers.

Requests are built as these models and serialised with :func:`request_json` at the process
boundary (``None`` fields are left out: the harness treats a null like an absent field).
Answers are read with :func:`parse_answer`: fields the harness adds later are kept (extra
fields are allowed), and an answer that lacks a field this side needs is a
:class:`~kernelopt_mcp.errors.HarnessError` that names it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import HarnessError

__all__ = [
    "AdaptiveRequest", "BufferArg", "CaseAnswer", "CaseError", "CaseRequest", "CompareEntry",
    "CompareThresholds", "DeterminismEntry", "FreshSpec", "GuardViolation", "HarnessAnswer", "InputDraw",
    "LaunchRequest", "ModifiedInput", "RequestError", "RunRequest", "ScalarArg", "TimedCheck",
    "TimedDump", "TimingAnswer", "TimingRequest", "parse_answer", "request_json",
]

Number = float | int | str  # the harness writes infinite maxima as "inf" (JSON has no Inf)


class _Request(BaseModel):
    """A request part: built here, so an unknown field is a bug on this side."""

    model_config = ConfigDict(extra="forbid")


class _Answer(BaseModel):
    """An answer part: a newer harness may say more; what it says is kept, not refused. A null
    counts as an absent field (as on the harness's side) where the field has a default."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {
            k: v for k, v in data.items()
            if not (v is None and k in fields and not fields[k].is_required() and fields[k].get_default(call_default_factory=True) is not None)
        }


# --- requests ----------------------------------------------------------------------------


class CompareThresholds(_Request):
    """A buffer's ``compare`` block: the rule of compare.py, applied on the device."""

    abs_tol: float
    rtol: float
    rel_floor: float


class FreshSpec(_Request):
    """How a buffer is redrawn on the device before timed launches (``fresh``)."""

    kind: Literal["uniform", "normal", "randint"]
    low: float | int | None = None
    high: float | int | None = None
    mean: float | None = None
    std: float | None = None


class InputDraw(FreshSpec):
    """A buffer's starting bytes drawn on the device (``input_draw``, ``timed_input_draw``):
    ``ko_fill_<dtype>`` under a key derived from ``seed`` and the argument's position, the same
    bytes in every request."""

    seed: int = Field(ge=0, lt=2**64)


class BufferArg(_Request):
    kind: Literal["buffer"] = "buffer"
    name: str
    role: Literal["in", "out", "inout"]
    bytes: int
    input: str | None = None
    timed_input: str | None = None
    dtype: str | None = None
    fresh: FreshSpec | None = None
    input_draw: InputDraw | None = None
    timed_input_draw: InputDraw | None = None
    output: str | None = None
    compare: CompareThresholds | None = None
    expected: str | None = None
    expected_dtype: str | None = None
    write_output: bool | None = None
    timed_expected: str | None = None
    init: Literal["poison", "zero"] | None = None
    poison_byte: int | None = None


class ScalarArg(_Request):
    kind: Literal["scalar"] = "scalar"
    name: str
    dtype: str
    value: int | float | str = Field(description="informational; `raw` is what is passed")
    raw: str = Field(description="the value's little-endian bytes in hex")


Arg = Annotated[BufferArg | ScalarArg, Field(discriminator="kind")]


class LaunchRequest(_Request):
    grid: list[int]
    block: list[int]
    shared_bytes: int = 0


class AdaptiveRequest(_Request):
    target_rse: float
    max_ms: float
    max_iterations: int | None = None


class TimingRequest(_Request):
    warmup: int
    iterations: int
    mode: Literal["events", "graph"] | None = None
    graph_batch: int | None = None
    blocking: bool | None = None
    adaptive: AdaptiveRequest | None = None


class CaseRequest(_Request):
    name: str
    args: list[Arg]
    launch: LaunchRequest
    repeat_validation: bool | None = None
    timing: TimingRequest | None = None
    fresh_seed: int | None = None
    fresh_timed: bool | None = None
    fresh_launches: list[int] | None = None
    checked_launches: list[int] | None = None
    check_launch: LaunchRequest | None = None
    confirm_launch: bool | None = None
    checked_dump: str | None = None


class RunRequest(_Request):
    """A ``run`` request: one module, one entry, the cases to run."""

    protocol: int = 1
    device: int
    module: str
    entry: str
    guard_bytes: int
    flush_l2: bool
    cases: list[CaseRequest]
    support_module: str | None = None
    input_cache: bool | None = None
    input_cache_bytes: int | None = None
    check_module: str | None = None
    check_entry: str | None = None


def request_json(request: RunRequest) -> dict[str, Any]:
    """The request as the harness reads it (JSON-ready; absent fields left out)."""
    return request.model_dump(mode="json", exclude_none=True)


# --- answers -----------------------------------------------------------------------------


class RequestError(_Answer):
    """A request-level ``error``: ``kind`` is bad_request, driver_unavailable, io_error, ..."""

    kind: str | None = None
    message: str | None = None
    call: str | None = None
    cuda_error: str | None = None
    code: int | None = None
    log: str | None = None


class CaseError(_Answer):
    """A case's CUDA ``error``: the failing call and the driver's error."""

    call: str | None = None
    cuda_error: str | None = None
    code: int | None = None
    message: str | None = None
    file: str | None = None
    line: int | None = None


class GuardViolation(_Answer):
    buffer: str
    side: str | None = None
    first_offset: int | None = None
    bytes_changed: int | None = None


class ModifiedInput(_Answer):
    buffer: str
    first_offset: int | None = None
    bytes_changed: int | None = None


class CompareEntry(_Answer):
    """One device-side comparison of one buffer after one launch (``compares``)."""

    buffer: str
    launch: str
    elements: int
    mismatches: int
    nonfinite: int
    max_abs_error: Number | None = None
    max_rel_error: Number | None = None
    err_sq: Number | None = None
    first_mismatch: int | None = None
    output_written: bool | None = None
    compare_ms: float | None = None


class DeterminismEntry(_Answer):
    buffer: str
    bytes_differ: int = 0
    first_offset: int | None = None


class TimedCheck(_Answer):
    """One checked timed launch of one output buffer against the CUDA reference (``timed_checks``)."""

    launch: str | None = None
    sample: int | None = None
    draw: int | None = None
    time_ms: float | None = None
    buffer: str | None = None
    elements: int | None = None
    mismatches: int = 0
    nonfinite: int | None = None
    max_abs_error: Number | None = None
    max_rel_error: Number | None = None
    first_mismatch: int | None = None


class TimedDump(_Answer):
    """The files of one checked launch, for the NumPy oracle (``timed_dumps``)."""

    sample: int | None = None
    draw: int | None = None
    time_ms: float | None = None
    files: dict[str, dict[str, str]] = Field(default_factory=dict)


class AdaptiveAnswer(_Answer):
    rse: float | None = None
    converged: bool | None = None
    samples: int | None = None


class TimingAnswer(_Answer):
    """A case's ``timing``: every sample and the harness's own summary of them."""

    times_ms: list[float] = Field(default_factory=list)
    warmup: int = 0
    iterations: int | None = None
    flush_l2: bool | None = None
    median_ms: float | None = None
    mean_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    stdev_ms: float | None = None
    q1_ms: float | None = None
    q3_ms: float | None = None
    mode: str | None = None
    blocking: bool | None = None
    graph_batch: int | None = None
    blocking_timed_out: bool | None = None
    launch_overhead_ms: float | None = None
    adaptive: AdaptiveAnswer | None = None
    check_launch_ms: float | None = None
    fresh_buffers: list[str] = Field(default_factory=list)
    fresh_draws: int | None = None
    confirm_launch_ms: float | None = None


class CaseAnswer(_Answer):
    name: str | None = None
    status: str
    error: CaseError | None = None
    guard_violations: list[GuardViolation] = Field(default_factory=list)
    modified_inputs: list[ModifiedInput] = Field(default_factory=list)
    occupancy_blocks_per_sm: int | None = None
    timing: TimingAnswer | None = None
    compares: list[CompareEntry] = Field(default_factory=list)
    determinism: list[DeterminismEntry] = Field(default_factory=list)
    timed_checks: list[TimedCheck] = Field(default_factory=list)
    timed_dumps: list[TimedDump] = Field(default_factory=list)


class HarnessAnswer(_Answer):
    """The answer to a ``run`` request."""

    protocol: int | None = None
    status: str
    error: RequestError | None = None
    module_load_ms: float | None = None
    cases: list[CaseAnswer] = Field(default_factory=list)


def parse_answer(answer: dict[str, Any]) -> HarnessAnswer:
    """The harness's answer, typed.

    Raises:
        HarnessError: a field this side reads is missing or of the wrong type (the harness
            and this package disagree on PROTOCOL.md: rebuild the harness).
    """
    try:
        return HarnessAnswer.model_validate(answer)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'answer'}: {e['msg']}" for e in exc.errors()[:3]
        )
        raise HarnessError(
            f"the harness's answer does not follow native_harness/PROTOCOL.md ({problems}); rebuild the "
            "harness with `pip install .` so it matches this kernelopt"
        ) from None
