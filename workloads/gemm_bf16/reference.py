"""NumPy oracle for gemm_bf16 (float64 from the exact bf16 values, independent of any GPU code).

Tolerance (workload.json: rtol 1e-3, atol 1e-3 of RMS(C)), derived for inputs uniform in [-1, 1]:
- the inputs are drawn, then rounded to bf16 once; the oracle and the kernels see the same bf16
  values, so input rounding is not an error here. A product of two bf16 values (8 significant
  bits each) is exact in float32 (24 bits), so a kernel's only error is the float32 accumulation;
- round-to-nearest float32 accumulation over K terms: about u * sqrt(K) * RMS(C) with
  u = 2^-24, i.e. ~5e-6 RMS(C) at K = 8192 (RMS(C) = sqrt(K / 9) ~ 30 there);
- tensor cores that truncate (round toward zero) when adding to the f32 accumulator: one
  bias of at most 2^-23 * |partial sum| per k16 step, K / 16 = 512 steps at K = 8192:
  <= 512 * 2^-23 * 30 ~ 1.8e-3 absolute = 6e-5 RMS(C) even if every step errs the same way;
- so 1e-3 is > 15x the worst plausible float32 accumulation error, while a C rounded to bf16
  (relative error up to 2^-9 = 1.95e-3: fails on the ~30% of elements with |C| > RMS(C)),
  bf16 accumulation (every add rounded to 2^-9 of the partial sum: several % of RMS(C)) or
  fp8 inputs (2^-4 per input, a few % of RMS(C)) fail. The rigorous bound gamma_K * sum|a*b|
  (~K * u * K / 4 = 3% of RMS(C) at K = 8192) is far looser than what any real order gives.
"""

import numpy as np


def reference(A: np.ndarray, B: np.ndarray, M: int, N: int, K: int) -> dict[str, np.ndarray]:
    a = np.asarray(A).astype(np.float64).reshape(M, K)
    b = np.asarray(B).astype(np.float64).reshape(K, N)
    return {"C": a @ b}
