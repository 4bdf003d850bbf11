"""NumPy oracle for transpose (exact, independent of any GPU code).

The input buffer is named ``in``, a Python keyword, so it arrives through ``**buffers``.
"""

import numpy as np


def reference(rows: int, cols: int, **buffers: np.ndarray) -> dict[str, np.ndarray]:
    a = np.asarray(buffers["in"]).reshape(rows, cols)
    return {"out": np.ascontiguousarray(a.T)}
