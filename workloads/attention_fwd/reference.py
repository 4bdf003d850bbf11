"""NumPy oracle for attention_fwd (float64 from the exact bf16 values, independent of any GPU code).

Tolerance (workload.json: rtol 1e-2, atol 1e-2 of RMS(o)): o is bf16, so rounding it costs up to
2^-9 = 2e-3 of |o|; flash-style kernels also round the probabilities to bf16 for the P @ V
tensor-core product (2^-9 relative per probability, averaging out over the keys: ~2^-9 of
RMS(o) at most), and accumulate in float32 (negligible). 1e-2 admits those with a 2.5x margin
and rejects an unstable softmax (inf / NaN on the large-scores case), a wrong scale (1/D instead
of 1/sqrt(D): tens of % off), or a causal mask off by one key.
"""

import numpy as np


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, B: int, H: int, S: int, D: int,
              causal: int) -> dict[str, np.ndarray]:
    out = np.empty((B, H, S, D), dtype=np.float64)
    mask = np.triu(np.ones((S, S), dtype=bool), k=1) if causal else None  # True where j > i
    scale = 1.0 / np.sqrt(D)
    for b in range(B):
        for h in range(H):
            qh = np.asarray(q[b, h]).astype(np.float64)
            kh = np.asarray(k[b, h]).astype(np.float64)
            vh = np.asarray(v[b, h]).astype(np.float64)
            s = (qh @ kh.T) * scale
            if mask is not None:
                s[mask] = -np.inf
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out[b, h] = (p @ vh) / p.sum(axis=1, keepdims=True)
    return {"o": out}
