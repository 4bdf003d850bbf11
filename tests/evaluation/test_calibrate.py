"""Calibration without a GPU: a stand-in harness that runs the two calibration kernels'
semantics in NumPy and reports times of a pretend 4.0 TB/s, 50 TFLOP/s device; the cache, the
force flag, a broken copy kernel, and the CLI."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kernelopt_mcp.cli import main
from kernelopt_mcp.compiler import CompileCache
from kernelopt_mcp.errors import HarnessError
from kernelopt_mcp.evaluation.calibrate import (
    Calibration,
    cache_path,
    calibrate,
    device_peaks,
    load_calibration,
)
from kernelopt_mcp.evaluation.device import DeviceInfo
from kernelopt_mcp.evaluation.harness import HarnessProcess

DEVICE = {
    "ordinal": 0, "device_count": 1, "name": "NVIDIA H200 (fake)", "uuid": "5f0c6a1e-0b7d-4c1a-9d2e-7a8b9c0d1e2f",
    "pci_bus_id": "0000:19:00.0", "compute_capability": [9, 0], "arch": "sm_90", "sm_count": 132,
    "clock_khz": 1980000, "memory_clock_khz": 3201000, "memory_bus_width_bits": 6144,
    "total_memory_bytes": 150754820096, "l2_cache_bytes": 52428800, "shared_memory_per_block_bytes": 49152,
    "shared_memory_per_block_optin_bytes": 232448, "max_threads_per_block": 1024, "warp_size": 32,
    "max_block_dim": [1024, 1024, 64], "max_grid_dim": [2147483647, 65535, 65535], "driver_version": 13000,
    "driver_version_str": "13.0", "peak_memory_bandwidth_bytes_per_s": 4.9e12,
}

FAKE = r'''
import json, os, struct, sys
import numpy as np
DEVICE = json.loads(os.environ["KO_CAL_DEVICE"])
if sys.argv[1:2] == ["--device-info"]:
    print(json.dumps(DEVICE)); sys.exit(0)
for line in sys.stdin:
    req = json.loads(line)
    with open(os.environ["KO_CAL_LOG"], "a") as log:
        log.write(req["entry"] + "\n")
    case = req["cases"][0]
    args = {a["name"]: a for a in case["args"]}
    raw = lambda name, fmt: struct.unpack(fmt, bytes.fromhex(args[name]["raw"]))[0]
    result = {"name": case["name"], "status": "ok", "error": None, "guard_violations": [], "modified_inputs": []}
    timing = case.get("timing")
    if req["entry"] == "ko_calib_copy":
        n = raw("n", "<Q")
        assert args["src"]["bytes"] == args["dst"]["bytes"] == 16 * n
        if args["src"]["role"] == "in":
            grid, block = case["launch"]["grid"][0], case["launch"]["block"][0]
            assert 2 * grid * block < n < 3 * grid * block  # the check exercises the grid-stride loop
            data = open(args["src"]["input"], "rb").read()
            if os.environ.get("KO_CAL_BROKEN"):
                data = data[:-4] + b"\0\0\0\0"
            open(args["dst"]["output"], "wb").write(data)
        seconds = 2 * 16 * n / 4.0e12
    else:
        threads = args["out"]["bytes"] // 4
        grid, block = case["launch"]["grid"][0], case["launch"]["block"][0]
        assert threads == grid * block
        np.ones(threads, dtype="<f4").tofile(args["out"]["output"])
        seconds = 2 * 8 * raw("iterations", "<i") * threads / 50e12
    if timing:
        ms = seconds * 1e3
        result["timing"] = {"warmup": timing["warmup"], "iterations": timing["iterations"],
                            "flush_l2": req["flush_l2"],
                            "times_ms": [ms * (1 + 0.002 * (i % 5 - 2)) for i in range(timing["iterations"])]}
    print(json.dumps({"protocol": 1, "status": "ok", "error": None, "cases": [result]}), flush=True)
'''


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "fake_cal.py"
    script.write_text(FAKE)
    wrapper = tmp_path / "kernelopt-harness-cal"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("KO_CAL_DEVICE", json.dumps(DEVICE))
    monkeypatch.setenv("KO_CAL_LOG", str(tmp_path / "requests.log"))
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML here, whatever is installed
    return wrapper


def requests_made(tmp_path: Path) -> list[str]:
    log = tmp_path / "requests.log"
    return log.read_text().split() if log.exists() else []


def test_calibrate_measures_and_caches(fake: Path, tmp_path: Path) -> None:
    device = DeviceInfo.model_validate(DEVICE)
    cache = tmp_path / "cache"
    with HarnessProcess(fake) as proc:
        cal = calibrate(proc, device, cache, compile_cache=CompileCache())
    assert requests_made(tmp_path) == ["ko_calib_copy", "ko_calib_copy", "ko_calib_fma"]
    # >= 8x the 50 MiB L2, read and written
    assert cal.copy_buffer_bytes == 8 * DEVICE["l2_cache_bytes"]
    assert cal.copy_bytes_per_s == pytest.approx(4.0e12, rel=0.01)
    assert cal.fma_flops_per_s == pytest.approx(50e12, rel=0.01)
    assert cal.copy_timing.flush_l2 and not cal.fma_timing.flush_l2
    assert cal.theoretical_flops_per_s == pytest.approx(66.9e12, rel=1e-3)
    assert cal.device_uuid == DEVICE["uuid"] and cal.clocks is None
    assert "4.00 TB/s" in cal.summary() and "50.0 TFLOP/s" in cal.summary()
    path = cache_path(device, cache)
    assert path.exists() and DEVICE["uuid"] in path.name and "cuda13000" in path.name
    assert load_calibration(device, cache) == cal

    # the second call reads the cache: no request reaches the harness
    with HarnessProcess(fake) as proc:
        again = calibrate(proc, device, cache)
    assert again == cal and len(requests_made(tmp_path)) == 3
    # force measures again
    with HarnessProcess(fake) as proc:
        forced = calibrate(proc, device, cache, force=True)
    assert len(requests_made(tmp_path)) == 6 and forced.measured_at >= cal.measured_at


def test_cache_is_per_device_and_driver(tmp_path: Path) -> None:
    device = DeviceInfo.model_validate(DEVICE)
    cal = _stored(device, tmp_path)
    assert load_calibration(device, tmp_path) == cal
    assert load_calibration(device.model_copy(update={"driver_version": 13010}), tmp_path) is None
    assert load_calibration(device.model_copy(update={"uuid": "00000000-0000-0000-0000-000000000000"}),
                            tmp_path) is None
    # NVML saw another display driver than the one recorded: stale
    assert load_calibration(device, tmp_path, display_driver="590.01") is None
    assert load_calibration(device, tmp_path, display_driver="580.159.04") == cal
    # a damaged file is no calibration (and is replaced by the next one)
    cache_path(device, tmp_path).write_text("{not json")
    assert load_calibration(device, tmp_path) is None


def test_peaks_with_and_without_calibration(tmp_path: Path) -> None:
    device = DeviceInfo.model_validate(DEVICE)
    bare = device_peaks(device, None)
    assert bare.calibrated_bytes_per_s is None and bare.theoretical_bytes_per_s == 4.9e12
    assert bare.theoretical_flops_per_s == pytest.approx(66.9e12, rel=1e-3)
    peaks = device_peaks(device, _stored(device, tmp_path))
    assert peaks.calibrated_bytes_per_s == 4.1e12 and peaks.floor_bytes_per_s == 4.9e12
    # tensor-core peaks are theoretical with or without a calibration (132 SMs x 4096 x 1.98 GHz)
    assert bare.tensor_flops_per_s == peaks.tensor_flops_per_s
    assert peaks.floor_flops_per_s("float") == pytest.approx(1070.6e12, rel=1e-3)


def test_a_wrong_copy_is_an_error(fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KO_CAL_BROKEN", "1")
    with HarnessProcess(fake) as proc, pytest.raises(HarnessError, match="wrong copy"):
        calibrate(proc, DeviceInfo.model_validate(DEVICE), tmp_path / "cache")
    assert requests_made(tmp_path) == ["ko_calib_copy"]
    assert not (tmp_path / "cache" / "calibration").exists()


def test_cli_calibrate(fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    assert main(["gpu", "--calibrate", "--json", "--harness", str(fake)]) == 0
    cal = Calibration.model_validate_json(capsys.readouterr().out)
    assert cal.copy_bytes_per_s == pytest.approx(4.0e12, rel=0.01)
    assert main(["gpu", "--calibrate", "--harness", str(fake)]) == 0
    out = capsys.readouterr().out
    assert "copy bandwidth" in out and "4.00 TB/s" in out and "FP32 FMA rate" in out and "--force" in out
    assert len(requests_made(tmp_path)) == 3  # the table came from the cache
    assert main(["gpu", "--calibrate", "--force", "--json", "--harness", str(fake)]) == 0
    assert len(requests_made(tmp_path)) == 6
    assert main(["gpu", "--force", "--harness", str(fake)]) == 2
    assert "--force only applies to --calibrate" in capsys.readouterr().err


def _stored(device: DeviceInfo, cache_root: Path) -> Calibration:
    from kernelopt_mcp.evaluation.stats import summarize

    cal = Calibration(
        device_name=device.name, device_uuid=device.uuid, driver_version=device.driver_version,
        display_driver="580.159.04", arch=device.arch, measured_at="2026-11-29T22:00:00Z",
        copy_buffer_bytes=1 << 30, copy_bytes_per_s=4.1e12, copy_timing=summarize([0.5] * 10),
        fma_flops_per_launch=1e11, fma_flops_per_s=60e12, fma_timing=summarize([1.6] * 10),
        theoretical_bytes_per_s=4.9e12, theoretical_flops_per_s=66.9e12,
    )
    path = cache_path(device, cache_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(cal.model_dump_json())
    return cal
