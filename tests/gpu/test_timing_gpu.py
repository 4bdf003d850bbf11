"""Timing v2 on a real GPU: graph and blocking modes, L2 flushing, adaptive stopping, the launch
overhead floor, survival after faults and hangs, and the cuBLAS SGEMM baseline.

These run the real harness in serve mode (``HarnessProcess``) on kernels compiled with NVRTC.
Comparisons are between modes measured in the same process seconds apart, never against
absolute times, except where the protocol promises a bound (launch overhead < 10 us).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernelopt_mcp import HarnessProcess, Settings
from kernelopt_mcp.baselines import find_cublas, run_cublas_sgemm
from kernelopt_mcp.compiler import compile_kernel
from kernelopt_mcp.evaluation.device import DeviceInfo
from kernelopt_mcp.evaluation.support_module import support_module

pytestmark = pytest.mark.gpu

SOURCE = r"""
extern "C" __global__ void add(const float* a, const float* b, float* c, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

// Reads every float4 of x (grid-stride) and writes one partial sum per thread.
extern "C" __global__ void read_sum(const float4* x, float* out, unsigned n4) {
  unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
  float s = 0.f;
  for (unsigned i = tid; i < n4; i += gridDim.x * blockDim.x) {
    float4 v = x[i];
    s += v.x + v.y + v.z + v.w;
  }
  out[tid] = s;
}

// Busy-waits ns nanoseconds of %globaltimer in every thread: a kernel of known, stable length.
extern "C" __global__ void wait_ns(float* out, unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
  out[blockIdx.x * blockDim.x + threadIdx.x] = (float)(now - start);
}

// Writes 2^40 floats past its buffer: an illegal address.
extern "C" __global__ void fault(float* p) {
  *(volatile float*)(p + (1ull << 40)) = 1.f;
}

// Never returns while *flag is 0.
extern "C" __global__ void hang(volatile int* flag) {
  while (*flag == 0) {}
}
"""


@pytest.fixture(scope="module")
def module(device: DeviceInfo, tmp_path_factory: pytest.TempPathFactory) -> Path:
    result = compile_kernel(SOURCE, device.arch)
    assert result.ok and result.cubin, result.summary()
    path = tmp_path_factory.mktemp("timing") / "kernels.cubin"
    path.write_bytes(result.cubin)
    return path


@pytest.fixture(scope="module")
def support(device: DeviceInfo, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return support_module(device.arch, tmp_path_factory.mktemp("support"))


def _in(tmp: Path, name: str, array: np.ndarray) -> dict[str, Any]:
    path = tmp / f"{name}.bin"
    array.tofile(path)
    return {"kind": "buffer", "name": name, "role": "in", "bytes": array.nbytes, "input": str(path)}


def _out(tmp: Path, name: str, nbytes: int) -> dict[str, Any]:
    return {"kind": "buffer", "name": name, "role": "out", "bytes": nbytes, "output": str(tmp / f"{name}.out")}


def _scalar(name: str, dtype: str, value: int) -> dict[str, Any]:
    size = {"uint32": 4, "uint64": 8}[dtype]
    return {"kind": "scalar", "name": name, "dtype": dtype, "value": value, "raw": value.to_bytes(size, "little").hex()}


def _request(module: Path, entry: str, args: list[dict[str, Any]], grid: int, block: int,
             timing: dict[str, Any] | None, *, flush: bool = True, support: Path | None = None) -> dict[str, Any]:
    case: dict[str, Any] = {"name": entry, "args": args, "launch": {"grid": [grid, 1, 1], "block": [block, 1, 1]}}
    if timing is not None:
        case["timing"] = timing
    req: dict[str, Any] = {"protocol": 2, "device": 0, "module": str(module), "entry": entry,
                           "flush_l2": flush, "cases": [case]}
    if support is not None:
        req["support_module"] = str(support)
    return req


def _timing(proc: HarnessProcess, request: dict[str, Any], timeout_s: float = 120) -> dict[str, Any]:
    reply = proc.request(request, timeout_s)
    assert not reply.timed_out and reply.answer is not None, reply.stderr[-2000:]
    assert reply.answer["status"] == "ok", reply.answer
    case = reply.answer["cases"][0]
    assert case["status"] == "ok", case
    return case["timing"]


def _add_args(tmp: Path, n: int = 1024) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    return [_in(tmp, "a", a), _in(tmp, "b", b), _out(tmp, "c", 4 * n), _scalar("n", "uint32", n)]


def test_graph_timing_of_a_tiny_kernel_is_below_single_launch_events(
    proc: HarnessProcess, module: Path, tmp_path: Path
) -> None:
    args = _add_args(tmp_path)
    events = _timing(proc, _request(module, "add", args, 4, 256, {"warmup": 20, "iterations": 200}, flush=False))
    graph = _timing(proc, _request(module, "add", args, 4, 256,
                                   {"warmup": 20, "iterations": 200, "mode": "graph"}, flush=False))
    assert events["mode"] == "events" and events["graph_batch"] is None
    assert graph["mode"] == "graph" and 1 <= graph["graph_batch"] <= 1000
    # A ~2 us kernel: the graph is chosen to take >= 0.2 ms, so it holds many launches.
    assert graph["graph_batch"] >= 10, graph["graph_batch"]
    assert graph["median_ms"] < events["median_ms"], (graph["median_ms"], events["median_ms"])
    assert len(graph["times_ms"]) == 200
    assert graph["q1_ms"] <= graph["median_ms"] <= graph["q3_ms"]


def test_blocking_median_of_a_tiny_kernel_is_not_above_non_blocking(
    proc: HarnessProcess, module: Path, support: Path, tmp_path: Path
) -> None:
    args = _add_args(tmp_path)
    timing = {"warmup": 20, "iterations": 300}
    plain = _timing(proc, _request(module, "add", args, 4, 256, timing, flush=False, support=support))
    held = _timing(proc, _request(module, "add", args, 4, 256, {**timing, "blocking": True}, flush=False,
                                  support=support))
    assert plain["blocking"] is False and held["blocking"] is True
    assert held["blocking_timed_out"] is False
    # Holding the stream can only remove the host's launch gaps from the events' window, never add
    # time; a ~3.6 us kernel has no gap to remove on a fast host, so the two medians are equal up to
    # run-to-run noise: plain's interquartile range or 5% (one such run: 3.664 vs 3.584 us).
    noise = max(plain["q3_ms"] - plain["q1_ms"], 0.05 * plain["median_ms"])
    assert held["median_ms"] <= plain["median_ms"] + noise, (held["median_ms"], plain["median_ms"], noise)


def test_flush_makes_a_kernel_that_fits_in_l2_slower(
    proc: HarnessProcess, module: Path, device: DeviceInfo, support: Path, tmp_path: Path
) -> None:
    nbytes = 16 << 20
    assert nbytes < device.l2_cache_bytes // 2, "the test needs an L2 that holds 16 MB comfortably"
    x = np.ones(nbytes // 4, dtype=np.float32)
    grid, block = 4 * device.sm_count, 256
    args = [_in(tmp_path, "x", x), _out(tmp_path, "out", 4 * grid * block), _scalar("n4", "uint32", nbytes // 16)]
    # Blocking in both: without the flush (tens of microseconds of GPU work per sample) the
    # host's enqueue gap would land in the warm samples and hide what L2 saves.
    timing = {"warmup": 10, "iterations": 200, "blocking": True}
    cold = _timing(proc, _request(module, "read_sum", args, grid, block, timing, flush=True, support=support))
    warm = _timing(proc, _request(module, "read_sum", args, grid, block, timing, flush=False, support=support))
    assert not cold["blocking_timed_out"] and not warm["blocking_timed_out"]
    assert cold["flush_l2"] is True and warm["flush_l2"] is False
    # From DRAM vs from L2: flushing must cost at least 10% here.
    assert cold["median_ms"] > 1.1 * warm["median_ms"], (cold["median_ms"], warm["median_ms"])


def test_the_flush_by_reading_leaves_no_dirty_lines_for_the_kernel_to_write_back(
    proc: HarnessProcess, module: Path, device: DeviceInfo, support: Path, tmp_path: Path
) -> None:
    # c = a + b over 3 x 128 MB: everything L2 holds when it starts is evicted during it. After
    # the memset flush (no support module) those are dirty lines, written back inside the window
    # while the kernel streams its own reads and writes; after ko_flush_l2 (the support module's
    # read) they are clean, dropped for free. Measured on the H200: 126 us against 121.
    n = 1 << 25
    assert 4 * n >= 2 * device.l2_cache_bytes
    args = _add_args(tmp_path, n)
    timing = {"warmup": 10, "iterations": 100}
    by_read = _timing(proc, _request(module, "add", args, n // 256, 256, timing, support=support))
    by_memset = _timing(proc, _request(module, "add", args, n // 256, 256, timing))
    assert by_read["flush_l2"] is True and by_memset["flush_l2"] is True
    assert by_memset["median_ms"] > 1.02 * by_read["median_ms"], (by_memset["median_ms"], by_read["median_ms"])


def test_adaptive_converges_for_a_1ms_kernel(proc: HarnessProcess, module: Path, device: DeviceInfo,
                                             tmp_path: Path) -> None:
    grid, block = device.sm_count, 32
    args = [_out(tmp_path, "out", 4 * grid * block), _scalar("ns", "uint64", 1_000_000)]
    timing = {"warmup": 3, "iterations": 20, "adaptive": {"target_rse": 0.005, "max_ms": 20000, "max_iterations": 2000}}
    t = _timing(proc, _request(module, "wait_ns", args, grid, block, timing))
    adaptive = t["adaptive"]
    assert adaptive["converged"] is True, adaptive
    assert adaptive["rse"] <= 0.005
    assert adaptive["samples"] >= 20 and adaptive["samples"] == len(t["times_ms"])
    assert 0.9 < t["median_ms"] < 1.5, t["median_ms"]


def test_launch_overhead_is_positive_and_below_10us(
    proc: HarnessProcess, module: Path, support: Path, tmp_path: Path
) -> None:
    for mode in ("events", "graph"):
        t = _timing(proc, _request(module, "add", _add_args(tmp_path), 4, 256,
                                   {"warmup": 10, "iterations": 100, "mode": mode}, flush=False, support=support))
        overhead = t["launch_overhead_ms"]
        assert overhead is not None and 0 < overhead < 0.010, (mode, overhead)
    without = _timing(proc, _request(module, "add", _add_args(tmp_path), 4, 256, {"warmup": 1, "iterations": 5}))
    assert without["launch_overhead_ms"] is None  # no support module, no floor


def test_worker_survives_a_fault_and_a_hang(proc: HarnessProcess, module: Path, support: Path, tmp_path: Path) -> None:
    timing = {"warmup": 2, "iterations": 10, "mode": "graph", "blocking": True}
    fault = proc.request(_request(module, "fault", [_out(tmp_path, "p", 1024)], 1, 1, timing, support=support), 60)
    assert fault.answer is not None and fault.answer["cases"][0]["status"] == "runtime_error"
    assert fault.exit_code == 5
    t = _timing(proc, _request(module, "add", _add_args(tmp_path), 4, 256, timing, support=support))
    assert t["blocking"] is True and len(t["times_ms"]) == 10

    flag = np.zeros(1, dtype=np.int32)
    hang = proc.request(_request(module, "hang", [_in(tmp_path, "flag", flag)], 1, 1, timing, support=support), 5)
    assert hang.timed_out
    t = _timing(proc, _request(module, "add", _add_args(tmp_path), 4, 256, timing, support=support))
    assert t["mode"] == "graph" and len(t["times_ms"]) == 10


def test_cublas_sgemm_4096_reaches_30_tflops(proc: HarnessProcess, support: Path) -> None:
    library = find_cublas(Settings.from_env().cuda_home)  # CUDA_HOME, read as an entry point reads it
    if library is None:
        pytest.skip("cuBLAS not found (pip install nvidia-cublas, or set CUDA_HOME)")
    result = run_cublas_sgemm(
        proc, 4096, 4096, 4096, {"warmup": 5, "iterations": 20, "adaptive": {"target_rse": 0.01, "max_ms": 10000}},
        library_path=library, support_module=support,
    )
    assert result.result_ok is True
    assert result.library_version and result.library_version >= 12000
    assert result.tflops > 30, result
    assert result.launch_overhead_ms is not None and result.launch_overhead_ms > 0
