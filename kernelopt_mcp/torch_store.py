"""Writing an imported PyTorch problem's workload, and the tolerances and checks an imported
problem is judged by.

See :mod:`kernelopt_mcp.torch_import` for what is written and why. :data:`ORACLE_TEMPLATE` is the
NumPy lookup oracle (``reference.py``) that workloads imported in an earlier format carry, with
their inputs and outputs stored under ``data/`` and ``expected/``: such a workload still loads and
evaluates through it, and the oracle's sandbox recognises the template by it
(:mod:`kernelopt_mcp.evaluation.oracle_sandbox`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from .dtypes import DType
from .workload import DEFAULT_TOLERANCE, Tolerance


def sha256_of(array: np.ndarray) -> str:
    return hashlib.sha256(le_bytes(array)).hexdigest()


def le_bytes(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()


#: reference.py of a workload imported with its outputs stored under expected/ (the module's docstring says why)
ORACLE_TEMPLATE = '''"""NumPy oracle of {name}: the outputs of the PyTorch problem {problem}, computed with torch
{torch_version} by `kernelopt import-torch` and stored under expected/.

They are looked up by the bytes of the inputs: the workload's data files and the second draw each
names as its hidden_path. This needs neither torch nor the problem file, and it cannot compute
outputs for other inputs (they raise LookupError): import the problem again to change them.
The store is beside this file, else in the directory the workload was imported to (a copy of this
file, as `kernelopt optimize` keeps in its run directory, reads it there).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
IMPORTED_TO = {home!r}
INPUTS = {inputs!r}
SCALARS = {scalars!r}  # name -> "int" | "float"
OUTPUT = {output!r}


def input_key(params: dict) -> str:
    """sha256 over the input buffers' names, dtypes, sizes and bytes and the scalars' values."""
    h = hashlib.sha256()
    for name in INPUTS:
        a = np.ascontiguousarray(params[name])
        h.update(f"{{name}}:{{a.dtype.name}}:{{a.size}}\\0".encode())
        h.update(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())
    for name, kind in SCALARS.items():
        value = int(params[name]) if kind == "int" else float(params[name])
        h.update(f"{{name}}={{value!r}}\\0".encode())
    return h.hexdigest()


def store() -> Path:
    """The workload directory holding expected/index.json: this file's, else the one imported to."""
    for root in (HERE, Path(IMPORTED_TO)):
        if (root / "expected" / "index.json").is_file():
            return root
    raise LookupError(
        f"the stored outputs (expected/index.json) are neither beside this oracle ({{HERE}}) nor in the directory the "
        f"problem was imported to ({{IMPORTED_TO}}): keep the workload directory, or import the problem again"
    )


def reference(**params) -> dict:
    root = store()
    index = json.loads((root / "expected" / "index.json").read_text())
    entry = index.get(input_key(params))
    if entry is None:
        raise LookupError(
            "these inputs are not among those stored when the problem was imported (the workload's data files "
            "and their hidden_path draws): this oracle cannot compute others; evaluate with the workload's own "
            "files, or import the problem again"
        )
    if entry["dtype"] == "bfloat16":
        import ml_dtypes

        dtype = np.dtype(ml_dtypes.bfloat16)
    else:
        dtype = np.dtype(entry["dtype"])
    data = (root / entry["path"]).read_bytes()
    return {{OUTPUT: np.frombuffer(data, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(entry["shape"])}}
'''


def write_workload(root: Path, spec: dict[str, Any], *, problem: str, files: dict[str, bytes],
                   initial_cu: str | None) -> None:
    """Write the workload into ``root``: the problem (``problem.py``, the reference), the data files
    ``spec`` names (``files``: path relative to ``root`` -> bytes), the initial kernel and
    ``workload.json``."""
    (root / "problem.py").write_text(problem)
    if initial_cu is not None:
        (root / "initial.cu").write_text(initial_cu)
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "workload.json").write_text(json.dumps(spec, indent=2) + "\n")


def move_into_place(staging: Path, target: Path) -> None:
    """Rename the staged directory onto ``target`` (an existing one is moved aside, then removed)."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.rename(target, old)
    try:
        os.rename(staging, target)
    except BaseException:
        if old is not None:
            os.rename(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# --- how an imported problem is judged -----------------------------------------------------


#: Per output dtype. float32 is looser than workload.py's default (1e-5), as the bundled workloads
#: that reduce (sgemm, softmax, layernorm, reduce_sum) are: an imported module may sum in any order.
#: KernelBench itself checks with atol = rtol = 1e-2 for every dtype.
TORCH_TOLERANCE = {**DEFAULT_TOLERANCE, DType.float32: Tolerance(rtol=1e-4, atol=1e-4, source="dtype")}


#: ``--tolerance``: "strict" (by dtype, as above, atol relative to the output's RMS) or KernelBench's
#: torch.allclose(atol = rtol = 1e-2), its atol absolute.
TOLERANCE_MODES = ("strict", "kernelbench")
KERNELBENCH_TOLERANCE = Tolerance(rtol=1e-2, atol=1e-2, absolute=True, source="kernelbench")


def judged_as_imported(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with what sets an imported problem's checks apart: float outputs need only agree
    within the tolerance between two launches on the same inputs (torch's own reductions are not
    bitwise repeatable, and a float ``atomicAdd`` reduction is a correct kernel), and the roofline
    floor is the bytes term alone (torch counts the FLOPs of the module as written, which a
    smarter algorithm may avoid). Integer outputs stay bitwise (:meth:`WorkloadSpec.bitwise_outputs`)."""
    return {**spec, "deterministic": False, "cost": {**spec.get("cost", {}), "floor_from": "bytes"}}


def choose_tolerance(dtype: DType, needed: float, mode: str, notes: list[str]) -> dict[str, Any]:
    """The tolerance of an output of ``dtype`` under ``mode``, widened to 10x ``needed`` (the largest
    error of the module's own result against its float64 result) where that is more."""
    base = KERNELBENCH_TOLERANCE if mode == "kernelbench" else TORCH_TOLERANCE.get(dtype)
    if base is None:
        return {"rtol": 0.0, "atol": 0.0, "source": "dtype"}
    wider = widened(base, needed)
    if wider is not None:
        notes.append(
            f"tolerance widened to {wider.rtol:.3g} (the {base.source or 'dtype'} one is {base.rtol:g}): the module's "
            f"own {dtype} result differs from its float64 result by up to {needed:.3g} of the output's scale"
        )
        return wider.model_dump(exclude={"absolute"})
    chosen = {"rtol": base.rtol, "atol": base.atol, "source": base.source or "dtype"}
    return {**chosen, "absolute": True} if base.absolute else chosen


#: A tolerance the module's own error needs is this many times that error, at most WIDEST.
WIDEN_FACTOR = 10
WIDEST = 0.25


def widened(base: Tolerance, needed: float) -> Tolerance | None:
    """``base`` widened to WIDEN_FACTOR x ``needed`` (the module's largest error against its float64
    result, relative to the output's RMS plus the element), rounded up to two digits, where that is
    more than ``base``; None where ``base`` is enough."""
    wider = min(WIDEST, _round_up(WIDEN_FACTOR * needed))
    return Tolerance(rtol=wider, atol=wider, source="widened") if wider > max(base.rtol, base.atol) else None


def _round_up(x: float) -> float:
    """``x`` rounded up to two significant digits (a tolerance that reads well in workload.json)."""
    if x <= 0:
        return 0.0
    step = 10.0 ** (math.floor(math.log10(x)) - 1)
    return float(f"{math.ceil(x / step) * step:.2g}")
