"""Fresh inputs for the timed launches, and which timed launches are checked.

The harness redraws input buffers on the device before every warm-up and measured launch, or
with ``fresh_launches`` (the default) before the first warm-up and a hidden subset of measured
launches (native_harness/PROTOCOL.md, "Fresh inputs and checked launches"), from the case's own
generator: ``uniform``, ``normal`` and ``randint`` map to the support module's ``ko_fill_<dtype>``
and ``choice`` to its ``ko_choice_<bytes>`` (Philox4x32-10 keyed per draw by a PRF of a hidden
per-request seed, which never reaches the device; same distribution and range as
:func:`kernelopt_mcp.evaluation.inputs.generate`, not the same bits). ``arange`` and ``constant`` buffers are
deterministic and data files are the user's bytes: those are not redrawn (a data file that
records ``drawn_from``, as a frozen ``optimize`` run's do, is redrawn from that generator).

This module decides, per case and buffer, what the harness is asked to draw; picks the hidden
measured launches whose outputs the CUDA reference checks; and judges the fresh-input timing
consistency (a launch on unseen inputs much slower than the timed median, twice).
"""

from __future__ import annotations

import math
import secrets
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..dtypes import DType
from ..input_choice import Choice, exact_values
from ..input_structure import matrix_dims
from ..workload import BufferParam, Case, DataFile, Normal, RandInt, Uniform, Workload, case_shape
from .protocol import FreshSpec, StructureSpec
from .stats import TimingStats

#: The harness feature that applies a generator's ``structure`` on the device (PROTOCOL.md)
STRUCTURED_DRAW = "structured_draw"
#: The harness feature that draws a ``choice`` on the device (PROTOCOL.md)
CHOICE_DRAW = "choice_draw"
#: The harness features that widen what it draws: a generator that needs one the harness lacks is
#: drawn on the host and not redrawn before timed launches (:func:`fresh_spec`)
DRAW_FEATURES = (STRUCTURED_DRAW, CHOICE_DRAW)
#: A launch on unseen inputs is inconsistent when slower than median * (1 + max(this, ...)) ...
CONSISTENCY_MIN_FRACTION = 0.25
#: ... and than median * (1 + this * CV) (the measured noise) ...
CONSISTENCY_CV_FACTOR = 5.0
#: ... and than median + this many milliseconds (launch latency of a lone launch).
CONSISTENCY_MIN_MS = 0.020


def request_seed() -> int:
    """A new hidden seed for one request's device draws (never reported: a seed that leaked is
    useless for the next evaluation, which draws its own)."""
    return secrets.randbits(64)


def generator_of(param: BufferParam, case: Case, workload: Workload) -> Any:
    return case.inputs.get(param.name) or workload.spec.inputs[param.name]


def fresh_spec(
    gen: Any, dtype: DType, shape: Sequence[int] | None = None, *, draw_features: Collection[str] = (),
) -> tuple[FreshSpec | None, str]:
    """The harness's ``fresh`` object for a buffer of ``shape`` made by ``gen``, or None and why not.

    ``draw_features``: the harness's draw features (:data:`DRAW_FEATURES`). A ``choice`` is drawn on the
    device only by a harness that draws it (feature ``choice_draw``), its values sent exactly in
    ``dtype`` (:func:`~kernelopt_mcp.input_choice.exact_values`); a generator with a ``structure``
    (triangular or symmetric matrices) only by one that applies it (feature ``structured_draw``),
    its spec carrying the matrices' rows and columns, from ``shape`` (required then). Never without.
    """
    if isinstance(gen, DataFile):
        drawn = getattr(gen, "drawn_from", None)
        if drawn is None:
            return None, "data file (the user's bytes)"
        spec, why = fresh_spec(drawn, dtype, shape, draw_features=draw_features)
        return spec, why if spec is None else "drawn_from"
    match gen:
        case Uniform(low=low, high=high):
            spec = FreshSpec(kind="uniform", low=float(low), high=float(high))
        case Normal(mean=mean, std=std):
            spec = FreshSpec(kind="normal", mean=float(mean), std=float(std))
        case RandInt(low=low, high=high) if high > low:
            spec = FreshSpec(kind="randint", low=int(low), high=int(high))
        case Choice(values=values) if CHOICE_DRAW in draw_features:
            spec = FreshSpec(kind="choice", values=exact_values(values, dtype))
        case Choice():
            return None, _lacks("a choice of values", CHOICE_DRAW)
        case _:
            kind = getattr(gen, "generator", type(gen).__name__)
            return None, f"{kind} (deterministic: the same values on every launch)"
    structure = gen.structure
    if structure is None:
        return spec, ""
    if STRUCTURED_DRAW not in draw_features:
        return None, _lacks(f"{structure.kind} matrices", STRUCTURED_DRAW)
    if shape is None:
        raise ValueError(f"a {structure.kind} draw needs the buffer's shape")
    rows, cols = matrix_dims(structure, shape)
    if math.prod(shape):  # an empty buffer has nothing to structure
        spec.structure = StructureSpec(kind=structure.kind, diagonal=structure.diagonal, rows=rows, cols=cols)
    return spec, ""


def _lacks(what: str, feature: str) -> str:
    return f"{what}, which this harness cannot draw (it lacks the feature {feature!r}; rebuild it with `pip install .`)"


@dataclass
class CaseFresh:
    """What the harness redraws for one case: specs by buffer, and the buffers it cannot redraw."""

    specs: dict[str, FreshSpec] = field(default_factory=dict)
    fixed: dict[str, str] = field(default_factory=dict)  # buffer -> why it is not redrawn


def case_fresh(workload: Workload, case: Case, *, draw_features: Collection[str] = ()) -> CaseFresh:
    """What the harness redraws for ``case``; ``draw_features``: the harness's draw features (inputs that
    need one it lacks are not redrawn: :func:`fresh_spec`)."""
    out = CaseFresh()
    for param in workload.signature.inputs:
        spec, why = fresh_spec(generator_of(param, case, workload), param.dtype, case_shape(param, case.scalars),
                               draw_features=draw_features)
        if spec is None:
            out.fixed[param.name] = why
        else:
            out.specs[param.name] = spec
    return out


def later_round_checks(first: int) -> int:
    """Hidden checks in each measuring round after the first (stop="precision"): a third of the
    first round's, at least one. To move the median, a kernel honest in the first round must
    cheat on most later launches, so one check per later round of 20 misses it with
    probability <= 1/2 per round, and the rounds multiply."""
    return max(1, first // 3) if first > 0 else 0


def pick_checked_launches(iterations: int, count: int) -> list[int]:
    """``count`` distinct measured-sample indices in ``[0, iterations)``, hidden (from the OS's
    random source), at least one in the last quarter (a kernel that turns lazy late in the
    timing is caught), sorted."""
    if iterations <= 0 or count <= 0:
        return []
    count = min(count, iterations)
    rng = secrets.SystemRandom()
    last_quarter = range(iterations - max(1, iterations // 4), iterations)
    picked = {rng.choice(last_quarter)}
    while len(picked) < count:
        picked.add(rng.randrange(iterations))
    return sorted(picked)


#: With ``fresh_launches`` (a hidden subset of measured launches redrawn, the rest reusing the
#: last draw), the launches on new inputs are inconsistent when their median exceeds that of the
#: launches on inputs seen before by more than this fraction ...
SPLIT_MIN_FRACTION = 0.03
#: ... and the two medians' confidence intervals (order statistics, this z: 99.99%) do not
#: overlap, so noise, outliers and several clock states do not count (at z = 2.58 two clock
#: states 4% apart were flagged in 6 of 10,000 honest runs; at 3.89 in none of 36,000) ...
SPLIT_Z = 3.891
#: ... judged when each side has at least this many samples.
SPLIT_MIN_SAMPLES = 5


def fresh_count(count: int, launches: int) -> int:
    """How many of a round's ``launches`` measured launches are redrawn before when ``count`` are
    asked for: at most half of them (so as many reuse a draw, and both sides of
    :func:`split_problem` get samples), never under :data:`SPLIT_MIN_SAMPLES` while the round has them."""
    return min(count, max(SPLIT_MIN_SAMPLES, launches // 2), launches)


def pick_fresh_launches(iterations: int, count: int) -> list[int]:
    """``fresh_count(count, iterations)`` distinct measured-sample indices in ``[0, iterations)``
    before which the harness redraws the inputs (``fresh_launches``), hidden (the OS's random
    source), sorted."""
    if iterations <= 0 or count <= 0:
        return []
    return sorted(secrets.SystemRandom().sample(range(iterations), fresh_count(count, iterations)))


def _median_interval(values: list[float]) -> tuple[float, float, float]:
    """The median and a distribution-free confidence interval for it: the order statistics
    n/2 -/+ z sqrt(n)/2 (clamped to the sample), which widens by itself when the samples fall in
    several modes."""
    xs = sorted(values)
    n = len(xs)
    half = SPLIT_Z * math.sqrt(n) / 2
    lo = xs[max(0, math.floor(n / 2 - half))]
    hi = xs[min(n - 1, math.ceil(n / 2 + half) - 1)]
    return statistics.median(xs), lo, hi


def split_problem(times_ms: list[float], fresh: list[int]) -> str | None:
    """Why the launches on new inputs (measured samples ``fresh``) are inconsistent with those on
    inputs seen before, or None (consistent, or too few samples on either side to judge).

    A kernel that recognises inputs it has seen and reuses results is fast only on the reused
    ones: their median drops below the new inputs' median by what the cache saves. Honest kernels
    take the same time on both (the inputs are drawn alike and L2 is flushed before each launch).
    """
    chosen = set(fresh)
    new = [t for i, t in enumerate(times_ms) if i in chosen]
    seen = [t for i, t in enumerate(times_ms) if i not in chosen]
    if len(new) < SPLIT_MIN_SAMPLES or len(seen) < SPLIT_MIN_SAMPLES:
        return None
    (m_new, lo_new, _), (m_seen, _, hi_seen) = _median_interval(new), _median_interval(seen)
    if m_seen <= 0 or m_new <= m_seen * (1 + SPLIT_MIN_FRACTION) or lo_new <= hi_seen:
        return None
    return (
        f"the {len(new)} timed launches on inputs never seen before took a median of {m_new:.4g} ms, the "
        f"{len(seen)} on inputs seen before {m_seen:.4g} ms ({m_new / m_seen - 1:+.1%}, beyond "
        f"{SPLIT_MIN_FRACTION:.0%} and the medians' 99.99% confidence intervals, {lo_new:.4g} ms above "
        f"{hi_seen:.4g} ms): the kernel is faster on "
        "inputs it has seen, such as results reused from a cache, which is not a speed-up of the work"
    )


def consistency_limit_ms(timing: TimingStats) -> float:
    """The slowest a launch on unseen inputs may be before it counts as inconsistent."""
    med = timing.median_ms
    return max(
        med * (1 + max(CONSISTENCY_MIN_FRACTION, CONSISTENCY_CV_FACTOR * timing.cv)),
        med + CONSISTENCY_MIN_MS,
    )


def consistency_problem(timing: TimingStats, check_ms: float | None, confirm_ms: float | None) -> str | None:
    """Why the fresh-input launches are inconsistent with the timed median, or None.

    Both the launch after timing on hidden-seed inputs (``check_ms``) and the confirm launch on
    freshly drawn inputs (``confirm_ms``) must exceed :func:`consistency_limit_ms`: one slow
    launch alone can be a hiccup. Only events-mode timing is judged (graph-mode samples are
    back-to-back launches without an L2 flush between them, not comparable with a lone launch).
    """
    if timing.mode != "events" or check_ms is None or confirm_ms is None or timing.median_ms <= 0:
        return None
    limit = consistency_limit_ms(timing)
    if check_ms <= limit or confirm_ms <= limit:
        return None
    return (
        f"the timed launches took a median of {timing.median_ms:.4g} ms, but a launch on inputs the kernel had not "
        f"seen took {check_ms:.4g} ms and a second one {confirm_ms:.4g} ms (limit {limit:.4g} ms: the median plus "
        f"max({CONSISTENCY_MIN_FRACTION:.0%}, {CONSISTENCY_CV_FACTOR:g} x CV {timing.cv:.3f}) and at least "
        f"{CONSISTENCY_MIN_MS * 1e3:.0f} us): the timed launches were faster for a reason other than the work, such as "
        "results reused from inputs seen before or work skipped while timed"
    )


def fresh_checks(workload: Workload, cases: list[Case], *, redraw: bool, reference: bool, checked: int,
                 consistency: bool, oracle_checked: int = 0, graph: bool = False,
                 subset: tuple[int, int] | None = None, later_rounds: bool = False, poison_subset: bool = False,
                 reference_name: str = "the CUDA reference", draw_features: Collection[str] = ()) -> list[str]:
    """The lines of a result's ``checks`` list for fresh inputs, checked launches and timing
    consistency over the performance ``cases``: only what really runs, and what cannot.
    ``later_rounds``: the precision rule may measure more rounds after the first (each gets
    its own hidden redraws and checks); ``poison_subset``: outputs poisoned before the subset and the checked
    launches only; ``draw_features``: as :func:`case_fresh`'s."""
    lines: list[str] = []
    drawn: list[str] = []
    fixed: dict[str, str] = {}
    for case in cases:
        cf = case_fresh(workload, case, draw_features=draw_features)
        drawn += [b for b in cf.specs if b not in drawn]
        for name, why in cf.fixed.items():
            fixed.setdefault(name, why)
    if redraw and drawn and graph:
        lines.append(
            f"fresh device-drawn inputs for every CUDA-graph replay (buffers {', '.join(drawn)}); the launches inside "
            "one replay share them, so memoization within a replay is not excluded (events mode excludes it)"
        )
    elif redraw and drawn and subset is not None:
        count, iterations = subset
        lines.append(
            f"fresh device-drawn inputs before a hidden {min(count, iterations)} of the {iterations} measured launches"
            f"{' of each round' if later_rounds else ''} and the first warm-up (buffers {', '.join(drawn)}); the "
            "others reuse the last draw, and launches on new inputs slower than those on inputs seen before (over "
            f"{SPLIT_MIN_FRACTION:.0%}, beyond both medians' 99.99% intervals) are inconsistent_timing"
        )
        if poison_subset:
            lines.append("outputs poisoned before those launches and the checked ones only: the others find the "
                         "outputs of the launch before them, and a kernel faster there is named by the same split")
    elif redraw and drawn:
        lines.append(f"fresh device-drawn inputs for every timed launch (buffers {', '.join(drawn)})")
    if redraw and drawn and not graph:
        lines += [f"fresh inputs: buffer {name} not redrawn ({why})" for name, why in fixed.items()]
    elif redraw and cases:
        lines.append(
            "fresh inputs: not possible, no input can be redrawn ("
            + "; ".join(f"{n}: {w}" for n, w in fixed.items()) + "): every timed launch sees the same bytes"
        )
    if cases and checked > 0 and reference:
        lines.append(
            f"outputs of {checked} hidden timed launches per case"
            + (f" in the first round, and {later_round_checks(checked)} in each later round the "
               "precision rule asks for,"
               if later_rounds else "")
            + f" checked against {reference_name} on their inputs"
        )
    elif cases and oracle_checked > 0:
        lines.append(
            f"outputs of {oracle_checked} hidden timed launch(es) per "
            f"case{' (and one in each later round)' if later_rounds else ''} checked against the NumPy oracle on their "
            "inputs (no CUDA reference)"
        )
    elif cases and checked > 0:
        lines.append(
            "outputs of timed launches checked only by the launch after timing (no CUDA reference to check "
            "the fresh inputs of timed launches with)"
        )
    if consistency and cases:
        if drawn:
            lines.append("fresh-input timing consistency (two launches on unseen inputs vs the timed "
                         "median, events mode)")
        else:
            lines.append("fresh-input timing consistency: not possible (no input can be redrawn for the second launch)")
    return lines
