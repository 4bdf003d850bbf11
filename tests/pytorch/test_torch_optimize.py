"""`kernelopt optimize --workload DIR` on an imported PyTorch problem, on CPU: PyTorch is the reference.

tests/torch_problems/vector_add.py is imported (output "c"); the scripted model (real HTTP on loopback)
is asked for the starting kernel only, never a CUDA reference; kernelopt-mcp runs over stdio with the
pretend H200 of tests/fakegpu.py (it computes c = a + b), and the server's PyTorch reference computes
the expected outputs of every evaluation on the CPU from the inputs the harness reads. Nothing is
frozen: the run holds a copy of the workload directory, the server finds it as a configured workload,
and every candidate (initial, proposals, a resumed run's, a replay) is evaluated on that copy. Needs
torch (skipped without it): run with PYTHONPATH=/opt/torch-local where torch lives outside site-packages.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from fakegpu import kernel, write_harness
from scripted_model import ScriptedModel

from kernelopt_agent.cli import main as agent_main
from kernelopt_mcp.cli import main as kernelopt_main

REPO = Path(__file__).resolve().parents[2]
LAUNCH = {"default": {"grid": ["ceil_div(n, 256)"], "block": [256], "shared_bytes": 0}}

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def workload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """vector_add imported with output "c", and the environment of a run against the scripted model."""
    pytest.importorskip("torch", reason="torch is not installed (pip install torch): PyTorch problems cannot be run")
    from kernelopt_mcp.torch_import import TorchImportOptions, import_torch_problem

    options = TorchImportOptions(name="vector_add", output_name="c")
    path = import_torch_problem(REPO / "tests" / "torch_problems" / "vector_add.py", tmp_path / "vadd", options).path
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-scripted")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    # the server and its confined PyTorch child find torch where this process found it
    monkeypatch.setenv("PYTHONPATH",
                       os.pathsep.join(filter(None, [str(REPO), str(REPO / "clients"), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("KERNELOPT_DOCS_OFFLINE", "1")
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    return path


def proposal(source: str, why: str) -> dict[str, Any]:
    return {"content": json.dumps({"rationale": why, "source": source, "launch": LAUNCH, "compile_options": []})}


def optimize(tmp_path: Path, steps: list[dict[str, Any]], *args: str) -> tuple[int, ScriptedModel]:
    with ScriptedModel(steps) as model:
        code = agent_main(["optimize", *args, "--base-url", model.url, "--harness",
                           str(write_harness(tmp_path, "fake")), "--workspace", str(tmp_path / "ws"), "--results-dir",
                           str(tmp_path / "results"),
                           "--warmup", "1", "--iterations", "3", "--quiet"])
    return code, model


def candidates(run: Path) -> list[tuple[str, str]]:
    return [(h["label"], h["status"]) for h in json.loads((run / "history.json").read_text())
            if h["event"] == "candidate"]


def test_optimize_an_imported_problem_with_pytorch_as_the_reference(
    workload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    generated = {"content": json.dumps({"initial_cu": kernel(), "initial_launch": LAUNCH})}
    code, model = optimize(tmp_path, [generated, proposal(kernel("MS:perf=0.001;"), "the same, faster"),
                                      proposal(kernel("WRONG"), "one element off")],
                           "--workload", str(workload), "--max-iterations", "2")
    run = tmp_path / "results" / "run-001"
    summary: dict[str, Any] = json.loads((run / "summary.json").read_text())
    assert code == 0 and not model.steps and not model.exhausted, summary

    # the model was asked for the starting kernel alone, shown the module it must match
    asked = model.requests[0]["messages"][-1]["content"]
    assert "exactly these keys: name, description, initial_cu, initial_launch." in asked, asked
    assert "reference_cu" not in asked.split("The full format:")[0] and "return a + b" in asked
    assert "return a + b" in json.dumps(model.requests[1])  # each iteration's workload prompt shows the module too

    # no CUDA reference: the initial kernel and the proposals, checked against PyTorch; the wrong one fails
    assert candidates(run) == [("000-initial", "ok"), ("001-it1", "ok"), ("002-it2", "mismatch")]
    reference = summary["workload"]["reference"]
    assert reference["pytorch"] is True and reference["cuda_reference"] is False and reference["checked"] is True
    assert "no CUDA reference was asked for" in reference["note"]
    assert ("PyTorch" in summary["workload"]["expected_outputs"]
            and summary["workload"]["expected_outputs"] == reference["expected_from"])
    assert (summary["workload"]["expected_outputs"] != "PyTorch (the workload's module) on each evaluation's own "
            "draws, inside kernelopt-mcp")
    assert summary["reference"] is None and summary["best"]["label"] == "001-it1" and summary["provenance"]["nvrtc"]
    # PyTorch's times go beside every candidate that passed; torch sees no GPU here, so the record says why in one line
    pytorch = summary["best"]["pytorch"]
    assert "not timed" in pytorch["note"] and summary["best"]["speedup_vs_eager"] is None, pytorch
    assert not (run / "supplied-reference.cu").exists() and not (run / "reference.cu").exists()

    # nothing frozen: a copy of the workload directory, found by the server as a configured workload
    tools = sorted(p.name.split("-", 1)[1] for p in (run / "tools").glob("*.json"))
    assert "freeze_workload.json" not in tools and "replay_requests.json" not in tools, tools
    assert not (run / "input_cases.json").exists() and not (run / "inputs").exists()
    copy = run / "workload" / "vector_add"
    assert sorted(p.name for p in copy.iterdir()) == ["problem.py", "workload.json"]
    assert (copy / "problem.py").read_bytes() == (workload / "problem.py").read_bytes()
    assert json.loads((run / "server.json").read_text())["workload_dirs"] == [str(run / "workload")]
    for label in ("000-initial", "001-it1", "002-it2"):
        request = json.loads((run / "candidates" / label / "request.json").read_text())
        assert request["arguments"]["workload"] == "vector_add"
        result = json.loads((run / "candidates" / label / "result.json").read_text())["result"]
        assert "PyTorch" in result["expected_from"], result["expected_from"]
    assert summary["files"]["workload"] == "workload/vector_add" and "replay" not in summary["files"]

    # `kernelopt runs` reads it; a replay evaluates a candidate on the run's copy, PyTorch recomputing the outputs
    capsys.readouterr()
    assert agent_main(["runs", "show", str(run)]) == 0
    assert "PyTorch is the reference" in capsys.readouterr().out
    assert agent_main(["runs", "restore", str(run)]) != 0  # nothing was drawn to files: it says how to replay instead
    assert "kernelopt evaluate" in " ".join(capsys.readouterr().err.split())
    harness = str(tmp_path / "kernelopt-harness-fake")
    assert summary["files"]["replay_command"] == f"kernelopt evaluate {copy} {run / 'best.cu'}"
    for source, status in ((run / "best.cu", "ok"), (run / "candidates" / "002-it2" / "source.cu", "mismatch")):
        code = kernelopt_main(["evaluate", str(copy), str(source), "--harness", harness, "--warmup", "1",
                               "--iterations", "3", "--json"])
        assert json.loads(capsys.readouterr().out)["status"] == status and (code == 0) == (status == "ok")


def test_a_pytorch_reference_run_resumes_on_its_copy(workload: Path, tmp_path: Path) -> None:
    """--resume re-opens the same copy (the user's directory may have changed or gone) and goes on."""
    generated = {"content": json.dumps({"initial_cu": kernel(), "initial_launch": LAUNCH})}
    code, _ = optimize(tmp_path, [generated, proposal(kernel("WRONG"), "one element off")],
                       "--workload", str(workload), "--max-iterations", "1")
    run = tmp_path / "results" / "run-001"
    assert code == 0 and candidates(run) == [("000-initial", "ok"), ("001-it1", "mismatch")]
    (workload / "problem.py").write_text("raise SystemExit('the user edited the original')\n")

    code, model = optimize(tmp_path, [proposal(kernel("MS:perf=0.001;"), "repaired")], "--resume", "run-001",
                           "--max-iterations", "2")
    summary: dict[str, Any] = json.loads((run / "summary.json").read_text())
    assert code == 0 and not model.steps and not model.exhausted, summary
    assert candidates(run) == [("000-initial", "ok"), ("001-it1", "mismatch"), ("002-it2-repair", "ok")]
    assert (summary["status"] == "completed" and len(summary["resumes"]) == 1
            and summary["best"]["label"] == "002-it2-repair")
    assert summary["workload"]["reference"]["pytorch"] is True and "PyTorch" in summary["workload"]["expected_outputs"]
    assert not list((run / "tools").glob("*-freeze_workload.json"))


def test_flags_that_would_replace_the_pytorch_reference_are_refused(workload: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ref.cu").write_text(kernel())
    code, model = optimize(tmp_path, [], "--workload", str(workload), "--reference", str(tmp_path / "ref.cu"))
    assert code != 0 and not model.requests
    said = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert ("its reference is its PyTorch module (reference.torch)" in said
            and "--reference cannot be combined" in said), said
