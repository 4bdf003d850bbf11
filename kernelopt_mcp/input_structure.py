"""Structured inputs: drawn matrices that are triangular or symmetric, defined once.

A drawn generator (``uniform``, ``normal``, ``randint``) may carry ``structure``:
``{"kind": "triu" | "tril" | "symmetric", "diagonal": 0}``. It acts on the last two dimensions of
the buffer (rows, columns); leading dimensions are a batch of matrices. The whole buffer is drawn
as without it, then in every matrix the element at row r, column c is

- ``triu``: set to zero where ``c - r < diagonal`` (``torch.triu``'s rule);
- ``tril``: set to zero where ``c - r > diagonal`` (``torch.tril``'s);
- ``symmetric`` (square matrices, diagonal 0): where ``r > c``, given the bits of element (c, r).

Nothing is computed: zeros are all-zero bytes (+0 in every dtype) and the mirror copies bits, so
every implementation turns the same draw into the same bytes: the host's NumPy (:func:`apply`, for
``evaluation/inputs.py``), the device's ``ko_structure_<element bytes>`` (``support/fill.cu``,
launched by the harness right after the fill: PROTOCOL.md, ``structure``; and by ``torch_fill.py``
after its own), and the tests' pretend GPU.

A problem whose ``get_inputs()`` makes such matrices (``torch.triu(torch.rand(N, N))``,
``(A + A.T) / 2``) is imported with the structure its values show (:func:`detect`), so a kernel
may rely on it as it may on the problem's own inputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

StructureKind = Literal["triu", "tril", "symmetric"]
#: the most a diagonal may be off the main one (no matrix is wider than a buffer's element bound)
MAX_DIAGONAL = 2**48
#: the fewest elements a detected structure must have zeroed or mirrored in the values it is found in:
#: a random value is zero (or equal to its mirror) by chance with probability 1/2 at the most (a
#: ReLU's output), so all of them by chance is at most 2^-16; an import's smallest case (5 x 5
#: matrices, drawn twice) holds 20
MIN_EVIDENCE = 16


class Structure(BaseModel):
    """What is done to every matrix of a drawn buffer after the draw (module docstring)."""

    model_config = ConfigDict(extra="forbid")

    kind: StructureKind = Field(
        description="triu: zero where column - row < diagonal; tril: zero where column - row > diagonal; symmetric: "
        "each element below the diagonal takes the value of its mirror above it (square matrices)"
    )
    diagonal: int = Field(0, ge=-MAX_DIAGONAL, le=MAX_DIAGONAL, description="triu / tril: the diagonal kept from "
                          "(0 the main one, > 0 above it, < 0 below it), as torch.triu's and torch.tril's")

    @model_validator(mode="after")
    def _check(self) -> Structure:
        if self.kind == "symmetric" and self.diagonal != 0:
            raise ValueError("structure symmetric mirrors about the main diagonal: diagonal must be 0")
        return self


StructureField = Annotated[
    Structure | None,
    Field(description="the matrices over the buffer's last two dimensions made triangular or symmetric after the draw "
          '(e.g. {"kind": "triu"}); leading dimensions are a batch'),
]


class Drawn(BaseModel):
    """A generator that may carry ``structure``: left out of its JSON when it has none, so a
    generator without one reads and writes as before structures existed."""

    model_config = ConfigDict(extra="forbid")

    @model_serializer(mode="wrap")
    def _without_empty_structure(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict) and data.get("structure", 0) is None:
            del data["structure"]
        return data


def structure_of(gen: Any) -> Structure | None:
    """The structure of a generator's draws: its own, or (a data file) that of the generator it
    records as ``drawn_from``."""
    own = getattr(gen, "structure", None)
    return own if own is not None else getattr(getattr(gen, "drawn_from", None), "structure", None)


def matrix_dims(structure: Structure, shape: Sequence[int]) -> tuple[int, int]:
    """(rows, columns) of the matrices of a buffer of ``shape``.

    Raises:
        ValueError: fewer than two dimensions, or non-square matrices for ``symmetric``.
    """
    if len(shape) < 2:
        raise ValueError(f"structure {structure.kind} needs matrices: at least two dimensions (the last two are "
                         f"rows and columns), got shape {list(shape)}")
    rows, cols = int(shape[-2]), int(shape[-1])
    if structure.kind == "symmetric" and rows != cols:
        raise ValueError(f"structure symmetric needs square matrices; the last two dimensions of shape {list(shape)} "
                         f"are {rows} x {cols}")
    return rows, cols


def _zeroed(structure: Structure, rows: int, cols: int) -> np.ndarray:
    """Where ``structure`` writes in a rows x cols matrix (zeros, or the mirror's bits), as a mask."""
    if structure.kind == "triu":
        return np.tri(rows, cols, structure.diagonal - 1, dtype=bool)  # c - r <= diagonal - 1
    if structure.kind == "tril":
        return ~np.tri(rows, cols, structure.diagonal, dtype=bool)  # not c - r <= diagonal
    return np.tri(rows, cols, -1, dtype=bool)  # below the main diagonal


def apply(values: np.ndarray, structure: Structure) -> np.ndarray:
    """``values`` (C-contiguous, shape (..., rows, columns)) with ``structure`` applied in place,
    bit for bit as the device applies it; returns ``values``.

    Raises:
        ValueError: a shape the structure does not fit (:func:`matrix_dims`).
    """
    rows, cols = matrix_dims(structure, values.shape)
    if values.size == 0:
        return values
    bits = values.view(np.dtype(f"u{values.dtype.itemsize}"))  # bits, not values: -0.0 and NaNs copy as they are
    where = _zeroed(structure, rows, cols)
    if structure.kind == "symmetric":
        bits[..., where] = np.swapaxes(bits, -1, -2)[..., where]  # the right side is a copy, read before the write
    else:
        bits[..., where] = 0
    return values


def kept(values: np.ndarray, structure: Structure) -> np.ndarray:
    """The elements of ``values`` that ``structure`` leaves as drawn, flat (what a fit of the
    generator should see: not the zeros, nor the mirrored copies twice)."""
    rows, cols = matrix_dims(structure, values.shape)
    return values[..., ~_zeroed(structure, rows, cols)].reshape(-1)


def detect(arrays: Sequence[np.ndarray]) -> Structure | None:
    """The structure every one of ``arrays`` (the values one input took in several draws, each of
    shape (..., rows, columns), of a float or integer dtype) shows, or None.

    Upper triangular (everything below diagonal k >= 0 zero, something above the main diagonal
    nonzero) is ``triu`` with the highest such k; lower likewise ``tril``; exactly equal to its
    transpose, square and not diagonal, ``symmetric``. A diagonal matrix is none of them. The
    structure must have zeroed or mirrored at least :data:`MIN_EVIDENCE` elements in all, so a
    few zeros by chance in tiny matrices are not taken for one.
    """
    if not arrays or any(a.ndim < 2 or a.size == 0 or min(a.shape[-2:]) < 2 or a.dtype.kind not in "fiu"
                         for a in arrays):
        return None
    low, high = math.inf, -math.inf  # the least and greatest column - row of a nonzero element
    for a in arrays:
        rows, cols = a.shape[-2:]
        r, c = np.nonzero(np.any(a.reshape(-1, rows, cols) != 0, axis=0))
        if r.size:
            low, high = min(low, int((c - r).min())), max(high, int((c - r).max()))
    found: Structure | None = None
    if low >= 0 and high > 0:  # (no nonzero element at all: low = inf, high = -inf, none of these)
        found = Structure(kind="triu", diagonal=int(low))
    elif high <= 0 and low < 0:
        found = Structure(kind="tril", diagonal=int(high))
    elif low < 0 < high and all(a.shape[-1] == a.shape[-2] and np.array_equal(a, np.swapaxes(a, -1, -2))
                                for a in arrays):
        found = Structure(kind="symmetric")
    if found is None:
        return None
    evidence = sum(int(_zeroed(found, *a.shape[-2:]).sum()) * (a.size // (a.shape[-2] * a.shape[-1])) for a in arrays)
    return found if evidence >= MIN_EVIDENCE else None
