"""Protocol 2 of the native harness on a real GPU, driven in serve mode with real files:
device-side compare (against kernelopt_mcp.evaluation.compare.compare), the input cache, determinism
re-runs and timed inputs (native_harness/PROTOCOL.md, "Protocol 2")."""

from __future__ import annotations

import math
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernelopt_mcp.compiler import compile_kernel
from kernelopt_mcp.dtypes import DType
from kernelopt_mcp.evaluation.compare import compare, thresholds
from kernelopt_mcp.evaluation.device import DeviceInfo
from kernelopt_mcp.evaluation.harness import HarnessProcess
from kernelopt_mcp.evaluation.support_module import support_module
from kernelopt_mcp.workload import DEFAULT_TOLERANCE, EXACT, Tolerance

pytestmark = pytest.mark.gpu

KERNELS = r"""
typedef unsigned long long u64;

// out[0..n) = in[0..n) (bytes), grid-stride: the output is whatever the input file holds.
extern "C" __global__ void copy_bytes(const unsigned char* in, unsigned char* out, u64 n) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        out[i] = in[i];
}

// A float reduction whose result depends on the order the atomics land in.
extern "C" __global__ void sum_racy(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(out, x[i]);
}

extern "C" __global__ void twice(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}

// Computes y = 2x on its first launch and replays that answer on every later one.
__device__ float memo[1 << 16];
__device__ int memo_valid[1 << 16];
extern "C" __global__ void twice_memo(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (memo_valid[i]) { y[i] = memo[i]; return; }
    y[i] = 2.0f * x[i];
    memo[i] = y[i];
    memo_valid[i] = 1;
}
"""

N_COMPARE = (1 << 20) + 37  # many blocks of the compare kernel, and a ragged tail
TAIL = 1000                 # elements the "unwritten" scenario leaves poisoned


@pytest.fixture(scope="module")
def files(device: DeviceInfo, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("harness_v2")
    compiled = compile_kernel(KERNELS, device.arch)
    assert compiled.ok, compiled.summary()
    module = directory / "kernels.cubin"
    module.write_bytes(compiled.cubin or b"")
    return {"module": module, "support": support_module(device.arch, directory / "support")}


def _request(files: dict[str, Path], entry: str, args: list[dict[str, Any]], grid: int, **case: Any) -> dict[str, Any]:
    input_cache = case.pop("input_cache", False)
    return {
        "protocol": 2, "device": 0, "module": str(files["module"]), "entry": entry,
        "support_module": str(files["support"]), "input_cache": input_cache,
        "guard_bytes": 4096, "flush_l2": False,
        "cases": [{"name": "c", "args": args, "launch": {"grid": [grid, 1, 1], "block": [256, 1, 1]}, **case}],
    }


def _run(proc: HarnessProcess, request: dict[str, Any]) -> dict[str, Any]:
    reply = proc.request(request, timeout_s=120)
    assert reply.exit_code in (None, 0) and reply.answer is not None, reply.stderr[-2000:]
    assert reply.answer["status"] == "ok", reply.answer["error"]
    return reply.answer


def _write(path: Path, array: np.ndarray) -> str:
    path.write_bytes(np.ascontiguousarray(array).tobytes())
    return str(path)


def _figure(value: float | str) -> float:
    return math.inf if value == "inf" else float(value)


def _out_arg(tmp_path: Path, name: str, dtype: DType, expected: np.ndarray, tol: Tolerance,
             **extra: Any) -> dict[str, Any]:
    return {
        "kind": "buffer", "name": name, "role": "out", "bytes": expected.size * dtype.itemsize,
        "output": str(tmp_path / f"{name}.out"), "init": "poison", "poison_byte": 255,
        "dtype": dtype.value, "expected": _write(tmp_path / f"{name}.expected", expected.astype("<f8")),
        "compare": thresholds(expected, tol).harness_compare(tol.rtol), **extra,
    }


def _copy_request(files: dict[str, Path], tmp_path: Path, dtype: DType, actual: np.ndarray, expected: np.ndarray,
                  tol: Tolerance, copy_elements: int, **case: Any) -> dict[str, Any]:
    nbytes = actual.size * dtype.itemsize
    args = [
        {"kind": "buffer", "name": "in", "role": "in", "bytes": nbytes, "input": _write(tmp_path / "in.bin", actual)},
        _out_arg(tmp_path, "out", dtype, expected, tol),
        {"kind": "scalar", "name": "n", "dtype": "uint64",
         "raw": (copy_elements * dtype.itemsize).to_bytes(8, "little").hex()},
    ]
    return _request(files, "copy_bytes", args, grid=1024, **case)


def _scenario(dtype: DType, scenario: str) -> tuple[np.ndarray, np.ndarray, int]:
    """(expected float64, what the output will hold, elements the kernel copies)."""
    rng = np.random.default_rng(zlib.crc32(f"{dtype.value}/{scenario}".encode()))
    if dtype.is_float:
        expected = rng.standard_normal(N_COMPARE) * 3.0
    else:
        expected = rng.integers(-1000, 1000, N_COMPARE).astype(np.float64)
    actual = expected.astype(dtype.numpy)  # rounded to the dtype: within tolerance
    copied = N_COMPARE
    if scenario == "wrong":
        for k, i in enumerate((5, 777_777, N_COMPARE - 1)):
            actual[i] = expected[i] + 10 + k
    elif scenario == "unwritten":
        copied = N_COMPARE - TAIL
        actual[copied:] = np.frombuffer(b"\xff" * (TAIL * dtype.itemsize), dtype=dtype.numpy)
    return expected, actual, copied


@pytest.mark.parametrize("scenario", ["match", "wrong", "unwritten"])
@pytest.mark.parametrize("dtype", [DType.float32, DType.float16, DType.bfloat16, DType.int32, DType.float64])
def test_device_compare_agrees_with_compare_py(
    proc: HarnessProcess, files: dict[str, Path], tmp_path: Path, dtype: DType, scenario: str
) -> None:
    expected, actual, copied = _scenario(dtype, scenario)
    tol = DEFAULT_TOLERANCE.get(dtype, EXACT)
    # The input file holds `actual` (poison bytes in the unwritten tail too, so the CPU side
    # sees exactly what the output buffer will hold); the kernel copies `copied` elements.
    answer = _run(proc, _copy_request(files, tmp_path, dtype, actual, expected, tol, copied))
    ref = compare("out", expected, actual, tol)
    assert ref.passed == (scenario == "match")  # the scenario is what it claims to be
    [c] = answer["cases"][0]["compares"]
    assert c["buffer"] == "out" and c["launch"] == "validation"
    assert c["elements"] == ref.elements == N_COMPARE
    assert c["mismatches"] == ref.mismatches
    assert c["nonfinite"] == ref.nonfinite
    assert c["first_mismatch"] == (ref.first_mismatches[0].index[0] if ref.first_mismatches else None)
    for key in ("max_abs_error", "max_rel_error"):
        got, want = _figure(c[key]), getattr(ref, key)
        assert got == want if math.isinf(want) else got == pytest.approx(want, rel=1e-12, abs=0), key
    if ref.nonfinite == 0:
        norm = thresholds(expected, tol).norm
        assert math.sqrt(c["err_sq"]) / norm == pytest.approx(ref.rel_l2_error, rel=1e-9, abs=1e-300)
    out = tmp_path / "out.out"
    assert c["output_written"] == out.exists() == (ref.mismatches > 0)
    if out.exists():
        assert out.read_bytes() == actual.tobytes()


def test_expected_values_are_cached_across_requests(
    proc: HarnessProcess, files: dict[str, Path], tmp_path: Path
) -> None:
    expected, actual, copied = _scenario(DType.float32, "wrong")
    request = _copy_request(files, tmp_path, DType.float32, actual, expected, DEFAULT_TOLERANCE[DType.float32], copied,
                            input_cache=True)
    first = _run(proc, request)
    second = _run(proc, request)
    assert first["input_cache"]["misses"] == 2  # the input and the expected values
    assert second["input_cache"]["hits"] == 2 and second["input_cache"]["misses"] == 0
    assert second["input_cache"]["resident_bytes"] >= N_COMPARE * (4 + 8)
    [a], [b] = first["cases"][0]["compares"], second["cases"][0]["compares"]
    assert b["mismatches"] == a["mismatches"] == 3 and b["first_mismatch"] == a["first_mismatch"] == 5
    assert b["max_abs_error"] == a["max_abs_error"] and b["max_rel_error"] == a["max_rel_error"]
    # err_sq is summed with atomics across blocks: equal up to the order of the additions
    assert b["err_sq"] == pytest.approx(a["err_sq"], rel=1e-12)


def test_a_deterministic_kernel_differs_in_no_byte(
    proc: HarnessProcess, files: dict[str, Path], tmp_path: Path
) -> None:
    expected, actual, copied = _scenario(DType.float32, "match")
    answer = _run(proc, _copy_request(files, tmp_path, DType.float32, actual, expected,
                                      DEFAULT_TOLERANCE[DType.float32], copied, repeat_validation=True))
    case = answer["cases"][0]
    assert case["status"] == "ok"
    assert case["determinism"] == [{"buffer": "out", "bytes_differ": 0, "first_offset": None}]
    assert [c["launch"] for c in case["compares"]] == ["validation", "repeat"]
    assert case["compares"][1]["mismatches"] == 0


def test_a_racy_float_reduction_is_caught_by_the_bitwise_diff(
    proc: HarnessProcess, files: dict[str, Path], tmp_path: Path
) -> None:
    n = 1_000_000
    rng = np.random.default_rng(7)
    # Magnitudes over six decades, so the rounding of the running sum depends on the order.
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(np.float32)
    args: list[dict[str, Any]] = [
        {"kind": "buffer", "name": "x", "role": "in", "bytes": 4 * n, "input": _write(tmp_path / "x.bin", x)},
        {"kind": "buffer", "name": "sum", "role": "out", "bytes": 4, "output": str(tmp_path / "sum.out"),
         "init": "zero"},
        {"kind": "scalar", "name": "n", "dtype": "int32", "raw": n.to_bytes(4, "little").hex()},
    ]
    request = _request(files, "sum_racy", args, grid=(n + 255) // 256, repeat_validation=True)
    differ = []
    for _ in range(5):  # the order of atomics varies from launch to launch; one difference suffices
        [det] = _run(proc, request)["cases"][0]["determinism"]
        assert det["buffer"] == "sum"
        differ.append(det["bytes_differ"])
        if det["bytes_differ"]:
            assert 0 <= det["first_offset"] < 4
            break
    assert any(differ), f"5 pairs of launches of a racy atomicAdd sum agreed bit for bit: {differ}"


@pytest.mark.parametrize("entry", ["twice", "twice_memo"])
def test_timed_inputs_catch_a_kernel_that_replays_its_first_answer(
    proc: HarnessProcess, files: dict[str, Path], tmp_path: Path, entry: str
) -> None:
    n = 4096
    rng = np.random.default_rng(11)
    x = rng.standard_normal(n).astype(np.float32)
    x_timed = (x + 1.0).astype(np.float32)  # every element differs: 2x is off by 2 everywhere
    tol = DEFAULT_TOLERANCE[DType.float32]
    expected = 2.0 * x.astype(np.float64)
    timed_expected = 2.0 * x_timed.astype(np.float64)
    args = [
        {"kind": "buffer", "name": "x", "role": "in", "bytes": 4 * n, "input": _write(tmp_path / "x.bin", x),
         "timed_input": _write(tmp_path / "x_timed.bin", x_timed)},
        _out_arg(tmp_path, "y", DType.float32, expected, tol,
                 timed_expected=_write(tmp_path / "y_timed.expected", timed_expected.astype("<f8"))),
        {"kind": "scalar", "name": "n", "dtype": "int32", "raw": n.to_bytes(4, "little").hex()},
    ]
    # Python sends the timed compare's tolerances in the same block; the timed expected values
    # have the same scale here, so one block fits both.
    answer = _run(proc, _request(files, entry, args, grid=n // 256, timing={"warmup": 2, "iterations": 5}))
    case = answer["cases"][0]
    assert case["status"] == "ok", case
    assert len(case["timing"]["times_ms"]) == 5
    assert case["timing"]["check_launch_ms"] > 0
    validation, timed = case["compares"]
    assert (validation["launch"], timed["launch"]) == ("validation", "timed")
    assert validation["mismatches"] == 0 and validation["output_written"] is False
    out = tmp_path / "y.out"
    if entry == "twice":
        assert timed["mismatches"] == 0 and not timed["output_written"] and not out.exists()
    else:
        assert timed["mismatches"] == n and timed["nonfinite"] == 0
        assert timed["output_written"] and timed["first_mismatch"] == 0
        assert timed["max_abs_error"] == pytest.approx(2.0, abs=1e-5)
        assert np.array_equal(np.fromfile(out, dtype="<f4"), 2.0 * x)  # the replayed answer
