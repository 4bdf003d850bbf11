"""The MCP tools' result views are validated straight from the library's results
(results._View, from_attributes): non-finite numbers become the strings JSON can carry, the
names they share are taken as they are, and what a view adds is computed, not copied."""

from __future__ import annotations

import json
import math

from kernelopt_mcp.evaluation.compare import Mismatch, compare
from kernelopt_mcp.evaluation.stats import summarize
from kernelopt_mcp.results import OutputCheck, Timing
from kernelopt_mcp.workload import Tolerance


def test_an_output_check_is_json_safe_and_counts_what_it_does_not_list() -> None:
    import numpy as np

    expected = np.arange(64, dtype=np.float64)
    actual = expected.copy()
    actual[:40] = np.nan  # more mismatches than are listed
    actual[50] = np.inf
    comparison = compare("c", expected, actual, Tolerance(rtol=1e-3, atol=1e-3))
    view = OutputCheck.model_validate(comparison)
    payload = json.loads(view.model_dump_json())  # strict JSON: no NaN or Infinity tokens
    assert payload["mismatches"] == comparison.mismatches == 41
    assert payload["mismatches_not_listed"] == 41 - len(comparison.first_mismatches) > 0
    assert payload["max_abs_error"] in ("nan", "inf")
    assert payload["first_mismatches"][0]["actual"] == "nan"
    assert all(isinstance(m["expected"], float) for m in payload["first_mismatches"])


def test_a_mismatch_keeps_finite_numbers_as_numbers() -> None:
    from kernelopt_mcp.results import Mismatch as MismatchView

    view = MismatchView.model_validate(Mismatch(index=[2, 3], expected=1.5, actual=-math.inf))
    assert view.model_dump() == {"index": [2, 3], "expected": 1.5, "actual": "-inf"}


def test_timing_takes_the_statistics_and_names_convergence_converged() -> None:
    stats = summarize([0.010, 0.011, 0.012, 0.010, 0.011] * 4, warmup=3, iterations=20)
    stats.adaptive_converged = True
    view = Timing.model_validate(stats)
    assert (view.median_ms, view.warmup, view.iterations, view.samples) == (stats.median_ms, 3, 20, 20)
    assert view.converged is True and "adaptive_converged" not in view.model_dump()


def test_a_view_validates_again_from_its_own_json() -> None:
    """The MCP SDK validates a tool's structured result against its output model once more: a
    view's own dump (non-finite numbers already strings) must validate to the same view."""
    import numpy as np

    expected = np.arange(16, dtype=np.float64)
    view = OutputCheck.model_validate(compare("c", expected, np.full(16, np.nan), Tolerance(rtol=1e-3, atol=1e-3)))
    again = OutputCheck.model_validate(view.model_dump())
    assert again == view and again.max_abs_error == "inf"


def test_an_output_check_is_the_comparison_less_its_scale_with_the_same_descriptions() -> None:
    """One definition of a comparison's fields: the view differs only in its number type, the
    scale it leaves out and the count it adds."""
    from kernelopt_mcp.evaluation.compare import OutputComparison

    library, view = OutputComparison.model_fields, OutputCheck.model_fields
    assert set(library) - set(view) == {"scale"} and set(view) - set(library) == {"mismatches_not_listed"}
    for name in set(library) & set(view):
        assert view[name].description == library[name].description, name
    assert view["nonfinite"].description and "NaN-poisoned" in view["nonfinite"].description
