"""NumPy oracle for histogram (exact integer counts, independent of any GPU code)."""

import numpy as np


def reference(x: np.ndarray, n: int) -> dict[str, np.ndarray]:
    values = np.asarray(x, dtype=np.uint8).reshape(-1)[:n]
    return {"hist": np.bincount(values, minlength=256).astype(np.int64)}
