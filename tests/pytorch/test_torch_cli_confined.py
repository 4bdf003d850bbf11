"""`kernelopt import-torch` runs the problem file in a confined child (kernelopt_mcp/torch_cli.py):
a problem file is someone's code, as a KernelBench directory is. ``--in-process`` runs it here."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from test_suite_imports import PROBE, stand_in_torch
from test_torch_child import needs_landlock

from kernelopt_mcp.cli import main

PRINTING = """import os, torch, torch.nn as nn
print("a line on stdout from the problem")
os.write(1, b"and one from descriptor 1\\n")
class Model(nn.Module):
    def forward(self, x):
        return x * 2
def get_inputs():
    return [torch.rand(64, 32)]
"""


@needs_landlock
def test_the_problem_runs_confined(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """No secret of the caller's environment, no other file read (not even one beside the problem)
    or written, no process started; the refusal says what the problem raised, nothing is written."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted-cli")
    stand_in_torch(tmp_path, monkeypatch)
    problem = tmp_path / "problems" / "probe.py"
    problem.parent.mkdir()
    # beside the problem: the child reads a copy of the file alone, not its directory (a file in $HOME)
    secret, outside = problem.parent / "secret.txt", tmp_path / "escaped.txt"
    secret.write_text("sk-planted-file")
    problem.write_text(f"SECRET = {str(secret)!r}\nOUTSIDE = {str(outside)!r}\n{PROBE}")
    (tmp_path / "out").mkdir()
    assert main(["import-torch", str(problem), "-o", str(tmp_path / "out" / "w"), "--json"]) == 2
    answer = json.loads(capsys.readouterr().out)
    assert answer["status"] == "error" and "PROBE" in answer["message"], answer
    found, _ = json.JSONDecoder().raw_decode(answer["message"].split("PROBE", 1)[1])
    assert found == {"key": False, "read": "PermissionError", "write": "PermissionError", "fork": "PermissionError"}
    assert not outside.exists() and list((tmp_path / "out").iterdir()) == []  # no staging directory left


@needs_landlock
@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_without_torch_the_confined_import_says_how_to_get_it(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    problem = tmp_path / "p.py"
    problem.write_text(PRINTING)
    assert main(["import-torch", str(problem), "-o", str(tmp_path / "w")]) == 2
    assert "install torch" in capsys.readouterr().err and not (tmp_path / "w").exists()


def _import(args: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], str]:
    code = main(["import-torch", *args, "--json"])
    captured = capfd.readouterr()
    return code, json.loads(captured.out), captured.err  # stdout is one JSON document, whatever the problem printed


@needs_landlock
def test_confined_and_in_process_imports_write_the_same_workload(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch", reason="torch is not installed (pip install torch): PyTorch problems cannot be run")
    problem = tmp_path / "twice.py"
    problem.write_text(PRINTING)
    confined, here = tmp_path / "confined", tmp_path / "here"
    kernel = tmp_path / "k.cu"  # a starting kernel and its launch, with a compile option: handed over alike
    kernel.write_text('extern "C" __global__ void twice(const float* x, float* out) {}\n')
    (tmp_path / "k.launch.json").write_text(json.dumps({"launch": {"grid": [2], "block": [64]},
                                                        "compile_options": ["-DTILE=4"]}))
    code, answer, _ = _import([str(problem), "-o", str(confined), "--initial", str(kernel)], capfd)
    assert code == 0 and answer["path"] == str(confined) and answer["status"] == "ok"
    code, answer_here, err = _import([str(problem), "-o", str(here), "--in-process", "--initial", str(kernel)], capfd)
    assert code == 0 and "a line on stdout from the problem" in err and "from descriptor 1" in err
    assert {k: v for k, v in answer.items() if k != "path"} == {k: v for k, v in answer_here.items() if k != "path"}
    assert (confined / "workload.json").read_text() == (here / "workload.json").read_text()
    assert "-DTILE=4" in (confined / "workload.json").read_text()
    assert (confined / "initial.cu").read_text() == kernel.read_text()
    assert sorted(p.name for p in confined.iterdir()) == sorted(p.name for p in here.iterdir())
    code, refused, _ = _import([str(problem), "-o", str(confined), "--initial", str(kernel)], capfd)  # there already
    assert code == 2 and "exists and is not empty" in refused["message"] and "--force" in refused["message"]
    code, again, _ = _import([str(problem), "-o", str(confined), "--force", "--initial", str(kernel)], capfd)
    assert code == 0 and again == answer
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging directory left
