"""Diagnostic for the GPU machine: does a correct flash-attention kernel meet attention_fwd's tolerance?

PyTorch's flash backend (scaled_dot_product_attention on bf16, P rounded to bf16 for P @ V, as
FlashAttention and the bundled kernels do) is compared with the CUDA reference's arithmetic
(float32 scores, softmax and P @ V, TF32 off, the output rounded to bf16) on the performance
shapes, several draws of normal(0, 1) inputs each, as the harness compares: an element fails where
|a - e| > rtol * |e| + atol * rms(e). Printed per shape: the largest error, the smallest atol
(times the RMS) that every element of every draw meets at the workload's rtol, and how many
elements fail the workload's atol.

    python scripts/probe_attention_tolerance.py [draws] [--causal]   # default 4 per shape; causal shapes only
"""

import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

WORKLOAD = Path(__file__).parents[1] / "workloads" / "attention_fwd" / "workload.json"
TOL = json.loads(WORKLOAD.read_text())["tolerance"]["o"]


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """The CUDA reference's arithmetic, a few heads at a time: float32 throughout, bf16 output."""
    out = torch.empty_like(q)
    s_len, d = q.shape[-2], q.shape[-1]
    mask = torch.ones(s_len, s_len, dtype=torch.bool, device=q.device).tril() if causal else None
    qf, kf, vf = (t.flatten(0, 1) for t in (q, k, v))
    of = out.flatten(0, 1)
    for h in range(0, qf.shape[0], 8):
        s = qf[h:h + 8].float() @ kf[h:h + 8].float().transpose(1, 2) / d ** 0.5
        if mask is not None:
            s.masked_fill_(~mask, float("-inf"))
        p = torch.exp(s - s.amax(-1, keepdim=True))
        of[h:h + 8] = ((p @ vf[h:h + 8].float()) / p.sum(-1, keepdim=True)).to(torch.bfloat16)
    return out


def main() -> None:
    draws = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 4
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator(device="cuda").manual_seed(0)
    print(f"{torch.cuda.get_device_name()}; tolerance rtol {TOL['rtol']}, atol {TOL['atol']} x rms; {draws} draws")
    print("shape                     causal  max err   needed atol (largest; median of the draws)  failing elements")
    causals = (True,) if "--causal" in sys.argv else (False, True)
    for d in (128, 64):
        for causal in causals:
            worst, needs, failing = 0.0, [], 0
            for _ in range(draws):
                q, k, v = (torch.randn(4, 32, 4096, d, device="cuda", generator=gen).to(torch.bfloat16)
                           for _ in range(3))
                e = reference(q, k, v, causal).float()
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    a = F.scaled_dot_product_attention(q, k, v, is_causal=causal).float()
                rms = e.square().mean().sqrt().item()
                err = (a - e).abs()
                worst = max(worst, err.max().item())
                needs.append(((err - TOL["rtol"] * e.abs()).max().item()) / rms)
                failing += int((err > TOL["rtol"] * e.abs() + TOL["atol"] * rms).sum().item())
                del q, k, v, e, a, err
            print(f"4x32x4096x{d:<3}              {int(causal)}     {worst:.5f}   {max(needs):.3f}; "
                  f"{statistics.median(needs):.3f}                        {failing}")


if __name__ == "__main__":
    main()
