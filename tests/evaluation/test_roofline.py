"""Roofline arithmetic: peaks, floors, percentages and the impossible flag."""

from __future__ import annotations

import pytest

from kernelopt_mcp.evaluation.evaluate import evaluate
from kernelopt_mcp.evaluation.roofline import (
    IMPOSSIBLE_MARGIN,
    Peaks,
    case_roofline,
    roofline_floor_ms,
    tensor_operands,
    theoretical_fp32_flops,
    theoretical_tensor_flops,
)

H200 = Peaks(
    calibrated_bytes_per_s=4.2e12, calibrated_flops_per_s=60e12,
    theoretical_bytes_per_s=4.8e12, theoretical_flops_per_s=66.9e12,
    tensor_flops_per_s={"float": 1070.5e12, "int8": 2141e12},
)


def test_theoretical_fp32() -> None:
    # H200: 132 SMs x 128 FP32 lanes x 2 flops x 1.98 GHz
    assert theoretical_fp32_flops((9, 0), 132, 1_980_000) == pytest.approx(66.9e12, rel=1e-3)
    assert theoretical_fp32_flops((8, 0), 108, 1_410_000) == pytest.approx(19.5e12, rel=1e-2)  # A100
    assert theoretical_fp32_flops((8, 9), 128, 2_520_000) == pytest.approx(82.6e12, rel=1e-2)  # RTX 4090
    assert theoretical_fp32_flops((9, 0), 132, None) is None
    assert theoretical_fp32_flops((3, 0), 10, 1_000_000) is None


def test_theoretical_tensor_peaks() -> None:
    # H100/H200: 989 TFLOP/s dense bf16 at 1830 MHz on 132 SMs; A100: 312 at 1410 MHz on 108
    assert theoretical_tensor_flops((9, 0), 132, 1_830_000)["float"] == pytest.approx(989.4e12, rel=1e-3)
    assert (theoretical_tensor_flops((8, 0), 108, 1_410_000)
            == pytest.approx({"float": 312e12, "int8": 624e12}, rel=1e-2))
    assert theoretical_tensor_flops((6, 1), 28, 1_500_000) == {}
    assert theoretical_tensor_flops((9, 0), 132, None) == {}


@pytest.mark.parametrize(("name", "operands"), [("sgemm", "float"), ("gemm_bf16", "float"), ("softmax", "float"),
                                                ("histogram", "int8")])
def test_floating_inputs_are_bounded_by_the_tensor_core_rate(name: str, operands: str) -> None:
    from kernelopt_mcp import Settings
    from kernelopt_mcp.config import find_workload

    assert tensor_operands(find_workload(name, Settings())) == operands


def test_a_tensor_core_gemm_is_not_impossible_but_a_cached_one_is() -> None:
    """gemm_bf16 4096^3 at 0.567 ms (cuBLAS-class, 243 TFLOP/s, measured on the H200) is 3.6x
    under the FP32 SIMT floor: flagging it failed the bundled reference. The tensor-core floor
    passes it and still catches a kernel that skips most of the work."""
    m = 4096
    flops, bytes_ = 2 * m**3, 2 * 2 * m * m + 4 * m * m
    simt = case_roofline("c", 0.5666, bytes_=bytes_, flops=flops, peaks=H200, flush_l2=True)
    assert simt.impossible  # what the SIMT-only floor said
    honest = case_roofline("c", 0.5666, bytes_=bytes_, flops=flops, peaks=H200, flush_l2=True, operands="float")
    assert not honest.impossible and honest.bound == "compute"
    assert honest.tensor_pct == pytest.approx(100 * flops / 0.5666e-3 / 1070.5e12) and simt.tensor_pct is None
    assert honest.floor_ms == pytest.approx(flops / 1070.5e12 * 1e3)
    cached = case_roofline("c", 0.05, bytes_=bytes_, flops=flops, peaks=H200, flush_l2=True, operands="float")
    assert cached.impossible
    # int8 operands: their own (faster) rate; no tensor rate known: the SIMT one
    assert H200.floor_flops_per_s("int8") == 2141e12 and H200.floor_flops_per_s(None) == 66.9e12
    assert Peaks(theoretical_flops_per_s=1e12).floor_flops_per_s("float") == 1e12


def test_floor_uses_the_larger_peak_and_the_binding_term() -> None:
    # softmax 8192^2: 512 MiB moved, 5 flops per element
    n = 8192 * 8192
    floor, bound = roofline_floor_ms(8 * n, 5 * n, H200)
    assert bound == "memory" and floor == pytest.approx(8 * n / 4.8e12 * 1e3)
    # sgemm 4096^3: compute-bound
    m = 4096
    floor, bound = roofline_floor_ms(4 * 3 * m * m, 2 * m**3, H200)
    assert bound == "compute" and floor == pytest.approx(2 * m**3 / 66.9e12 * 1e3)
    # a calibration above the theoretical figure (theoretical clocks under-reported) wins
    fast = H200.model_copy(update={"calibrated_bytes_per_s": 5.0e12})
    assert roofline_floor_ms(1e9, None, fast)[0] == pytest.approx(1e9 / 5.0e12 * 1e3)
    assert roofline_floor_ms(None, None, H200) == (None, None)
    assert roofline_floor_ms(1e9, None, Peaks()) == (None, None)


def test_percent_of_calibrated_peaks() -> None:
    r = case_roofline("c", 0.5, bytes_=1.05e9, flops=12e9, peaks=H200, flush_l2=True)
    assert r.bytes_per_s == pytest.approx(2.1e12) and r.bandwidth_pct == pytest.approx(50.0)
    assert r.flops_per_s == pytest.approx(24e12) and r.flops_pct == pytest.approx(40.0)
    assert r.floor_ms == pytest.approx(1.05e9 / 4.8e12 * 1e3) and r.bound == "memory"
    assert r.of_floor == pytest.approx(0.5 / r.floor_ms) and not r.impossible


def test_impossible_only_beyond_the_margin_and_only_with_a_flush() -> None:
    floor = 1e9 / 4.8e12 * 1e3
    inside = case_roofline("c", floor / (IMPOSSIBLE_MARGIN * 0.99), bytes_=1e9, flops=None, peaks=H200, flush_l2=True)
    assert not inside.impossible and inside.of_floor < 1  # faster than the floor, within the margin
    beyond = case_roofline("c", floor / (IMPOSSIBLE_MARGIN * 1.01), bytes_=1e9, flops=None, peaks=H200, flush_l2=True)
    assert beyond.impossible and "cannot have done all the work" in beyond.note
    do_nothing = case_roofline("c", 0.004, bytes_=1e9, flops=None, peaks=H200, flush_l2=True)
    assert do_nothing.impossible
    cached = case_roofline("c", 0.004, bytes_=1e9, flops=None, peaks=H200, flush_l2=False)
    assert not cached.impossible and "not flushed" in cached.note


def test_without_figures() -> None:
    r = case_roofline("c", 1.0, bytes_=None, flops=None, peaks=H200, flush_l2=True)
    assert r.floor_ms is None and not r.impossible and "no floor" in r.note
    r = case_roofline("c", 1.0, bytes_=1e9, flops=None, peaks=Peaks(theoretical_bytes_per_s=4.8e12), flush_l2=True)
    assert r.bandwidth_pct is None and r.floor_ms is not None  # no calibration: no %, still a floor
    r = case_roofline("c", 0.0, bytes_=1e9, flops=None, peaks=H200, flush_l2=True)
    assert not r.impossible and r.bytes_per_s is None


def test_result_roofline_through_the_fake_gpu(tmp_path) -> None:
    """An evaluation's timed cases get roofline figures from the workload's cost model."""
    from fakegpu import ADD_LAUNCH, kernel, write_harness, write_tiny_workload

    from kernelopt_mcp import Candidate, HarnessProcess, LaunchSpec, Session, Settings
    from kernelopt_mcp.config import find_workload
    from kernelopt_mcp.evaluation.device import device_info
    from kernelopt_mcp.evaluation.outcomes import result_roofline

    harness = write_harness(tmp_path, "fake")
    wl = find_workload(write_tiny_workload(tmp_path / "extra") / "tiny_add", Settings())
    launch = LaunchSpec.model_validate(ADD_LAUNCH)
    with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=tmp_path / "w") as ev:
        honest = evaluate(ev, Candidate(kernel(), launch, [], "honest"))
        # 49152 bytes in 1e-6 ms would be 49 PB/s: work was skipped
        skipped = evaluate(ev, Candidate(kernel("MS:n_4096=0.000001;"), launch, [], "skipped"))
    [r] = result_roofline(honest, wl, H200)
    assert (r.case, r.bytes, r.flops) == ("n_4096", 12 * 4096, 4096)
    assert r.median_ms == pytest.approx(0.1, rel=0.02) and not r.impossible
    assert r.bandwidth_pct == pytest.approx(100 * 12 * 4096 / (r.median_ms * 1e-3) / 4.2e12)
    [s] = result_roofline(skipped, wl, H200)
    assert s.impossible and s.bound == "memory"


def test_a_tensor_core_rate_is_shown_beside_the_fma_rate() -> None:
    from kernelopt_mcp.results import CaseOutput, Timing, _case_detail

    timing = Timing(median_ms=0.5666, iqr_ms=0.001, min_ms=0.56, max_ms=0.57, cv=0.001, noisy=False,
                    warmup=10, iterations=20)
    case = CaseOutput(name="square_4096", kind="performance", status="ok", timing=timing,
                      flops_per_s=242.6e12, flops_pct=373.0, tensor_pct=22.7)
    assert "242.60 TFLOP/s (373% of FMA peak, 23% of tensor-core peak)" in _case_detail(case)
    assert "(373% of FMA peak)" in _case_detail(case.model_copy(update={"tensor_pct": None}))
