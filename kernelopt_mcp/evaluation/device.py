"""GPU properties, read by the native harness (``kernelopt-harness --device-info``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ..errors import DeviceUnavailable, HarnessError
from ..launch import DeviceLimits
from .harness import ExitCode, run_once
from .protocol import AnswerEnvelope, parse_answer


class DeviceInfo(BaseModel):
    """The properties a kernel author needs, straight from the CUDA driver."""

    model_config = ConfigDict(extra="allow")

    ordinal: int
    device_count: int
    name: str
    uuid: str | None = None
    pci_bus_id: str | None = None
    compute_capability: tuple[int, int]
    arch: str = Field(description="NVRTC target, e.g. sm_90")
    sm_count: int
    clock_khz: int | None = None
    memory_clock_khz: int | None = None
    memory_bus_width_bits: int | None = None
    total_memory_bytes: int
    l2_cache_bytes: int
    persisting_l2_max_bytes: int | None = None
    shared_memory_per_sm_bytes: int | None = None
    shared_memory_per_block_bytes: int
    shared_memory_per_block_optin_bytes: int
    registers_per_sm: int | None = None
    registers_per_block: int | None = None
    max_threads_per_block: int
    max_threads_per_sm: int | None = None
    max_blocks_per_sm: int | None = None
    warp_size: int
    max_block_dim: tuple[int, int, int]
    max_grid_dim: tuple[int, int, int]
    ecc_enabled: bool | None = None
    driver_version: int
    driver_version_str: str
    peak_memory_bandwidth_bytes_per_s: float | None = Field(
        description="theoretical DRAM bandwidth from clock and bus width (measured copy is lower)"
    )

    @property
    def limits(self) -> DeviceLimits:
        return DeviceLimits(
            max_threads_per_block=self.max_threads_per_block,
            max_block_dim=self.max_block_dim,
            max_grid_dim=self.max_grid_dim,
            max_shared_bytes_per_block_optin=self.shared_memory_per_block_optin_bytes,
            sm_count=self.sm_count,
        )

    def summary(self) -> str:
        return (
            f"{self.name} ({self.arch}, {self.sm_count} SMs, "
            f"{self.total_memory_bytes / 2**30:.0f} GiB, L2 {self.l2_cache_bytes / 2**20:.0f} MiB, "
            f"driver {self.driver_version_str})"
        )


@lru_cache(maxsize=8)
def device_info(harness: Path, device: int = 0) -> DeviceInfo:
    """Query the device through the harness (cached per process).

    Raises:
        DeviceUnavailable: no driver or no such device.
        HarnessError: the harness answered outside its contract.
    """
    code, answer, stderr = run_once(harness, ["--device-info", "--device", str(device)])
    if code == ExitCode.DRIVER_UNAVAILABLE:
        error = parse_answer(answer, AnswerEnvelope).error if answer else None
        message = (error.message if error else "") or stderr.strip()
        raise DeviceUnavailable(
            f"no usable CUDA device: {message} (check `nvidia-smi`; compiling needs no GPU: "
            "`kernelopt compile --arch sm_90 FILE`)"
        )
    if code != ExitCode.OK or not answer:
        raise HarnessError(f"kernelopt-harness --device-info failed (exit {code}): {stderr.strip()[-500:]}")
    return DeviceInfo.model_validate(answer)


def cuda_device_count() -> int:
    """CUDA devices visible through the driver (cuInit + cuDeviceGetCount); 0 without one.

    Used to decide whether GPU work is possible at all; it never raises.
    """
    try:
        from cuda.bindings import driver
    except ImportError:
        return 0
    try:
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return 0
        err, count = driver.cuDeviceGetCount()
        return int(count) if err == driver.CUresult.CUDA_SUCCESS else 0
    except Exception:  # no libcuda.so.1 at all
        return 0
