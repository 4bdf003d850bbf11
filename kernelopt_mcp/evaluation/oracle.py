"""Running a workload's NumPy oracle (``reference.py``).

The oracle is what makes "correct" mean something independent of any GPU code. It defines
``reference(**params)``, receiving the input buffers (as arrays of their declared shapes)
and the scalars by name, and returns ``{output name: array}``.

It is Python that kernelopt did not write (a workload's author, or in ``kernelopt optimize``
description runs the model), so it never runs in this process: every call goes to a confined
worker process (:mod:`.oracle_sandbox`: empty environment, Landlock, rlimits, a wall-time limit).
"""

from __future__ import annotations

import numpy as np

from ..errors import WorkloadError
from ..workload import Workload
from .oracle_sandbox import OracleLimits, call_oracle

__all__ = ["OracleLimits", "run_oracle"]


def run_oracle(
    workload: Workload, case_name: str, arrays: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]],
    *, limits: OracleLimits | None = None,
) -> dict[str, np.ndarray]:
    """Expected outputs of one case from the NumPy oracle, run in a confined worker.

    Raises:
        WorkloadError: the oracle cannot be confined, fails, runs out of time or memory, crashes,
            misses an output, or returns the wrong size or a non-numeric dtype.
    """
    if workload.oracle_path is None:
        raise WorkloadError(f"workload {workload.name!r} has no NumPy oracle (reference.python)")
    case = workload.spec.case(case_name)
    outputs = {p.name: tuple(shapes[p.name]) for p in workload.signature.outputs}
    return call_oracle(workload.oracle_path, arrays, case.scalars, outputs, case=case_name, limits=limits)
