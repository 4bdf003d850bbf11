"""The stopping rules of timing (issue 17): "count" (the seed's exact 10 + 100) and "precision"
(search's default: a first round, then rounds until the median's rse reaches a target)."""

from __future__ import annotations

import pytest

from kernelopt_mcp.evaluation.candidate import PRECISION_MIN_ITERATIONS, PRECISION_RSE, EvaluateOptions, stop_rule
from kernelopt_mcp.evaluation.protocol import AdaptiveRequest

ADAPTIVE = frozenset({"blocking", "adaptive"})


def test_count_times_exactly_the_launches_asked_for() -> None:
    t = EvaluateOptions().timing_request(ADAPTIVE)
    assert (t.warmup, t.iterations, t.adaptive) == (10, 100, None)
    # --adaptive with a count: the count is the first round, no cap but the time limit (as before)
    t = EvaluateOptions(adaptive_rse=0.01).timing_request(ADAPTIVE)
    assert t.iterations == 100 and t.adaptive == AdaptiveRequest(target_rse=0.01, max_ms=2000.0)


def test_precision_is_a_first_round_then_rounds_up_to_iterations() -> None:
    o = EvaluateOptions(stop="precision")
    t = o.timing_request(ADAPTIVE)
    assert o.first_round == t.iterations == PRECISION_MIN_ITERATIONS == 20
    assert t.adaptive == AdaptiveRequest(target_rse=PRECISION_RSE, max_ms=2000.0, max_iterations=100)
    # its own target, and a cap of 400
    t = EvaluateOptions(stop="precision", adaptive_rse=0.001, iterations=400).timing_request(ADAPTIVE)
    assert t.iterations == 20 and t.adaptive == AdaptiveRequest(target_rse=0.001, max_ms=2000.0, max_iterations=400)
    # no more than iterations asked for: those, exactly
    o = EvaluateOptions(stop="precision", iterations=12)
    assert o.first_round == 12 and o.timing_request(ADAPTIVE).adaptive is None
    # a redrawn subset does not lengthen the first round: it takes at most half of it
    assert EvaluateOptions(stop="precision", fresh_launches=16).first_round == 20


def test_a_harness_without_adaptive_timing_gets_the_most_launches() -> None:
    t = EvaluateOptions(stop="precision").timing_request(frozenset({"blocking"}))
    assert t.iterations == 100 and t.adaptive is None


def test_an_unknown_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="stop must be one of count, precision"):
        EvaluateOptions(stop="fast")


@pytest.mark.parametrize(("stop", "warmup", "iterations", "rule"), [
    (None, None, None, "precision"), (None, 10, None, "count"), (None, None, 100, "count"),
    ("precision", 10, 100, "precision"), ("count", None, None, "count"),
])
def test_search_stops_on_precision_unless_a_count_is_asked_for(
    stop: str | None, warmup: int | None, iterations: int | None, rule: str
) -> None:
    assert stop_rule(stop, warmup=warmup, iterations=iterations) == rule


def test_the_rounds_are_the_harness_rounds() -> None:
    """Where hidden checks are placed: every round the precision rule may measure."""
    assert EvaluateOptions().rounds(ADAPTIVE) == [(0, 100)]
    assert EvaluateOptions(stop="precision").rounds(ADAPTIVE) == [(0, 20), (20, 40), (40, 60), (60, 80), (80, 100)]
    # later rounds are at least 16 launches (adaptive_round in native_harness/src/stats.hpp)
    assert (EvaluateOptions(stop="precision", iterations=50, fresh_launches=5).rounds(ADAPTIVE)[:2]
            == [(0, 20), (20, 40)])
    assert EvaluateOptions(stop="precision", iterations=30).rounds(ADAPTIVE) == [(0, 20), (20, 30)]
    assert EvaluateOptions(stop="precision").rounds(frozenset()) == [(0, 100)]  # no adaptive timing: one round
