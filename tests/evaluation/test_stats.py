"""Timing statistics on every vector in tests/fixtures/timings/ (recorded on an H200 where
the file is not named synthetic_*), checked against the standard library's independent
implementations, and the adaptive stopping rule replayed on them."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest

from kernelopt_mcp.evaluation.stats import (
    adaptive_should_stop,
    adaptive_stop_index,
    from_answer,
    rse_median,
    summarize,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "timings"
VECTORS = sorted(FIXTURES.glob("*.json"))


def load(path: Path) -> dict:
    data = json.loads(path.read_text())
    assert set(data) >= {"kernel", "times_ms", "flush_l2"}, f"{path.name}: not a timing fixture"
    return data


def test_there_are_synthetic_vectors() -> None:
    assert [p for p in VECTORS if p.name.startswith("synthetic_")]


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_summary_matches_the_standard_library(path: Path) -> None:
    data = load(path)
    t = data["times_ms"]
    s = summarize(t, warmup=3, flush_l2=data["flush_l2"])
    # statistics.quantiles(method="inclusive") is type-7 interpolation, NumPy's default
    q1, med, q3 = statistics.quantiles(t, n=4, method="inclusive")
    assert s.median_ms == pytest.approx(statistics.median(t), rel=1e-12)
    assert med == pytest.approx(s.median_ms, rel=1e-12)
    assert (s.q1_ms, s.q3_ms) == pytest.approx((q1, q3), rel=1e-12)
    assert s.iqr_ms == pytest.approx(q3 - q1, rel=1e-9, abs=1e-15)
    assert s.mean_ms == pytest.approx(statistics.fmean(t), rel=1e-12)
    assert s.stdev_ms == pytest.approx(statistics.stdev(t), rel=1e-9)
    assert s.cv == pytest.approx(statistics.stdev(t) / statistics.fmean(t), rel=1e-9)
    assert (s.min_ms, s.max_ms) == (min(t), max(t))
    assert s.samples == s.iterations == len(t)
    assert s.flush_l2 is data["flush_l2"] and s.warmup == 3
    expected_rse = 1.2533 * ((q3 - q1) / 1.349) / math.sqrt(len(t)) / statistics.median(t)
    assert s.rse_median == pytest.approx(expected_rse, rel=1e-9)
    assert s.noisy == (s.noisy_reason is not None)


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
@pytest.mark.parametrize("target", [0.01, 0.003, 0.0005])
def test_adaptive_replay_stops_at_the_first_checkpoint_under_target(path: Path, target: float) -> None:
    t = load(path)["times_ms"]
    first, batch = min(10, len(t)), 16  # the harness's rounds: max(iterations, 16)
    n, converged = adaptive_stop_index(t, target, first=first)
    checkpoints = list(range(first, len(t), batch)) + [len(t)]
    assert n in checkpoints
    for k in checkpoints[: checkpoints.index(n)]:
        assert rse_median(t[:k]) > target, f"should have stopped at {k}"
    if converged:
        assert rse_median(t[:n]) <= target
    else:
        assert n == len(t)


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_adaptive_caps(path: Path) -> None:
    t = load(path)["times_ms"]
    # an unreachable target: the sample cap decides
    cap = max(2, len(t) // 2)
    n, converged = adaptive_stop_index(t, 0.0, first=2, batch=5, max_samples=cap)
    assert (n, converged) == (cap, False)
    # the time cap: stops at the first checkpoint whose launches sum past max_ms
    max_ms = sum(t) / 3
    n, _ = adaptive_stop_index(t, 0.0, first=1, batch=1, max_ms=max_ms)
    assert sum(t[:n]) >= max_ms > sum(t[: n - 1])


def test_rounds_mirror_the_harness() -> None:
    from kernelopt_mcp.evaluation.stats import adaptive_round

    assert (adaptive_round(10), adaptive_round(16), adaptive_round(100)) == (16, 16, 100)
    # a target met exactly at the sample cap counts as converged (as in the harness)
    t = [1.0] * 20
    assert adaptive_stop_index(t, 0.01, first=20, max_samples=20) == (20, True)


def test_should_stop_rule() -> None:
    tight = [1.0, 1.001, 0.999, 1.0005, 0.9995] * 20
    assert adaptive_should_stop(tight, 0.01, elapsed_ms=0, max_ms=1e9, max_samples=10**6)
    spread = [1.0, 2.0, 3.0, 4.0]
    assert not adaptive_should_stop(spread, 0.01, elapsed_ms=0, max_ms=1e9, max_samples=10**6)
    assert adaptive_should_stop(spread, 0.01, elapsed_ms=1e9, max_ms=1e9, max_samples=10**6)
    assert adaptive_should_stop(spread, 0.01, elapsed_ms=0, max_ms=1e9, max_samples=4)
    # one sample or a zero median: the rse is unknown, never "converged"
    assert not adaptive_should_stop([1.0], 0.5, elapsed_ms=0, max_ms=1e9, max_samples=100)
    assert not adaptive_should_stop([0.0, 0.0, 0.0], 0.5, elapsed_ms=0, max_ms=1e9, max_samples=100)


def test_rse_formula_agrees_with_a_bootstrap() -> None:
    """sqrt(pi/2) * sigma / sqrt(n) is the median's standard error for normal samples."""
    t = np.asarray(load(FIXTURES / "synthetic_normal_1ms.json")["times_ms"])
    rng = np.random.default_rng(7)
    boots = np.median(rng.choice(t, size=(4000, t.size), replace=True), axis=1)
    bootstrap_rse = boots.std() / np.median(t)
    assert rse_median(t) == pytest.approx(bootstrap_rse, rel=0.3)


def test_noise_rule_on_synthetic_vectors() -> None:
    clean = summarize(load(FIXTURES / "synthetic_normal_1ms.json")["times_ms"])
    assert not clean.noisy and clean.noisy_reason is None
    drop = summarize(load(FIXTURES / "synthetic_bimodal_clock_drop.json")["times_ms"])
    assert drop.noisy and "IQR" in (drop.noisy_reason or "")
    few = summarize(load(FIXTURES / "synthetic_few_samples.json")["times_ms"])
    assert few.noisy and "sample" in (few.noisy_reason or "")
    # a tail of late launches moves the mean and the CV, not the median or the noise flag
    tail = summarize(load(FIXTURES / "synthetic_tiny_5us_tail.json")["times_ms"])
    assert not tail.noisy and tail.mean_ms > tail.median_ms


def test_rse_rule_alone_flags_a_short_run() -> None:
    # IQR/median 4.9% (under the 5% limit) over 5 samples: rse = 1.2533 * 0.049 / 1.349 / sqrt(5) = 2.04%
    s = summarize([0.9, 0.976, 1.0, 1.025, 1.1])
    assert s.rse_median is not None and s.rse_median > 0.02
    assert s.noisy and "rse" in (s.noisy_reason or "") and "IQR" not in (s.noisy_reason or "")


def test_bad_samples_are_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        summarize([])
    with pytest.raises(ValueError, match="finite"):
        summarize([1.0, float("nan")])
    with pytest.raises(ValueError, match="finite"):
        summarize([1.0, -0.5])


def test_one_sample_has_no_rse() -> None:
    s = summarize([0.25])
    assert s.rse_median is None and s.iqr_ms == 0 and s.stdev_ms == 0 and s.noisy
    json.loads(s.model_dump_json())  # serializable (no inf)


def test_from_answer_protocol_1_and_2() -> None:
    t = [0.1, 0.11, 0.1, 0.12, 0.1, 0.1]
    old = from_answer({"warmup": 2, "iterations": 6, "flush_l2": False, "times_ms": t})
    assert (old.mode, old.flush_l2, old.warmup, old.samples) == ("events", False, 2, 6)
    assert old.graph_batch is None and old.adaptive_converged is None
    new = from_answer({
        "warmup": 10, "iterations": 4, "flush_l2": True, "times_ms": t, "mode": "graph", "graph_batch": 64,
        "blocking": True, "launch_overhead_ms": 0.002, "adaptive": {"rse": 0.004, "converged": True, "samples": 6},
        "q1_ms": 0.1, "q3_ms": 0.1,
    })
    assert (new.mode, new.graph_batch, new.blocking, new.launch_overhead_ms) == ("graph", 64, True, 0.002)
    assert new.adaptive_converged is True and new.iterations == 4 and new.samples == 6
    assert new.blocking_timed_out is None
    spun_out = from_answer({"iterations": 6, "times_ms": [1.0] * 6, "blocking": True, "blocking_timed_out": True})
    assert spun_out.noisy and "blocking kernel timed out" in spun_out.noisy_reason
    with pytest.raises(ValueError):
        from_answer({"warmup": 1, "iterations": 0, "times_ms": []})


def test_the_net_median_takes_the_measured_floor_out() -> None:
    """net = median - the empty kernel's time measured the same way (what ncu's duration leaves
    out); never negative; absent where the harness measured no floor."""
    times = [0.125, 0.126, 0.124, 0.125, 0.127]
    with_floor = from_answer({"iterations": 5, "times_ms": times, "launch_overhead_ms": 0.0041})
    assert with_floor.median_ms == 0.125
    assert with_floor.net_median_ms == pytest.approx(0.125 - 0.0041)
    assert from_answer({"iterations": 5, "times_ms": times}).net_median_ms is None
    tiny = from_answer({"iterations": 3, "times_ms": [0.003, 0.003, 0.004], "launch_overhead_ms": 0.0045})
    assert tiny.net_median_ms == 0.0
