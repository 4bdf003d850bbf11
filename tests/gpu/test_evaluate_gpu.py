"""End-to-end evaluation on a real GPU: bundled workloads, wrong and faulting kernels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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
from kernelopt_mcp.launch import LaunchSpec

pytestmark = pytest.mark.gpu

BUNDLED = ["vector_add", "sgemm", "reduce_sum", "softmax", "transpose", "layernorm", "histogram", "gemm_bf16"]
VECTOR_ADD_LAUNCH = LaunchSpec.model_validate({"grid": ["ceil_div(n, 256)"], "block": [256]})
FAST = EvaluateOptions(warmup=2, iterations=10, timeout_s=60)


@pytest.fixture
def vector_add(proc: HarnessProcess, device: DeviceInfo, tmp_path: Path) -> Iterator[Session]:
    wl = find_workload("vector_add", Settings())
    # the two correctness cases are enough to catch every fault below, and keep it quick
    wl.spec = wl.spec.model_copy(update={"cases": [c for c in wl.spec.cases if c.kind == "correctness"]
                                         + wl.spec.performance_cases[:1]})
    with Session(wl, proc, device, workdir=tmp_path, options=FAST) as ev:
        prepare(ev)
        yield ev


def test_device_info_matches_the_driver(device: DeviceInfo) -> None:
    from cuda.bindings import driver

    driver.cuInit(0)
    _, dev = driver.cuDeviceGet(0)
    _, name = driver.cuDeviceGetName(64, dev)
    assert device.name == name.split(b"\0")[0].decode()
    A = driver.CUdevice_attribute
    _, major = driver.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
    _, minor = driver.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
    _, sms = driver.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)
    _, l2 = driver.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev)
    _, total = driver.cuDeviceTotalMem(dev)
    _, version = driver.cuDriverGetVersion()
    assert device.compute_capability == (major, minor)
    assert device.arch == f"sm_{major}{minor}"
    assert device.sm_count == sms and device.l2_cache_bytes == l2
    assert device.total_memory_bytes == total
    assert device.driver_version == version
    assert device.max_threads_per_block == 1024 and device.warp_size == 32


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_reference_matches_oracle_and_initial_passes(
    name: str, proc: HarnessProcess, device: DeviceInfo, tmp_path: Path
) -> None:
    wl = find_workload(name, Settings())
    with Session(wl, proc, device, workdir=tmp_path, options=FAST) as ev:
        # the CUDA reference is checked against the NumPy oracle on every case, large ones too
        prepare(ev, time_reference=True, oracle_on_all_cases=True)
        assert ev.reference_result is not None and ev.reference_result.ok
        result = evaluate(ev, initial_candidate(wl))
    assert result.status is Status.ok, result.message
    assert result.score_ms and result.score_ms > 0
    assert result.speedup and result.speedup > 0
    for case in result.cases:
        assert all(o.passed for o in case.outputs)
        if case.kind == "performance":
            assert case.timing is not None and case.timing.iterations == FAST.iterations
            assert case.bytes_per_s and case.bytes_per_s < 6e12, "faster than HBM: skipped work?"
    report = os.environ.get("KERNELOPT_GPU_REPORT")
    if report:
        with open(report, "a") as f:
            f.write(json.dumps({
                "workload": name, "initial_score_ms": result.score_ms,
                "reference_score_ms": result.reference_score_ms, "speedup": result.speedup,
                "cases": {c.name: {"initial_ms": c.timing.median_ms, "reference_ms": c.reference_median_ms,
                                   "initial_GBps": (c.bytes_per_s or 0) / 1e9,
                                   "initial_TFLOPs": (c.flops_per_s or 0) / 1e12}
                          for c in result.cases if c.timing},
            }) + "\n")


def _kernel(body: str) -> str:
    return (
        'extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {\n'
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n" + body + "\n}\n"
    )


def test_wrong_kernel_is_a_mismatch_with_details(vector_add: Session) -> None:
    r = evaluate(vector_add, Candidate(_kernel("if (i < n) c[i] = a[i] - b[i];"), VECTOR_ADD_LAUNCH, name="minus"))
    assert r.status is Status.mismatch
    case = next(c for c in r.cases if c.status is Status.mismatch)
    out = case.outputs[0]
    assert out.mismatches > 0 and out.first_mismatches
    assert "expected" in case.message
    assert r.score_ms is None


def test_kernel_that_writes_nothing_is_caught_by_the_poison(vector_add: Session) -> None:
    r = evaluate(vector_add, Candidate(_kernel("if (i < n && i % 2) c[i] = a[i] + b[i];"),
                                       VECTOR_ADD_LAUNCH, name="half"))
    assert r.status is Status.mismatch
    assert any(o.nonfinite > 0 for c in r.cases for o in c.outputs)


def test_write_past_the_end_is_out_of_bounds_write(vector_add: Session) -> None:
    r = evaluate(vector_add, Candidate(_kernel("if (i < n) c[i + 1] = a[i] + b[i];"), VECTOR_ADD_LAUNCH, name="oob"))
    assert r.status is Status.out_of_bounds_write
    case = next(c for c in r.cases if c.status is Status.out_of_bounds_write)
    assert case.guard_violations[0]["buffer"] == "c"
    assert case.guard_violations[0]["side"] == "after"


def test_writing_an_input_is_input_modified(vector_add: Session) -> None:
    src = _kernel("if (i < n) { c[i] = a[i] + b[i]; ((float*)a)[i] = 0.0f; }")
    r = evaluate(vector_add, Candidate(src, VECTOR_ADD_LAUNCH, name="clobber"))
    assert r.status is Status.input_modified
    assert any(m["buffer"] == "a" for c in r.cases for m in c.modified_inputs)


def test_illegal_address_is_runtime_error_and_the_next_evaluation_works(vector_add: Session) -> None:
    bad = _kernel("if (i < n) { ((float*)0x10)[i] = 1.0f; c[i] = a[i] + b[i]; }")
    r = evaluate(vector_add, Candidate(bad, VECTOR_ADD_LAUNCH, name="illegal"))
    assert r.status is Status.runtime_error
    case = next(c for c in r.cases if c.status is Status.runtime_error)
    assert case.error is not None and case.error.cuda_error == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert any(c.status is Status.skipped for c in r.cases)
    proc = vector_add.harness
    assert isinstance(proc, HarnessProcess)
    restarts = proc.restarts
    ok = evaluate(vector_add, initial_candidate(vector_add.workload))
    assert ok.status is Status.ok, ok.message
    assert proc.restarts == restarts + 1


def test_trap_is_runtime_error(vector_add: Session) -> None:
    r = evaluate(vector_add, Candidate(_kernel("if (i == 0) __trap(); if (i < n) c[i] = a[i] + b[i];"),
                                       VECTOR_ADD_LAUNCH, name="trap"))
    assert r.status is Status.runtime_error
    assert evaluate(vector_add, initial_candidate(vector_add.workload)).ok


def test_infinite_loop_times_out_within_the_deadline(vector_add: Session) -> None:
    vector_add.options.timeout_s = 5
    hang = _kernel("while (true) { __nanosleep(1000); }")
    start = time.monotonic()
    r = evaluate(vector_add, Candidate(hang, VECTOR_ADD_LAUNCH, name="hang"))
    elapsed = time.monotonic() - start
    assert r.status is Status.timeout
    assert elapsed < 5 + 15, f"took {elapsed:.1f} s"
    vector_add.options.timeout_s = 60
    assert evaluate(vector_add, initial_candidate(vector_add.workload)).ok


def test_a_hang_in_the_second_case_of_a_validation_batch_is_named_within_its_deadline(vector_add: Session) -> None:
    """Every case of a candidate goes to the harness in one request (feature progress): a kernel
    that hangs only on the second case is that case's timeout, after its own deadline and not the
    cases' sum; the first case, whose answer died with the killed process, is run again and
    passes; the cases after it are skipped; the next candidate works."""
    assert "progress" in vector_add.features
    vector_add.options.timeout_s = 5
    hang = _kernel("if (n == 1000003) { while (true) { __nanosleep(1000); } }\n    if (i < n) c[i] = a[i] + b[i];")
    start = time.monotonic()
    r = evaluate(vector_add, Candidate(hang, VECTOR_ADD_LAUNCH, name="hang-second"))
    elapsed = time.monotonic() - start
    vector_add.options.timeout_s = 60
    statuses = {c.name: c.status for c in r.cases}
    # the fixture keeps "one", "odd_1000003" and one performance case
    expected = {c.name: Status.skipped for c in vector_add.workload.spec.cases}
    expected.update({"one": Status.ok, "odd_1000003": Status.timeout})
    assert len(expected) > 2 and statuses == expected, r.message
    assert r.phases is not None and r.phases.requests == 2  # the batch, then "one" alone
    assert elapsed < 5 + 15, f"took {elapsed:.1f} s"
    assert evaluate(vector_add, initial_candidate(vector_add.workload)).ok


def test_block_over_1024_threads_is_invalid_launch_naming_the_limit(vector_add: Session) -> None:
    launch = LaunchSpec.model_validate({"grid": ["ceil_div(n, 2048)"], "block": [2048]})
    r = evaluate(vector_add, Candidate(_kernel("if (i < n) c[i] = a[i] + b[i];"), launch, name="big"))
    assert r.status is Status.invalid_launch
    assert "1024" in r.cases[0].message


def test_missing_entry_is_a_compile_error_naming_the_prototype(vector_add: Session) -> None:
    src = 'extern "C" __global__ void vec_add(const float* a, const float* b, float* c, int n) {}'
    r = evaluate(vector_add, Candidate(src, VECTOR_ADD_LAUNCH, name="wrong-name"))
    assert r.status is Status.compile_error
    assert "vec_add" in r.message and "extern \"C\" __global__ void vector_add(" in r.message


def test_cli_evaluate_sgemm_prints_cases_and_score(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kernelopt_mcp.cli", "evaluate", "sgemm", "--warmup", "1", "--iterations",
         "5", "--json"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "ok"
    assert result["score_ms"] > 0
    assert {c["status"] for c in result["cases"]} == {"ok"}
    assert result["reference"]["candidate"] == "reference"
