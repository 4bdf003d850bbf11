"""The fresh-versus-seen timing check of ``fresh_launches`` (issue 14's cost): with a hidden
subset of measured launches redrawn and the rest reusing the last draw, a kernel that reuses
results on inputs it has seen is fast only on the reused launches. These tests feed
``split_problem`` timing samples shaped like real ones (noise, outliers, drift, two clock
states) and check that honest kernels are never flagged and caches that pay are."""

from __future__ import annotations

import numpy as np
import pytest

from kernelopt_mcp.evaluation.fresh_inputs import (
    SPLIT_MIN_SAMPLES,
    fresh_count,
    pick_fresh_launches,
    split_problem,
)

ITERATIONS = 100
FRESH = 16


def honest(rng: np.random.Generator, shape: str, cv: float) -> list[float]:
    base = 1.0 + cv * rng.standard_normal(ITERATIONS)
    if shape == "outliers":  # one launch in ten 30% slower (a clock hiccup, a preemption)
        base = np.where(rng.random(ITERATIONS) < 0.1, base * 1.3, base)
    elif shape == "drift":  # clocks settling: 3% faster from the first launch to the last
        base = base * np.linspace(1.03, 1.0, ITERATIONS)
    elif shape == "two_states":  # two clock states, alternating in runs
        base = base * np.where((np.arange(ITERATIONS) // 7) % 2 == 0, 1.0, 1.04)
    return [float(t) for t in base]


def subset(rng: np.random.Generator) -> list[int]:
    """A hidden subset as pick_fresh_launches draws it, from a seeded generator (reproducible)."""
    return sorted(int(i) for i in rng.choice(ITERATIONS, FRESH, replace=False))


@pytest.mark.parametrize("shape", ["normal", "outliers", "drift", "two_states"])
@pytest.mark.parametrize("cv", [0.001, 0.01, 0.05])
def test_honest_kernels_are_never_flagged(shape: str, cv: float) -> None:
    rng = np.random.default_rng(1234)
    flagged = []
    for _ in range(300):
        times = honest(rng, shape, cv)
        fresh = subset(rng)
        if (problem := split_problem(times, fresh)) is not None:
            flagged.append(problem)
    assert not flagged, flagged[:2]


@pytest.mark.parametrize(("saving", "cv"), [(0.2, 0.05), (0.1, 0.01), (0.08, 0.003), (0.05, 0.001)])
def test_a_cache_that_pays_on_seen_inputs_is_flagged(saving: float, cv: float) -> None:
    rng = np.random.default_rng(99)
    for _ in range(50):
        fresh = subset(rng)
        times = honest(rng, "normal", cv)
        cached = [t * (1 - saving) if i not in fresh else t for i, t in enumerate(times)]
        problem = split_problem(cached, fresh)
        assert problem is not None and "inputs it has seen" in problem


def test_too_few_samples_on_a_side_is_not_judged() -> None:
    times = [1.0] * 20
    fresh = list(range(SPLIT_MIN_SAMPLES - 1))
    slow = [3.0 if i in fresh else t for i, t in enumerate(times)]
    assert split_problem(slow, fresh) is None
    fresh = list(range(SPLIT_MIN_SAMPLES))
    slow = [3.0 if i in fresh else t for i, t in enumerate(times)]
    assert split_problem(slow, fresh) is not None


def test_a_redrawn_subset_takes_at_most_half_a_round() -> None:
    assert fresh_count(16, 100) == 16
    assert fresh_count(16, 20) == 10  # the precision rule's first round: as many launches reuse a draw
    assert fresh_count(16, 8) == 5 and fresh_count(16, 3) == 3  # never under the split's minimum while there
    assert fresh_count(5, 100) == 5


def test_fresh_launches_are_distinct_sorted_and_hidden() -> None:
    picks = [tuple(pick_fresh_launches(ITERATIONS, FRESH)) for _ in range(20)]
    for p in picks:
        assert len(p) == FRESH and list(p) == sorted(set(p)) and all(0 <= i < ITERATIONS for i in p)
    assert len(set(picks)) > 1  # not a fixed pattern a kernel could learn
    assert pick_fresh_launches(5, 16) == [0, 1, 2, 3, 4]
    assert pick_fresh_launches(0, 16) == [] and pick_fresh_launches(10, 0) == []
