"""`kernelopt optimize --workload DIR` on an imported PyTorch problem, on CPU: the scripted model
writes the reference and the starting kernel, kernelopt-mcp runs over stdio with the pretend H200 of
tests/fakegpu.py (it computes c = a + b). The run freezes torch's stored draws (hidden_path
included), its copy of the lookup oracle finds the stored outputs, and every candidate is checked
against them. Needs torch (skipped without it)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from fakegpu import kernel, write_harness
from scripted_model import ScriptedModel

from kernelopt_agent.cli import main as agent_main
from kernelopt_mcp.torch_import import TorchImportOptions, import_torch_problem

REPO = Path(__file__).resolve().parent.parent
LAUNCH = {"default": {"grid": ["ceil_div(n, 256)"], "block": [256], "shared_bytes": 0}}


def test_optimize_an_imported_problem_on_the_pretend_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch", reason="torch is not installed (pip install torch): PyTorch problems cannot be run")
    options = TorchImportOptions(name="vector_add", output_name="c")
    workload = import_torch_problem(REPO / "tests" / "torch_problems" / "vector_add.py", tmp_path / "vadd", options).path
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-scripted")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), str(REPO / "clients")]))
    monkeypatch.setenv("KERNELOPT_DOCS_OFFLINE", "1")
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    generated = {"reference_cu": kernel(), "reference_launch": LAUNCH, "initial_cu": kernel(), "initial_launch": LAUNCH}
    proposal = {"rationale": "the same, faster", "source": kernel("MS:perf=0.001;"), "launch": LAUNCH, "compile_options": []}
    results = tmp_path / "results"
    with ScriptedModel([{"content": json.dumps(generated)}, {"content": json.dumps(proposal)}]) as model:
        code = agent_main(["optimize", "--workload", str(workload), "--max-iterations", "1", "--base-url", model.url,
                           "--harness", str(write_harness(tmp_path, "fake")), "--workspace", str(tmp_path / "ws"),
                           "--results-dir", str(results), "--warmup", "1", "--iterations", "3", "--quiet"])
    run = results / "run-001"
    summary: dict[str, Any] = json.loads((run / "summary.json").read_text())
    assert code == 0 and not model.steps and not model.exhausted, summary
    status = [(h["label"], h["status"]) for h in json.loads((run / "history.json").read_text()) if h["event"] == "candidate"]
    assert status == [("000-reference", "ok"), ("001-initial", "ok"), ("002-it1", "ok")], status
    assert summary["workload"]["reference"]["checked"] is True  # the generated reference matched the stored outputs
    manifest = json.loads((run / "input_cases.json").read_text())
    files = [g for case in manifest["cases"] for g in case["inputs"].values()]
    assert files and all(g["generator"] == "file" and "drawn_from" not in g and g["hidden_path"] for g in files)
