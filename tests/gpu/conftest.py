"""Fixtures every GPU test shares: the device's properties and a serve-mode harness."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelopt_mcp.evaluation.device import DeviceInfo, device_info
from kernelopt_mcp.evaluation.harness import HarnessProcess


@pytest.fixture(scope="session")
def device(harness_binary: Path) -> DeviceInfo:
    return device_info(harness_binary, 0)


@pytest.fixture
def proc(harness_binary: Path) -> Iterator[HarnessProcess]:
    """A harness of its own for each test: a fault or a kill in one cannot leak into the next."""
    with HarnessProcess(harness_binary, 0) as p:
        yield p


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With KERNELOPT_GPU_FAILURES set (scripts/device_gpu_tests.sh sets it), each failure's
    report is appended to that file as it happens (and with KERNELOPT_GPU_PROGRESS, a line per
    test with its outcome and duration): the device's time limit can kill pytest before
    its summary, and a failure nobody can read costs another device call."""
    progress = os.environ.get("KERNELOPT_GPU_PROGRESS")
    if progress and (report.when == "call" or report.outcome != "passed"):
        with open(progress, "a") as f:
            f.write(f"{report.outcome.upper()} {report.nodeid} ({report.when}) {report.duration:.1f} s\n")
    path = os.environ.get("KERNELOPT_GPU_FAILURES")
    if path and report.failed:
        with open(path, "a") as f:
            f.write(f"=== {report.nodeid} ({report.when}, {report.duration:.1f} s)\n{report.longreprtext}\n")
            if report.capstdout:
                f.write(f"--- stdout (last 4000 chars)\n{report.capstdout[-4000:]}\n")
            if report.capstderr:
                f.write(f"--- stderr (last 4000 chars)\n{report.capstderr[-4000:]}\n")
