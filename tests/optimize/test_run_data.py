"""A run's directory keeps what reproduces its data, not the bytes; `runs restore` draws them again,
`runs du` says what takes the space and `runs prune` removes whole runs, never a live one.

The scripted optimize runs use the pretend GPU (tests/fakegpu.py, c = a + b) on a workload whose
timed case holds 16 MiB of float32 inputs and 16 MiB of float64 expected outputs: a run that kept
the bytes would be over the 20 MB bound sgemm is held to.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakegpu import TINY_SPEC, kernel, write_tiny_workload
from scripted_model import ScriptedModel
from test_optimize import env, optimize, proposal  # noqa: F401  (env: fixture)

from kernelopt_agent.cli import main as agent_main
from kernelopt_agent.rundisk import parse_age, prune_plan

BIG_N = 1 << 21  # a, b: 8 MiB each; the expected c: 16 MiB of float64
BIG = json.loads(json.dumps(TINY_SPEC))
BIG["name"] = "big_add"
BIG["cases"] = [
    {"name": "one", "kind": "correctness", "scalars": {"n": 1}},
    {"name": "odd_1001", "kind": "correctness", "scalars": {"n": 1001}},
    {"name": "big", "kind": "performance", "scalars": {"n": BIG_N}},
]
RUN_BOUND_BYTES = 20 * 10**6


def read(path: Path) -> Any:
    return json.loads(path.read_text())


def run_bytes(run: Path) -> int:
    return sum(p.stat().st_size for p in run.rglob("*") if p.is_file())


def scripted_run(env: dict[str, Path], *args: str) -> Path:  # noqa: F811
    write_tiny_workload(env["extra"], BIG)
    script = [proposal(kernel(f"MS:big={ms};"), f"idea {i}") for i, ms in enumerate((0.08, 0.05, 0.06, 0.02))]
    with ScriptedModel(script) as model:
        assert optimize(env, model, "--workload", "big_add", "--max-iterations", "4", *args) == 0
    runs = sorted(env["results"].iterdir())
    return runs[-1]


def test_a_run_keeps_what_reproduces_its_inputs_and_restore_replays_the_best(env: dict[str, Path]) -> None:  # noqa: F811
    run = scripted_run(env)
    summary = read(run / "summary.json")
    assert summary["status"] == "completed" and summary["best"]["label"].endswith("it4")
    data = read(run / summary["files"]["data"])
    input_bytes = 2 * 4 * (1 + 1001 + BIG_N)
    assert data["removed_bytes"] >= input_bytes  # the drawn inputs and the large expected output went
    assert run_bytes(run) < RUN_BOUND_BYTES, f"the run keeps {run_bytes(run)} bytes"
    assert run_bytes(run) < 0.5 * input_bytes  # bytes kept per input byte
    manifest = read(run / "input_cases.json")
    drawn = [g for c in manifest["cases"] for g in c["inputs"].values()]
    assert drawn and all(g.get("drawn_from") and g.get("sha256") for g in drawn)
    assert not any((run / g["path"]).exists() for g in drawn)
    assert (run / "expected" / "big" / "c.bin").exists() is False and (run / "expected" / "one" / "c.bin").is_file()

    # the data drawn again from the recorded seed, checked against the recorded hashes
    assert agent_main(["runs", "restore", str(run), "--harness", str(env["harness"]), "--workspace",
                       str(env["ws"])]) == 0
    for g in drawn:
        assert hashlib.sha256((run / g["path"]).read_bytes()).hexdigest() == g["sha256"]
    # and the harness alone replays the best kernel on them, reproducing the oracle's outputs
    replays = summary["files"]["replay"]
    proc = subprocess.run([str(env["harness"]), "serve"], input="".join(
        json.dumps(read(run / replays[c])) + "\n" for c in replays), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert all(json.loads(line)["cases"][0]["status"] == "ok" for line in proc.stdout.splitlines())
    expected = read(run / "expected" / "manifest.json")
    for case in replays:
        out = np.fromfile(run / "replay" / "outputs" / case / "c.bin", dtype="<f4")
        entry = expected[case]["c"]
        np.testing.assert_allclose(out, np.fromfile(run / entry["path"], dtype="<f8"), rtol=1e-6, atol=1e-6)


def test_keep_data_keeps_the_bytes(env: dict[str, Path]) -> None:  # noqa: F811
    run = scripted_run(env, "--keep-data")
    data = read(run / "data.json")
    assert data["kept_all"] is True and data["removed_bytes"] == 0
    assert (run / "expected" / "big" / "c.bin").stat().st_size == 8 * BIG_N
    assert run_bytes(run) > RUN_BOUND_BYTES


def test_a_tampered_input_is_not_restored_silently(env: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    run = scripted_run(env)
    manifest = read(run / "input_cases.json")
    manifest["cases"][0]["inputs"]["a"]["sha256"] = "0" * 64
    (run / "input_cases.json").write_text(json.dumps(manifest, indent=2))
    assert agent_main(["runs", "restore", str(run), "--harness", str(env["harness"]), "--workspace",
                       str(env["ws"])]) == 2
    assert "input_cases.json" in capsys.readouterr().err


def _fake_run(results: Path, number: int, *, status: str | None, pid: int | None = None, age_s: float = 0.0,
              payload: int = 0) -> Path:
    run = results / f"run-{number:03d}"
    (run / "inputs").mkdir(parents=True)
    (run / "inputs" / "a.bin").write_bytes(b"x" * payload)
    if status is not None:
        (run / "summary.json").write_text(json.dumps({"status": status, "pid": pid}))
        then = time.time() - age_s
        os.utime(run / "summary.json", (then, then))
    return run


def test_du_lists_runs_largest_first_with_what_takes_the_space(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_run(tmp_path, 1, status="completed", payload=10)
    _fake_run(tmp_path, 2, status="completed", payload=5000)
    assert agent_main(["runs", "du", "--results-dir", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in out["runs"]] == ["run-002", "run-001"]
    assert next(iter(out["runs"][0]["entries"])) == "inputs/" and out["runs"][0]["entries"]["inputs/"] == 5000
    assert agent_main(["runs", "du", "--results-dir", str(tmp_path)]) == 0
    assert "run-002" in capsys.readouterr().out


def test_prune_removes_whole_runs_but_never_a_live_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    old = _fake_run(tmp_path, 1, status="completed", age_s=40 * 86400)
    live = _fake_run(tmp_path, 2, status="running", pid=os.getpid(), age_s=40 * 86400)
    crashed = _fake_run(tmp_path, 3, status="running", pid=dead.pid, age_s=40 * 86400)
    recent = _fake_run(tmp_path, 4, status="completed", age_s=60)
    starting = _fake_run(tmp_path, 5, status=None)
    newest = _fake_run(tmp_path, 6, status="completed")

    assert agent_main(["runs", "prune", "--results-dir", str(tmp_path), "--older-than", "30d", "--dry-run"]) == 0
    assert old.is_dir() and "would remove run-001, run-003" in capsys.readouterr().out
    assert agent_main(["runs", "prune", "--results-dir", str(tmp_path), "--older-than", "30d"]) == 0
    assert not old.exists() and not crashed.exists() and live.is_dir() and recent.is_dir()
    assert "kept run-002: running" in capsys.readouterr().out

    assert agent_main(["runs", "prune", "--results-dir", str(tmp_path), "--keep", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["removed"] == ["run-004"] and set(out["spared_live"]) == {"run-002", "run-005"}
    assert live.is_dir() and starting.is_dir() and newest.is_dir() and not recent.exists()


def test_prune_says_what_to_give(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert agent_main(["runs", "prune", "--results-dir", str(tmp_path)]) == 2
    assert "--keep N" in capsys.readouterr().err
    assert agent_main(["runs", "prune", "--results-dir", str(tmp_path), "--older-than", "soon"]) == 2
    assert "30d" in capsys.readouterr().err
    assert parse_age("12h") == 43200 and parse_age("2") == 2 * 86400
    with pytest.raises(ValueError):
        prune_plan(tmp_path, keep=-1, older_than_s=None)
