"""The Session on a protocol-2 harness: device-side comparison, the input cache, the
determinism re-run and the timed check on hidden-seed inputs, end to end on a real GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_kernels import CACHING_ADD

from kernelopt_mcp import (
    Candidate,
    EvaluateOptions,
    HarnessProcess,
    Session,
    Settings,
    Status,
)
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.evaluation.candidate import initial_candidate
from kernelopt_mcp.evaluation.device import DeviceInfo
from kernelopt_mcp.evaluation.evaluate import evaluate, prepare
from kernelopt_mcp.evaluation.harness import harness_features
from kernelopt_mcp.launch import LaunchSpec

pytestmark = pytest.mark.gpu

FAST = EvaluateOptions(warmup=2, iterations=10, timeout_s=60)
ADD_LAUNCH = LaunchSpec.model_validate({"grid": ["ceil_div(n, 256)"], "block": [256]})


# Sums with float atomics in whatever order blocks arrive: right within tolerance, not bitwise stable.
RACY_SUM = r"""
extern "C" __global__ void reduce_sum(const float* x, float* out, int n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    float v = 0.f;
    for (; i < n; i += (long long)gridDim.x * blockDim.x) v += x[i];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, v);
}
"""


def test_the_harness_offers_protocol_2(harness_binary: Path) -> None:
    assert {"input_cache", "device_compare", "determinism", "timed_inputs"} <= harness_features(harness_binary)


def test_device_compare_agrees_with_the_cpu_compare(proc: HarnessProcess, device: DeviceInfo, tmp_path: Path) -> None:
    wl = find_workload("softmax", Settings())
    results = {}
    for on in (True, False):
        opts = EvaluateOptions(warmup=2, iterations=5, device_compare=on)
        with Session(wl, proc, device, workdir=tmp_path / str(on), options=opts, seed=11) as ev:
            results[on] = evaluate(ev, initial_candidate(wl), benchmark=False)
    assert results[True].ok and results[False].ok
    for dev_case, cpu_case in zip(results[True].cases, results[False].cases, strict=True):
        d, c = dev_case.outputs[0], cpu_case.outputs[0]
        assert d.elements == c.elements and d.mismatches == c.mismatches == 0
        assert d.max_abs_error == pytest.approx(c.max_abs_error, rel=1e-12, abs=1e-300)
        assert d.max_rel_error == pytest.approx(c.max_rel_error, rel=1e-12, abs=1e-300)
        assert d.rel_l2_error == pytest.approx(c.rel_l2_error, rel=1e-6, abs=1e-300)


def test_repeated_evaluations_of_one_candidate_agree(proc: HarnessProcess, device: DeviceInfo, tmp_path: Path) -> None:
    wl = find_workload("sgemm", Settings())
    with Session(wl, proc, device, workdir=tmp_path, options=FAST) as ev:
        prepare(ev, time_reference=False)
        cand = initial_candidate(wl)
        first = evaluate(ev, cand, benchmark=False)
        second = evaluate(ev, cand, benchmark=False)  # inputs and expected outputs now resident
    assert first.ok and second.ok, (first.message, second.message)
    # validation only: no timed launch ran, so no check of timed launches is listed
    assert "timed outputs on hidden-seed inputs" not in second.checks and "repeat launch (bitwise)" in second.checks
    for a, b in zip(first.cases, second.cases, strict=True):
        assert a.outputs[0].max_abs_error == b.outputs[0].max_abs_error  # same data, same kernel: bitwise


def test_a_kernel_that_replays_cached_results_fails_the_timed_check(
    proc: HarnessProcess, device: DeviceInfo, tmp_path: Path
) -> None:
    wl = find_workload("vector_add", Settings())
    with Session(wl, proc, device, workdir=tmp_path, options=FAST) as ev:
        result = evaluate(ev, Candidate(CACHING_ADD, ADD_LAUNCH, [], "cacher"))
    # validation (first launch of each case) passes; the checked timed launches on fresh inputs do not
    assert result.status is Status.timed_mismatch, result.message
    assert "the outputs of timed launch" in result.message and "cached" in result.message
    honest = initial_candidate(wl)
    with Session(wl, proc, device, workdir=tmp_path / "honest", options=FAST) as ev:
        ok = evaluate(ev, honest)
    assert ok.ok, ok.message
    assert all(c.timed_check and all(o.passed for o in c.timed_check) for c in ok.cases if c.kind == "performance")


def test_racy_atomics_pass_where_the_workload_allows_them_and_fail_where_it_demands_bitwise(
    proc: HarnessProcess, device: DeviceInfo, tmp_path: Path
) -> None:
    wl = find_workload("reduce_sum", Settings())
    assert wl.spec.deterministic is False
    launch = LaunchSpec.model_validate({"grid": [1024], "block": [256]})
    racy = Candidate(RACY_SUM, launch, [], "racy")
    with Session(wl, proc, device, workdir=tmp_path / "loose", options=FAST) as ev:
        loose = evaluate(ev, racy, benchmark=False)
    assert loose.ok, loose.message
    differing = [d for c in loose.cases for d in c.determinism if d["bytes_differ"]]
    strict_wl = find_workload("reduce_sum", Settings())
    strict_wl.spec = strict_wl.spec.model_copy(update={"deterministic": True})
    verdicts = []
    for attempt in range(3):  # the race shows up on the large cases nearly always; allow luck
        with Session(strict_wl, proc, device, workdir=tmp_path / f"strict{attempt}", options=FAST) as ev:
            verdicts.append(evaluate(ev, racy, benchmark=False).status)
        if verdicts[-1] is Status.nondeterministic:
            break
    assert Status.nondeterministic in verdicts, (verdicts, differing)
