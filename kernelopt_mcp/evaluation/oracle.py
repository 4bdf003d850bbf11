"""Running a workload's NumPy oracle (``reference.py``).

The oracle is trusted code that ships with the workload (bundled, or written by the user);
it is what makes "correct" mean something independent of any GPU code. It defines
``reference(**params)``, receiving the input buffers (as arrays of their declared shapes)
and the scalars by name, and returns ``{output name: array}``.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import WorkloadError
from ..workload import Workload

_loaded: dict[Path, Callable[..., Any]] = {}


def load_oracle(path: Path) -> Callable[..., Any]:
    path = path.resolve()
    if path in _loaded:
        return _loaded[path]
    module_name = f"kernelopt_oracle_{abs(hash(path))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise WorkloadError(f"{path}: importing the oracle failed: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, "reference", None)
    if not callable(fn):
        raise WorkloadError(
            f"{path}: defines no function `reference`; add "
            "`def reference(<inputs>, <scalars>) -> dict[str, numpy.ndarray]`"
        )
    reference: Callable[..., Any] = fn
    _loaded[path] = reference
    return reference


def run_oracle(
    workload: Workload, case_name: str, arrays: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]]
) -> dict[str, np.ndarray]:
    """Expected outputs of one case from the NumPy oracle.

    Raises:
        WorkloadError: the oracle fails, misses an output, or returns the wrong shape.
    """
    if workload.oracle_path is None:
        raise WorkloadError(f"workload {workload.name!r} has no NumPy oracle (reference.python)")
    fn = load_oracle(workload.oracle_path)
    case = workload.spec.case(case_name)
    kwargs: dict[str, Any] = {name: arr.copy() for name, arr in arrays.items()}
    kwargs.update(case.scalars)
    try:
        result = fn(**kwargs)
    except Exception as exc:
        raise WorkloadError(
            f"{workload.oracle_path}: reference() failed on case {case_name!r}: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(result, dict):
        raise WorkloadError(f"{workload.oracle_path}: reference() must return a dict, got {type(result).__name__}")
    expected = {}
    for param in workload.signature.outputs:
        if param.name not in result:
            raise WorkloadError(
                f"{workload.oracle_path}: reference() returned no {param.name!r} on case {case_name!r}"
            )
        array = np.asarray(result[param.name])
        if array.size != int(np.prod(shapes[param.name], dtype=np.int64)):
            raise WorkloadError(
                f"{workload.oracle_path}: {param.name!r} has {array.size} elements on case "
                f"{case_name!r}; the signature says shape {shapes[param.name]}"
            )
        expected[param.name] = array.reshape(shapes[param.name])
    return expected
