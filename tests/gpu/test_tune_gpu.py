"""Autotuning end to end on a real GPU: a small sgemm space, every configuration validated on every
case of the bundled sgemm workload, the best strictly faster than the deliberately weak default,
and a second run (through `kernelopt tune`, same cache) that measures nothing.

The space is a sub-space of workloads/sgemm/tunable.json when it exists (the bundled tunable
kernel), otherwise of the small shared-memory-tiled kernel below (TILE x TILE tiles, WPT rows
per thread); either way the default is the smallest tile.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from kernelopt_mcp import EvaluateOptions, HarnessProcess, Session, Settings
from kernelopt_mcp.cli import main
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.evaluation.device import device_info
from kernelopt_mcp.tune.cache import TuneCache
from kernelopt_mcp.tune.space import Space
from kernelopt_mcp.tune.spec import Tunable, load_tunable, parse_tunable
from kernelopt_mcp.tune.tuner import tune
from kernelopt_mcp.workload import Workload

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
TIMING = EvaluateOptions(warmup=5, iterations=30, timeout_s=120)

# Bundled sub-space: 2 x 2 x 2 tile shapes (one breaks the register constraint); default 64x64, 4x4 per thread.
BUNDLED_SUBSPACE = {"BM": [64, 128], "BN": [64, 128], "BK": [8], "TM": [4], "TN": [4, 8], "MINB": [1]}

FALLBACK_SOURCE = r"""
#ifndef TILE
#define TILE 8
#endif
#ifndef WPT
#define WPT 1
#endif
#define RTS (TILE / WPT)
// C[M,N] = A[M,K] @ B[K,N]; a block computes a TILE x TILE tile of C with TILE x RTS threads,
// each thread WPT rows strided by RTS; K walked in TILE-deep slices through shared memory.
extern "C" __global__ void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE + 1];
    __shared__ float Bs[TILE][TILE + 1];
    const int tx = threadIdx.x;           // column within the tile, 0..TILE-1
    const int ty = threadIdx.y;           // row group, 0..RTS-1
    const int col = blockIdx.x * TILE + tx;
    const int row0 = blockIdx.y * TILE + ty;
    float acc[WPT];
#pragma unroll
    for (int w = 0; w < WPT; ++w) acc[w] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
#pragma unroll
        for (int w = 0; w < WPT; ++w) {
            const int r = ty + w * RTS;
            const int arow = blockIdx.y * TILE + r, acol = k0 + tx;
            As[r][tx] = (arow < M && acol < K) ? A[(size_t)arow * K + acol] : 0.0f;
            const int brow = k0 + r, bcol = blockIdx.x * TILE + tx;
            Bs[r][tx] = (brow < K && bcol < N) ? B[(size_t)brow * N + bcol] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) {
            const float b = Bs[k][tx];
#pragma unroll
            for (int w = 0; w < WPT; ++w) acc[w] += As[ty + w * RTS][k] * b;
        }
        __syncthreads();
    }
#pragma unroll
    for (int w = 0; w < WPT; ++w) {
        const int row = row0 + w * RTS;
        if (row < M && col < N) C[(size_t)row * N + col] = acc[w];
    }
}
"""
FALLBACK_SPEC: dict[str, Any] = {
    "description": "shared-memory tiled sgemm (test-only)",
    "params": {"TILE": [8, 16, 32], "WPT": [1, 2, 4]},
    "constraints": ["TILE % WPT == 0", "TILE * (TILE // WPT) >= 32"],
    "defaults": {"TILE": 8, "WPT": 1},
    "launch": {"default": {"grid": ["ceil_div(N, TILE)", "ceil_div(M, TILE)"], "block": ["TILE", "TILE // WPT"]}},
}


def small_space(wl: Workload, directory: Path) -> tuple[Tunable, Path]:
    """The tunable for the test (and its JSON + source written to ``directory`` for the CLI)."""
    bundled = next((p for p in (wl.root / "tunable.json" if wl.root else None, REPO / "workloads/sgemm/tunable.json")
                    if p is not None and p.is_file()), None)
    directory.mkdir(parents=True, exist_ok=True)
    if bundled is not None:
        full = load_tunable(bundled, wl)
        data = json.loads(bundled.read_text())
        data["params"] = BUNDLED_SUBSPACE
        data["defaults"] = {k: v[0] for k, v in BUNDLED_SUBSPACE.items()}
        shutil.copy(bundled.parent / full.spec.source, directory / full.spec.source)
        source = full.source
    else:
        data = {**FALLBACK_SPEC, "source": "sgemm_tiled.cu"}
        (directory / "sgemm_tiled.cu").write_text(FALLBACK_SOURCE)
        source = FALLBACK_SOURCE
    (directory / "tunable.json").write_text(json.dumps(data))
    return parse_tunable(data, source, "test space", wl), directory / "tunable.json"


def test_tune_small_sgemm_space_then_the_cache_measures_nothing(
    harness_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    wl = find_workload("sgemm", Settings())
    tunable, path = small_space(wl, tmp_path / "space")
    space = Space(tunable.spec)
    valid = space.valid()
    assert 4 <= len(valid) <= 8
    device = device_info(harness_binary, 0)
    cache_root = tmp_path / "cache"
    with HarnessProcess(harness_binary, 0) as proc, Session(wl, proc, device, options=TIMING) as ev:
        # every configuration timed in full (no early stop), so every one is cached and the rerun measures nothing
        result = tune(ev, tunable, strategy="exhaustive", cache=TuneCache(cache_root / "tune"), early_stop=False)
    c = result.counts
    print(json.dumps([r.model_dump() for r in result.ranked()], indent=1))
    assert c.tried == c.measured == len(valid) and c.cached == 0
    assert c.skipped_by_constraint == space.size - len(valid)
    assert c.ok == len(valid), [r for r in result.table if r.status != "ok"]  # every configuration is a correct kernel
    untuned, best = result.untuned, result.best
    assert untuned is not None and untuned.ok and untuned.score_ms
    assert best is not None and best.ok and best.score_ms
    # validated on every case (correctness and performance), timed on every performance case
    assert [x.status.value for x in best.cases] == ["ok"] * len(wl.spec.cases)
    assert {x.name for x in best.cases if x.timing} == {x.name for x in wl.spec.performance_cases}
    assert result.best_params != tunable.spec.defaults
    assert best.score_ms < untuned.score_ms  # strictly: the default is the weakest tile
    assert result.speedup_vs_untuned and result.speedup_vs_untuned > 1.0

    # the same search through the CLI with the same cache: nothing is measured again
    monkeypatch.setenv("KERNELOPT_CACHE", str(cache_root))
    capsys.readouterr()
    code = main(["tune", "sgemm", str(path), "--strategy", "exhaustive", "--time-all", "--warmup", str(TIMING.warmup),
                 "--iterations", str(TIMING.iterations), "--timeout", "120", "--harness", str(harness_binary),
                 "-o", str(tmp_path / "run"), "--json"])
    assert code == 0
    again = json.loads(capsys.readouterr().out)
    assert again["counts"]["measured"] == 0 and again["counts"]["cached"] == len(valid)
    assert again["best_params"] == result.best_params
    assert (tmp_path / "run" / "best.cu").is_file() and (tmp_path / "run" / "tune.csv").is_file()
    # a directory: keep the recording for tests/tune/test_tune.py's replay
    record = os.environ.get("KERNELOPT_TUNE_RECORD")
    if record:
        Path(record).mkdir(parents=True, exist_ok=True)
        (Path(record) / "sgemm_subspace.json").write_text(result.model_dump_json(indent=1))
