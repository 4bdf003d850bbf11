"""A kernel per CUDA header family, and one on Hopper's arch-specific target, run on the GPU
through the real evaluation path (issue 16): WMMA (mma.h), cuda::pipeline and cuda::barrier
copies, cp.async primitives, a cooperative_groups reduce, fp8/fp16/bf16 round trips, and wgmma's
fence instructions compiled for sm_90a. Each workload's CUDA reference is checked against its
NumPy oracle first, so a header whose conversion or instruction is wrong fails here too.

The kernels are tests/header_kernels.py's; tests/compiler/test_headers.py compiles the same ones on CPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from header_kernels import GPU_CANDIDATES, write_workload

from kernelopt_mcp import Candidate, EvaluateOptions, HarnessProcess, Session, Settings, Status
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.cuda_headers import find_header_dirs
from kernelopt_mcp.errors import KerneloptError
from kernelopt_mcp.evaluation.device import DeviceInfo
from kernelopt_mcp.evaluation.evaluate import evaluate, prepare
from kernelopt_mcp.launch import LaunchSpec

pytestmark = pytest.mark.gpu

FAST = EvaluateOptions(warmup=2, iterations=10, timeout_s=60)


def _evaluate(proc: HarnessProcess, device: DeviceInfo, tmp_path: Path, family: str, arch: str | None = None) -> None:
    workload, source, launch, options = GPU_CANDIDATES[family]
    wl = find_workload(write_workload(tmp_path / "workloads", workload), Settings())
    with Session(wl, proc, device, workdir=tmp_path / "work", options=FAST, arch=arch) as ev:
        # the CUDA reference against the NumPy oracle on every case first
        prepare(ev, time_reference=True, oracle_on_all_cases=True)
        assert ev.reference_result is not None and ev.reference_result.ok, ev.reference_result
        result = evaluate(ev, Candidate(source, LaunchSpec.model_validate(launch), options, family.replace("/", "_")))
    assert result.status is Status.ok, result.message
    assert result.score_ms and result.score_ms > 0
    assert result.compile is not None
    if "-arch=sm_90a" in options or arch == "sm_90a":
        assert result.compile.arch == "sm_90a"


def test_the_wheels_alone_hold_every_header_family() -> None:
    """The H200 machine's fresh install: the headers come from the wheels, not a toolkit."""
    found = find_header_dirs(None, system=False)
    assert found.missing == (), found.missing_hint()


@pytest.mark.parametrize("family", sorted(f for f in GPU_CANDIDATES if f != "sm_90a"))
def test_a_kernel_per_header_family_passes_every_case(
    family: str, proc: HarnessProcess, device: DeviceInfo, tmp_path: Path
) -> None:
    _evaluate(proc, device, tmp_path, family)


def test_an_sm_90a_kernel_runs_on_hopper(proc: HarnessProcess, device: DeviceInfo, tmp_path: Path) -> None:
    """wgmma.fence / commit_group / wait_group, which ptxas takes only for sm_90a: through the
    candidate's compile option, and with the session's arch set to sm_90a (--arch sm_90a)."""
    if device.arch != "sm_90":
        pytest.skip(f"sm_90a code runs only on compute capability 9.0; this GPU is {device.arch}")
    _evaluate(proc, device, tmp_path / "option", "sm_90a")
    _evaluate(proc, device, tmp_path / "session", "sm_90a", arch="sm_90a")


def test_sm_90a_is_refused_on_other_gpus(proc: HarnessProcess, device: DeviceInfo, tmp_path: Path) -> None:
    if device.arch == "sm_90":
        pytest.skip("this GPU runs sm_90a code")
    wl = find_workload(write_workload(tmp_path, "hdr_copy"), Settings())
    with pytest.raises(KerneloptError, match=r"compute capability 9\.0"):
        Session(wl, proc, device, workdir=tmp_path / "work", arch="sm_90a")
