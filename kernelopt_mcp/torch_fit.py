"""The generator an imported problem's input is drawn from when get_inputs() makes it by further
operations on random numbers (``(torch.rand(N, N) + 1) / 2``, ``torch.triu(torch.rand(N, N))``),
which no generator reproduces: one of the same range and spread, or, for a float input whose
values are a few numbers in every draw (``torch.randint(0, 2, (N,)).float() * 2 - 1``: -1 or +1),
a choice of them (:mod:`kernelopt_mcp.input_choice`), with the structure its values show in every
draw (triangular or symmetric matrices: :mod:`kernelopt_mcp.input_structure`), so a kernel that
relies on those values or that structure, as it may on the problem's own inputs, is not judged on
a continuous range or dense matrices. Split from :mod:`kernelopt_mcp.torch_import`, which uses it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import input_choice
from .dtypes import DType
from .input_structure import Structure, detect, kept

#: what a structure makes of every drawn matrix, in an import's notes
STRUCTURE_WORDS = {"triu": "upper triangular", "tril": "lower triangular", "symmetric": "symmetric"}


def fit_generator(values: np.ndarray, draws: list[np.ndarray], dtype: DType) -> dict[str, Any]:
    """The generator (as workload JSON) for an input whose values in one case are ``values``, and in
    every draw on the CPU (each case's main and hidden draws) ``draws``: :func:`fitted` to them,
    with the structure every draw shows (:func:`~.input_structure.detect`), fitted then to the
    elements the structure keeps (a triangle's zeros would drag the range down, or add a value)."""
    structure = detect(draws)
    if structure is not None:
        gen = fitted(kept(values, structure), dtype, [kept(d, structure) for d in draws])
        if gen["generator"] in ("uniform", "randint", "choice"):  # (constant kept values: no drawn generator)
            return {**gen, "structure": structure.model_dump()}
    return fitted(values, dtype, draws)


def fitted(values: np.ndarray, dtype: DType, draws: list[np.ndarray] | None = None) -> dict[str, Any]:
    """A generator of the values of ``values``: a float input whose ``draws`` (all of them; default
    ``values`` alone) take a few values only is a choice of them (:func:`~.input_choice.detect`);
    else integers (and bools) uniform over their range (randint), floats uniform over mean -+
    sqrt(3) std (the same spread), within their range."""
    choice = input_choice.detect(draws if draws is not None else [values]) if dtype.is_float else None
    if choice is not None:
        return {"generator": "choice", "values": choice}
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
    head = f"input {buffer!r} is made by operations on random numbers in get_inputs(), which no generator reproduces: "
    st = Structure.model_validate(gen["structure"]) if "structure" in gen else None
    shaped = ""
    if st is not None:
        diagonal = f" from diagonal {st.diagonal}" if st.diagonal else ""
        shaped = f" as {STRUCTURE_WORDS[st.kind]} matrices{diagonal} (structure {st.kind})"
    if gen["generator"] == "choice":
        values = gen["values"]
        shown = ", ".join(f"{v:g}" for v in values)
        if st is None:
            return (f"{head}drawn choice of its {len(values)} values [{shown}], each equally likely: get_inputs' own "
                    "values take only these in every draw, so a kernel may rely on them")
        return (f"{head}drawn choice of the {len(values)} values [{shown}] of the elements the structure keeps, each "
                f"equally likely,{shaped}: get_inputs' own values take only these, and have that structure, in every "
                "draw, so a kernel may rely on both")
    shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in gen.items()
                      if k not in ("generator", "structure"))
    head += f"drawn {gen['generator']} ({shown}: the range and spread of get_inputs' own values in case {case}"
    if st is None:
        return f"{head}) instead"
    return (f"{head}, of the elements the structure keeps){shaped}, as get_inputs' own values are in every draw: a "
            "kernel may rely on it")
