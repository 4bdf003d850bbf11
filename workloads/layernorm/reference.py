"""NumPy oracle for layernorm (float64, independent of any GPU code)."""

import numpy as np


def reference(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, rows: int, cols: int, eps: float
) -> dict[str, np.ndarray]:
    a = np.asarray(x, dtype=np.float64).reshape(rows, cols)
    g = np.asarray(gamma, dtype=np.float64).reshape(1, cols)
    b = np.asarray(beta, dtype=np.float64).reshape(1, cols)
    e = float(np.float32(eps))   # the kernel receives eps as a float32
    mean = a.mean(axis=1, keepdims=True)
    centered = a - mean
    var = np.mean(centered * centered, axis=1, keepdims=True)   # biased
    return {"y": centered / np.sqrt(var + e) * g + b}
