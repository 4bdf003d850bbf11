"""The bundled tunable kernels on a real GPU: the defaults and a few other configurations of each
pass every case of their workload (correctness and performance cases, validated by the Session).

Parameters reach the kernel as -DNAME=VALUE and are substituted into the launch expressions
(concrete_launch, from tests/workloads/test_tunable_kernels.py), as the tuning library will do. With
KERNELOPT_GPU_REPORT=path, each evaluation's per-case timings are appended there as JSON lines
(the figures for bench/ and docs/measurements.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_tunable_kernels import concrete_launch, load_tunable, options_for, satisfies

from kernelopt_mcp import (
    Candidate,
    EvaluateOptions,
    HarnessProcess,
    Session,
    Settings,
    Status,
)
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.evaluation.device import DeviceInfo
from kernelopt_mcp.evaluation.evaluate import evaluate, prepare
from kernelopt_mcp.evaluation.outcomes import EvaluationResult

pytestmark = pytest.mark.gpu

FAST = EvaluateOptions(warmup=3, iterations=20, timeout_s=120)

# besides the defaults: a configuration expected to be fast, and ones that exercise other code
# paths (warp-per-row, two-pass reduction, 64-wide tiles, the largest blocks). A key
# "<workload>:<spec>" names another tunable spec beside the workload's tunable.json.
CONFIGS: dict[str, list[dict[str, int]]] = {
    "sgemm": [
        {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8, "MINB": 2},
        {"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8, "MINB": 1},
        {"BM": 256, "BN": 128, "BK": 8, "TM": 8, "TN": 8, "MINB": 1},
        {"BM": 64, "BN": 128, "BK": 8, "TM": 4, "TN": 4, "MINB": 1},
    ],
    "softmax": [
        {"TPR": 256, "RPB": 1, "VPT": 8, "SMEM": 0},
        {"TPR": 32, "RPB": 4, "VPT": 8, "SMEM": 0},
        {"TPR": 1024, "RPB": 1, "VPT": 2, "SMEM": 0},
        {"TPR": 128, "RPB": 1, "VPT": 8, "SMEM": 1},  # 8192 columns from shared memory, 65536 read twice
        {"TPR": 256, "RPB": 4, "VPT": 0, "SMEM": 1},
    ],
    "reduce_sum": [
        {"THREADS": 256, "BPS": 8, "UNROLL": 4, "TWO_PASS": 0},
        {"THREADS": 512, "BPS": 4, "UNROLL": 2, "TWO_PASS": 1},
        {"THREADS": 1024, "BPS": 2, "UNROLL": 8, "TWO_PASS": 1},
    ],
    "transpose": [
        {"TILE": 32, "ROWS": 8, "STCS": 1, "ALIGN": 0, "MINB": 1, "VEC": 0},
        {"TILE": 64, "ROWS": 4, "STCS": 0, "ALIGN": 0, "MINB": 1, "VEC": 0},
        {"TILE": 32, "ROWS": 32, "STCS": 0, "ALIGN": 0, "MINB": 1, "VEC": 0},
        # 5003 x 8191: aligned output windows (on 32-byte sectors, then on 128-byte lines)
        {"TILE": 64, "ROWS": 8, "STCS": 1, "ALIGN": 8, "MINB": 1, "VEC": 0},
        {"TILE": 32, "ROWS": 8, "STCS": 0, "ALIGN": 8, "MINB": 1, "VEC": 0},
        {"TILE": 64, "ROWS": 8, "STCS": 1, "ALIGN": 32, "MINB": 1, "VEC": 0},
        # 16-byte loads shifted into the tile
        {"TILE": 64, "ROWS": 8, "STCS": 1, "ALIGN": 8, "MINB": 4, "VEC": 1},
        {"TILE": 32, "ROWS": 8, "STCS": 0, "ALIGN": 16, "MINB": 2, "VEC": 1},
    ],
    "layernorm": [
        {"TPR": 128, "RPB": 1, "VPT": 8, "WR": 0},
        {"TPR": 32, "RPB": 4, "VPT": 8, "WR": 0},
        {"TPR": 1024, "RPB": 1, "VPT": 1, "WR": 0},
        {"TPR": 128, "RPB": 2, "VPT": 8, "WR": 1},  # 1024 columns a warp per row, 4096 a block's 128 threads
    ],
    "histogram": [
        {"THREADS": 512, "VPT": 4, "COPIES": 4, "GRID": 1056, "LANES": 0},
        {"THREADS": 1024, "VPT": 2, "COPIES": 8, "GRID": 2112, "LANES": 0},
        {"THREADS": 128, "VPT": 1, "COPIES": 1, "GRID": 264, "LANES": 0},
        {"THREADS": 512, "VPT": 2, "COPIES": 1, "GRID": 2112, "LANES": 1},  # lane-striped sub-histogram
    ],
    "gemm_bf16": [
        {"BM": 128, "BN": 256, "BK": 32, "WM": 64, "WN": 64, "STAGES": 4},
        {"BM": 128, "BN": 128, "BK": 64, "WM": 64, "WN": 64, "STAGES": 3},
        {"BM": 64, "BN": 128, "BK": 64, "WM": 32, "WN": 64, "STAGES": 2},
    ],
    "attention_fwd": [
        {"WARPS": 8, "BKV": 64, "QREG": 1, "RPW": 1},
        {"WARPS": 4, "BKV": 128, "QREG": 0, "RPW": 1},
        {"WARPS": 2, "BKV": 16, "QREG": 0, "RPW": 1},
        {"WARPS": 4, "BKV": 16, "QREG": 0, "RPW": 2},
    ],
    # Hopper's warpgroup MMA (sm_90a): every warpgroup count, every wgmma width, the deepest ring
    "gemm_bf16:tunable_wgmma.json": [
        {"BM": 64, "BN": 64, "STAGES": 3},
        {"BM": 192, "BN": 128, "STAGES": 3},
        {"BM": 256, "BN": 128, "STAGES": 4},
        {"BM": 64, "BN": 128, "STAGES": 6},
    ],
    # flash attention on wgmma (sm_90a): one warpgroup, BKV 64 with a deeper ring, BKV 128's deepest
    "attention_fwd:tunable_wgmma.json": [
        {"NWG": 1, "BKV": 64, "STAGES": 3},
        {"NWG": 2, "BKV": 64, "STAGES": 4},
        {"NWG": 2, "BKV": 128, "STAGES": 3},
    ],
    # warp-specialized TMA + mbarrier + wgmma (tensor maps built by the harness): both wgmma
    # widths, the shallowest and deepest rings, each tile order; odd shapes take the fallback
    "gemm_bf16:tunable_tma.json": [
        {"BN": 256, "STAGES": 4, "GROUP": 8},
        {"BN": 128, "STAGES": 6, "GROUP": 1},
        {"BN": 256, "STAGES": 3, "GROUP": 16},
    ],
    # flash attention, FA3's structure (producer warpgroup, TMA into an mbarrier ring, wgmma): one
    # consumer warpgroup at BKV 128; the intra-warpgroup overlap at BKV 64's deepest ring and at
    # BKV 128's; head dim 64 with three consumer warpgroups (a 512-thread block, setmaxnreg 32 / 160;
    # head dim 128 there with an idle fourth warpgroup), and its 192-key tiles
    "attention_fwd:tunable_tma.json": [
        {"NWG": 1, "BKV": 128, "STAGES": 2, "OVERLAP": 0, "NWG64": 2, "BKV64": 128},
        {"NWG": 2, "BKV": 64, "STAGES": 4, "OVERLAP": 1, "NWG64": 2, "BKV64": 128},
        {"NWG": 2, "BKV": 128, "STAGES": 3, "OVERLAP": 1, "NWG64": 2, "BKV64": 128},
        {"NWG": 2, "BKV": 128, "STAGES": 2, "OVERLAP": 1, "NWG64": 3, "BKV64": 128},
        {"NWG": 2, "BKV": 128, "STAGES": 2, "OVERLAP": 1, "NWG64": 2, "BKV64": 192},
    ],
    # sgemm on tensor cores at FP32 accuracy: the tolerance is sgemm's, on every case; PROMOTE 1 (each
    # slice on its own partial tile) at the default tile and at a 4-warp one
    "sgemm:tunable_3xtf32.json": [
        {"BM": 128, "BN": 256, "BK": 16, "WM": 64, "WN": 64, "STAGES": 4, "PROMOTE": 0},
        {"BM": 256, "BN": 128, "BK": 32, "WM": 64, "WN": 64, "STAGES": 3, "PROMOTE": 0},
        {"BM": 64, "BN": 64, "BK": 16, "WM": 32, "WN": 32, "STAGES": 2, "PROMOTE": 0},
        {"BM": 128, "BN": 128, "BK": 32, "WM": 64, "WN": 32, "STAGES": 3, "PROMOTE": 1},
        {"BM": 128, "BN": 64, "BK": 32, "WM": 32, "WN": 32, "STAGES": 4, "PROMOTE": 1},
    ],
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_tunable_kernel_passes_every_case_at_several_configs(
    name: str, proc: HarnessProcess, device: DeviceInfo, tmp_path: Path
) -> None:
    workload, _, spec = name.partition(":")
    t = load_tunable(workload, spec or "tunable.json")
    wl = find_workload(workload, Settings())
    configs = [t.spec["defaults"], *CONFIGS[name]]
    failures = []
    with Session(wl, proc, device, workdir=tmp_path, options=FAST) as ev:
        prepare(ev, time_reference=True)
        for config in configs:
            assert satisfies(t.spec, config), config
            candidate = Candidate(t.source, concrete_launch(t.spec, config), options_for(t.spec, config),
                                  name=f"{workload}-{Path(spec).stem if spec else 'tunable'}")
            result = evaluate(ev, candidate)
            bad = [f"{c.name}: {c.status.value} {c.message}" for c in result.cases
                   if c.status is not Status.ok or not all(o.passed for o in c.outputs)]
            if result.status is not Status.ok or bad:
                failures.append(f"{config}: {result.status.value} {result.message}; " + "; ".join(bad))
            assert len(result.cases) == len(wl.spec.cases) or result.status is not Status.ok
            _report(name, config, result)
    assert not failures, "\n".join(failures)


def _report(name: str, config: dict[str, int], result: EvaluationResult) -> None:
    path = os.environ.get("KERNELOPT_GPU_REPORT")
    if not path:
        return
    cases = {
        c.name: {"ms": c.timing.median_ms, "reference_ms": c.reference_median_ms,
                 "GBps": (c.bytes_per_s or 0) / 1e9, "TFLOPs": (c.flops_per_s or 0) / 1e12}
        for c in result.cases if c.timing
    }
    with open(path, "a") as f:
        f.write(json.dumps({"workload": name, "tunable": config, "status": result.status.value,
                            "score_ms": result.score_ms, "speedup": result.speedup, "cases": cases}) + "\n")
