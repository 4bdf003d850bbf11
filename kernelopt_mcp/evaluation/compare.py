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
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np
from pydantic import BaseModel, Field

from ..workload import Tolerance
from .protocol import CompareEntry

MAX_REPORTED_MISMATCHES = 5


# The number type of a comparison's errors and elements: float here. The MCP tools' view
# (results.OutputCheck) is these same models over a number JSON can carry (a float, or "nan" /
# "inf"), so the fields and their descriptions, which the tools' output schema shows, are written
# once. The classes carry comments, not docstrings: a docstring would be a description in that schema.
Real = TypeVar("Real")


# One element outside tolerance.
class MismatchOf(BaseModel, Generic[Real]):
    index: list[int]  # multi-dimensional
    expected: Real
    actual: Real


class Mismatch(MismatchOf[float]):
    pass


MismatchT = TypeVar("MismatchT", bound=MismatchOf[Any])


# How one output buffer compares with the expected values: what the library's OutputComparison
# and the MCP tools' view of it share.
class OutputComparisonOf(BaseModel, Generic[Real, MismatchT]):
    name: str
    passed: bool
    elements: int
    mismatches: int = Field(description="elements outside tolerance, NaN/Inf included")
    nonfinite: int = Field(description="NaN/Inf elements (outputs are NaN-poisoned: NaN often means unwritten)")
    max_abs_error: Real
    max_rel_error: Real
    rel_l2_error: Real  # ||actual - expected|| / ||expected||
    rtol: float
    atol: float = Field(description="relative to the RMS of the expected output")
    tolerance_from: str | None = Field(None, description="dtype, workload, widened or kernelbench")
    first_mismatches: list[MismatchT] = Field(default_factory=list)  # the first MAX_REPORTED_MISMATCHES


class OutputComparison(OutputComparisonOf[float, Mismatch]):
    """How one output buffer compares with the expected values."""

    scale: float = Field(description="RMS of the expected output; atol is relative to it")

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


CHUNK_ELEMENTS = 1 << 20  # compare in slices: bounded temporaries, cache-friendly


@dataclass(frozen=True)
class Thresholds:
    """What the elementwise rule needs from the expected values (pass 1 of :func:`compare`)."""

    scale: float  # RMS of the finite expected values; atol is relative to it
    norm: float  # L2 norm of the finite expected values
    abs_tol: float  # atol * scale (float32 rounding noise when scale is 0)
    rel_floor: float  # denominator floor of the relative error: scale, or 1.0 when 0

    def harness_compare(self, rtol: float) -> dict[str, float]:
        """The ``compare`` block of a harness request (PROTOCOL.md, protocol 2), so the
        device-side comparison applies exactly the rule :func:`compare` applies."""
        return {"abs_tol": self.abs_tol, "rtol": rtol, "rel_floor": self.rel_floor}


def thresholds(expected: np.ndarray, tol: Tolerance) -> Thresholds:
    """Pass 1 of :func:`compare`: the RMS scale of ``expected`` and the tolerances built on it."""
    exp_flat = np.asarray(expected).reshape(-1)
    sum_sq, finite_count = 0.0, 0
    for lo in range(0, exp_flat.size, CHUNK_ELEMENTS):
        e = exp_flat[lo : lo + CHUNK_ELEMENTS].astype(np.float64)
        finite = np.isfinite(e)
        if not finite.all():
            e = e[finite]
        finite_count += e.size
        sum_sq += float(np.dot(e, e))
    return thresholds_from(sum_sq, finite_count, tol)


def thresholds_from(sum_sq: float, finite: int, tol: Tolerance) -> Thresholds:
    """The tolerances of :func:`thresholds` from the sum of squares of the ``finite`` finite
    expected values (as the harness reports them for values it keeps on the device)."""
    scale = math.sqrt(sum_sq / finite) if finite else 0.0
    # For an all-zero expectation, allow only float32 rounding noise rather than nothing.
    if tol.absolute:
        abs_tol = tol.atol
    else:
        abs_tol = tol.atol * scale if scale > 0 else tol.atol * float(np.finfo(np.float32).tiny)
    return Thresholds(scale=scale, norm=math.sqrt(sum_sq), abs_tol=abs_tol, rel_floor=scale if scale > 0 else 1.0)


def compare(name: str, expected: np.ndarray, actual: np.ndarray, tol: Tolerance) -> OutputComparison:
    """Compare ``actual`` with ``expected`` (any numeric dtypes, same number of elements)."""
    exp_flat = np.asarray(expected).reshape(-1)
    act_flat = np.asarray(actual).reshape(-1)
    shape = np.shape(expected)
    if act_flat.size != exp_flat.size:
        raise ValueError(f"{name}: {act_flat.size} elements, expected {exp_flat.size}")
    n = exp_flat.size
    if n == 0:
        return OutputComparison(
            name=name, passed=True, elements=0, mismatches=0, nonfinite=0, max_abs_error=0.0,
            max_rel_error=0.0, rel_l2_error=0.0, scale=0.0, rtol=tol.rtol, atol=tol.atol, tolerance_from=tol.source,
        )
    th = thresholds(exp_flat, tol)
    scale, norm, abs_tol, rel_floor = th.scale, th.norm, th.abs_tol, th.rel_floor

    # Pass 2: errors, mismatches and the first few mismatching elements.
    mismatches = nonfinite = 0
    max_abs = max_rel = err_sq = 0.0
    first: list[Mismatch] = []
    with np.errstate(invalid="ignore", over="ignore"):
        for lo in range(0, n, CHUNK_ELEMENTS):
            e = exp_flat[lo : lo + CHUNK_ELEMENTS].astype(np.float64)
            a = act_flat[lo : lo + CHUNK_ELEMENTS].astype(np.float64)
            abs_e = np.abs(e)
            diff = np.abs(a - e)
            ok = diff <= abs_tol + tol.rtol * abs_e  # False for NaN/Inf on either side
            bad_count = ok.size - int(np.count_nonzero(ok))
            nonfinite += a.size - int(np.count_nonzero(np.isfinite(a)))
            finite_diff = np.isfinite(diff)
            if not finite_diff.all():
                diff = np.where(finite_diff, diff, 0.0)
            if diff.size:
                max_abs = max(max_abs, float(diff.max()))
                max_rel = max(max_rel, float((diff / np.maximum(abs_e, rel_floor)).max()))
                err_sq += float(np.dot(diff, diff))
            if bad_count:
                mismatches += bad_count
                if len(first) < MAX_REPORTED_MISMATCHES:
                    for flat in np.flatnonzero(~ok)[: MAX_REPORTED_MISMATCHES - len(first)]:
                        idx = np.unravel_index(lo + int(flat), shape)
                        first.append(Mismatch(
                            index=[int(i) for i in idx], expected=float(e[flat]), actual=float(a[flat]),
                        ))
    err_norm = math.sqrt(err_sq)
    return OutputComparison(
        name=name,
        passed=mismatches == 0,
        elements=n,
        mismatches=mismatches,
        nonfinite=nonfinite,
        max_abs_error=math.inf if nonfinite else max_abs,
        max_rel_error=math.inf if nonfinite else max_rel,
        rel_l2_error=math.inf if nonfinite else (err_norm / norm if norm > 0 else err_norm),
        scale=scale,
        rtol=tol.rtol,
        atol=tol.atol,
        tolerance_from=tol.source,
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


def from_device(
    name: str, stats: CompareEntry, *, scale: float, norm: float, tol: Tolerance,
    shape: tuple[int, ...] | None = None,
) -> OutputComparison:
    """An :class:`OutputComparison` from the harness's device-side comparison (one entry of
    a case answer's ``compares``). Of the mismatching elements it carries the first, with its
    expected and actual values, when the harness read them (and ``shape`` places its index);
    where the expected values are on the host, :func:`compare` produces the full report."""

    def number(value: float | int | str | None) -> float:
        return math.inf if value in ("inf", "Infinity") else float(value or 0)

    mismatches, nonfinite = stats.mismatches, stats.nonfinite
    err_norm = math.sqrt(number(stats.err_sq))
    return OutputComparison(
        name=name,
        passed=mismatches == 0,
        elements=stats.elements,
        mismatches=mismatches,
        nonfinite=nonfinite,
        max_abs_error=math.inf if nonfinite else number(stats.max_abs_error),
        max_rel_error=math.inf if nonfinite else number(stats.max_rel_error),
        rel_l2_error=math.inf if nonfinite else (err_norm / norm if norm > 0 else err_norm),
        scale=scale,
        rtol=tol.rtol,
        atol=tol.atol,
        tolerance_from=tol.source,
        first_mismatches=_first_from_device(stats, shape),
    )


def _first_from_device(stats: CompareEntry, shape: tuple[int, ...] | None) -> list[Mismatch]:
    e, a, flat = stats.first_mismatch_expected, stats.first_mismatch_actual, stats.first_mismatch
    if flat is None or e is None or a is None or not shape:
        return []
    index = [int(i) for i in np.unravel_index(flat, shape)]
    return [Mismatch(index=index, expected=float(e), actual=float(a))]
