"""Calibration: the device's measured copy bandwidth and FP32 FMA rate, the bars that every
benchmark's roofline figures are quoted against (``kernelopt gpu --calibrate``).

Both are measured through the real harness with the same timing as any candidate (CUDA
events, warm-up, median of the measured launches), on kernels of our own:

- copy: a grid-stride ``float4`` copy of a buffer of ``max(8 x L2, 256 MiB)``; bandwidth =
  bytes read + bytes written per second, L2 flushed before each launch. A small odd-sized copy
  is run first and its output checked, so a broken kernel cannot report a fast copy.
- FMA: every thread runs 8 independent ``fmaf`` chains (enough instruction-level parallelism
  to hide the FMA latency at full occupancy); rate = 2 flops x FMAs per second.

The result is cached per device (UUID) and driver in ``<cache>/calibration/``; it is measured
again with ``force`` (``--calibrate --force``) or when NVML reports another display driver.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field, ValidationError

from ..compile_options import CompileLimits
from ..compiler import CompileCache, compile_kernel
from ..dtypes import DType, scalar_raw
from ..errors import HarnessError
from ..files import write_atomic
from .clocks import ClockSample, probe_device_clocks
from .device import DeviceInfo
from .harness import HarnessProcess, raise_for_request_error
from .protocol import (
    AnswerEnvelope,
    BufferArg,
    CaseAnswer,
    CaseRequest,
    HarnessAnswer,
    LaunchRequest,
    RunRequest,
    ScalarArg,
    TimingRequest,
)
from .roofline import Peaks, theoretical_fp32_flops, theoretical_tensor_flops
from .stats import TimingStats, from_answer

CALIBRATION_VERSION = 1
COPY_ENTRY, FMA_ENTRY = "ko_calib_copy", "ko_calib_fma"
FMA_CHAINS = 8
BLOCK = 256
BLOCKS_PER_SM = 8  # 2048 threads per SM: full occupancy on sm_80..sm_90
MIN_COPY_BYTES = 256 << 20

CALIBRATION_SOURCE = r"""
extern "C" __global__ void ko_calib_copy(const float4* __restrict__ src, float4* __restrict__ dst,
                                         unsigned long long n) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = src[i];
}

// 8 independent FMA chains per thread; a and b come from the host so nothing can be folded.
extern "C" __global__ void ko_calib_fma(float* __restrict__ out, int iterations, float a, float b) {
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    float x0 = t * 1e-9f, x1 = x0 + 1e-3f, x2 = x0 + 2e-3f, x3 = x0 + 3e-3f;
    float x4 = x0 + 4e-3f, x5 = x0 + 5e-3f, x6 = x0 + 6e-3f, x7 = x0 + 7e-3f;
    #pragma unroll 16
    for (int i = 0; i < iterations; ++i) {
        x0 = fmaf(x0, a, b); x1 = fmaf(x1, a, b); x2 = fmaf(x2, a, b); x3 = fmaf(x3, a, b);
        x4 = fmaf(x4, a, b); x5 = fmaf(x5, a, b); x6 = fmaf(x6, a, b); x7 = fmaf(x7, a, b);
    }
    out[t] = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7));
}
"""

ProgressFn = Callable[[str], None]


class Calibration(BaseModel):
    """Measured peaks of one device under one driver."""

    version: int = CALIBRATION_VERSION
    device_name: str
    device_uuid: str | None
    pci_bus_id: str | None = None
    driver_version: int = Field(description="CUDA driver API version, e.g. 13000")
    display_driver: str | None = Field(None, description="NVML's driver version, e.g. 580.159.04")
    arch: str
    measured_at: str = Field(description="UTC, ISO 8601")
    copy_buffer_bytes: int = Field(description="size of the copied buffer (read once, written once)")
    copy_bytes_per_s: float = Field(description="bytes read + bytes written per second (median launch)")
    copy_timing: TimingStats
    fma_flops_per_launch: float
    fma_flops_per_s: float = Field(description="FP32, 2 flops per FMA (median launch)")
    fma_timing: TimingStats
    theoretical_bytes_per_s: float | None = None
    theoretical_flops_per_s: float | None = None
    clocks: ClockSample | None = Field(None, description="clocks read right after the measurement")

    def peaks(self) -> Peaks:
        return Peaks(
            calibrated_bytes_per_s=self.copy_bytes_per_s, calibrated_flops_per_s=self.fma_flops_per_s,
            theoretical_bytes_per_s=self.theoretical_bytes_per_s, theoretical_flops_per_s=self.theoretical_flops_per_s,
        )

    def summary(self) -> str:
        return (
            f"{self.device_name}: copy {self.copy_bytes_per_s / 1e12:.2f} TB/s"
            + (f" ({100 * self.copy_bytes_per_s / self.theoretical_bytes_per_s:.0f}% of theoretical)"
               if self.theoretical_bytes_per_s else "")
            + f", FP32 FMA {self.fma_flops_per_s / 1e12:.1f} TFLOP/s"
            + (f" ({100 * self.fma_flops_per_s / self.theoretical_flops_per_s:.0f}% of theoretical)"
               if self.theoretical_flops_per_s else "")
        )


def device_peaks(device: DeviceInfo, calibration: Calibration | None) -> Peaks:
    """The peaks for roofline figures: calibrated where known, theoretical always (tensor-core
    peaks are theoretical only: nothing calibrates them)."""
    peaks = calibration.peaks() if calibration is not None else Peaks(
        theoretical_bytes_per_s=device.peak_memory_bandwidth_bytes_per_s,
        theoretical_flops_per_s=theoretical_fp32_flops(device.compute_capability, device.sm_count, device.clock_khz),
    )
    peaks.tensor_flops_per_s = theoretical_tensor_flops(device.compute_capability, device.sm_count, device.clock_khz)
    return peaks


def peaks_for(device: DeviceInfo, cache_root: Path) -> Peaks:
    """The device's peaks: its cached calibration where there is one, else theoretical figures."""
    return device_peaks(device, load_calibration(device, cache_root))


def cache_path(device: DeviceInfo, cache_root: Path) -> Path:
    """``<cache_root>/calibration/<uuid>-cuda<driver>.json`` (bus id or name without a UUID)."""
    ident = device.uuid or device.pci_bus_id or device.name
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", ident)
    return cache_root / "calibration" / f"{safe}-cuda{device.driver_version}.json"


def load_calibration(device: DeviceInfo, cache_root: Path, *, display_driver: str | None = None) -> Calibration | None:
    """The cached calibration of ``device``, or None when there is none (or it is stale:
    another calibration format, or ``display_driver`` given and different from the recorded one)."""
    path = cache_path(device, cache_root)
    try:
        cal = Calibration.model_validate_json(path.read_text())
    except (OSError, ValidationError, ValueError):
        return None
    if cal.version != CALIBRATION_VERSION or cal.device_uuid != device.uuid:
        return None
    if display_driver and cal.display_driver and display_driver != cal.display_driver:
        return None
    return cal


def calibrate(
    harness: HarnessProcess,
    device: DeviceInfo,
    cache_root: Path,
    *,
    force: bool = False,
    compile_cache: CompileCache | None = None,
    compile_limits: CompileLimits | None = None,
    progress: ProgressFn | None = None,
    timeout_s: float = 120.0,
) -> Calibration:
    """Return the device's calibration, measuring it (and caching it) unless a cached one fits.

    Raises:
        HarnessError: a calibration kernel failed or the harness answered outside its contract.
        DeviceUnavailable: no usable device.
    """
    say = progress or (lambda message: None)
    clocks = probe_device_clocks(device)[0]
    display_driver = clocks.driver_version if clocks else None
    if not force:
        cached = load_calibration(device, cache_root, display_driver=display_driver)
        if cached is not None:
            return cached
    compiled = compile_kernel(CALIBRATION_SOURCE, device.arch, [], cache=compile_cache, limits=compile_limits)
    if not compiled.ok or compiled.cubin is None:
        raise HarnessError(f"the calibration kernels did not compile: {compiled.summary()}")
    with tempfile.TemporaryDirectory(prefix="kernelopt-calibrate-") as tmp:
        work = Path(tmp)
        module = work / "calibrate.cubin"
        module.write_bytes(compiled.cubin)
        say("checking the copy kernel")
        _check_copy(harness, device, module, work, timeout_s)
        copy_bytes = -(-max(8 * device.l2_cache_bytes, MIN_COPY_BYTES) // 16) * 16
        say(f"measuring copy bandwidth ({copy_bytes / 2**20:.0f} MiB buffer)")
        copy_timing = _time_copy(harness, device, module, copy_bytes, timeout_s)
        say("measuring the FP32 FMA rate")
        fma_flops, fma_timing = _time_fma(harness, device, module, work, timeout_s)
    after = probe_device_clocks(device)[0]
    cal = Calibration(
        device_name=device.name, device_uuid=device.uuid, pci_bus_id=device.pci_bus_id,
        driver_version=device.driver_version,
        display_driver=sample.driver_version if (sample := after or clocks) else None,
        arch=device.arch, measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        copy_buffer_bytes=copy_bytes, copy_bytes_per_s=2 * copy_bytes / (copy_timing.median_ms * 1e-3),
        copy_timing=copy_timing, fma_flops_per_launch=fma_flops,
        fma_flops_per_s=fma_flops / (fma_timing.median_ms * 1e-3), fma_timing=fma_timing,
        theoretical_bytes_per_s=device.peak_memory_bandwidth_bytes_per_s,
        theoretical_flops_per_s=theoretical_fp32_flops(device.compute_capability, device.sm_count, device.clock_khz),
        clocks=after,
    )
    write_atomic(cache_path(device, cache_root), cal.model_dump_json(indent=1).encode())
    return cal


# --- requests --------------------------------------------------------------------------


def _grid(device: DeviceInfo) -> LaunchRequest:
    return LaunchRequest(grid=[device.sm_count * BLOCKS_PER_SM, 1, 1], block=[BLOCK, 1, 1], shared_bytes=0)


def _scalar(name: str, dtype: DType, value: float) -> ScalarArg:
    return ScalarArg(name=name, dtype=dtype.value, value=value, raw=scalar_raw(dtype, value).hex())


def _request(device: DeviceInfo, module: Path, entry: str, args: list[BufferArg | ScalarArg], *,
             flush_l2: bool, timing: TimingRequest | None) -> RunRequest:
    case = CaseRequest(name=entry, args=args, launch=_grid(device), timing=timing)
    return RunRequest(device=device.ordinal, module=str(module.resolve()), entry=entry, guard_bytes=65536,
                      flush_l2=flush_l2, cases=[case])


def _send(harness: HarnessProcess, request: RunRequest, timeout_s: float) -> CaseAnswer:
    """One request; the case answer when it ran cleanly, else HarnessError with the details."""
    reply = harness.request(request, timeout_s)
    entry = request.entry
    if reply.timed_out:
        raise HarnessError(f"calibration kernel {entry} did not finish within {timeout_s:.0f} s")
    raise_for_request_error(reply.parsed(AnswerEnvelope), reply.exit_code)
    answer = reply.parsed(HarnessAnswer)
    if answer is None or answer.status != "ok" or not answer.cases:
        raise HarnessError(f"calibration kernel {entry}: the harness answered {json.dumps(reply.answer)[:500]} "
                           f"(exit {reply.exit_code}; stderr: {reply.stderr[-300:]})")
    case = answer.cases[0]
    if case.status != "ok":
        raise HarnessError(f"calibration kernel {entry} failed: {case.status} {case.error}")
    return case


def _check_copy(harness: HarnessProcess, device: DeviceInfo, module: Path, work: Path, timeout_s: float) -> None:
    # odd, and more than twice as many float4s as the grid has threads: the grid-stride loop
    # runs three rounds, the last one partial
    n4 = 2 * device.sm_count * BLOCKS_PER_SM * BLOCK + 3
    data = np.arange(4 * n4, dtype="<f4")
    src, dst = work / "check_src.bin", work / "check_dst.bin"
    src.write_bytes(data.tobytes())
    args: list[BufferArg | ScalarArg] = [
        BufferArg(name="src", role="in", bytes=data.nbytes, input=str(src)),
        BufferArg(name="dst", role="out", bytes=data.nbytes, output=str(dst), init="poison", poison_byte=255),
        _scalar("n", DType.uint64, n4),
    ]
    _send(harness, _request(device, module, COPY_ENTRY, args, flush_l2=False, timing=None), timeout_s)
    if dst.read_bytes() != data.tobytes():
        raise HarnessError("the calibration copy kernel produced a wrong copy; its bandwidth would mean nothing")


def _time_copy(harness: HarnessProcess, device: DeviceInfo, module: Path, nbytes: int, timeout_s: float) -> TimingStats:
    # Both buffers are harness-initialised (no multi-GiB input file to write and upload); the
    # outputs are discarded: the copy itself was checked by _check_copy.
    args: list[BufferArg | ScalarArg] = [
        BufferArg(name="src", role="out", bytes=nbytes, output="/dev/null", init="zero"),
        BufferArg(name="dst", role="out", bytes=nbytes, output="/dev/null", init="poison", poison_byte=255),
        _scalar("n", DType.uint64, nbytes // 16),
    ]
    case = _send(harness, _request(device, module, COPY_ENTRY, args, flush_l2=True,
                                   timing=TimingRequest(warmup=5, iterations=40)), timeout_s)
    return _timing(case, COPY_ENTRY)


def _time_fma(harness: HarnessProcess, device: DeviceInfo, module: Path, work: Path,
              timeout_s: float) -> tuple[float, TimingStats]:
    threads = device.sm_count * BLOCKS_PER_SM * BLOCK
    iterations = 16_384  # ~1 ms per launch at ~65 TFLOP/s on 132 SMs
    out = work / "fma_out.bin"
    args: list[BufferArg | ScalarArg] = [
        BufferArg(name="out", role="out", bytes=threads * 4, output=str(out), init="poison", poison_byte=255),
        _scalar("iterations", DType.int32, iterations),
        _scalar("a", DType.float32, 0.9999999),
        _scalar("b", DType.float32, 1e-7),
    ]
    case = _send(harness, _request(device, module, FMA_ENTRY, args, flush_l2=False,
                                   timing=TimingRequest(warmup=3, iterations=30)), timeout_s)
    values = np.frombuffer(out.read_bytes(), dtype="<f4")
    if values.size != threads or not np.all(np.isfinite(values)):
        raise HarnessError("the calibration FMA kernel left non-finite or missing outputs")
    return 2.0 * FMA_CHAINS * iterations * threads, _timing(case, FMA_ENTRY)


def _timing(case: CaseAnswer, entry: str) -> TimingStats:
    if case.timing is None:
        raise HarnessError(f"calibration kernel {entry}: the harness returned no timing")
    try:
        stats = from_answer(case.timing)
    except ValueError:
        raise HarnessError(f"calibration kernel {entry}: the harness returned no times") from None
    if stats.median_ms <= 0:
        raise HarnessError(f"calibration kernel {entry}: median time {stats.median_ms} ms")
    return stats
