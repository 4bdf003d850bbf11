"""Inputs drawn from a few values: the ``choice`` generator, defined once.

``{"generator": "choice", "values": [-1.0, 1.0]}`` draws every element as one of ``values``, each
entry equally likely (repeat a value to weight it), for inputs whose values are a small set:
KernelBench's hinge-loss targets (``torch.randint(0, 2, (N,)).float() * 2 - 1``: -1 or +1), 0/1
masks, one-hot rows. A kernel may rely on the set (``t > 0 ? 1 - p : 1 + p``) as it may on the
problem's own inputs; a continuous draw of the same range would judge it a mismatch.

The values are rounded to the buffer's dtype once (:func:`table`: NumPy's cast, round to nearest
even), refused when the workload loads where they do not fit it (:func:`check_fits`: an overflow,
or for an integer dtype a value that is not an integer of its range). Element i of a draw of k
values is then ``table[j]``, j being what a ``randint`` over [0, k) draws at element i under the
same key, in every implementation:

- the host (``evaluation/inputs.py``): ``table[rng.integers(0, k, n)]`` on the buffer's stream;
- the device (``support/fill.cu``'s ``ko_choice_<element bytes>``, harness feature ``choice_draw``,
  PROTOCOL.md): j from the Philox words ``ko_fill``'s randint reads for element i, the table sent as
  numbers exactly of the dtype (:func:`table`), which the harness turns into the elements' bits;
- ``torch_fill.py`` (the PyTorch reference's draws): the same kernel with the same table's bits
  (:func:`table_bits`);
- the tests' pretend GPU: its randint, then the table.

So on each of them a choice draw is the randint(0, k) draw of the same key looked up in the table,
bit for bit. A ``structure`` (:mod:`kernelopt_mcp.input_structure`) applies after the draw, as
for the other drawn generators.

A problem whose ``get_inputs()`` makes a float input of at most :data:`MAX_VALUES` distinct values
in every draw is imported as a choice over them (:func:`detect`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from .dtypes import DType
from .input_structure import Drawn, StructureField, matrix_dims, structure_of

#: the most values a choice draws from (a wider set is a randint or a uniform)
MAX_VALUES = 16
#: the fewest elements per distinct value a draw must show for :func:`detect` to take a float input
#: for a choice: a continuous input shows a new value in (almost) every element, and with this many
#: a set of k equally likely values misses one with probability below k * e^-16
MIN_ELEMENTS_PER_VALUE = 16


class Choice(Drawn):
    """Every element one of ``values``, each entry equally likely (repeat one to weight it): inputs whose
    values are a few numbers, such as -1/+1 targets, 0/1 masks or one-hot rows."""

    generator: Literal["choice"]
    values: list[float] = Field(description=f"2 to {MAX_VALUES} finite numbers (two of them distinct at least), each "
                                "drawn with equal probability (repeat one to weight it), rounded to the buffer's "
                                "dtype; e.g. [-1, 1]", json_schema_extra={"minItems": 2, "maxItems": MAX_VALUES})
    structure: StructureField = None

    @field_validator("values")
    @classmethod
    def _check_values(cls, values: list[float]) -> list[float]:
        check_values(values)
        return values


def check_values(values: Sequence[float]) -> None:
    """Raises ValueError naming the problem: more than :data:`MAX_VALUES` values, one not finite,
    fewer than two distinct ones (none, or a constant)."""
    _check_drawable(values)
    if len(set(values)) < 2:
        raise ValueError(f"choice needs at least two distinct values, got only {values[0]:g} (one value is a constant: "
                         f'{{"generator": "constant", "value": {values[0]:g}}})')


def _check_drawable(values: Sequence[float]) -> None:
    """What any draw needs (the harness's rule too): 1 to :data:`MAX_VALUES` finite numbers."""
    if len(values) > MAX_VALUES:
        raise ValueError(f"choice takes at most {MAX_VALUES} values, got {len(values)} (a wider set is a randint "
                         "or a uniform)")
    for i, v in enumerate(values):
        if not math.isfinite(v):
            raise ValueError(f"values[{i}] is {v}: every value of a choice must be finite")
    if not values:
        raise ValueError("choice needs values to choose from, got none")


def choice_of(gen: Any) -> Choice | None:
    """The choice a generator draws: itself, or (a data file) the one it records as ``drawn_from``."""
    for g in (gen, getattr(gen, "drawn_from", None)):
        if isinstance(g, Choice):
            return g
    return None


def table(values: Sequence[float], dtype: DType) -> np.ndarray:
    """``values`` in ``dtype`` (an array of ``dtype.numpy``): floats rounded to nearest even (NumPy's
    cast), integers as they are.

    Raises:
        ValueError: a value that does not fit ``dtype`` (naming it and its index): one the rounding
            makes infinite, or for an integer dtype one that is not an integer of its range.
    """
    _check_drawable(values)
    wide = np.asarray(values, dtype=np.float64)
    if dtype.is_float:
        with np.errstate(over="ignore"):
            out = wide.astype(dtype.numpy)
        for over in np.flatnonzero(~np.isfinite(out.astype(np.float64))):
            import ml_dtypes

            largest = float(ml_dtypes.finfo(dtype.numpy).max)
            raise ValueError(f"values[{over}] = {wide[over]:g} overflows {dtype} (whose largest value is {largest:g})")
        return out
    info = np.iinfo(dtype.numpy)
    for i, v in enumerate(wide):
        if not float(v).is_integer():
            raise ValueError(f"values[{i}] = {v:g} is not an integer, and the buffer is {dtype}")
        if not info.min <= int(v) <= info.max:
            raise ValueError(f"values[{i}] = {int(v)} is outside {dtype}'s range {info.min}..{info.max}")
    return np.array([int(v) for v in wide], dtype=dtype.numpy)


def exact_values(values: Sequence[float], dtype: DType) -> list[float]:
    """The numbers the harness is sent for a choice draw: :func:`table`'s, each exactly a ``dtype``
    value (the harness refuses any other: it turns them into the elements' bits without rounding)."""
    return [float(v) for v in table(values, dtype).astype(np.float64)]


def table_bits(values: Sequence[float], dtype: DType) -> list[int]:
    """Each value's bits as ``dtype`` (little-endian, as an unsigned integer): the table
    ``ko_choice_<bytes>`` takes, zero-extended to 64 bits."""
    raw = table(values, dtype).astype(dtype.numpy.newbyteorder("<")).tobytes()
    size = dtype.itemsize
    return [int.from_bytes(raw[i:i + size], "little") for i in range(0, len(raw), size)]


def draw(rng: np.random.Generator, values: Sequence[float], dtype: DType, count: int) -> np.ndarray:
    """``count`` elements of ``dtype``, each one of ``values`` (the host's draw: the table at the
    randint over [0, k) of ``rng``)."""
    return table(values, dtype)[rng.integers(0, len(values), size=count, dtype=np.int64)]


def check_fits(gen: Any, shape: Sequence[int], dtype: DType) -> None:
    """Whether a buffer of ``shape`` and ``dtype`` can be drawn by ``gen`` (its own, or its data file's
    ``drawn_from``): a structure's matrices (:func:`~.input_structure.matrix_dims`) and a choice's
    values (:func:`table`).

    Raises:
        ValueError: what does not fit.
    """
    structure = structure_of(gen)
    if structure is not None:
        matrix_dims(structure, shape)
    choice = choice_of(gen)
    if choice is not None:
        table(choice.values, dtype)


def moments(values: Sequence[float]) -> tuple[float, float]:
    """(mean, standard deviation) of a choice's draws."""
    wide = np.asarray(values, dtype=np.float64)
    return float(wide.mean()), float(wide.std())


def detect(arrays: Sequence[np.ndarray]) -> list[float] | None:
    """The sorted distinct values of ``arrays`` (one input's values in several draws; the caller
    asks for float inputs only) when they are a choice's: 2 to :data:`MAX_VALUES` of them, all
    finite, over at least :data:`MIN_ELEMENTS_PER_VALUE` elements per value in all (fewer could be
    a few draws of a continuous input); else None. Zero is +0.0."""
    seen: set[float] = set()
    elements = 0
    for a in arrays:
        flat = a.reshape(-1)
        if flat.size == 0:
            continue
        if np.unique(flat[:1024]).size > MAX_VALUES:  # a continuous input, told at once
            return None
        distinct = np.unique(flat.astype(np.float64))
        if not np.isfinite(distinct).all():
            return None
        seen.update(float(v) + 0.0 for v in distinct)  # + 0.0: -0.0 and 0.0 are one value
        if len(seen) > MAX_VALUES:
            return None
        elements += flat.size
    if len(seen) < 2 or elements < MIN_ELEMENTS_PER_VALUE * len(seen):
        return None
    return sorted(seen)
