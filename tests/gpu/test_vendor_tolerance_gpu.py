"""bench/vendor.py's PyTorch routines on a real GPU: each one computes its workload's output on the
workload's own input distribution, its error against float64 (rounded to the output's dtype, as the
harness keeps expected values) is measured by the harness's rule, and that measure fails a wrong
answer. Shapes are cut down from the performance cases so the float64 answers stay quick.

Needs torch with CUDA in this interpreter. Run with --run-gpu.
"""

from __future__ import annotations

from types import ModuleType

import pytest
from bench_scripts import load_bench_script

from kernelopt_mcp import Settings
from kernelopt_mcp.workload import Workload

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

SMALL = {  # a performance case of each workload with its sizes cut down
    "softmax": ("square_8192", {"rows": 512, "cols": 8192}),
    "layernorm": ("wide_16384x4096", {"rows": 512, "cols": 4096}),
    "attention_fwd": ("d128_4x32x4096_causal", {"B": 1, "H": 4, "S": 2048}),
    "gemm_bf16": ("square_4096", {"M": 1024, "N": 1024, "K": 1024}),
}


@pytest.fixture(scope="module")
def vendor() -> ModuleType:
    pytest.importorskip("torch")
    return load_bench_script("vendor.py")


def small(name: str) -> tuple[Workload, str]:
    case, scalars = SMALL[name]
    return load_bench_script("bench_core.py").bench_workload(name, Settings(), scalars={case: scalars}), case


def used(vendor: ModuleType, wl: Workload, case: str, wrong: float = 1.0) -> float:
    routine = vendor.torch_routine(wl, case)
    with routine.backend():
        share = vendor.vendor_tolerance(wl, routine, routine.call() * wrong)
    assert share is not None
    return float(share)


@pytest.mark.parametrize("name", ["softmax", "layernorm", "attention_fwd"])
def test_the_vendor_meets_its_workloads_tolerance_and_a_wrong_answer_does_not(vendor: ModuleType, name: str) -> None:
    wl, case = small(name)
    assert used(vendor, wl, case) < 1
    assert used(vendor, wl, case, wrong=1.5) > 1


def test_the_vendor_is_timed_and_its_tolerance_reported_where_its_dtype_is_the_outputs(vendor: ModuleType) -> None:
    """softmax writes float32 as the workload does: timed and measured; torch.matmul on bf16 writes bf16 where
    gemm_bf16 writes float32: timed, its error not put against the float32 contract."""
    timer = vendor.torch_timer()
    wl, case = small("softmax")
    ms, share = vendor.torch_ms(wl, case, timer)
    assert ms > 0 and share is not None and 0 <= share < vendor.TIGHT
    wl, case = small("gemm_bf16")
    ms, share = vendor.torch_ms(wl, case, timer)
    assert ms > 0 and share is None
