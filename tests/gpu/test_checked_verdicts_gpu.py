"""The verdicts of checked timed launches on a real GPU (PROTOCOL.md, "Fresh inputs and checked
launches", step 5): no launch of the candidate runs between a check's compare and the read of
its verdict, and the reference's copy of an input that is never redrawn is read-only.

The kernels aim exactly: KERNELOPT_HARNESS_REPORT_STAGED=1 (a test-only switch) makes a case
report the address of its compare results (``check_results``) and of its staged copies. A first
request learns them; the second, made the same way, gets the same allocations (the test checks
that it did) and is given them as scalars, so the attack does not depend on a blind scan."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gpu_kernels import module_files

from kernelopt_mcp import HarnessProcess
from kernelopt_mcp.evaluation.device import DeviceInfo

pytestmark = pytest.mark.gpu

N = 1 << 16
CHECKED = [2, 5, 9]
KERNELS = r"""
// The reference: a copy, with the attackers' signature (target and bytes unused).
extern "C" __global__ void copy_ref(const float* in, float* out, unsigned long long n,
                                    unsigned long long target, unsigned long long bytes) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}

// Which launch of the kernel counting into `blocks` this is (every block agrees); the first
// two (validation and its repeat) copy, later ones write zeros. True when this one cheats.
__device__ bool cheats(unsigned long long* blocks, const float* in, float* out, unsigned long long n) {
    __shared__ unsigned long long launch;
    if (threadIdx.x == 0) launch = atomicAdd(blocks, 1ull) / gridDim.x;
    __syncthreads();
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = launch < 2 ? in[i] : 0.0f;
    return launch >= 2;
}

__device__ unsigned long long hush_blocks;
// Cheats from its third launch on and resets every 48-byte compare record in [target,
// target + bytes) to "no mismatch": had the verdicts stayed on the device until after the
// later launches, every check would read as a pass.
extern "C" __global__ void hush(const float* in, float* out, unsigned long long n,
                                unsigned long long target, unsigned long long bytes) {
    if (!cheats(&hush_blocks, in, out, n)) return;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long* r = (unsigned long long*)target;
    for (unsigned long long k = i; k < bytes / 48; k += (unsigned long long)gridDim.x * blockDim.x) {
        r[6 * k] = 0; r[6 * k + 1] = 0; r[6 * k + 2] = ~0ull; r[6 * k + 3] = 0; r[6 * k + 4] = 0;
        r[6 * k + 5] = 0;
    }
}

__device__ unsigned long long blank_blocks;
// Cheats from its third launch on and zeroes [target, target + bytes): the reference's copy of
// the input, so the reference would compute zeros too.
extern "C" __global__ void blank(const float* in, float* out, unsigned long long n,
                                 unsigned long long target, unsigned long long bytes) {
    if (!cheats(&blank_blocks, in, out, n)) return;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (unsigned long long k = i; k < bytes / 4; k += (unsigned long long)gridDim.x * blockDim.x)
        ((float*)target)[k] = 0.0f;
}
"""


def _u64(v: int) -> str:
    return v.to_bytes(8, "little").hex()


@pytest.fixture
def files(device: DeviceInfo, tmp_path: Path) -> dict[str, Path]:
    files = module_files(KERNELS, device.arch, tmp_path)
    data = np.arange(1, N + 1, dtype=np.float32)  # no zero: a zero output mismatches everywhere
    (tmp_path / "in.bin").write_bytes(data.tobytes())
    (tmp_path / "expected.bin").write_bytes(data.astype("<f8").tobytes())
    return {**files, "in": tmp_path / "in.bin", "expected": tmp_path / "expected.bin", "out": tmp_path / "out.bin"}


def _request(files: dict[str, Path], entry: str, target: tuple[int, int]) -> dict[str, Any]:
    launch = {"grid": [N // 256, 1, 1], "block": [256, 1, 1]}
    compare = {"abs_tol": 0.0, "rtol": 0.0, "rel_floor": 1.0}
    args: list[dict[str, Any]] = [
        {"kind": "buffer", "name": "in", "role": "in", "bytes": N * 4, "input": str(files["in"]), "dtype": "float32"},
        {"kind": "buffer", "name": "out", "role": "out", "bytes": N * 4, "output": str(files["out"]),
         "dtype": "float32", "expected": str(files["expected"]), "compare": compare},
        {"kind": "scalar", "name": "n", "dtype": "uint64", "raw": _u64(N)},
        {"kind": "scalar", "name": "target", "dtype": "uint64", "raw": _u64(target[0])},
        {"kind": "scalar", "name": "bytes", "dtype": "uint64", "raw": _u64(target[1])},
    ]
    return {"protocol": 2, "device": 0, "module": str(files["module"]), "entry": entry,
            "support_module": str(files["support"]), "check_module": str(files["module"]), "check_entry": "copy_ref",
            "guard_bytes": 4096, "flush_l2": False,
            "cases": [{"name": "c", "args": args, "launch": launch, "repeat_validation": True,
                       "timing": {"warmup": 1, "iterations": 12, "blocking": True},
                       "checked_launches": CHECKED, "check_launch": launch}]}


def _address(answer: dict[str, Any], source: str) -> tuple[int, int]:
    found = [s for s in answer["cases"][0]["staged"] if s["source"] == source]
    assert found, answer["cases"][0]["staged"]
    return int(found[0]["address"]), int(found[0]["bytes"])


def test_a_kernel_resetting_earlier_verdicts_still_fails_every_check(
    harness_binary: Path, files: dict[str, Path]
) -> None:
    with HarnessProcess(harness_binary, 0, env={**os.environ, "KERNELOPT_HARNESS_REPORT_STAGED": "1"}) as proc:
        probe = proc.request(_request(files, "copy_ref", (0, 0)), timeout_s=120).answer
        assert probe is not None and probe["cases"][0]["status"] == "ok", probe
        assert [c["mismatches"] for c in probe["cases"][0]["timed_checks"]] == [0] * len(CHECKED)
        target = _address(probe, "check_results")
        answer = proc.request(_request(files, "hush", target), timeout_s=120).answer
        assert answer is not None
        case = answer["cases"][0]
        assert _address(answer, "check_results") == target, "the compare results moved: the aim is off"
        assert case["status"] == "ok", case  # validation passed; the checks are Python's to judge
        checks = case["timed_checks"]
        assert [c["sample"] for c in checks] == CHECKED
        # every check saw the zeros, whatever the kernel did to the slots afterwards
        assert [c["mismatches"] for c in checks] == [N] * len(CHECKED), checks


def test_the_references_copy_of_a_fixed_input_is_read_only(harness_binary: Path, files: dict[str, Path]) -> None:
    with HarnessProcess(harness_binary, 0, env={**os.environ, "KERNELOPT_HARNESS_REPORT_STAGED": "1"}) as proc:
        probe = proc.request(_request(files, "copy_ref", (0, 0)), timeout_s=120).answer
        assert probe is not None and (probe["staging"]["readonly"], probe["staging"]["reason"]) == (True, None), probe
        target = _address(probe, "reference_input")
        answer = proc.request(_request(files, "blank", target), timeout_s=120).answer
        assert answer is not None
        case = answer["cases"][0]
        assert _address(answer, "reference_input") == target, "the reference's copy moved: the aim is off"
        assert case["status"] == "runtime_error", case
        assert case["error"]["cuda_error"] == "CUDA_ERROR_ILLEGAL_ADDRESS"
