"""Fixtures every GPU test shares: the device's properties and a serve-mode harness."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelopt_mcp.evaluation.harness import HarnessProcess
from kernelopt_mcp.gpu import DeviceInfo, device_info


@pytest.fixture(scope="session")
def device(harness_binary: Path) -> DeviceInfo:
    return device_info(harness_binary, 0)


@pytest.fixture
def proc(harness_binary: Path) -> Iterator[HarnessProcess]:
    """A harness of its own for each test: a fault or a kill in one cannot leak into the next."""
    with HarnessProcess(harness_binary, 0) as p:
        yield p
