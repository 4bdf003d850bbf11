"""Rough edges of the command line a new user meets first: `kernelopt runs` alone lists runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.parametrize("argv", [[], ["--json"]])
def test_runs_without_an_action_lists_the_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str],
) -> None:
    from kernelopt_agent.cli import main as agent_main

    run = tmp_path / "results" / "run-001"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"status": "finished",
                                                  "timings": {"started": 1764559800.5, "wall_s": 3}}))
    monkeypatch.chdir(tmp_path)  # the default --results-dir is ./results
    assert agent_main(["runs", *argv]) == 0
    out = capsys.readouterr().out
    assert "run-001" in out
    if argv:
        assert json.loads(out)[0]["status"] == "finished"


def test_python_m_kernelopt_mcp_names_itself_in_its_usage() -> None:
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "kernelopt_mcp", "--help"], capture_output=True, text=True,
                          timeout=120, cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)}, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: python -m kernelopt_mcp "), proc.stdout[:200]
