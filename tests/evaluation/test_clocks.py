"""Clock readings: NVML absent, NVML failing to initialize, and a stubbed pynvml module
(the only way to reach the GPU-only path on a CPU machine; the field mapping is what is tested)."""

from __future__ import annotations

import sys
import types

import pytest

from kernelopt_mcp.evaluation import clocks
from kernelopt_mcp.evaluation.clocks import decode_reasons, probe_clocks, read_clocks

UUID = "5f0c6a1e-0b7d-4c1a-9d2e-7a8b9c0d1e2f"


class NVMLError(Exception):
    pass


def stub_pynvml(*, init_error: str | None = None, unsupported: tuple[str, ...] = ()) -> types.ModuleType:
    """A pynvml stand-in for one H200 at NVML index 0, UUID ``GPU-<UUID>``, bus 0000:19:00.0."""
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM, m.NVML_TEMPERATURE_GPU = 1, 2, 0
    m.NVMLError = NVMLError
    handle = object()
    m.calls = []

    def api(name, fn):
        def wrapped(*args):
            m.calls.append(name)
            if name in unsupported:
                raise NVMLError("Not Supported")
            return fn(*args)
        setattr(m, name, wrapped)

    def init():
        if init_error:
            raise NVMLError(init_error)

    def by_index(i):
        if i != 0:
            raise NVMLError("Invalid Argument")
        return handle

    def by_uuid(u):
        if u != f"GPU-{UUID}":
            raise NVMLError("Not Found")
        return handle

    def by_bus(b):
        if b != "0000:19:00.0":
            raise NVMLError("Not Found")
        return handle

    api("nvmlInit", init)
    api("nvmlDeviceGetHandleByIndex", by_index)
    api("nvmlDeviceGetHandleByUUID", by_uuid)
    api("nvmlDeviceGetHandleByPciBusId", by_bus)
    api("nvmlDeviceGetIndex", lambda h: 0)
    api("nvmlDeviceGetUUID", lambda h: f"GPU-{UUID}")
    api("nvmlDeviceGetName", lambda h: b"NVIDIA H200")
    api("nvmlSystemGetDriverVersion", lambda: "580.159.04")
    api("nvmlDeviceGetClockInfo", lambda h, kind: {1: 1755, 2: 3201}[kind])
    api("nvmlDeviceGetMaxClockInfo", lambda h, kind: {1: 1980, 2: 3201}[kind])
    api("nvmlDeviceGetTemperature", lambda h, sensor: 61)
    api("nvmlDeviceGetPowerUsage", lambda h: 612_345)
    api("nvmlDeviceGetEnforcedPowerLimit", lambda h: 700_000)
    api("nvmlDeviceGetCurrentClocksEventReasons", lambda h: 0x4 | 0x40)
    return m


@pytest.fixture
def use_module(monkeypatch: pytest.MonkeyPatch):
    def install(module: types.ModuleType | None) -> None:
        monkeypatch.setitem(sys.modules, "pynvml", module)
        monkeypatch.setattr(clocks, "_initialized", False)
        monkeypatch.setattr(clocks, "_devices", {})
    return install


def test_without_nvidia_ml_py(use_module) -> None:
    use_module(None)  # `import pynvml` raises ImportError
    sample, why = probe_clocks(0)
    assert sample is None and "pip install nvidia-ml-py" in (why or "")
    assert read_clocks(0) is None


def test_nvml_library_missing(use_module) -> None:
    use_module(stub_pynvml(init_error="NVML Shared Library Not Found"))
    sample, why = probe_clocks(0)
    assert sample is None and "NVML is unavailable" in why and "Shared Library" in why


def test_a_reading_by_index(use_module) -> None:
    m = stub_pynvml()
    use_module(m)
    s = read_clocks(0)
    assert s is not None
    assert (s.sm_clock_mhz, s.max_sm_clock_mhz, s.memory_clock_mhz, s.max_memory_clock_mhz) == (1755, 1980, 3201, 3201)
    assert (s.temperature_c, s.power_w, s.power_limit_w) == (61, pytest.approx(612.345), 700.0)
    assert s.throttle_reasons == ["sw_power_cap", "hw_thermal_slowdown"] and s.slowed_down
    assert (s.name, s.uuid, s.driver_version, s.nvml_index) == ("NVIDIA H200", f"GPU-{UUID}", "580.159.04", 0)
    assert "1755/1980 MHz" in s.summary() and "sw_power_cap" in s.summary()
    again = read_clocks(0)
    assert again == s
    assert m.calls.count("nvmlInit") == 1  # initialized once per process
    # the device is looked up and described once; what moves is read on every sample
    assert m.calls.count("nvmlDeviceGetHandleByIndex") == 1 and m.calls.count("nvmlDeviceGetName") == 1
    assert m.calls.count("nvmlDeviceGetMaxClockInfo") == 2 and m.calls.count("nvmlSystemGetDriverVersion") == 1
    assert m.calls.count("nvmlDeviceGetClockInfo") == 4 and m.calls.count("nvmlDeviceGetPowerUsage") == 2


def test_by_cuda_uuid_and_bus_id(use_module) -> None:
    use_module(stub_pynvml())
    assert read_clocks(UUID) is not None  # the harness's UUID has no GPU- prefix
    assert read_clocks(f"GPU-{UUID}") is not None
    assert read_clocks("0000:19:00.0") is not None
    sample, why = probe_clocks("0000:aa:00.0")
    assert sample is None and "no device" in why
    sample, why = probe_clocks(3)
    assert sample is None and "Invalid Argument" in why


def test_by_device_info(use_module) -> None:
    from types import SimpleNamespace

    from kernelopt_mcp.evaluation.clocks import probe_device_clocks

    use_module(stub_pynvml())
    assert probe_device_clocks(SimpleNamespace(uuid=UUID, pci_bus_id=None, ordinal=5))[0] is not None
    assert probe_device_clocks(SimpleNamespace(uuid=None, pci_bus_id="0000:19:00.0", ordinal=5))[0] is not None
    sample, why = probe_device_clocks(SimpleNamespace(uuid=None, pci_bus_id=None, ordinal=5))
    assert sample is None and "no device 5" in why


def test_unsupported_queries_are_none(use_module) -> None:
    use_module(stub_pynvml(unsupported=(
        "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature", "nvmlDeviceGetCurrentClocksEventReasons",
    )))
    s = read_clocks(0)
    assert s is not None and s.sm_clock_mhz == 1755
    assert s.power_w is None and s.temperature_c is None and s.throttle_reasons == [] and not s.slowed_down


def test_older_pynvml_throttle_name(use_module) -> None:
    m = stub_pynvml()
    m.nvmlDeviceGetCurrentClocksThrottleReasons = m.nvmlDeviceGetCurrentClocksEventReasons
    del m.nvmlDeviceGetCurrentClocksEventReasons
    use_module(m)
    assert read_clocks(0).throttle_reasons == ["sw_power_cap", "hw_thermal_slowdown"]


def test_decode_reasons() -> None:
    assert decode_reasons(0) == []
    assert decode_reasons(0x1) == ["gpu_idle"]
    assert decode_reasons(0x88) == ["hw_slowdown", "hw_power_brake_slowdown"]
    assert decode_reasons(0x1000 | 0x4) == ["sw_power_cap", "unknown_0x1000"]


def test_the_real_nvidia_ml_py_without_a_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine without libnvidia-ml (CI), the real bindings give None and the reason."""
    pynvml = pytest.importorskip("pynvml")
    from kernelopt_mcp.evaluation.device import cuda_device_count

    if cuda_device_count():
        pytest.skip("this machine has a GPU: tests/gpu/test_calibrate_gpu.py reads its clocks")
    monkeypatch.setitem(sys.modules, "pynvml", pynvml)
    monkeypatch.setattr(clocks, "_initialized", False)
    sample, why = probe_clocks(0)
    assert sample is None and why.startswith("NVML is unavailable")
