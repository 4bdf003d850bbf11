"""NumPy oracle for vector_add (float64, independent of any GPU code)."""

import numpy as np


def reference(a: np.ndarray, b: np.ndarray, n: int) -> dict[str, np.ndarray]:
    return {"c": a.astype(np.float64) + b.astype(np.float64)}
