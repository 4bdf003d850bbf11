"""The workloads of issue 16 (histogram, gemm_bf16) through `kernelopt optimize` on a real GPU.

With no API key and `--strategy tune`, optimize freezes the workload (inputs of every case, the
oracle on the correctness cases, the CUDA reference on the performance cases), evaluates the
reference and the naive initial kernel, then autotunes workloads/<name>/tunable.json; it must
finish with a tuned kernel that passes every case and is faster than the naive initial kernel.
The figures (best score, speedup over the CUDA reference, GB/s or TFLOP/s of the best kernel per
performance case) are printed for the README's table.

The reference-vs-oracle and initial checks are in tests/gpu/test_evaluate_gpu.py (BUNDLED), the
tunable kernels at several configurations in tests/gpu/test_tunable_gpu.py; the CPU emulation of
the same kernels in tests/test_new_workloads_emulated.py.

Run with --run-gpu (scripts/device_gpu_tests.sh tests/gpu/test_new_workloads_gpu.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kernelopt_agent.cli import main as agent_main

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]


def read(path: Path) -> Any:
    return json.loads(path.read_text())


@pytest.mark.parametrize(("name", "evals"), [("histogram", 24), ("gemm_bf16", 12)])
def test_optimize_tune_without_a_key_finishes_with_a_tuned_kernel(
    name: str, evals: int, tmp_path: Path, harness_binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("KERNELOPT_DOCS_OFFLINE", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), str(REPO / "clients"), os.environ.get("PYTHONPATH")])))
    results = tmp_path / "results"
    code = agent_main(["optimize", "--workload", name, "--strategy", "tune", "--tune-evals", str(evals),
                       "--tune-seconds", "600", "--harness", str(harness_binary), "--workspace", str(tmp_path / "ws"),
                       "--results-dir", str(results), "--warmup", "3", "--iterations", "20", "--quiet"])
    run = results / "run-001"
    summary = read(run / "summary.json")
    assert code == 0, summary
    assert summary["status"] == "completed" and summary["strategy"] == "tune", summary
    candidates = {h["label"]: h for h in read(run / "history.json") if h.get("event") == "candidate"}
    labels = sorted(candidates)
    assert labels[:2] == ["000-reference", "001-initial"], labels
    assert all(candidates[label]["status"] == "ok" for label in labels), {k: v["status"] for k, v in candidates.items()}
    best = summary["best"]
    assert best["label"].endswith("-tuned") or best["label"].endswith("-untuned"), best
    initial_ms = candidates["001-initial"]["score_ms"]
    assert best["score_ms"] < initial_ms, (best, initial_ms)  # the naive kernels are far slower than tiling
    source = (run / "best.cu").read_text()
    tunable = read(REPO / "workloads" / name / "tunable.json")
    for param in tunable["params"]:
        assert f"#define {param} " in source, param
    tuned = read(run / "tuning/workload/autotune.json")["result"]
    assert tuned["counts"]["tried"] >= min(evals, 10), tuned["counts"]
    print(json.dumps({"workload": name, "best": best, "initial_ms": initial_ms,
                      "best_params": tuned.get("best_params"), "summary_best": summary.get("best")}, indent=1))
