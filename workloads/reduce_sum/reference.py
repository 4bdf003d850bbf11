"""NumPy oracle for reduce_sum (float64 accumulation, independent of any GPU code)."""

import numpy as np


def reference(x: np.ndarray, n: int) -> dict[str, np.ndarray]:
    total = np.sum(np.asarray(x).reshape(-1)[:n], dtype=np.float64)
    return {"out": np.array([total], dtype=np.float64)}
