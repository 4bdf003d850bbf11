"""The generator an imported problem's input is drawn from when get_inputs() makes it by further
operations on random numbers (``(torch.rand(N, N) + 1) / 2``, ``torch.triu(torch.rand(N, N))``),
which no generator reproduces: one of the same range and spread, with the structure its values
show in every draw (triangular or symmetric matrices: :mod:`kernelopt_mcp.input_structure`), so
a kernel that relies on that structure, as it may on the problem's own inputs, is not judged on
dense matrices. Split from :mod:`kernelopt_mcp.torch_import`, which uses it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .dtypes import DType
from .input_structure import Structure, detect, kept

#: what a structure makes of every drawn matrix, in an import's notes
STRUCTURE_WORDS = {"triu": "upper triangular", "tril": "lower triangular", "symmetric": "symmetric"}


def fit_generator(values: np.ndarray, draws: list[np.ndarray], dtype: DType) -> dict[str, Any]:
    """The generator (as workload JSON) for an input whose values in one case are ``values``, and in
    every draw on the CPU (each case's main and hidden draws) ``draws``: :func:`fitted` to the
    values, with the structure every draw shows (:func:`~.input_structure.detect`), fitted then to
    the elements the structure keeps (a triangle's zeros would drag the range down)."""
    structure = detect(draws)
    if structure is not None:
        gen = fitted(kept(values, structure), dtype)
        if gen["generator"] in ("uniform", "randint"):  # (constant kept values: no drawn generator to carry it)
            return {**gen, "structure": structure.model_dump()}
    return fitted(values, dtype)


def fitted(values: np.ndarray, dtype: DType) -> dict[str, Any]:
    """A generator of the range and spread of ``values``: integers (and bools) uniform over their
    range (randint), floats uniform over mean -+ sqrt(3) std (the same spread), within their range."""
    flat = values.astype(np.float64).reshape(-1)
    flat = flat[np.isfinite(flat)]
    if flat.size == 0:
        return {"generator": "constant", "value": 0.0}
    low, high = float(flat.min()), float(flat.max())
    if not dtype.is_float:
        return {"generator": "randint", "low": int(low), "high": int(high) + 1}
    if low == high:
        return {"generator": "constant", "value": low}
    mean, spread = float(flat.mean()), math.sqrt(3) * float(flat.std())
    return {"generator": "uniform", "low": max(low, mean - spread), "high": min(high, mean + spread)}


def fitted_note(buffer: str, case: str, gen: dict[str, Any]) -> str:
    """The import's note (one line) on input ``buffer`` drawn from ``gen``, fitted in ``case``."""
    shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in gen.items()
                      if k not in ("generator", "structure"))
    head = (f"input {buffer!r} is made by operations on random numbers in get_inputs(), which no generator reproduces: "
            f"drawn {gen['generator']} ({shown}: the range and spread of get_inputs' own values in case {case}")
    if "structure" not in gen:
        return f"{head}) instead"
    st = Structure.model_validate(gen["structure"])
    diagonal = f" from diagonal {st.diagonal}" if st.diagonal else ""
    return (f"{head}, of the elements the structure keeps) as {STRUCTURE_WORDS[st.kind]} matrices{diagonal} "
            f"(structure {st.kind}), as get_inputs' own values are in every draw: a kernel may rely on it")
