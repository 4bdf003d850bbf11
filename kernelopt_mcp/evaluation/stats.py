"""Statistics of per-launch kernel times: summary, noise flag, adaptive stopping.

Everything here is pure (NumPy only) so it can be replayed on recorded timings in CI.

Quartiles are NumPy's default ("linear", Hyndman & Fan type 7): for sorted samples
``x[0..n-1]`` the p-quantile is ``x[h_lo] + (h - h_lo) * (x[h_lo + 1] - x[h_lo])`` with
``h = (n - 1) * p``. The harness's C++ copy of :func:`adaptive_should_stop` must use the same
definition (native_harness/PROTOCOL.md, "adaptive"), so both stop at the same sample count on
the same vector (tests/evaluation/test_stats.py replays every file in tests/fixtures/timings/).

The relative standard error of the median (``rse_median``) uses the large-sample variance of
the median of a normal distribution, ``sd(median) = sqrt(pi / 2) * sigma / sqrt(n)``
(1.2533 = sqrt(pi / 2)), with sigma estimated robustly as ``IQR / 1.349`` (the IQR of a
normal is 1.349 sigma), so one preempted launch does not inflate it the way the standard
deviation would.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, Field

from .protocol import TimingAnswer

#: sqrt(pi / 2): sd(median) / (sigma / sqrt(n)) for large normal samples
MEDIAN_SE_FACTOR = 1.2533
#: IQR / sigma for a normal distribution
IQR_PER_SIGMA = 1.349
#: noisy when the interquartile range exceeds this fraction of the median ...
NOISY_IQR_FRACTION = 0.05
#: ... or when the median itself is this uncertain (relative standard error) ...
NOISY_RSE = 0.02
#: ... or when there are too few samples for quartiles to mean anything
MIN_SAMPLES = 5


class TimingStats(BaseModel):
    """Summary of one case's measured launches (all times in milliseconds).

    Field names of the first version (warmup, iterations, flush_l2, median_ms, mean_ms, min_ms,
    max_ms, stdev_ms, iqr_ms, cv, noisy) keep their meaning; ``iterations`` is the number of
    measured launches asked for, ``samples`` the number actually measured (adaptive timing may
    take more).

    The noise rule (``noisy``): a result is noisy when ``iqr_ms / median_ms > 5%`` or
    ``rse_median > 2%`` or it has fewer than 5 samples. Why these: optimization steps worth
    keeping are typically >= 5-10%; if the middle half of the launches already spreads over 5%
    of the median, single launches are not telling the candidates apart (clock changes, a
    co-tenant, L2 state) and the result should be re-measured. The second rule is about the
    estimate, not the launches: with an rse of 2% two equal kernels' medians differ by more than
    ~5.5% (1.96 * sqrt(2) * 2%) one time in twenty, so a ranking at that precision is not
    trustworthy. With 100 samples the IQR rule is the stricter one (IQR/median = 5% gives
    rse ~0.5%); the rse rule catches short adaptive runs and few iterations. The CV is reported
    but not used: one preempted launch inflates it without moving the median.
    """

    warmup: int = Field(0, description="warm-up launches before the measured ones")
    iterations: int = Field(description="measured launches requested")
    samples: int = Field(description="measured launches (times_ms entries) summarized")
    flush_l2: bool = Field(True, description="L2 flushed before each measured launch")
    mode: str = Field("events", description="'events' (one event pair per launch) or 'graph'")
    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    stdev_ms: float = Field(description="sample standard deviation (ddof=1)")
    q1_ms: float = Field(description="first quartile (NumPy linear interpolation)")
    q3_ms: float = Field(description="third quartile (NumPy linear interpolation)")
    iqr_ms: float = Field(description="interquartile range of the per-launch times")
    cv: float = Field(description="coefficient of variation (stdev / mean)")
    rse_median: float | None = Field(
        description="relative standard error of the median: 1.2533 * (IQR / 1.349) / sqrt(n) / median "
        "(None below 2 samples or with a median of 0)"
    )
    noisy: bool = Field(
        description=f"IQR above {NOISY_IQR_FRACTION:.0%} of the median, rse_median above {NOISY_RSE:.0%}, "
        f"or fewer than {MIN_SAMPLES} samples"
    )
    noisy_reason: str | None = Field(None, description="why the result is noisy (None when it is not)")
    # Optional protocol-2 details of how the samples were taken (None when the harness did not say)
    graph_batch: int | None = Field(None, description="launches per graph sample (mode 'graph')")
    blocking: bool | None = Field(None, description="launches enqueued behind a blocking kernel")
    launch_overhead_ms: float | None = Field(None, description="median time of an empty kernel timed the same way")
    net_median_ms: float | None = Field(
        None, description="median minus launch_overhead_ms (at least 0): the event pair's fixed cost taken out, "
        "which is what Nsight Compute's gpu__time_duration measures (README: within 3% for kernels >= 20 us; "
        "below that the fixed cost dominates and this is an estimate); scores use median_ms"
    )
    adaptive_converged: bool | None = Field(None, description="adaptive timing reached its rse target")
    blocking_timed_out: bool | None = Field(
        None, description="the blocking kernel gave up before the launches were queued (gaps may be timed)"
    )
    check_launch_ms: float | None = Field(
        None, description="the extra launch after timing, on hidden-seed inputs (not among the samples)"
    )


def quartiles(times_ms: Sequence[float] | NDArray[np.float64]) -> tuple[float, float, float]:
    """(q1, median, q3) with NumPy's default linear interpolation."""
    q1, med, q3 = np.percentile(np.asarray(times_ms, dtype=np.float64), [25.0, 50.0, 75.0])
    return float(q1), float(med), float(q3)


def rse_median(times_ms: Sequence[float] | NDArray[np.float64]) -> float:
    """Relative standard error of the median: ``1.2533 * (IQR / 1.349) / sqrt(n) / median``.

    Returns ``inf`` for fewer than 2 samples or a non-positive median (nothing is known yet).
    """
    n = len(times_ms)
    if n < 2:
        return math.inf
    q1, med, q3 = quartiles(times_ms)
    if not med > 0:
        return math.inf
    return MEDIAN_SE_FACTOR * ((q3 - q1) / IQR_PER_SIGMA) / math.sqrt(n) / med


def summarize(
    times_ms: Sequence[float],
    *,
    warmup: int = 0,
    flush_l2: bool = True,
    mode: str = "events",
    iterations: int | None = None,
) -> TimingStats:
    """Summarize per-launch times (ms).

    Raises:
        ValueError: no samples, or a sample that is not a finite non-negative number.
    """
    x = np.asarray(times_ms, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("no timing samples to summarize (times_ms is empty)")
    if not np.all(np.isfinite(x)) or np.any(x < 0):
        raise ValueError("timing samples must be finite and >= 0 ms")
    n = int(x.size)
    q1, med, q3 = quartiles(x)
    mean = float(x.mean())
    stdev = float(x.std(ddof=1)) if n > 1 else 0.0
    iqr = q3 - q1
    rse = rse_median(x)
    reasons = []
    if n < MIN_SAMPLES:
        reasons.append(f"only {n} sample(s)")
    if med > 0 and iqr > NOISY_IQR_FRACTION * med:
        reasons.append(f"IQR is {iqr / med:.1%} of the median (limit {NOISY_IQR_FRACTION:.0%})")
    if math.isfinite(rse) and rse > NOISY_RSE:
        reasons.append(f"rse of the median {rse:.2%} (limit {NOISY_RSE:.0%})")
    return TimingStats(
        warmup=warmup, iterations=n if iterations is None else iterations, samples=n, flush_l2=flush_l2,
        mode=mode, median_ms=med, mean_ms=mean, min_ms=float(x.min()), max_ms=float(x.max()),
        stdev_ms=stdev, q1_ms=q1, q3_ms=q3, iqr_ms=iqr, cv=stdev / mean if mean > 0 else 0.0,
        rse_median=rse if math.isfinite(rse) else None,
        noisy=bool(reasons), noisy_reason="; ".join(reasons) or None,
    )


def from_answer(answer: TimingAnswer | Mapping[str, Any], *, flush_l2: bool | None = None) -> TimingStats:
    """Summarize a harness case answer's ``timing`` object (protocol 1 or 2; a mapping is read
    as :class:`~kernelopt_mcp.evaluation.protocol.TimingAnswer`).

    Protocol-2 fields (``mode``, ``graph_batch``, ``blocking``, ``launch_overhead_ms``,
    ``adaptive``) are read when present and ignored when not.

    Raises:
        ValueError: the answer has no samples.
    """
    timing = answer if isinstance(answer, TimingAnswer) else TimingAnswer.model_validate(answer)
    flushed = timing.flush_l2 if timing.flush_l2 is not None else (True if flush_l2 is None else flush_l2)
    stats = summarize(
        timing.times_ms, warmup=timing.warmup, flush_l2=flushed, mode=timing.mode or "events",
        iterations=timing.iterations,
    )
    stats.graph_batch = timing.graph_batch
    stats.blocking = timing.blocking
    stats.launch_overhead_ms = timing.launch_overhead_ms
    if timing.launch_overhead_ms is not None:
        stats.net_median_ms = max(0.0, stats.median_ms - timing.launch_overhead_ms)
    stats.adaptive_converged = timing.adaptive.converged if timing.adaptive is not None else None
    stats.blocking_timed_out = timing.blocking_timed_out
    stats.check_launch_ms = timing.check_launch_ms
    if stats.blocking_timed_out:
        reason = "the blocking kernel timed out: launch gaps may be in the times"
        stats.noisy = True
        stats.noisy_reason = f"{stats.noisy_reason}; {reason}" if stats.noisy_reason else reason
    return stats


def adaptive_should_stop(
    times_ms: Sequence[float], target_rse: float, elapsed_ms: float, max_ms: float, max_samples: int
) -> bool:
    """The adaptive-timing stopping rule (the harness has the same in C++:
    native_harness/src/stats.hpp, ``adaptive_step``).

    Stop when ``rse_median(times_ms) <= target_rse`` (converged; rse is infinite below 2
    samples or with a median <= 0, so those never converge), or ``len(times_ms) >=
    max_samples``, or ``elapsed_ms >= max_ms``. The harness checks it after the first
    ``iterations`` samples and after each further round; :func:`adaptive_stop_index` replays
    that schedule.
    """
    if rse_median(times_ms) <= target_rse:
        return True
    return len(times_ms) >= max_samples or elapsed_ms >= max_ms


def adaptive_round(first: int) -> int:
    """Samples per adaptive round after the first: as many as the first round, at least 16
    (``adaptive_round`` in native_harness/src/stats.hpp)."""
    return max(first, 16)


def adaptive_stop_index(
    times_ms: Sequence[float], target_rse: float, *, first: int, batch: int | None = None,
    max_samples: int | None = None, max_ms: float = math.inf,
) -> tuple[int, bool]:
    """Replay adaptive timing on a recorded vector: the sample count it stops at and whether
    it converged (rse target met) rather than hitting a cap or running out of samples.

    ``batch`` defaults to the harness's round size (:func:`adaptive_round`); rounds are cut
    short at the cap. Elapsed time is modelled as the sum of the samples so far.
    """
    step = adaptive_round(first) if batch is None else batch
    cap = len(times_ms) if max_samples is None else min(max_samples, len(times_ms))
    n = min(first, cap)
    while True:
        head = times_ms[:n]
        if adaptive_should_stop(head, target_rse, float(np.sum(head)), max_ms, cap):
            return n, rse_median(head) <= target_rse
        n = min(n + step, cap)
