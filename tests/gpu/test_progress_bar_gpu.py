"""The command line's progress bar on a real GPU: `kernelopt tune sgemm` (configurations done /
budget) and `kernelopt evaluate sgemm A.cu B.cu` (kernels done / total) draw it on stderr with
--progress, and stdout stays the JSON result alone (tests/cli/test_progress_bar.py does the same on the
pretend GPU)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernelopt_mcp.cli import main

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]


def test_tune_counts_configurations_on_stderr(harness_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    code = main(["tune", "sgemm", "--strategy", "random", "--budget-evals", "3", "--warmup", "2", "--iterations", "10",
                 "--harness", str(harness_binary), "-o", str(tmp_path / "run"), "--json", "--progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out)  # stdout: the result alone
    assert result["counts"]["measured"] + result["counts"].get("cached", 0) >= 1
    assert "tuning sgemm" in captured.err and "3/3" in captured.err


def test_evaluate_counts_kernels_on_stderr(harness_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    first, second = tmp_path / "first.cu", tmp_path / "second.cu"
    for copy in (first, second):
        shutil.copy(REPO / "workloads" / "sgemm" / "initial.cu", copy)
    code = main(["evaluate", "sgemm", str(first), str(second), "--warmup", "2", "--iterations", "10",
                 "--harness", str(harness_binary), "--json", "--progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert [r["candidate"] for r in json.loads(captured.out)] == ["first", "second"]
    assert "evaluating on sgemm" in captured.err and "2/2" in captured.err
