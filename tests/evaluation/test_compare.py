from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from kernelopt_mcp.evaluation.compare import compare, geometric_mean
from kernelopt_mcp.workload import Tolerance

TOL = Tolerance(rtol=1e-5, atol=1e-5)


def test_identical_outputs_pass() -> None:
    x = np.random.default_rng(0).normal(size=(7, 9)).astype(np.float32)
    r = compare("y", x.astype(np.float64), x, TOL)
    assert r.passed and r.mismatches == 0 and r.max_abs_error == 0.0


def test_zeros_never_pass_a_nonzero_expectation() -> None:
    expected = np.random.default_rng(1).normal(size=1000) * 1e-6  # tiny values
    r = compare("y", expected, np.zeros(1000, np.float32), Tolerance(rtol=1e-3, atol=1e-3))
    assert not r.passed
    assert r.mismatches > 900


def test_nan_and_inf_never_pass() -> None:
    expected = np.ones(10)
    actual = np.ones(10, np.float32)
    actual[3] = np.nan
    actual[7] = np.inf
    r = compare("y", expected, actual, Tolerance(rtol=0.4, atol=0.4))
    assert not r.passed
    assert r.mismatches == 2 and r.nonfinite == 2
    assert r.first_mismatches[0].index == [3]
    assert math.isinf(r.max_abs_error)


def test_unwritten_poisoned_output_is_reported_as_nonfinite() -> None:
    poison = np.frombuffer(b"\xff" * 40, dtype=np.float32)
    r = compare("c", np.arange(10.0), poison, TOL)
    assert r.nonfinite == 10 and not r.passed
    assert "NaN/Inf" in r.summary()


def test_tolerance_edges() -> None:
    expected = np.full(100, 2.0)
    scale = 2.0  # RMS of the expected values
    tol = Tolerance(rtol=1e-3, atol=1e-4)
    limit = tol.atol * scale + tol.rtol * 2.0
    assert compare("y", expected, expected + limit * 0.999, tol).passed
    assert not compare("y", expected, expected + limit * 1.01, tol).passed


def test_atol_is_relative_to_scale() -> None:
    # Large-magnitude outputs (e.g. sgemm with K=4096): an element near zero may carry an
    # absolute error comparable to eps * scale and must still pass.
    expected = np.array([1000.0, -1000.0, 0.0])
    actual = np.array([1000.0, -1000.0, 0.005])
    assert compare("C", expected, actual, Tolerance(rtol=1e-5, atol=1e-5)).passed
    assert not compare("C", expected, np.array([1000.0, -1000.0, 0.05]), Tolerance(rtol=1e-5, atol=1e-5)).passed


def test_first_mismatch_has_multidimensional_index_and_values() -> None:
    expected = np.zeros((4, 5))
    expected[:] = 1.0
    actual = expected.astype(np.float32).copy()
    actual[2, 3] = 5.0
    r = compare("y", expected, actual, TOL)
    assert r.mismatches == 1
    m = r.first_mismatches[0]
    assert (m.index, m.expected, m.actual) == ([2, 3], 1.0, 5.0)


def test_integer_outputs_compare_exactly() -> None:
    expected = np.arange(10, dtype=np.int32)
    actual = expected.copy()
    actual[5] += 1
    assert not compare("i", expected, actual, Tolerance(rtol=0, atol=0)).passed
    assert compare("i", expected, expected.copy(), Tolerance(rtol=0, atol=0)).passed


def test_bfloat16_outputs_are_compared_in_float64() -> None:
    expected = np.linspace(-3, 3, 50)
    actual = expected.astype(ml_dtypes.bfloat16)
    assert compare("y", expected, actual, Tolerance(rtol=1e-2, atol=1e-2)).passed
    assert not compare("y", expected, actual, Tolerance(rtol=1e-5, atol=1e-5)).passed


def test_all_zero_expectation_requires_near_zero_output() -> None:
    expected = np.zeros(8)
    assert compare("y", expected, np.zeros(8, np.float32), TOL).passed
    assert not compare("y", expected, np.full(8, 1e-3, np.float32), TOL).passed


def test_size_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="elements"):
        compare("y", np.zeros(3), np.zeros(4), TOL)


def test_geometric_mean() -> None:
    assert geometric_mean([1.0, 4.0]) == pytest.approx(2.0)
    assert geometric_mean([2.0, 2.0, 2.0]) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        geometric_mean([])
    with pytest.raises(ValueError):
        geometric_mean([1.0, 0.0])
    with pytest.raises(ValueError):
        geometric_mean([1.0, float("nan")])


def test_chunked_comparison_matches_across_chunk_boundaries() -> None:
    from kernelopt_mcp.evaluation.compare import CHUNK_ELEMENTS

    rows = 3 * CHUNK_ELEMENTS // 1024 + 1
    expected = np.random.default_rng(2).normal(size=(rows, 1024))
    actual = expected.astype(np.float32)
    actual[rows // 2, 7] += 10.0  # in the second chunk
    actual[-1, -1] = np.nan  # in the last chunk
    r = compare("y", expected, actual, TOL)
    assert r.mismatches == 2 and r.nonfinite == 1
    assert [m.index for m in r.first_mismatches] == [[rows // 2, 7], [rows - 1, 1023]]
    assert r.scale == pytest.approx(float(np.sqrt(np.mean(expected**2))))
    clean = compare("y", expected, expected.astype(np.float32), TOL)
    assert (clean.passed
            and clean.max_abs_error == pytest.approx(float(np.abs(expected.astype(np.float32) - expected).max())))
