"""The cases of an imported PyTorch problem: which sizes, drawn how, and what the draws show.

The performance case is the problem as written; correctness cases scale its size constants down
(:func:`size_variants`), and where the problem rejects those sizes (a group count that must divide
the channels), other sizes are searched (:func:`other_sizes`) so that every problem keeps a
correctness case smaller than its performance case. :func:`degenerate` says what a kernel could
skip and still pass: an input or parameter the output does not depend on, a constant output.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .torch_problem import Arg, Draw, ProblemSource, SizeConstant, TorchProblemError, draw
from .torch_store import le_bytes

SMALL_SIZES = (5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61)
OTHER_ODD_SIZES = (9, 15, 21, 25, 27, 33, 35, 39, 45, 49, 51, 55, 57, 63, 65, 69)  # odd, with factors 3, 5, 7
EVEN_SIZES = (6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36)
MAX_CORRECTNESS_BYTES = 256 * 2**20  # all buffers of one correctness case
HIDDEN_SEED_OFFSET = 1_000_003


def size_variants(constants: list[SizeConstant]) -> list[tuple[str, str, dict[str, int]]]:
    """The cases' size constants: ``small_odd`` (each constant a distinct small prime, at most its
    own value), ``mid_odd`` (about 1/16 of each, odd and distinct) and ``perf`` (as written).
    Variants equal to an earlier one are left out."""
    small = {c.name: min(c.value, SMALL_SIZES[i % len(SMALL_SIZES)]) for i, c in enumerate(constants)}
    mid = {c.name: min(c.value, max(SMALL_SIZES[-1], (c.value // 16) | 1) + 2 * i) for i, c in enumerate(constants)}
    perf = {c.name: c.value for c in constants}
    out: list[tuple[str, str, dict[str, int]]] = []
    for name, kind, values in (("small_odd", "correctness", small), ("mid_odd", "correctness", mid), ("perf", "performance", perf)):
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
    needs). Every value is at most the written one."""
    n = len(constants)
    perf = {c.name: c.value for c in constants}
    if slot == "small":
        base = {c.name: min(c.value, SMALL_SIZES[i % len(SMALL_SIZES)]) for i, c in enumerate(constants)}
        odd = {c.name: min(c.value, OTHER_ODD_SIZES[i % len(OTHER_ODD_SIZES)]) for i, c in enumerate(constants)}
        even = {c.name: min(c.value, EVEN_SIZES[i % len(EVEN_SIZES)]) for i, c in enumerate(constants)}
        floor, factors = 16, (64, 16, 4)
        out = [("small_odd", odd), ("small_even", even)]
    else:
        base = {c.name: min(c.value, max(SMALL_SIZES[-1], (c.value // 16) | 1) + 2 * i) for i, c in enumerate(constants)}
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
    return [(name, values) for name, values in out if n and values != perf]


@dataclass
class DrawnCase:
    """A case as drawn: its size constants, seed, and the stored and hidden draws."""

    name: str
    kind: str
    values: dict[str, int]
    seed: int
    main: Draw
    hidden: Draw


def draw_cases(src: ProblemSource, seed: int, max_bytes: int, search_s: float, notes: list[str]) -> list[DrawnCase]:
    """The performance case as written, then each correctness case at the first sizes the problem
    accepts: the variant of :func:`size_variants`, else :func:`other_sizes` in turn, within
    ``search_s`` seconds and ``max_bytes`` of buffers per case. What was left out, and why, goes
    to ``notes``."""
    variants = size_variants(src.constants)
    perf_name, _, perf_values = variants[-1]
    seeds = {name: seed + 7919 * i for i, (name, _, _) in enumerate(variants)}
    # the problem as written first: whether it converts at all is decided there
    perf_seed = seeds[perf_name]
    perf = DrawnCase(perf_name, "performance", perf_values, perf_seed,
                     draw(src, perf_values, perf_seed, reference64=True), draw(src, perf_values, perf_seed + HIDDEN_SEED_OFFSET))
    same_layout(perf.main, perf.hidden, src.label, "a second draw")
    deadline = time.monotonic() + search_s
    cases: list[DrawnCase] = []
    for name, kind, values in variants[:-1]:
        tried = [(name, values)]
        if name != "check":
            tried += other_sizes(src.constants, name.removesuffix("_odd"))
        first: str | None = None
        attempts, found = 0, None
        for i, (cname, cvalues) in enumerate(tried):
            if i and (cvalues == perf_values or any(cvalues == c.values for c in cases) or cvalues in [v for _, v in tried[:i]]):
                continue
            if i and time.monotonic() > deadline:
                first = f"{first}; the search for other sizes stopped after {search_s:g} s"
                break
            attempts += 1
            try:
                found = _draw_case(src, cname, kind, cvalues, seeds[name], perf, max_bytes)
                break
            except TorchProblemError as exc:
                first = first or str(exc)
        if found is None:
            others = f"; nor {attempts - 1} other size sets (odd, even, multiples, scaled down, partly as written)" if attempts > 1 else ""
            notes.append(f"correctness case {name} ({_scaled(values, perf_values)}) left out: {first}{others}")
            continue
        cases.append(found)
        if found.name != name:
            notes.append(f"correctness case {found.name} ({_scaled(found.values, perf_values)}) instead of {name} "
                         f"({_scaled(values, perf_values)}), which the problem does not accept: {first}")
    if not cases:
        notes.append("no correctness case of other sizes: the performance case is the only one (it is validated too)")
    return [*cases, perf]


def _scaled(values: dict[str, int], perf: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items() if v != perf[k]) or "as written"


def _draw_case(
    src: ProblemSource, name: str, kind: str, values: dict[str, int], seed: int, perf: DrawnCase, max_bytes: int,
) -> DrawnCase:
    """One correctness case drawn twice (stored and hidden), or why it does not fit."""
    estimate = _estimated_bytes(perf, values)
    if estimate > 4 * max_bytes:  # a first guess: too large to draw at all
        raise TorchProblemError(f"about {estimate:.3g} bytes of buffers (more than {max_bytes})")
    main = draw(src, values, seed, reference64=True)
    hidden = draw(src, values, seed + HIDDEN_SEED_OFFSET)
    same_layout(main, perf.main, src.label, f"the sizes of case {name}")
    same_layout(main, hidden, src.label, "a second draw")
    size = sum(a.array.nbytes for a in _buffers(main) if a.array is not None)  # _buffers: arrays only
    if size > max_bytes:
        raise TorchProblemError(f"{size} bytes of buffers (more than {max_bytes})")
    return DrawnCase(name, kind, values, seed, main, hidden)


def _estimated_bytes(perf: DrawnCase, values: dict[str, int]) -> float:
    """The bytes of a case of ``values``, guessed from the performance case's buffers: each dimension
    equal to a constant's value there scales with that constant."""
    ratio: dict[int, float] = {}
    for k, v in perf.values.items():
        ratio.setdefault(v, values[k] / v)
    return sum(float(a.array.nbytes) * math.prod(ratio.get(d, 1.0) for d in a.shape)
               for a in _buffers(perf.main) if a.array is not None)


def _buffers(d: Draw) -> list[Arg]:
    return [*(a for a in d.args if a.array is not None), *d.state, d.output]


def same_layout(a: Draw, b: Draw, label: str, what: str) -> None:
    """Both draws have the same arguments, dtypes and ranks (and shapes, for a second draw)."""
    def layout(d: Draw, shapes: bool) -> list[tuple[Any, ...]]:
        return [(x.name, x.dtype, len(x.shape), x.shape if shapes else None, x.array is None) for x in [*d.args, *d.state, d.output]]

    same_sizes = what == "a second draw"
    if layout(a, same_sizes) != layout(b, same_sizes):
        detail = "shapes" if same_sizes else "arguments, dtypes or ranks"
        raise TorchProblemError(
            f"{label}: {what} gives other {detail} ({_describe(a)} vs {_describe(b)}); shapes must be fixed by "
            "get_inputs and the size constants"
        )


def _describe(d: Draw) -> str:
    return ", ".join(f"{x.name}{list(x.shape)}" if x.array is not None else f"{x.name}={x.number!r}" for x in [*d.args, *d.state, d.output])


def degenerate(src: ProblemSource, cases: list[DrawnCase], names: dict[str, str], probe_s: float, notes: list[str]) -> list[str]:
    """What a kernel may skip and still pass, one line each: an output that is constant (or the same
    for two draws of every input), and each input or parameter whose redraw alone leaves the output
    unchanged (found on the smallest case within about ``probe_s`` seconds). ``names`` maps the
    draws' keys (``arg:x``, ``state:fc.weight``) to buffer names. State that forward updates but
    does not read (BatchNorm's running statistics in training mode) is not a finding."""
    found = []
    outputs = [(c.main.output.array, c.hidden.output.array) for c in cases]
    if all(a is not None and a.size > 1 and np.all(a == a.reshape(-1)[0]) for a, _ in outputs):
        values = {float(a.reshape(-1)[0]) for a, _ in outputs if a is not None}
        what = "all zero" if values == {0.0} else f"constant (every element {', '.join(f'{v:g}' for v in sorted(values))})"
        found.append(f"the output is {what} on every case: a kernel may write it without reading any input")
    elif all(a is not None and b is not None and le_bytes(a) == le_bytes(b) for a, b in outputs) and any(map(_inputs_differ, cases)):
        found.append("the output is the same for two draws of every input: a kernel may ignore the inputs")
    smallest = cases[0]
    try:
        probe = draw(src, smallest.values, smallest.seed, probe_s=probe_s).probe
    except TorchProblemError as exc:  # drawn before: only a module that changes between runs gets here
        notes.append(f"which inputs the output depends on was not checked: {exc}")
        return found
    assert probe is not None  # draw returns one with probe_s
    restored = set(smallest.main.restored)
    for name in probe.inputs:
        found.append(f"input {names[f'arg:{name}']!r}: the output does not change when it alone is redrawn: a kernel may ignore it")
    for name in probe.state:
        buffer = names[f"state:{name}"]
        if name not in restored:
            found.append(f"parameter {buffer!r}{f' ({name})' if name != buffer else ''}: the output does not change when it "
                         "alone is redrawn: a kernel may ignore it")
    if probe.untried:
        untried = listed([names.get(f"arg:{n}", names.get(f"state:{n}", n)) for n in probe.untried])
        notes.append(f"not checked whether the output depends on {untried} (no way to redraw it, or the time ran out)")
    return found


def _inputs_differ(case: DrawnCase) -> bool:
    pairs = zip(_buffers(case.main)[:-1], _buffers(case.hidden)[:-1], strict=True)  # the output is last
    return any(a.array is not None and b.array is not None and le_bytes(a.array) != le_bytes(b.array) for a, b in pairs)


def listed(names: list[str], most: int = 6) -> str:
    """``a, b, c`` (and how many more past ``most``): a note stays one short line for a large network."""
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more
