"""Precision-based stopping on a real GPU (issue 17): search's default rule times fewer launches
than the seed's 10 + 100 where the kernel is quiet, agrees with the count's median, and keeps
every integrity check (the checked launches land inside the first round)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kernelopt_mcp import EvaluateOptions, HarnessProcess, Session, Settings, Status
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.evaluation.candidate import PRECISION_MIN_ITERATIONS, PRECISION_RSE, initial_candidate
from kernelopt_mcp.evaluation.device import DeviceInfo
from kernelopt_mcp.evaluation.evaluate import evaluate, prepare

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", ["sgemm", "softmax"])
def test_precision_stops_early_agrees_with_the_count_and_keeps_the_checks(
    name: str, proc: HarnessProcess, device: DeviceInfo, tmp_path: Path
) -> None:
    wl = find_workload(name, Settings())
    count = EvaluateOptions()
    precision = replace(count, stop="precision")
    with Session(wl, proc, device, workdir=tmp_path, options=count) as ev:
        prepare(ev)
        by_count = evaluate(ev, initial_candidate(wl), count)
        by_precision = evaluate(ev, initial_candidate(wl), precision)
    assert by_count.status is Status.ok and by_precision.status is Status.ok, (by_count.message, by_precision.message)
    # the same checks in force; only the hidden-launch line says the precision rule's rounds add checks
    assert len(by_precision.checks) == len(by_count.checks)
    differ = [(a, b) for a, b in zip(by_count.checks, by_precision.checks, strict=True) if a != b]
    assert all("hidden timed launches" in a and "each later round" in b for a, b in differ), differ
    pairs = [(a, b) for a in by_count.cases for b in by_precision.cases if a.name == b.name and a.timing and b.timing]
    assert pairs
    for a, b in pairs:
        assert a.timing.samples == 100 and PRECISION_MIN_ITERATIONS <= b.timing.samples <= 100
        # either it reached the target or it spent the whole budget
        assert b.timing.adaptive_converged or b.timing.samples == 100, b.timing
        if b.timing.adaptive_converged:
            assert b.timing.rse_median is not None and b.timing.rse_median <= PRECISION_RSE
        # the hidden checks all ran: the count's, plus one in each later round that ran
        later = -(-(b.timing.samples - PRECISION_MIN_ITERATIONS) // PRECISION_MIN_ITERATIONS)
        assert b.checked_launches == a.checked_launches + later, (b.checked_launches, b.timing.samples)
        # same kernel, same session: the medians agree within the noise both report (2% at least)
        tolerance = max(0.02, 4 * max(a.timing.rse_median or 0.0, b.timing.rse_median or 0.0))
        assert abs(b.timing.median_ms / a.timing.median_ms - 1) <= tolerance, (
            a.name, a.timing.median_ms, b.timing.median_ms)
    print({b.name: (b.timing.samples, b.timing.rse_median, a.timing.median_ms, b.timing.median_ms) for a, b in pairs})
