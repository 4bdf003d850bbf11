"""The cases of an imported PyTorch problem: which sizes, drawn how, and what the draws show.

The performance case is the problem as written; correctness cases scale its size constants down
(:func:`size_variants`), and where the problem rejects those sizes (a group count that must divide
the channels), other sizes are searched (:func:`other_sizes`) so that every problem keeps a
correctness case smaller than its performance case. Correctness cases run on the CPU (their
values size the tolerance and show what the output depends on); the performance case is drawn on
torch's meta device (shapes, dtypes, generators, FLOPs: nothing of its full size is computed), with
only what no generator makes built on the CPU (:func:`fixed_values`). :func:`degenerate` says what
a kernel could skip and still pass: an input or parameter the output does not depend on, a
constant output.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .torch_problem import (
    Arg,
    CpuOutOfMemory,
    Draw,
    ProblemSource,
    SizeConstant,
    SizesRejected,
    TorchProblemError,
    draw,
    draw_shapes,
    fixed_inputs,
    listed,
    module_state,
)
from .torch_store import le_bytes

SMALL_SIZES = (5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61)
OTHER_ODD_SIZES = (9, 15, 21, 25, 27, 33, 35, 39, 45, 49, 51, 55, 57, 63, 65, 69)  # odd, with factors 3, 5, 7
EVEN_SIZES = (6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36)
MAX_CORRECTNESS_BYTES = 256 * 2**20  # all buffers of one correctness case
MAX_FIXED_BYTES = 256 * 2**20  # one buffer of the performance case that no generator makes (a data file)
MAX_CPU_BYTES = 4 * 2**30  # what the performance case may take on the CPU where it must run there
HIDDEN_SEED_OFFSET = 1_000_003
MAX_PAIRED = 12  # the size search pairs up the largest constants only (66 pairs at most)


def size_variants(constants: list[SizeConstant]) -> list[tuple[str, str, dict[str, int]]]:
    """The cases' size constants: ``small_odd`` (each constant a distinct small prime, at most its
    own value), ``mid_odd`` (about 1/16 of each, odd and distinct) and ``perf`` (as written).
    Variants equal to an earlier one are left out."""
    small = {c.name: min(c.value, SMALL_SIZES[i % len(SMALL_SIZES)]) for i, c in enumerate(constants)}
    mid = {c.name: min(c.value, max(SMALL_SIZES[-1], (c.value // 16) | 1) + 2 * i) for i, c in enumerate(constants)}
    perf = {c.name: c.value for c in constants}
    out: list[tuple[str, str, dict[str, int]]] = []
    for name, kind, values in (("small_odd", "correctness", small), ("mid_odd", "correctness", mid),
                               ("perf", "performance", perf)):
        if all(values != v for _, _, v in out) and (kind == "performance" or values != perf):
            out.append((name, kind, values))
    if len(out) == 1:  # nothing to scale: a correctness case of the same sizes, drawn with another seed
        out.insert(0, ("check", "correctness", perf))
    return out


def other_sizes(constants: list[SizeConstant], slot: str) -> list[tuple[str, dict[str, int]]]:
    """Sizes to try, in order, for the ``small`` or ``mid`` correctness case where the problem rejects
    its odd ones (a group count that must divide the channels, a kernel larger than the scaled
    image): other odd sizes (with small factors 3, 5, 7: small only), even ones, multiples (each
    constant that divides another's written value divides its size too), the written values scaled
    down by 64, 16 and 4 (small) or 8, 4 and 2 (mid), keeping small constants, then the constants
    back at their written values one by one, largest first (an image size a fixed Linear layer
    needs), then each pair of them at their written values, the others small. Every value is at
    most the written one."""
    n = len(constants)
    perf = {c.name: c.value for c in constants}
    if slot == "small":
        base = {c.name: min(c.value, SMALL_SIZES[i % len(SMALL_SIZES)]) for i, c in enumerate(constants)}
        odd = {c.name: min(c.value, OTHER_ODD_SIZES[i % len(OTHER_ODD_SIZES)]) for i, c in enumerate(constants)}
        even = {c.name: min(c.value, EVEN_SIZES[i % len(EVEN_SIZES)]) for i, c in enumerate(constants)}
        floor, factors = 16, (64, 16, 4)
        out = [("small_odd", odd), ("small_even", even)]
    else:
        base = {c.name: min(c.value, max(SMALL_SIZES[-1], (c.value // 16) | 1) + 2 * i)
                for i, c in enumerate(constants)}
        even = {c.name: min(c.value, max(64, c.value // 16) // 2 * 2 + 2 * i) for i, c in enumerate(constants)}
        floor, factors = 64, (8, 4, 2)
        out = [("mid_even", even)]
    multiples: dict[str, int] = {}
    for c in sorted(constants, key=lambda c: c.value):
        step = math.lcm(1, *(multiples[d.name] for d in constants if 1 < d.value < c.value and c.value % d.value == 0))
        multiples[c.name] = min(c.value, step * -(-base[c.name] // step))
    out.append((f"{slot}_multiple", {c.name: multiples[c.name] for c in constants}))
    out += [(f"{slot}_scaled", {k: max(min(v, floor), v // f) for k, v in perf.items()}) for f in factors]
    partial = dict(base)
    for c in sorted(constants, key=lambda c: -c.value)[:-1]:  # the largest back to its written value first
        partial = {**partial, c.name: c.value}
        out.append((f"{slot}_partial", partial))
    # two constants that must stay related (a LayerNorm over the last dimension of a transposed
    # convolution's output: that width and the channels as written), the others small
    largest = sorted(constants, key=lambda c: -c.value)[:MAX_PAIRED]  # bounded: n constants make n^2/2 pairs
    pairs = sorted(itertools.combinations(largest, 2), key=lambda p: -(p[0].value + p[1].value))
    out += [(f"{slot}_pair", {**base, a.name: a.value, b.name: b.value}) for a, b in pairs]
    return [(name, values) for name, values in out if n and values != perf]


@dataclass
class DrawnCase:
    """A case as drawn: its size constants, the seed its module was built with, and its draws: on the
    CPU a stored-nowhere ``main`` draw and a ``hidden`` one of other inputs (what the output depends
    on, which inputs are random); the performance case usually as shapes only (``main.meta``, no
    ``hidden``), with the values no generator makes filled in by :func:`fixed_values`."""

    name: str
    kind: str
    values: dict[str, int]
    seed: int
    main: Draw
    hidden: Draw | None = None


def draw_cases(
    src: ProblemSource, seed: int, max_bytes: int, search_s: float, notes: list[str],
    max_cpu_bytes: int = MAX_CPU_BYTES,
    probe_s: float | None = None,
) -> list[DrawnCase]:
    """The correctness cases, each at the first sizes the problem accepts (the variant of
    :func:`size_variants`, else :func:`other_sizes` in turn, within ``search_s`` seconds and
    ``max_bytes`` of buffers per case), run on the CPU; then the performance case as written, on
    the meta device (:func:`draw_shapes`: no value computed). Where the meta device fails, or no
    correctness case fits, the performance case runs on the CPU instead if its buffers take at most
    ``max_cpu_bytes``. Every module is built with ``seed`` (the state it keeps comes from it). What
    was left out, and why, goes to ``notes``. With ``probe_s``, the first case drawn on the CPU (the
    smallest) also probes what its output depends on (:class:`~.torch_problem.Probe`, for
    :func:`degenerate`) in that draw.

    Raises:
        TorchProblemError: the problem is not convertible, or the performance case runs neither on
            the meta device nor (too large) on the CPU.
    """
    variants = size_variants(src.constants)
    perf_name, _, perf_values = variants[-1]
    perf: DrawnCase | None = None
    meta_failed = None
    try:  # the problem as written first: whether it converts at all is mostly decided there
        perf = DrawnCase(perf_name, "performance", perf_values, seed, draw_shapes(src, perf_values, seed))
    except SizesRejected as exc:
        meta_failed = str(exc)
    left_out: list[str] = []
    cases = _correctness_cases(src, variants[:-1], seed, perf, max_bytes, search_s, left_out, probe_s)
    if not cases and perf is not None and (bound := min(max_cpu_bytes, _bytes(perf.main))) > max_bytes:
        # a module whose own state is that large at every size (VGG's 0.5 GiB of weights): one case of
        # smaller sizes costs less on the CPU than the performance case, which would run there instead
        larger: list[str] = []
        cases = _correctness_cases(src, variants[:1], seed, perf, bound, search_s, larger, probe_s)
        if cases:
            left_out = [*larger, f"one correctness case of up to {bound / 2**20:.4g} MiB (more than the usual "
                        f"{max_bytes / 2**20:.4g} MiB): the buffers of every smaller size take more than that"]
    notes += left_out
    if perf is None or not cases:
        perf = _perf_on_cpu(src, perf_name, perf_values, seed, cases, perf, meta_failed, max_cpu_bytes, notes,
                            None if cases else probe_s)
        kept = []
        for c in cases:
            try:
                same_layout(c.main, perf.main, src.label, f"the sizes of case {c.name}")
                kept.append(c)
            except TorchProblemError as exc:
                notes.append(f"correctness case {c.name} left out: {exc}")
        cases = kept
    if not cases:
        notes.append("no correctness case of other sizes: the performance case is the only one (it is validated too)")
    return [*cases, perf]


def _correctness_cases(
    src: ProblemSource, variants: list[tuple[str, str, dict[str, int]]], seed: int, perf: DrawnCase | None,
    max_bytes: int,
    search_s: float, notes: list[str], probe_s: float | None = None,
) -> list[DrawnCase]:
    perf_values = {c.name: c.value for c in src.constants}
    deadline = time.monotonic() + search_s
    cases: list[DrawnCase] = []
    for name, kind, values in variants:
        tried = [(name, values)]
        if name != "check":
            tried += other_sizes(src.constants, name.removesuffix("_odd"))
        first: str | None = None
        attempts, found = 0, None
        for i, (cname, cvalues) in enumerate(tried):
            if i and (cvalues == perf_values or any(cvalues == c.values for c in cases)
                      or cvalues in [v for _, v in tried[:i]]):
                continue
            if i and time.monotonic() > deadline:
                first = f"{first}; the search for other sizes stopped after {search_s:g} s"
                break
            attempts += 1
            try:
                found = _draw_case(src, cname, kind, cvalues, seed, perf, max_bytes, None if cases else probe_s)
                break
            except CpuOutOfMemory:  # not a size the problem refuses: a case lost to a crowded machine is a weaker check
                raise
            except SizesRejected as exc:
                first = first or str(exc)
        if found is None:
            others = (f"; nor {attempts - 1} other size sets (odd, even, multiples, scaled down, partly as written)"
                      if attempts > 1 else "")
            notes.append(f"correctness case {name} ({_scaled(values, perf_values)}) left out: {first}{others}")
            continue
        cases.append(found)
        if found.name != name:
            notes.append(f"correctness case {found.name} ({_scaled(found.values, perf_values)}) instead of {name} "
                         f"({_scaled(values, perf_values)}), which the problem does not accept: {first}")
    return cases


def _perf_on_cpu(
    src: ProblemSource, name: str, values: dict[str, int], seed: int, cases: list[DrawnCase], shapes: DrawnCase | None,
    meta_failed: str | None, max_cpu_bytes: int, notes: list[str], probe_s: float | None = None,
) -> DrawnCase:
    """The performance case run on the CPU (twice: a second draw of other inputs) where the meta
    device fails or no correctness case checks the conversion, if its buffers fit ``max_cpu_bytes``
    (counted on the meta device, else scaled up from the largest correctness case)."""
    why = f"it fails on the meta device ({meta_failed})" if meta_failed else "no correctness case runs on the CPU"
    if shapes is not None:
        estimate = float(sum(a.nbytes for a in _buffers(shapes.main)))
    elif cases:
        estimate = max(_scaled_bytes(c.main, c.values, values) for c in cases)
    else:
        raise TorchProblemError(f"{src.label}: the performance case cannot be sized: {why}, and no smaller "
                                "case runs on the CPU")
    if estimate > max_cpu_bytes:
        raise TorchProblemError(
            f"{src.label}: the performance case needs the CPU ({why}), but its buffers take about "
            f"{estimate / 2**30:.4g} GiB (more than {max_cpu_bytes / 2**30:.3g} GiB): make forward run on the meta "
            "device (no .item(), no shapes that depend on values), or import smaller sizes"
        )
    notes.append(f"the performance case ran on the CPU ({estimate / 2**20:.3g} MiB of buffers): {why}")
    main = draw(src, values, seed, reference64=True, probe_s=probe_s)
    hidden = draw(src, values, seed + HIDDEN_SEED_OFFSET)
    same_layout(main, hidden, src.label, "a second draw")
    return DrawnCase(name, "performance", values, seed, main, hidden)


def fixed_values(src: ProblemSource, cases: list[DrawnCase], max_cpu_bytes: int, notes: list[str]) -> None:
    """Give the performance case drawn on the meta device (the last of ``cases``) what only values
    show: the module's state and how each part of it is drawn (:func:`module_state`: the module
    alone on the CPU, without inputs or forward) and the forward arguments no random function makes
    (:func:`fixed_inputs`), each run bounded by ``max_cpu_bytes``. A module whose state is larger
    gets the rules of the largest correctness case (its parameters drawn from the ranges their
    defaults have there), unless it keeps state (a mask) that only the build would give.

    Raises:
        TorchProblemError: what must be built does not fit ``max_cpu_bytes``, or the build differs
            from the meta device's shapes.
    """
    perf = cases[-1]
    d, label = perf.main, src.label
    if not d.meta:
        return
    state_bytes = sum(a.nbytes for a in d.state)
    if d.state and state_bytes <= max_cpu_bytes:
        state, rules = module_state(src, perf.values, perf.seed)
        if [(a.name, a.shape, a.dtype) for a in state] != [(a.name, a.shape, a.dtype) for a in d.state]:
            raise TorchProblemError(f"{label}: the module built on the CPU has other parameters or shapes "
                                    "than on the meta device")
        d.state, d.params = state, rules
    elif d.state:
        like = cases[-2] if len(cases) > 1 else None  # the largest correctness case
        rules = like.main.params if like is not None else {}
        kept = [name for name, rule in rules.items() if rule.generator is None]
        if like is None or kept:
            raise TorchProblemError(
                f"{label}: the module's state at the performance sizes takes {state_bytes / 2**30:.3g} GiB (more than "
                f"{max_cpu_bytes / 2**30:.3g} GiB to build on the CPU), and {listed(kept) or 'its parameters'} need "
                "the module's own values; import smaller sizes"
            )
        d.params = dict(rules)
        notes.append(
            f"the module's state at the performance sizes ({state_bytes / 2**30:.3g} GiB) was not built on the CPU: "
            f"its parameters are drawn from the ranges their defaults have in case {like.name}"
        )
    fixed = [a for a in d.args if a.tensor and a.drawn_from is None and not a.random]
    if fixed:
        made = sum(a.nbytes for a in d.args if a.tensor and a.drawn_from is None)  # drawn and then changed ones too
        if made > max_cpu_bytes:
            raise TorchProblemError(
                f"{label}: {listed([a.name for a in fixed])} of the performance case are made without random numbers, "
                f"so their values are needed, but get_inputs() makes {made / 2**30:.3g} GiB of such tensors (more than "
                f"{max_cpu_bytes / 2**30:.3g} GiB on the CPU)"
            )
        arrays = fixed_inputs(src, perf.values, perf.seed, [a.name for a in fixed])
        for a in fixed:
            if arrays[a.name].shape != a.shape:
                raise TorchProblemError(f"{label}: get_inputs() argument {a.name!r} has another shape on the CPU than "
                                        "on the meta device")
            a.array = arrays[a.name]


def _scaled(values: dict[str, int], perf: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items() if v != perf[k]) or "as written"


def _draw_case(
    src: ProblemSource, name: str, kind: str, values: dict[str, int], seed: int, perf: DrawnCase | None, max_bytes: int,
    probe_s: float | None = None,
) -> DrawnCase:
    """One correctness case drawn twice (other inputs the second time), or why it does not fit: its
    bytes are counted on the meta device first (a layer whose width is no size constant stays large),
    else guessed from the performance case's."""
    try:
        shapes: Draw | None = draw_shapes(src, values, seed)
    except SizesRejected:  # the CPU may still run it: guess
        shapes = None
    if shapes is not None:
        counted = sum(a.nbytes for a in _buffers(shapes))
        if counted > max_bytes:
            raise SizesRejected(f"{counted} bytes of buffers (more than {max_bytes})")
    elif perf is not None and (estimate := _scaled_bytes(perf.main, perf.values, values)) > 4 * max_bytes:
        raise SizesRejected(f"about {estimate:.3g} bytes of buffers (more than {max_bytes})")
    main = draw(src, values, seed, reference64=True, probe_s=probe_s)
    hidden = draw(src, values, seed + HIDDEN_SEED_OFFSET)
    if perf is not None:
        try:
            same_layout(main, perf.main, src.label, f"the sizes of case {name}")
        except TorchProblemError as exc:
            raise SizesRejected(str(exc)) from None
    same_layout(main, hidden, src.label, "a second draw")
    size = sum(a.nbytes for a in _buffers(main))
    if size > max_bytes:
        raise SizesRejected(f"{size} bytes of buffers (more than {max_bytes})")
    return DrawnCase(name, kind, values, seed, main, hidden)


def _scaled_bytes(d: Draw, values: dict[str, int], to: dict[str, int]) -> float:
    """The bytes of ``d``'s buffers at the sizes ``to``, guessed from their sizes at ``values``: each
    dimension equal to a constant's value there scales with that constant."""
    ratio: dict[int, float] = {}
    for k, v in values.items():
        ratio.setdefault(v, to[k] / v)
    return sum(float(a.nbytes) * math.prod(ratio.get(dim, 1.0) for dim in a.shape) for a in _buffers(d))


def _bytes(d: Draw) -> int:
    return sum(a.nbytes for a in _buffers(d))


def _buffers(d: Draw) -> list[Arg]:
    return [*(a for a in d.args if a.tensor), *d.state, *d.outputs]


def same_layout(a: Draw, b: Draw, label: str, what: str) -> None:
    """Both draws have the same arguments, dtypes and ranks (and shapes, for a second draw)."""
    def layout(d: Draw, shapes: bool) -> list[tuple[Any, ...]]:
        return [(x.name, x.dtype, len(x.shape), x.shape if shapes else None, x.tensor)
                for x in [*d.args, *d.state, *d.outputs]]

    same_sizes = what == "a second draw"
    if layout(a, same_sizes) != layout(b, same_sizes):
        detail = "shapes" if same_sizes else "arguments, dtypes or ranks"
        raise TorchProblemError(
            f"{label}: {what} gives other {detail} ({_describe(a)} vs {_describe(b)}); shapes must be fixed by "
            "get_inputs and the size constants"
        )


def _describe(d: Draw) -> str:
    return ", ".join(f"{x.name}{list(x.shape)}" if x.tensor else f"{x.name}={x.number!r}"
                     for x in [*d.args, *d.state, *d.outputs])


def degenerate(src: ProblemSource, cases: list[DrawnCase], names: dict[str, str], probe_s: float,
               notes: list[str]) -> list[str]:
    """What a kernel may skip and still pass, one line each: an output that is constant (or the same
    for two draws of every input), and each input or parameter whose redraw alone leaves every output
    unchanged (found on the smallest case within about ``probe_s`` seconds). ``names`` maps the
    draws' keys (``arg:x``, ``state:fc.weight``, ``out:0``) to buffer names. State that forward updates
    but does not read (BatchNorm's running statistics in training mode) is not a finding."""
    found = []
    ran = [c for c in cases if c.hidden is not None]  # on the CPU: with values
    count = len(cases[-1].main.outputs)
    for k in range(count):
        which = "the output" if count == 1 else f"output {names[f'out:{k}']!r}"
        outputs = [(c.main.outputs[k].array, c.hidden.outputs[k].array) for c in ran if c.hidden is not None]
        if outputs and all(a is not None and a.size > 1 and np.all(a == a.reshape(-1)[0]) for a, _ in outputs):
            values = {float(a.reshape(-1)[0]) for a, _ in outputs if a is not None}
            what = "all zero" if values == {0.0} else ("constant (every element "
                                                       f"{', '.join(f'{v:g}' for v in sorted(values))})")
            found.append(f"{which} is {what} on every case: a kernel may write it without reading any input")
        elif (outputs and all(a is not None and b is not None and le_bytes(a) == le_bytes(b) for a, b in outputs)
              and any(map(_inputs_differ, ran))):
            found.append(f"{which} is the same for two draws of every input: a kernel may ignore the inputs")
    unchanged = "the output does not change" if count == 1 else "no output changes"
    smallest = cases[0]
    probe = smallest.main.probe  # probed in its draw where draw_cases was given probe_s
    if probe is None:
        try:
            probe = draw(src, smallest.values, smallest.seed, probe_s=probe_s).probe
        except TorchProblemError as exc:  # drawn before: only a module that changes between runs gets here
            notes.append(f"which inputs the output depends on was not checked: {exc}")
            return found
    assert probe is not None  # draw returns one with probe_s
    restored = set(smallest.main.restored)
    for name in probe.inputs:
        found.append(f"input {names[f'arg:{name}']!r}: {unchanged} when it alone is redrawn: a kernel may ignore it")
    for name in probe.state:
        buffer = names[f"state:{name}"]
        if name not in restored:
            found.append(f"parameter {buffer!r}{f' ({name})' if name != buffer else ''}: {unchanged} when it alone "
                         "is redrawn: a kernel may ignore it")
    if probe.untried:
        untried = listed([names.get(f"arg:{n}", names.get(f"state:{n}", n)) for n in probe.untried])
        notes.append(f"not checked whether the output depends on {untried} (no way to redraw it, or the time ran out)")
    return found


def _inputs_differ(case: DrawnCase) -> bool:
    if case.hidden is None:
        return False
    count = len(case.main.outputs)  # the outputs are last
    pairs = zip(_buffers(case.main)[:-count], _buffers(case.hidden)[:-count], strict=True)
    return any(a.array is not None and b.array is not None and le_bytes(a.array) != le_bytes(b.array) for a, b in pairs)

