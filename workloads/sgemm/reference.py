"""NumPy oracle for sgemm (float64, independent of any GPU code)."""

import numpy as np


def reference(A: np.ndarray, B: np.ndarray, M: int, N: int, K: int) -> dict[str, np.ndarray]:
    a = np.asarray(A, dtype=np.float64).reshape(M, K)
    b = np.asarray(B, dtype=np.float64).reshape(K, N)
    return {"C": a @ b}
