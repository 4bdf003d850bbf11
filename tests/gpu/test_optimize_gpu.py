"""`kernelopt optimize --workload sgemm` on a real GPU, against the scripted model of
tests/scripted_model.py with five proposals: one that does not compile, one wrong, one that
faults, and two valid tiled kernels faster than the naive initial kernel. Then: best.cu is the
faster valid one, the heatmap is written, the replay requests run on the harness alone and give
the expected outputs (the same bytes twice), and a second run continues from the first run's files.

Run with --run-gpu (scripts/device_gpu_tests.sh tests/gpu/test_optimize_gpu.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scripted_model import ScriptedModel

from kernelopt_agent.cli import main as agent_main
from kernelopt_mcp.evaluation.compare import compare
from kernelopt_mcp.workload import Tolerance

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]

NAIVE = """extern "C" __global__ void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = %(start)s; k < K; ++k) acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
        %(store)s
    }
}
"""
DOES_NOT_COMPILE = (NAIVE.replace("float acc = 0.0f;", "float acc = 0.0f").replace("%(start)s", "0")
                    % {"store": "C[(size_t)row * N + col] = acc;"})
WRONG = NAIVE % {"start": "1", "store": "C[(size_t)row * N + col] = acc;"}  # skips k = 0
FAULTS = NAIVE % {"start": "0",
                  "store": "C[(size_t)row * N + col] = acc; if (row == 0 && col == 0) ((float*)0x10)[0] = acc;"}
NAIVE_LAUNCH = {"default": {"grid": ["ceil_div(N, 16)", "ceil_div(M, 16)"], "block": ["16", "16"],
                            "shared_bytes": "0"}, "cases": []}

TILED_64 = r"""// 64x64 tiles of C per block of 256 threads, 4x4 outputs per thread in registers; K in steps of 16
// through shared memory (A stored transposed). Every load and store is bounds-checked.
#define BM 64
#define BN 64
#define BK 16
#define TM 4
#define TN 4
extern "C" __global__ void __launch_bounds__(256) sgemm(const float* __restrict__ A, const float* __restrict__ B,
                                                        float* __restrict__ C, int M, int N, int K) {
    __shared__ float As[BK][BM + 4];
    __shared__ float Bs[BK][BN + 4];
    const int tid = threadIdx.x;
    const int tx = tid % 16;
    const int ty = tid / 16;
    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = tid; i < BM * BK; i += 256) {
            const int m = i / BK, k = i % BK;
            const int gm = row0 + m, gk = k0 + k;
            As[k][m] = (gm < M && gk < K) ? A[(size_t)gm * K + gk] : 0.0f;
        }
        for (int i = tid; i < BK * BN; i += 256) {
            const int k = i / BN, n = i % BN;
            const int gk = k0 + k, gn = col0 + n;
            Bs[k][n] = (gk < K && gn < N) ? B[(size_t)gk * N + gn] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[k][ty * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][tx * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int gm = row0 + ty * TM + i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int gn = col0 + tx * TN + j;
            if (gm < M && gn < N) C[(size_t)gm * N + gn] = acc[i][j];
        }
    }
}
"""

TILED_128 = r"""// 128x128 tiles of C per block of 256 threads, 8x8 outputs per thread in registers; K in steps of 8
// through shared memory (A stored transposed), fragments read as float4. Bounds-checked loads and stores.
#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8
extern "C" __global__ void __launch_bounds__(256) sgemm(const float* __restrict__ A, const float* __restrict__ B,
                                                        float* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(16) float As[BK][BM];
    __shared__ __align__(16) float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int tx = tid % 16;
    const int ty = tid / 16;
    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int r = 0; r < (BM * BK) / 256; ++r) {
            const int i = tid + r * 256;
            const int m = i / BK, k = i % BK;
            const int gm = row0 + m, gk = k0 + k;
            As[k][m] = (gm < M && gk < K) ? A[(size_t)gm * K + gk] : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < (BK * BN) / 256; ++r) {
            const int i = tid + r * 256;
            const int k = i / BN, n = i % BN;
            const int gk = k0 + k, gn = col0 + n;
            Bs[k][n] = (gk < K && gn < N) ? B[(size_t)gk * N + gn] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
            const float4 a0 = *reinterpret_cast<const float4*>(&As[k][ty * TM]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[k][ty * TM + 4]);
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[k][tx * TN]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[k][tx * TN + 4]);
            a[0] = a0.x; a[1] = a0.y; a[2] = a0.z; a[3] = a0.w; a[4] = a1.x; a[5] = a1.y; a[6] = a1.z; a[7] = a1.w;
            b[0] = b0.x; b[1] = b0.y; b[2] = b0.z; b[3] = b0.w; b[4] = b1.x; b[5] = b1.y; b[6] = b1.z; b[7] = b1.w;
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int gm = row0 + ty * TM + i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int gn = col0 + tx * TN + j;
            if (gm < M && gn < N) C[(size_t)gm * N + gn] = acc[i][j];
        }
    }
}
"""

TILED_64_LAUNCH = {"default": {"grid": ["ceil_div(N, 64)", "ceil_div(M, 64)"], "block": ["256"],
                               "shared_bytes": "0"}, "cases": []}
TILED_128_LAUNCH = {"default": {"grid": ["ceil_div(N, 128)", "ceil_div(M, 128)"], "block": ["256"],
                                "shared_bytes": "0"}, "cases": []}


def proposal(source: str, launch: dict[str, Any], rationale: str) -> dict[str, Any]:
    return {"content": json.dumps({"rationale": rationale, "source": source, "launch": launch, "compile_options": []})}


def read(path: Path) -> Any:
    return json.loads(path.read_text())


RUN_BOUND_BYTES = 20_000_000  # what a short sgemm run may keep on disk (inputs and expected outputs regenerable)


def run_bytes(run: Path) -> int:
    return sum(f.stat().st_size for f in run.rglob("*") if f.is_file())


def test_optimize_sgemm_end_to_end(tmp_path: Path, harness_binary: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-scripted")
    monkeypatch.setenv("KERNELOPT_DOCS_OFFLINE", "1")
    monkeypatch.setenv("PYTHONPATH",
                       os.pathsep.join(filter(None, [str(REPO), str(REPO / "clients"), os.environ.get("PYTHONPATH")])))
    results = tmp_path / "results"
    common = ["--harness", str(harness_binary), "--workspace", str(tmp_path / "ws"), "--results-dir", str(results),
              "--warmup", "2", "--iterations", "10"]
    script = [
        proposal(DOES_NOT_COMPILE, NAIVE_LAUNCH, "a missing semicolon"),
        proposal(WRONG, NAIVE_LAUNCH, "skips k = 0"),
        proposal(FAULTS, NAIVE_LAUNCH, "writes to address 0x10"),
        proposal(TILED_64, TILED_64_LAUNCH, "64x64 shared-memory tiles, 4x4 register blocking"),
        proposal(TILED_128, TILED_128_LAUNCH, "128x128x8 tiles, 8x8 register blocking, float4 fragments"),
    ]
    with ScriptedModel(script) as model:
        code = agent_main(["optimize", "--workload", "sgemm", "--max-iterations", "5", "--base-url",
                           model.url, *common])
    assert not model.steps and not model.exhausted
    run = results / "run-001"
    summary = read(run / "summary.json")
    assert code == 0, summary
    status = {r["label"]: r for r in read(run / "history.json") if r["event"] == "candidate"}
    assert [(k, v["status"]) for k, v in status.items()] == [
        ("000-reference", "ok"), ("001-initial", "ok"), ("002-it1", "compile_error"), ("003-it2-repair", "mismatch"),
        ("004-it3-repair", "runtime_error"), ("005-it4-repair", "ok"), ("006-it5", "ok"),
    ]
    assert "CUDA_ERROR" in status["004-it3-repair"]["message"]
    initial = status["001-initial"]["score_ms"]
    valid = {label: status[label]["score_ms"] for label in ("005-it4-repair", "006-it5")}
    assert all(score < initial for score in valid.values()), (initial, valid)
    faster = min(valid, key=valid.__getitem__)
    assert summary["best"]["label"] == faster
    assert (run / "best.cu").read_text() == (run / "candidates" / faster / "source.cu").read_text()
    assert (run / "heatmap.png").stat().st_size > 10_000 and (run / "heatmap.svg").stat().st_size > 10_000

    # the run keeps what reproduces its data, not the bytes (a 5-iteration sgemm run under 20 MB); `runs restore`
    # draws the inputs and expected outputs again from the recorded seeds, checked against the recorded hashes
    kept = run_bytes(run)
    assert kept < RUN_BOUND_BYTES, f"the run keeps {kept} bytes"
    assert agent_main(["runs", "restore", str(run), "--harness", str(harness_binary), "--workspace",
                       str(tmp_path / "ws")]) == 0
    print(json.dumps({"run_bytes": kept, "restored_bytes": run_bytes(run)}))

    # the replay requests: the harness alone gives the expected outputs, the same bytes each time
    tolerance = Tolerance(rtol=1e-4, atol=1e-4)
    replays = summary["files"]["replay"]
    assert len(replays) == 9
    for case, request in replays.items():
        outputs = []
        for _ in range(2):
            proc = subprocess.run([str(harness_binary), "run", str(run / request)], capture_output=True,
                                  text=True, timeout=300)
            answer = json.loads(proc.stdout)
            assert proc.returncode == 0 and answer["cases"][0]["status"] == "ok", (case, proc.stdout, proc.stderr)
            outputs.append((run / "replay" / "outputs" / case / "C.bin").read_bytes())
        assert outputs[0] == outputs[1], case
        entry = read(run / "expected" / "manifest.json")[case]["C"]
        expected = np.fromfile(run / entry["path"], dtype="<f8").reshape(entry["shape"])
        actual = np.frombuffer(outputs[0], dtype="<f4").reshape(expected.shape)
        assert compare("C", expected, actual, tolerance).passed, case

    # continue from the run's files, the original tool's way
    code = agent_main(["optimize", "--description", "Single-precision GEMM with rectangular matrices.",
                       "--input-cases", str(run / "input_cases.json"), "--reference",
                       str(run / "supplied-reference.cu"), "--initial-kernel", str(run / "best.cu"),
                       "--max-iterations", "0", *common])
    second = read(results / "run-002" / "summary.json")
    assert code == 0, second
    assert (second["workload"]["parts"]["signature"].startswith("inferred")
            and second["workload"]["reference"]["numpy_oracle"])
    assert second["initial"]["status"] == "ok"
    assert second["initial"]["score_ms"] == pytest.approx(summary["best"]["score_ms"], rel=0.3)
    print(json.dumps({"run-001": {k: v["score_ms"] for k, v in status.items()}, "best": faster,
                      "speedup_vs_reference": summary["best"]["speedup_vs_reference"],
                      "speedup_vs_initial": summary["best"]["speedup_vs_initial"],
                      "run-002 initial": second["initial"]["score_ms"]}, indent=1))
