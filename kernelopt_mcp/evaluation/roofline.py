"""Roofline figures of a measured case: achieved bandwidth and FLOP rate as a share of the
device's peaks, the fastest time the work could possibly take, and an ``impossible`` flag.

Pure arithmetic (no GPU, no I/O): the peaks come from :mod:`kernelopt_mcp.evaluation.calibrate`
(measured copy bandwidth and FP32 FMA rate) and from the device's theoretical figures.

The floor: a kernel that moves ``bytes`` and computes ``flops`` (the workload's cost model:
the minimum any correct kernel must do) cannot take less than
``max(bytes / bw_peak, flops / flop_peak)``. The peaks used for the floor are the larger of
the calibrated and the theoretical figure, so an under-measured calibration cannot make an
honest kernel look impossible. ``flop_peak`` is the fastest unit that could do the work: for a
workload with floating-point inputs that is the dense 16-bit tensor-core rate, whatever the
inputs' own type (a bf16 GEMM runs on tensor cores; an fp32 one can too, as 3xTF32 or split
bf16 products that keep float32 accuracy), for 8-bit integer inputs the int8 tensor rate, and
the SIMT FP32 rate only where no tensor path applies. So the compute term of a GEMM-like floor
is loose (an sgemm floor sits well below any real kernel); it is a bound, never a target.

``impossible`` is set when the median is below ``floor / IMPOSSIBLE_MARGIN`` (1.15). The
margin covers what can legitimately push a real kernel a little under the floor computed from
spec sheets and calibration: boost clocks above the ones the calibration ran at and the
theoretical figures' rounding (a few %), event-timer resolution on short kernels (~0.5 us on
a ~5-10 us floor is 5-10%), and data that survives an L2 flush of twice the L2 size (partial
hits on a small tail). A kernel 15% faster than the physics allows skipped work or reused
outputs; that is what the flag is for. Without an L2 flush the inputs may sit in L2 (50 MiB
on an H200), where DRAM bandwidth is no bound at all, so the flag is only raised for timings
taken with ``flush_l2``.

A workload whose ``flops`` count one algorithm's operations (an imported PyTorch problem: torch
counts the FLOPs of the module as written, and a GEMM followed by a sum can be done without
forming the product) says ``cost.floor_from: bytes``: its floor is the bytes term alone, and its
FLOP rate is reported but bounds nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from .. import expr

if TYPE_CHECKING:
    from ..workload import Case, Workload

#: measured < floor / IMPOSSIBLE_MARGIN is flagged impossible (see the module docstring)
IMPOSSIBLE_MARGIN = 1.15

#: FP32 lanes (FMA units) per SM by compute capability (CUDA C++ Programming Guide, arithmetic
#: instruction throughput table); major-only keys apply to every minor without its own entry
FP32_LANES_PER_SM: dict[tuple[int, int] | int, int] = {
    (6, 0): 64, 6: 128, 7: 64, (8, 0): 64, 8: 128, 9: 128, 10: 128, 11: 128, 12: 128,
}


#: dense tensor-core operations per SM per clock by operand kind ("float": fp16/bf16 operands,
#: the fastest path any floating-point result within a tolerance can take; "int8"), for the
#: fastest part of each compute capability (V100/T4; A100; L40S and RTX parts are given more
#: than they have, which only loosens their floors; H100/H200: 989 TFLOP/s bf16 at 1830 MHz on
#: 132 SMs; B200). Sparsity is not counted: the cost model's flops are the dense product's.
TENSOR_OPS_PER_SM: dict[tuple[int, int] | int, dict[str, int]] = {
    7: {"float": 1024, "int8": 2048}, (8, 0): {"float": 2048, "int8": 4096}, 8: {"float": 1024, "int8": 2048},
    9: {"float": 4096, "int8": 8192}, 10: {"float": 8192, "int8": 16384}, 11: {"float": 8192, "int8": 16384},
    12: {"float": 1024, "int8": 2048},
}


class Peaks(BaseModel):
    """Peak rates of a device; any of them may be unknown."""

    calibrated_bytes_per_s: float | None = Field(None,
                                                 description="measured copy bandwidth, bytes read + written per s")
    calibrated_flops_per_s: float | None = Field(None, description="measured FP32 FMA rate, 2 flops per FMA")
    theoretical_bytes_per_s: float | None = Field(None, description="DRAM bandwidth from clock and bus width")
    theoretical_flops_per_s: float | None = Field(None, description="SMs x FP32 lanes x 2 x boost clock")
    tensor_flops_per_s: dict[str, float] = Field(
        default_factory=dict, description="dense tensor-core peaks by operand kind ('float', 'int8') at the boost clock"
    )

    @property
    def floor_bytes_per_s(self) -> float | None:
        return _larger(self.calibrated_bytes_per_s, self.theoretical_bytes_per_s)

    def floor_flops_per_s(self, operands: str | None = None) -> float | None:
        """The fastest rate at which work on ``operands`` ('float', 'int8', None: SIMT only) can run."""
        simt = _larger(self.calibrated_flops_per_s, self.theoretical_flops_per_s)
        return _larger(simt, self.tensor_flops_per_s.get(operands) if operands else None)


class CaseRoofline(BaseModel):
    """Where one performance case's median sits against the device's peaks."""

    case: str
    median_ms: float
    bytes: float | None = Field(None, description="bytes the case must move (workload cost model)")
    flops: float | None = Field(None, description="floating-point operations of the case (cost model)")
    bytes_per_s: float | None = None
    flops_per_s: float | None = None
    bandwidth_pct: float | None = Field(None, description="bytes_per_s as % of the calibrated copy bandwidth")
    flops_pct: float | None = Field(None, description="flops_per_s as % of the calibrated FP32 FMA rate")
    tensor_pct: float | None = Field(None,
                                     description="flops_per_s as % of the dense tensor-core peak for the operands")
    floor_ms: float | None = Field(None, description="max(bytes / bw peak, flops / flop peak), larger peaks")
    bound: str | None = Field(None, description="'memory' or 'compute': which term sets the floor")
    of_floor: float | None = Field(None, description="median / floor (1.0 = at the roofline)")
    impossible: bool = Field(False, description=f"median below floor / {IMPOSSIBLE_MARGIN}: work was skipped")
    note: str | None = None


def _larger(a: float | None, b: float | None) -> float | None:
    values = [v for v in (a, b) if v is not None and v > 0]
    return max(values) if values else None


def theoretical_fp32_flops(compute_capability: tuple[int, int], sm_count: int, clock_khz: int | None) -> float | None:
    """SIMT FP32 peak (2 flops per FMA per lane per cycle) at the boost clock; None if unknown."""
    major, minor = compute_capability
    lanes = FP32_LANES_PER_SM.get((major, minor)) or FP32_LANES_PER_SM.get(major)
    if not lanes or not clock_khz:
        return None
    return float(sm_count * lanes * 2 * clock_khz * 1e3)


def theoretical_tensor_flops(compute_capability: tuple[int, int], sm_count: int,
                             clock_khz: int | None) -> dict[str, float]:
    """Dense tensor-core peaks by operand kind at the boost clock ({} without tensor cores)."""
    major, minor = compute_capability
    per_sm = TENSOR_OPS_PER_SM.get((major, minor)) or TENSOR_OPS_PER_SM.get(major)
    if not per_sm or not clock_khz:
        return {}
    return {kind: float(sm_count * ops * clock_khz * 1e3) for kind, ops in per_sm.items()}


def tensor_operands(workload: Workload) -> str | None:
    """Which tensor-core rate bounds the workload: 'float' for any floating-point input, 'int8'
    for 8-bit integer inputs, None (SIMT only) otherwise."""
    inputs = [p.dtype for p in workload.spec.signature.buffers if p.is_input]
    if any(d.is_float for d in inputs):
        return "float"
    if any(d.itemsize == 1 for d in inputs):
        return "int8"
    return None


def roofline_floor_ms(
    bytes_: float | None, flops: float | None, peaks: Peaks, operands: str | None = None,
) -> tuple[float | None, str | None]:
    """The fastest possible time (ms) for the work, and which term sets it."""
    terms: dict[str, float] = {}
    flop_peak = peaks.floor_flops_per_s(operands)
    if bytes_ and peaks.floor_bytes_per_s:
        terms["memory"] = bytes_ / peaks.floor_bytes_per_s * 1e3
    if flops and flop_peak:
        terms["compute"] = flops / flop_peak * 1e3
    if not terms:
        return None, None
    bound = max(terms, key=terms.__getitem__)
    return terms[bound], bound


def case_roofline(
    case: str, median_ms: float, *, bytes_: float | None, flops: float | None, peaks: Peaks, flush_l2: bool,
    operands: str | None = None, flops_bound: bool = True,
) -> CaseRoofline:
    """Achieved rates, % of calibrated peaks, the floor and the impossible flag of one case
    (``flops_bound`` False: the FLOPs give rates only, the floor is the bytes term)."""
    r = CaseRoofline(case=case, median_ms=median_ms, bytes=bytes_, flops=flops)
    if median_ms <= 0:
        r.note = "no positive median time"
        return r
    seconds = median_ms * 1e-3
    if bytes_:
        r.bytes_per_s = bytes_ / seconds
        if peaks.calibrated_bytes_per_s:
            r.bandwidth_pct = 100.0 * r.bytes_per_s / peaks.calibrated_bytes_per_s
    if flops:
        r.flops_per_s = flops / seconds
        if peaks.calibrated_flops_per_s:
            r.flops_pct = 100.0 * r.flops_per_s / peaks.calibrated_flops_per_s
        if operands and (tensor := peaks.tensor_flops_per_s.get(operands)):
            r.tensor_pct = 100.0 * r.flops_per_s / tensor
    r.floor_ms, r.bound = roofline_floor_ms(bytes_, flops if flops_bound else None, peaks, operands)
    if r.floor_ms is None:
        r.note = "no cost model or no peak figures: no floor"
        return r
    r.of_floor = median_ms / r.floor_ms
    below = median_ms < r.floor_ms / IMPOSSIBLE_MARGIN
    if not flush_l2:
        r.note = "L2 not flushed: inputs may be cached, the floor is not a bound"
    elif below:
        r.impossible = True
        r.note = (
            f"{median_ms:.4g} ms is {r.floor_ms / median_ms:.2f}x faster than the {r.bound} roofline floor "
            f"{r.floor_ms:.4g} ms: the kernel cannot have done all the work (skipped work or reused outputs)"
        )
    return r


def flops_bound(workload: Workload) -> bool:
    """Whether the workload's FLOP count may bound its roofline floor (see the module docstring)."""
    return workload.spec.cost.floor_from == "bytes_and_flops"


def case_cost(workload: Workload, case: Case) -> tuple[float | None, float | None]:
    """(bytes, flops) of a case from the workload's cost expressions (None where absent)."""
    cost = workload.spec.cost
    bytes_ = float(expr.evaluate(cost.bytes, case.scalars)) if cost.bytes else None
    flops = float(expr.evaluate(cost.flops, case.scalars)) if cost.flops else None
    return bytes_, flops
