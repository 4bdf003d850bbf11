"""Calibration and the roofline on a real GPU (figures for an H200: 4.8 TB/s HBM3e, 132 SMs).

Run: python -m pytest --run-gpu tests/gpu/test_calibrate_gpu.py
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from kernelopt_mcp import Candidate, HarnessProcess, LaunchSpec, Session, Settings
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.evaluation.calibrate import (
    cache_path,
    calibrate,
    device_peaks,
    load_calibration,
)
from kernelopt_mcp.evaluation.device import DeviceInfo
from kernelopt_mcp.evaluation.evaluate import case_request
from kernelopt_mcp.evaluation.harness import HarnessReply
from kernelopt_mcp.evaluation.protocol import HarnessRequest, TimingRequest
from kernelopt_mcp.evaluation.roofline import case_cost, case_roofline
from kernelopt_mcp.evaluation.stats import from_answer

pytestmark = pytest.mark.gpu


class CountingHarness(HarnessProcess):
    """The real harness, counting the requests it is sent."""

    requests = 0

    def request(
        self, payload: HarnessRequest | Mapping[str, Any], timeout_s: float,
        case_timeouts: Sequence[float] | None = None,
    ) -> HarnessReply:
        self.requests += 1
        return super().request(payload, timeout_s, case_timeouts)


def test_calibration_on_an_h200_and_its_cache(harness_binary: Path, device: DeviceInfo, tmp_path: Path) -> None:
    if "H200" not in device.name:
        pytest.skip(f"the bounds below are an H200's; this is a {device.name}")
    with CountingHarness(harness_binary, 0) as proc:
        cal = calibrate(proc, device, tmp_path, force=True)
        assert proc.requests == 3  # check copy, time copy, time FMA
    print(cal.summary(), cal.clocks.summary() if cal.clocks else "(no NVML)")
    assert 3.0e12 <= cal.copy_bytes_per_s <= 4.9e12, cal.summary()
    assert 40e12 <= cal.fma_flops_per_s <= 70e12, cal.summary()
    assert cal.copy_buffer_bytes >= 8 * device.l2_cache_bytes
    assert not cal.copy_timing.noisy and not cal.fma_timing.noisy, (cal.copy_timing, cal.fma_timing)
    assert cache_path(device, tmp_path).exists()
    assert load_calibration(device, tmp_path) == cal
    # the second call is answered from the cache: no request reaches the harness
    with CountingHarness(harness_binary, 0) as proc:
        again = calibrate(proc, device, tmp_path)
        assert proc.requests == 0
    assert again == cal


def test_clocks_through_nvml(device: DeviceInfo) -> None:
    """nvidia-ml-py is a dependency: on a GPU machine the clocks must be readable, by CUDA UUID."""
    from kernelopt_mcp.evaluation.clocks import probe_clocks

    sample, why = probe_clocks(device.uuid or 0)
    assert sample is not None, why
    print(sample.summary())
    assert sample.uuid == f"GPU-{device.uuid}" and sample.name == device.name
    assert 0 < (sample.sm_clock_mhz or 0) <= (sample.max_sm_clock_mhz or 0)
    assert 0 < (sample.memory_clock_mhz or 0) <= (sample.max_memory_clock_mhz or 0)
    assert sample.temperature_c is not None and 10 <= sample.temperature_c <= 100
    assert sample.power_w is not None and sample.power_w > 0


def test_impossible_flag_fires_for_a_kernel_that_does_nothing(
    harness_binary: Path, device: DeviceInfo, tmp_path: Path
) -> None:
    """vector_add 2^25 (400 MB moved): the reference sits above the floor, an empty kernel far below."""
    with HarnessProcess(harness_binary, 0) as proc:
        cal = calibrate(proc, device, tmp_path / "cache")
        peaks = device_peaks(device, cal)
        wl = find_workload("vector_add", Settings())
        case = wl.spec.case("n_2e25")
        wl.spec = wl.spec.model_copy(update={"cases": [case]})  # the 2^27 case's inputs are not needed
        launch = LaunchSpec.model_validate({"grid": ["ceil_div(n, 256)"], "block": [256]})
        # one warp: a do-nothing kernel on the workload's grid (131072 empty blocks) still takes
        # ~80 us on an H200 just to schedule, which is as long as the honest kernel's floor
        nothing = Candidate(
            'extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {}',
            LaunchSpec.model_validate({"grid": [1], "block": [32]}),
        )
        honest = Candidate(wl.reference_cu or "", wl.spec.reference.launch or launch, [], "reference")
        with Session(wl, proc, device, workdir=tmp_path / "work") as ev:
            figures = {}
            for cand in (honest, nothing):
                replay = case_request(ev, cand, case.name, tmp_path / cand.name, timing=True)
                request = replay.request
                assert request is not None, replay.problem
                request.cases[0].timing = TimingRequest(warmup=3, iterations=30)
                reply = proc.request(request, 120)
                assert reply.answer is not None, reply.stderr
                timing = from_answer(reply.answer["cases"][0]["timing"])
                bytes_, flops = case_cost(wl, case)
                figures[cand.name] = case_roofline(
                    case.name, timing.median_ms, bytes_=bytes_, flops=flops, peaks=peaks, flush_l2=timing.flush_l2
                )
    print(json.dumps({k: v.model_dump() for k, v in figures.items()}, indent=1))
    assert not figures["reference"].impossible and figures["reference"].of_floor >= 1 / 1.15
    assert figures["candidate"].impossible and figures["candidate"].bound == "memory"
