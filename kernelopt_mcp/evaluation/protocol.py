"""The harness's JSON contract as types (native_harness/PROTOCOL.md): requests and answers.

Requests are built as these models and serialised with :func:`request_json` at the process
boundary (``None`` fields are left out: the harness treats a null like an absent field).
Answers are read with :func:`parse_answer` into the model of what was asked (a ``run``
request's :class:`HarnessAnswer`, a ``baseline`` request's :class:`BaselineAnswer`, or only the
:class:`AnswerEnvelope` every answer has): fields the harness adds later are kept (extra fields
are allowed), and an answer that lacks a field this side needs is a
:class:`~kernelopt_mcp.errors.HarnessError` that names it. tests/harness/test_protocol_doc.py checks
these models against PROTOCOL.md, field by field, both ways.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import HarnessError

__all__ = [
    "AdaptiveAnswer", "AdaptiveRequest", "AnswerEnvelope", "BaselineAnswer", "BaselineRequest",
    "BaselineTiming", "BufferArg", "CaseAnswer", "CaseError", "CaseRequest", "CheckedExpected", "CompareEntry",
    "CompareThresholds", "DeterminismEntry", "DeviceAnswer", "FreshSpec", "FunctionAnswer",
    "GuardViolation", "HarnessAnswer", "HarnessRequest", "InputCacheAnswer", "InputDraw", "KeptEntry", "LaunchRequest",
    "ModifiedInput", "RequestError", "RunRequest", "ScalarArg", "StagingAnswer", "StructureSpec", "TensorMapRequest",
    "TimedCheck", "TimedDump", "TimingAnswer", "TimingRequest", "VersionAnswer", "parse_answer", "request_json",
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
            if not (v is None and k in fields and not fields[k].is_required()
                    and fields[k].get_default(call_default_factory=True) is not None)
        }


# --- requests ----------------------------------------------------------------------------


class CompareThresholds(_Request):
    """A buffer's ``compare`` block: the rule of compare.py, applied on the device."""

    abs_tol: float
    rtol: float
    rel_floor: float


class StructureSpec(_Request):
    """A draw's matrices made triangular or symmetric right after the fill (``structure`` of ``fresh``
    and ``input_draw``; the rule: kernelopt_mcp/input_structure.py). The harness sees bytes, not
    shapes: ``rows`` x ``cols`` is one matrix, the buffer a whole number of them."""

    kind: Literal["triu", "tril", "symmetric"]
    diagonal: int = 0
    rows: int = Field(ge=1)
    cols: int = Field(ge=1)

    @model_validator(mode="after")
    def _square(self) -> StructureSpec:
        if self.kind == "symmetric" and (self.rows != self.cols or self.diagonal != 0):
            raise ValueError(f"symmetric needs square matrices and diagonal 0, got {self.rows} x {self.cols}, "
                             f"diagonal {self.diagonal}")
        return self


class FreshSpec(_Request):
    """How a buffer is redrawn on the device before timed launches (``fresh``)."""

    kind: Literal["uniform", "normal", "randint", "choice"]
    low: float | int | None = None
    high: float | int | None = None
    mean: float | None = None
    std: float | None = None
    # choice (feature choice_draw): 1 to 16 numbers, each exactly a value of the buffer's dtype
    # (kernelopt_mcp/input_choice.py exact_values), every element one of them
    values: list[float] | None = None
    structure: StructureSpec | None = None  # feature structured_draw


class InputDraw(FreshSpec):
    """A buffer's starting bytes drawn on the device (``input_draw``, ``timed_input_draw``):
    ``ko_fill_<dtype>`` (a choice: ``ko_choice_<bytes>``) under a key derived from ``seed`` and the
    argument's position, the same bytes in every request."""

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
    keep_expected: str | None = None
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
    """``timing.adaptive``: omitted fields take the harness's defaults (0.01, 2000 ms)."""

    target_rse: float | None = None
    max_ms: float | None = None
    max_iterations: int | None = None


class TimingRequest(_Request):
    """A ``timing`` object: ``warmup`` omitted is 0; ``iterations`` is required."""

    warmup: int | None = None
    iterations: int
    mode: Literal["events", "graph"] | None = None
    graph_batch: int | None = None
    blocking: bool | None = None
    adaptive: AdaptiveRequest | None = None


class TensorMapRequest(_Request):
    """A case's ``tensor_maps`` entry: a CUtensorMap the harness encodes over one of its buffers
    and passes after the args (PROTOCOL.md, "Tensor maps")."""

    buffer: str
    dtype: str
    dims: list[int]
    strides: list[int] | None = None  # omitted: packed
    box: list[int]
    element_strides: list[int] | None = None  # omitted: all 1
    swizzle: Literal["none", "32B", "64B", "128B"] | None = None
    l2_promotion: Literal["none", "64B", "128B", "256B"] | None = None
    oob_fill: Literal["zero", "nan"] | None = None


class CheckedExpected(_Request):
    """A ``checked_expected`` entry (feature ``checked_expected``): the expected outputs of one
    ``out``/``inout`` buffer of one checked launch, given up front instead of a CUDA reference.

    The launch is a measured ``sample`` of the case's ``checked_launches`` or ``launch="confirm"``;
    ``draw`` is the draw its inputs come from (None: not drawn), by PROTOCOL.md's rule ("Checked
    launches against expected values"); ``expected`` holds one value per element in the buffer's
    ``expected_dtype`` (float64 by default).
    """

    sample: int | None = None
    launch: Literal["measured", "confirm"] | None = None
    draw: int | None = Field(default=None, ge=0, lt=2**64)
    buffer: str
    expected: str


class CaseRequest(_Request):
    name: str
    args: list[Arg]
    launch: LaunchRequest
    tensor_maps: list[TensorMapRequest] | None = None  # feature tensor_maps
    repeat_validation: bool | None = None
    timing: TimingRequest | None = None
    fresh_seed: int | None = None
    fresh_timed: bool | None = None
    fresh_launches: list[int] | None = None
    poison_subset: bool | None = None
    checked_launches: list[int] | None = None
    check_launch: LaunchRequest | None = None
    confirm_launch: bool | None = None
    checked_dump: str | None = None
    checked_expected: list[CheckedExpected] | None = None  # feature checked_expected


class RunRequest(_Request):
    """A ``run`` request: one module, one entry, the cases to run."""

    protocol: int = 1
    op: Literal["run"] | None = None  # omitted: "run"
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
    progress: bool | None = None


class BaselineRequest(_Request):
    """A ``baseline`` request: time a library routine (cuBLAS SGEMM) the harness dlopens."""

    protocol: int = 2
    op: Literal["baseline"] = "baseline"
    device: int
    library: Literal["cublas"]
    library_path: str
    routine: Literal["sgemm"]
    m: int
    n: int
    k: int
    flush_l2: bool
    timing: TimingRequest
    support_module: str | None = None


HarnessRequest = RunRequest | BaselineRequest  # a request of either op


def request_json(request: HarnessRequest) -> dict[str, Any]:
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
    missing: list[str] = Field(default_factory=list)


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
    first_mismatch_expected: Number | None = None
    first_mismatch_actual: Number | None = None
    output_written: bool | None = None
    compare_ms: float | None = None


class KeptEntry(_Answer):
    """A buffer the harness kept on the device as expected values (``keep_expected``): its key
    and what the tolerances need (the sum of squares and count of its finite values)."""

    buffer: str
    key: str
    elements: int
    finite: int
    sum_sq: Number
    bytes: int | None = None


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
    kept: list[KeptEntry] = Field(default_factory=list)
    steps_ms: dict[str, float] | None = None  # where the case's host time went (PROTOCOL.md)


class DeviceAnswer(_Answer):
    """The answer's ``device``: the device the request ran on (null before it was opened)."""

    ordinal: int | None = None
    name: str | None = None
    arch: str | None = None


class FunctionAnswer(_Answer):
    """The kernel's attributes as the driver reports them (``function``)."""

    num_regs: int | None = None
    static_shared_bytes: int | None = None
    local_bytes: int | None = None
    const_bytes: int | None = None
    max_threads_per_block: int | None = None
    binary_version: int | None = None


class InputCacheAnswer(_Answer):
    """This request's use of the device input cache (``input_cache``, when it was asked for)."""

    hits: int | None = None
    misses: int | None = None
    evictions: int | None = None
    resident_bytes: int | None = None


class StagingAnswer(_Answer):
    """Whether staged copies are read-only and expected values hidden (``staging``), and if not, why."""

    readonly: bool | None = None
    reason: str | None = None
    expected_hidden: bool | None = None
    hide_reason: str | None = None


class AnswerEnvelope(_Answer):
    """What every answer has, whatever was asked: enough to tell a request-level error."""

    protocol: int | None = None
    status: str | None = None
    error: RequestError | None = None


class HarnessAnswer(AnswerEnvelope):
    """The answer to a ``run`` request."""

    status: str
    device: DeviceAnswer | None = None
    module_load_ms: float | None = None
    steps_ms: dict[str, float] | None = None  # where the request's host time went (PROTOCOL.md)
    function: FunctionAnswer | None = None
    cases: list[CaseAnswer] = Field(default_factory=list)
    input_cache: InputCacheAnswer | None = None
    staging: StagingAnswer | None = None


class BaselineTiming(TimingAnswer):
    """A baseline's ``timing``: the summary a :class:`~kernelopt_mcp.baselines.BaselineResult` needs."""

    median_ms: float
    q1_ms: float
    q3_ms: float


class BaselineAnswer(AnswerEnvelope):
    """The ``ok`` answer to a ``baseline`` request (an error answer: :class:`AnswerEnvelope`)."""

    status: str
    op: str | None = None
    device: DeviceAnswer | None = None
    library: str
    library_path: str | None = None
    routine: str
    library_version: int | None = None
    m: int
    n: int
    k: int
    math_mode: str | None = None
    tf32_override: str | None = None
    flops: float | None = None
    result_ok: bool | None = None
    timing: BaselineTiming
    staging: StagingAnswer | None = None


class VersionAnswer(_Answer):
    """``kernelopt-harness --version``: the binary's version, protocol and optional features."""

    harness: str | None = None
    protocol: int | None = None
    features: list[str] = Field(default_factory=list)


AnswerT = TypeVar("AnswerT", bound=_Answer)


@overload
def parse_answer(answer: Mapping[str, Any]) -> HarnessAnswer: ...
@overload
def parse_answer(answer: Mapping[str, Any], model: type[AnswerT]) -> AnswerT: ...
def parse_answer(answer: Mapping[str, Any], model: type[_Answer] = HarnessAnswer) -> _Answer:
    """The harness's answer, typed: as ``model`` (default: the answer to a ``run`` request).

    Raises:
        HarnessError: a field this side reads is missing or of the wrong type (the harness
            and this package disagree on PROTOCOL.md: rebuild the harness).
    """
    try:
        return model.model_validate(answer)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'answer'}: {e['msg']}" for e in exc.errors()[:3]
        )
        raise HarnessError(
            f"the harness's answer does not follow native_harness/PROTOCOL.md ({problems}); rebuild the "
            "harness with `pip install .` so it matches this kernelopt"
        ) from None
