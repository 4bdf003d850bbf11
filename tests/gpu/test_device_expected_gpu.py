"""The CUDA reference's outputs kept on the device as the expected values (issue 17; harness
feature ``device_expected``), on a real GPU.

vector_add's n_2e25 (32M elements, inputs drawn on the device): the tolerances built on the
harness's sum of squares equal NumPy's on the same outputs written to a file (same seed, files
mode), candidates are judged against the kept copy (pass, and a kernel that skips one element
fails on it), and after a fault ends the harness the next candidate still passes: the new
process is told expected_missing and the reference keeps its outputs again, with the same
figures to the bit (the support module's ko_sum_sq adds them up on the device).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernelopt_mcp import Candidate, EvaluateOptions, HarnessProcess, Session, Settings, Status
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.evaluation.candidate import initial_candidate
from kernelopt_mcp.evaluation.compare import thresholds
from kernelopt_mcp.evaluation.device import DeviceInfo
from kernelopt_mcp.evaluation.evaluate import evaluate, prepare
from kernelopt_mcp.workload import Workload

pytestmark = pytest.mark.gpu

OPTS = {"warmup": 2, "iterations": 10, "timeout_s": 120}
CASE = "n_2e25"

SKIP_LAST = """
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n - 1) c[i] = a[i] + b[i];  // the last element keeps the harness's NaN poison
}
"""

FAULT = """
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) *(volatile float*)(0x10) = 1.0f;  // an illegal address: the context is lost
    if (i < n) c[i] = a[i] + b[i];
}
"""


def _workload() -> Workload:
    wl = find_workload("vector_add", Settings())
    wl.spec = wl.spec.model_copy(update={"cases": [c for c in wl.spec.cases if c.name != "n_2e27"]})
    return wl


def _like(wl: Workload, source: str, name: str) -> Candidate:
    initial = initial_candidate(wl)
    return Candidate(source, initial.launch, [], name)


def test_kept_tolerances_match_numpys_and_candidates_are_judged_against_the_kept_copy(
    harness_binary: Path, device: DeviceInfo, tmp_path: Path,
) -> None:
    wl = _workload()
    try:
        with HarnessProcess(harness_binary, device.ordinal) as proc, Session(
            wl, proc, device, workdir=tmp_path / "kept", seed=21, options=EvaluateOptions(**OPTS),  # type: ignore[arg-type]
        ) as s:
            prepare(s)
            assert s.record.device_kept == {CASE}, "the harness has device_expected and the input cache"
            kept = s.data.refs[CASE]["c"]
            assert kept.kept and kept.path is None and CASE not in s.expected
            assert not list((tmp_path / "kept" / "expected").rglob(f"{CASE}/*")), "nothing written"
            kept_ms = dict(s.prepare_ms)
            good = evaluate(s, initial_candidate(wl))
            wrong = evaluate(s, _like(wl, SKIP_LAST, "skip_last"))
        with HarnessProcess(harness_binary, device.ordinal) as proc, Session(
            wl, proc, device, workdir=tmp_path / "files", seed=21,
            options=EvaluateOptions(**OPTS, device_expected=False),  # type: ignore[arg-type]
        ) as f:
            prepare(f)
            assert f.record.device_kept == frozenset() and f.data.refs[CASE]["c"].path is not None
            want = thresholds(f.expected[CASE]["c"], wl.spec.tolerance_for("c"))
            files_ms = dict(f.prepare_ms)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)  # GBs of outputs: the disk is shared
    got = kept.thresholds
    # the same drawn inputs, the same reference: the same RMS (a sequential double sum of 2^25
    # squares against NumPy's chunked dot products: rounding apart, at most ~4e-9 relative)
    assert got.scale == pytest.approx(want.scale, rel=1e-7) and got.norm == pytest.approx(want.norm, rel=1e-7)
    assert got.abs_tol == pytest.approx(want.abs_tol, rel=1e-7)
    assert good.status is Status.ok, good.message
    perf = {c.name: c for c in wrong.cases}[CASE]
    assert perf.status is Status.mismatch, perf.message
    [out] = perf.outputs
    assert (out.mismatches, out.nonfinite, out.elements) == (1, 1, 1 << 25)
    print(f"preparation, expected kept on the device: {kept_ms}")
    print(f"preparation, expected through files:     {files_ms}")


def test_after_a_fault_the_reference_keeps_its_outputs_again_in_the_new_process(
    proc: HarnessProcess, device: DeviceInfo, tmp_path: Path,
) -> None:
    wl = _workload()
    try:
        with Session(wl, proc, device, workdir=tmp_path / "w", seed=22, options=EvaluateOptions(**OPTS)) as s:  # type: ignore[arg-type]
            prepare(s)
            first = s.data.refs[CASE]["c"].thresholds
            restarts = proc.restarts
            fault = evaluate(s, _like(wl, FAULT, "fault"))
            after = evaluate(s, initial_candidate(wl))
            again = s.data.refs[CASE]["c"].thresholds
            wrong = evaluate(s, _like(wl, SKIP_LAST, "skip_last"))
            # the case's runs that kept values, in requests of one case or several (a validation batch)
            keeps = [
                p for p in (tmp_path / "w" / "requests").rglob("*.json")
                for c in json.loads(p.read_text())["cases"]
                if c["name"] == CASE and any("keep_expected" in a for a in c["args"])
            ]
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)
    assert fault.status is Status.runtime_error, fault.message
    assert proc.restarts > restarts
    assert after.status is Status.ok, after.message
    assert {c.name: c.status for c in wrong.cases}[CASE] is Status.mismatch
    # prepare kept the validation and the hidden set; after the fault both were kept again
    assert len(keeps) == 4, sorted(str(p.relative_to(tmp_path)) for p in keeps)
    # the same outputs kept again in a new process: the device's sum of squares (fixed grid, no
    # atomics) gives the same bits, so the tolerances are exactly the same
    assert again is not first and again == first
