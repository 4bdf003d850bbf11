"""Read-only staging on a real GPU (PROTOCOL.md, "Read-only staging"): the harness's device
copies of inputs and expected values are mapped read-only, so a kernel that writes into them
faults instead of passing against values it rewrote or poisoning the input cache.

The harness-level tests aim exactly: KERNELOPT_HARNESS_REPORT_STAGED=1 (a test-only switch)
makes each case report its staged copies' addresses, so a kernel given one as a scalar hits
it whatever the driver's address layout. The session-level tests run the blind attacks a
candidate could make."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gpu_kernels import module_files

from kernelopt_mcp import Candidate, EvaluateOptions, HarnessProcess, Session, Settings, Status
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.evaluation.candidate import initial_candidate
from kernelopt_mcp.evaluation.device import DeviceInfo
from kernelopt_mcp.evaluation.evaluate import evaluate, prepare
from kernelopt_mcp.launch import LaunchSpec

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
LAUNCH = LaunchSpec.model_validate({"grid": ["ceil_div(n, 256)"], "block": [256]})
FAST = EvaluateOptions(warmup=1, iterations=5, timeout_s=60)
N = 4096
KERNELS = r"""
extern "C" __global__ void copy_f32(const float* in, float* out, unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}
// Writes 0xEE bytes over [target, target + bytes), then copies: aimed at a staged copy.
extern "C" __global__ void poke(const float* in, float* out, unsigned long long n,
                                unsigned long long target, unsigned long long bytes) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (unsigned long long k = i; k < bytes; k += (unsigned long long)gridDim.x * blockDim.x)
        ((unsigned char*)target)[k] = 0xEE;
    if (i < n) out[i] = in[i];
}
// Reads its answer from [target, target + 8 n): float64 expected values, aimed at their staged copy.
extern "C" __global__ void peek(const float* in, float* out, unsigned long long n,
                                unsigned long long target, unsigned long long bytes) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && i * 8 < bytes) out[i] = (float)((const double*)target)[i];
}
"""
# Scans the 64 MiB below `c` for its own float64 expected values (c = a + b); where it finds
# them it overwrites them with 0 and writes zeros to c, so a compare against them would pass.
FORGER = r"""
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (blockIdx.x == 0 && n > 0) {
        double want = (double)a[0] + (double)b[0];
        const double* base = (const double*)((size_t)c & ~(size_t)7);
        for (size_t k = threadIdx.x + 1; k < ((size_t)8 << 20); k += blockDim.x) {
            const double* p = base - k;
            if (fabs(*p - want) <= 1e-6 * fabs(want) + 1e-7) {
                for (int j = 0; j < n; ++j) ((double*)p)[j] = 0.0;
            }
        }
    }
    if (i < (size_t)n) c[i] = 0.0f;
}
"""


PROTECTED = {"readonly": True, "reason": None, "expected_hidden": True, "hide_reason": None}


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "KERNELOPT_HARNESS_REPORT_STAGED": "1", **extra}


def _u64(v: int) -> str:
    return v.to_bytes(8, "little").hex()


def _request(
    tmp_path: Path, files: dict[str, Path], entry: str, target: tuple[int, int] | None, *, timed: bool = False,
) -> dict[str, Any]:
    # Written once: the input cache knows a file by its identity (mtime included), so rewriting
    # the same bytes for each request would make every request a miss.
    if not (tmp_path / "in.bin").exists():
        data = np.arange(N, dtype=np.float32)
        (tmp_path / "in.bin").write_bytes(data.tobytes())
        (tmp_path / "expected.bin").write_bytes(data.astype("<f8").tobytes())
        (tmp_path / "timed_in.bin").write_bytes(data[::-1].copy().tobytes())
        (tmp_path / "timed_expected.bin").write_bytes(data[::-1].astype("<f8").tobytes())
    args: list[dict[str, Any]] = [
        {"kind": "buffer", "name": "in", "role": "in", "bytes": N * 4, "input": str(tmp_path / "in.bin")},
        {"kind": "buffer", "name": "out", "role": "out", "bytes": N * 4, "output": str(tmp_path / "out.bin"),
         "write_output": True, "dtype": "float32", "expected": str(tmp_path / "expected.bin"),
         "compare": {"abs_tol": 0.0, "rtol": 0.0, "rel_floor": 1.0}},
        {"kind": "scalar", "name": "n", "dtype": "uint64", "raw": _u64(N)},
    ]
    if target is not None:
        args += [{"kind": "scalar", "name": "target", "dtype": "uint64", "raw": _u64(target[0])},
                 {"kind": "scalar", "name": "bytes", "dtype": "uint64", "raw": _u64(target[1])}]
    case: dict[str, Any] = {"name": "c", "args": args, "launch": {"grid": [16, 1, 1], "block": [256, 1, 1]}}
    if timed:  # a timed case with a timed check: its inputs and expected values are staged too
        args[0]["timed_input"] = str(tmp_path / "timed_in.bin")
        args[1]["timed_expected"] = str(tmp_path / "timed_expected.bin")
        case["timing"] = {"warmup": 1, "iterations": 3}
    return {"protocol": 2, "device": 0, "module": str(files["module"]), "entry": entry,
            "support_module": str(files["support"]), "input_cache": True, "guard_bytes": 4096, "flush_l2": False,
            "cases": [case]}


@pytest.fixture
def files(device: DeviceInfo, tmp_path: Path) -> dict[str, Path]:
    return module_files(KERNELS, device.arch, tmp_path)


def _staged(answer: dict[str, Any], source: str) -> tuple[int, int]:
    [entry] = [s for s in answer["cases"][0]["staged"] if s["source"] == source]
    return int(entry["address"]), int(entry["bytes"])


@pytest.mark.parametrize("source", ["input", "expected"])
def test_a_write_into_a_cached_copy_faults_and_the_cache_survives(
    harness_binary: Path, files: dict[str, Path], tmp_path: Path, source: str
) -> None:
    with HarnessProcess(harness_binary, 0, env=_env()) as proc:
        first = proc.request(_request(tmp_path, files, "copy_f32", None), timeout_s=120).answer
        assert first is not None and first["staging"] == PROTECTED, first
        assert first["cases"][0]["status"] == "ok"
        target = _staged(first, source)  # the cache keeps it for the next request
        reply = proc.request(_request(tmp_path, files, "poke", target), timeout_s=120)
        assert reply.answer is not None
        case = reply.answer["cases"][0]
        assert case["status"] == "runtime_error", case
        assert case["error"]["cuda_error"] == "CUDA_ERROR_ILLEGAL_ADDRESS"
        again = proc.request(_request(tmp_path, files, "copy_f32", None), timeout_s=120).answer
        assert again is not None and again["cases"][0]["status"] == "ok"
        assert [c["mismatches"] for c in again["cases"][0]["compares"]] == [0]


def test_a_kernel_reading_its_expected_values_faults(
    harness_binary: Path, files: dict[str, Path], tmp_path: Path
) -> None:
    """Hidden expected values (unmapped between compares): a kernel aimed at their address faults
    instead of copying its answer; without hiding (only read-only) the same read passes."""
    with HarnessProcess(harness_binary, 0, env=_env()) as proc:
        first = proc.request(_request(tmp_path, files, "copy_f32", None), timeout_s=120).answer
        assert first is not None and first["staging"] == PROTECTED, first
        reply = proc.request(_request(tmp_path, files, "peek", _staged(first, "expected")), timeout_s=120)
        assert reply.answer is not None
        case = reply.answer["cases"][0]
        assert case["status"] == "runtime_error" and case["error"]["cuda_error"] == "CUDA_ERROR_ILLEGAL_ADDRESS", case
        again = proc.request(_request(tmp_path, files, "copy_f32", None), timeout_s=120).answer
        assert again is not None and again["cases"][0]["status"] == "ok"
        assert [c["mismatches"] for c in again["cases"][0]["compares"]] == [0]
    with HarnessProcess(harness_binary, 0, env=_env(KERNELOPT_HARNESS_HIDE_EXPECTED="0")) as proc:
        first = proc.request(_request(tmp_path, files, "copy_f32", None), timeout_s=120).answer
        assert first is not None and first["staging"]["expected_hidden"] is False
        read = proc.request(_request(tmp_path, files, "peek", _staged(first, "expected")), timeout_s=120).answer
        assert read is not None and read["cases"][0]["status"] == "ok"
        assert [c["mismatches"] for c in read["cases"][0]["compares"]] == [0]  # the answer, copied


@pytest.mark.parametrize("source", ["timed_input", "timed_expected"])
def test_the_timed_checks_data_is_out_of_reach_until_its_launch(
    harness_binary: Path, files: dict[str, Path], tmp_path: Path, source: str
) -> None:
    """The timed check's inputs ("not seen before") and expected values are unmapped while the
    validation and timed launches run: a read aimed at them faults; without hiding it does not."""
    for hidden in (True, False):
        env = _env() if hidden else _env(KERNELOPT_HARNESS_HIDE_EXPECTED="0")
        with HarnessProcess(harness_binary, 0, env=env) as proc:
            first = proc.request(_request(tmp_path, files, "copy_f32", None, timed=True), timeout_s=120).answer
            assert first is not None and first["cases"][0]["status"] == "ok", first
            reply = proc.request(_request(tmp_path, files, "peek", _staged(first, source), timed=True), timeout_s=120)
            assert reply.answer is not None
            case = reply.answer["cases"][0]
            if hidden:
                assert case["status"] == "runtime_error", case
                assert case["error"]["cuda_error"] == "CUDA_ERROR_ILLEGAL_ADDRESS"
            else:
                assert case["status"] != "runtime_error", case


def test_without_protection_the_same_write_poisons_the_cache(
    harness_binary: Path, files: dict[str, Path], tmp_path: Path
) -> None:
    """What the protection stops: with it off the poke succeeds and the next request reads poison."""
    with HarnessProcess(harness_binary, 0, env=_env(KERNELOPT_HARNESS_READONLY_STAGING="0")) as proc:
        first = proc.request(_request(tmp_path, files, "copy_f32", None), timeout_s=120).answer
        assert first is not None and first["staging"]["readonly"] is False
        proc.request(_request(tmp_path, files, "poke", _staged(first, "input")), timeout_s=120)
        again = proc.request(_request(tmp_path, files, "copy_f32", None), timeout_s=120).answer
        assert again is not None and again["input_cache"]["hits"] >= 1
        assert (tmp_path / "out.bin").read_bytes() == b"\xee" * (N * 4)


@pytest.fixture
def vector_add(proc: HarnessProcess, device: DeviceInfo, tmp_path: Path) -> Iterator[Session]:
    wl = find_workload("vector_add", Settings())
    with Session(wl, proc, device, workdir=tmp_path, options=FAST) as ev:
        prepare(ev)
        yield ev


def test_a_backward_scribbler_faults_and_the_initial_kernel_then_passes(vector_add: Session) -> None:
    source = (REPO / "tests" / "adversarial" / "vector_add_scribble.cu").read_text()
    r = evaluate(vector_add, Candidate(source, LAUNCH, name="scribble"))
    assert r.status in (Status.runtime_error, Status.out_of_bounds_write), r.message
    ok = evaluate(vector_add, initial_candidate(vector_add.workload))
    assert ok.status is Status.ok, ok.message
    assert all(c.status is Status.ok for c in ok.cases)


def test_a_kernel_overwriting_its_expected_values_cannot_pass(vector_add: Session) -> None:
    r = evaluate(vector_add, Candidate(FORGER, LAUNCH, name="forger"))
    assert r.status is not Status.ok, r.message
    ok = evaluate(vector_add, initial_candidate(vector_add.workload))
    assert ok.status is Status.ok, ok.message
