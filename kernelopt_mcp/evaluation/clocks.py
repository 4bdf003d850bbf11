"""GPU clocks, temperature, power and clock-throttle reasons, read through NVML.

A benchmark records one :class:`ClockSample` beside its times, so a slow result can be told
apart from a throttled GPU (a power cap, a thermal slowdown, clocks locked low). NVML comes
from ``nvidia-ml-py`` (module ``pynvml``), imported only when a sample is taken; where NVML is
missing (no driver, a CPU machine, a container without libnvidia-ml) the answer is ``None``
with the reason, never an exception.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any

from pydantic import BaseModel, Field

# Bit -> name of NVML's clocks event ("throttle") reasons (nvml.h, nvmlClocksEventReason*).
# "gpu_idle" and "applications_clocks_setting" are normal states, not slowdowns.
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
#: reasons that mean the GPU ran slower than it could (a benchmark taken under them is suspect)
SLOWDOWN_REASONS = frozenset({
    "sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
})

_init_lock = threading.Lock()
_initialized = False
# (pynvml module, device) -> (NVML handle, what does not change while the driver is loaded:
# identity, driver version, maximum clocks). A benchmark reads the clocks after every
# evaluation; looking the device up and asking for these again each time cost about a
# millisecond of host time per candidate.
_devices: dict[tuple[ModuleType, int | str], tuple[Any, dict[str, Any]]] = {}


class ClockSample(BaseModel):
    """One reading of a GPU's clocks and limits (NVML)."""

    nvml_index: int = Field(description="NVML's index of the device (may differ from the CUDA ordinal)")
    uuid: str | None = None
    name: str | None = None
    driver_version: str | None = Field(None, description="the display driver, e.g. 580.159.04")
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    max_memory_clock_mhz: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    throttle_reasons: list[str] = Field(
        default_factory=list, description="active clock event reasons, e.g. sw_power_cap, hw_thermal_slowdown"
    )

    @property
    def slowed_down(self) -> bool:
        """True when a power or thermal limit was holding the clocks down."""
        return any(r in SLOWDOWN_REASONS for r in self.throttle_reasons)

    def summary(self) -> str:
        parts = [f"SM {self.sm_clock_mhz}/{self.max_sm_clock_mhz} MHz",
                 f"mem {self.memory_clock_mhz}/{self.max_memory_clock_mhz} MHz"]
        if self.temperature_c is not None:
            parts.append(f"{self.temperature_c} C")
        if self.power_w is not None:
            parts.append(f"{self.power_w:.0f}/{self.power_limit_w or 0:.0f} W")
        parts.append("reasons: " + (", ".join(self.throttle_reasons) or "none"))
        return ", ".join(parts)


def decode_reasons(mask: int) -> list[str]:
    """Names of the bits set in an NVML clocks-event-reasons mask (unknown bits as hex)."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(f"unknown_0x{unknown:x}")
    return names


def _nvml() -> tuple[ModuleType | None, str | None]:
    """Import pynvml and initialize NVML once per process: (module, None) or (None, why not)."""
    global _initialized
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py (pynvml) is not installed: `pip install nvidia-ml-py`"
    with _init_lock:
        if not _initialized:
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
                return None, f"NVML is unavailable: {exc}"
            _initialized = True
    return pynvml, None


def _optional(error: type[Exception], fn: Any, *args: Any) -> Any:
    """One NVML query; None when this device or driver does not support it (``error``)."""
    try:
        return fn(*args)
    except error:
        return None


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def probe_clocks(device: int | str = 0) -> tuple[ClockSample | None, str | None]:
    """Read the clocks of ``device``: an NVML index, a CUDA UUID (with or without ``GPU-``)
    or a PCI bus id (``0000:19:00.0``).

    Returns:
        ``(sample, None)``, or ``(None, reason)`` when NVML or the device cannot be read.
    """
    nvml, why = _nvml()
    if nvml is None:
        return None, why
    err = nvml.NVMLError
    known = _devices.get((nvml, device))
    if known is None:
        try:
            if isinstance(device, int):
                handle = nvml.nvmlDeviceGetHandleByIndex(device)
            elif ":" in device:
                handle = nvml.nvmlDeviceGetHandleByPciBusId(device)
            else:
                uuid = device if device.startswith(("GPU-", "MIG-")) else f"GPU-{device}"
                handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
        except nvml.NVMLError as exc:
            return None, f"NVML has no device {device!r}: {exc}"
        get_max = nvml.nvmlDeviceGetMaxClockInfo
        index = _optional(err, nvml.nvmlDeviceGetIndex, handle)
        known = handle, {
            "nvml_index": device if isinstance(device, int) else (index if index is not None else -1),
            "uuid": _text(_optional(err, nvml.nvmlDeviceGetUUID, handle)),
            "name": _text(_optional(err, nvml.nvmlDeviceGetName, handle)),
            "driver_version": _text(_optional(err, nvml.nvmlSystemGetDriverVersion)),
            "max_sm_clock_mhz": _optional(err, get_max, handle, nvml.NVML_CLOCK_SM),
            "max_memory_clock_mhz": _optional(err, get_max, handle, nvml.NVML_CLOCK_MEM),
        }
        _devices[(nvml, device)] = known
    handle, fixed = known
    get_clock = nvml.nvmlDeviceGetClockInfo
    reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    mask = _optional(err, reasons_fn, handle) if reasons_fn else None
    power_mw = _optional(err, nvml.nvmlDeviceGetPowerUsage, handle)
    limit_mw = _optional(err, nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    return ClockSample(
        **fixed,
        sm_clock_mhz=_optional(err, get_clock, handle, nvml.NVML_CLOCK_SM),
        memory_clock_mhz=_optional(err, get_clock, handle, nvml.NVML_CLOCK_MEM),
        temperature_c=_optional(err, nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
        power_w=power_mw / 1000.0 if power_mw is not None else None,
        power_limit_w=limit_mw / 1000.0 if limit_mw is not None else None,
        throttle_reasons=decode_reasons(int(mask)) if mask is not None else [],
    ), None


def read_clocks(device: int | str = 0) -> ClockSample | None:
    """Like :func:`probe_clocks`, without the reason: ``None`` when NVML cannot be read."""
    return probe_clocks(device)[0]


def probe_device_clocks(device: Any) -> tuple[ClockSample | None, str | None]:
    """Clocks of a :class:`~kernelopt_mcp.evaluation.device.DeviceInfo`: found by its CUDA UUID, else its PCI
    bus id, else its ordinal (NVML's index order can differ from CUDA's, so that is the last
    resort)."""
    return probe_clocks(getattr(device, "uuid", None) or getattr(device, "pci_bus_id", None) or device.ordinal)
