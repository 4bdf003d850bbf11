"""Comparing a kernel's outputs with the expected ones, and scoring latencies.

Every comparison happens in float64. An element passes when
``|actual - expected| <= atol * scale + rtol * |expected|`` where ``scale`` is the RMS of the
expected output (so an output of zeros cannot pass a non-zero expectation), and both values
are finite: NaN and Inf never pass, which is also how an element the kernel never wrote
(poisoned with NaN) is caught.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
from pydantic import BaseModel, Field

from .workload import Tolerance

MAX_REPORTED_MISMATCHES = 5


class Mismatch(BaseModel):
    index: list[int] = Field(description="multi-dimensional index of the element")
    expected: float
    actual: float


class OutputComparison(BaseModel):
    """How one output buffer compares with the expected values."""

    name: str
    passed: bool
    elements: int
    mismatches: int = Field(description="elements outside tolerance (non-finite included)")
    nonfinite: int = Field(description="NaN/Inf elements in the output (unwritten elements are NaN)")
    max_abs_error: float
    max_rel_error: float
    rel_l2_error: float = Field(description="||actual - expected|| / ||expected||")
    scale: float = Field(description="RMS of the expected output; atol is relative to it")
    rtol: float
    atol: float
    first_mismatches: list[Mismatch] = Field(
        default_factory=list, description=f"the first {MAX_REPORTED_MISMATCHES} mismatching elements"
    )

    def summary(self) -> str:
        if self.passed:
            return f"{self.name}: ok (max abs err {self.max_abs_error:.3g}, rel L2 {self.rel_l2_error:.3g})"
        text = f"{self.name}: {self.mismatches}/{self.elements} elements mismatch"
        if self.nonfinite:
            text += f" ({self.nonfinite} NaN/Inf: unwritten or invalid)"
        if self.first_mismatches:
            m = self.first_mismatches[0]
            text += f"; first at {m.index}: expected {m.expected:.6g}, got {m.actual:.6g}"
        return text


def compare(name: str, expected: np.ndarray, actual: np.ndarray, tol: Tolerance) -> OutputComparison:
    """Compare ``actual`` with ``expected`` (any numeric dtypes, same number of elements)."""
    exp = np.asarray(expected, dtype=np.float64)
    act = np.asarray(actual, dtype=np.float64)
    if act.size != exp.size:
        raise ValueError(f"{name}: {act.size} elements, expected {exp.size}")
    act = act.reshape(exp.shape)
    n = exp.size
    if n == 0:
        return OutputComparison(
            name=name, passed=True, elements=0, mismatches=0, nonfinite=0, max_abs_error=0.0,
            max_rel_error=0.0, rel_l2_error=0.0, scale=0.0, rtol=tol.rtol, atol=tol.atol,
        )
    finite_exp = np.isfinite(exp)
    scale = float(np.sqrt(np.mean(np.square(exp[finite_exp])))) if finite_exp.any() else 0.0
    # For an all-zero expectation, allow only float32 rounding noise rather than nothing.
    abs_tol = tol.atol * scale if scale > 0 else tol.atol * np.finfo(np.float32).tiny
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(act - exp)
        nonfinite_mask = ~np.isfinite(act)
        bad = ~(diff <= abs_tol + tol.rtol * np.abs(exp)) | nonfinite_mask | ~finite_exp
        finite_diff = np.where(np.isfinite(diff), diff, 0.0)
        rel = finite_diff / np.maximum(np.abs(exp), scale if scale > 0 else 1.0)
        norm = float(np.linalg.norm(np.where(finite_exp, exp, 0.0)))
        err_norm = float(np.linalg.norm(np.where(np.isfinite(diff), diff, 0.0)))
    mismatches = int(np.count_nonzero(bad))
    first = []
    if mismatches:
        for flat in np.flatnonzero(bad)[:MAX_REPORTED_MISMATCHES]:
            idx = np.unravel_index(int(flat), exp.shape)
            first.append(
                Mismatch(index=[int(i) for i in idx], expected=float(exp[idx]), actual=float(act[idx]))
            )
    nonfinite = int(np.count_nonzero(nonfinite_mask))
    return OutputComparison(
        name=name,
        passed=mismatches == 0,
        elements=n,
        mismatches=mismatches,
        nonfinite=nonfinite,
        max_abs_error=math.inf if nonfinite else float(finite_diff.max()),
        max_rel_error=math.inf if nonfinite else float(rel.max()),
        rel_l2_error=math.inf if nonfinite else (err_norm / norm if norm > 0 else err_norm),
        scale=scale,
        rtol=tol.rtol,
        atol=tol.atol,
        first_mismatches=first,
    )


def geometric_mean(values: Iterable[float]) -> float:
    """Geometric mean of positive values (the ranking score over performance cases)."""
    vals = list(values)
    if not vals:
        raise ValueError("geometric mean of no values")
    if any(not (v > 0 and math.isfinite(v)) for v in vals):
        raise ValueError(f"geometric mean needs positive finite values, got {vals}")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))
