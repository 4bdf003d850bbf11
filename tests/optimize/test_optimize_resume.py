"""`kernelopt optimize --resume RUN` (issue 15): an interrupted, killed, budget-stopped or finished run goes
on in its own directory from its records, with the scripted model on loopback HTTP and the pretend H200
of tests/fakegpu.py (kernel markers set each candidate's verdict and latency, so the best is known).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fakegpu import kernel
from scripted_model import ScriptedModel
from test_optimize import env, optimize, proposal, read  # noqa: F401  (env is a fixture)

from kernelopt_agent.cli import main as agent_main
from kernelopt_agent.records import StepEvent, read_history

FAST, SLOW, FASTER = kernel("MS:n_4096=0.05;"), kernel("MS:n_4096=0.08;"), kernel("MS:n_4096=0.03;")


def ctrl_c(body: dict[str, Any]) -> dict[str, Any]:
    """Ctrl-C while the model is thinking (SIGINT to this process, which runs the optimizer)."""
    os.kill(os.getpid(), signal.SIGINT)
    return proposal(kernel("MS:n_4096=0.01;"), "never evaluated")


def stderr(capsys: pytest.CaptureFixture[str]) -> str:
    return " ".join(capsys.readouterr().err.split())  # the console wraps long lines


def labels(run: Path) -> list[str]:
    return [c.label for c in read_history(run).candidates]


def test_ctrl_c_then_resume_keeps_numbering_best_tokens_and_records(env: dict[str, Path],  # noqa: F811
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    run = env["results"] / "run-001"
    with ScriptedModel([proposal(FAST, "fast"), proposal(kernel("WRONG"), "wrong"), ctrl_c]) as model:
        assert optimize(env, model, "--workload", "tiny_add", "--max-iterations", "4") == 130
    before = read(run / "summary.json")
    assert before["status"] == "interrupted" and before["best"]["label"] == "002-it1"
    assert labels(run) == ["000-reference", "001-initial", "002-it1", "003-it2"]
    old_answers = {p.name: p.read_bytes() for p in (run / "model").iterdir()}
    old_lines = (run / "history.jsonl").read_text().splitlines()

    with ScriptedModel([proposal(SLOW, "repaired"), proposal(FASTER, "faster")]) as model:
        code = optimize(env, model, "--resume", "run-001")  # a bare name under --results-dir
    assert code == 0 and not model.steps and not model.exhausted
    assert sorted(p.name for p in env["results"].iterdir()) == ["run-001"]  # the same directory, no new run
    # iteration 3 was cut short: it is done again, as the repair of 003-it2; numbering goes on
    assert labels(run) == ["000-reference", "001-initial", "002-it1", "003-it2", "004-it3-repair", "005-it4"]
    assert "Repair it" in model.requests[0]["messages"][-1]["content"]
    assert "002-it1" in model.requests[0]["messages"][-1]["content"]  # the prompt is rebuilt from the records: the best
    summary = read(run / "summary.json")
    assert summary["status"] == "completed" and summary["best"]["label"] == "005-it4"
    assert (run / "best.cu").read_text().strip() == FASTER.strip()
    assert summary["iterations"]["used"] == 4 and summary["candidates"]["total"] == 6
    # tokens: both sessions' answers, each file kept (numbering went on)
    assert (summary["tokens"]["calls"] == before["tokens"]["calls"] + 2
            == len(list((run / "model").glob("*-response.json"))))
    assert all((run / "model" / name).read_bytes() == data for name, data in old_answers.items())
    numbers = [int(p.name[:4]) for p in (run / "tools").glob("*.json")]
    assert len(numbers) == len(set(numbers))
    # history.jsonl appended (the old lines untouched), the resume recorded as a step and in the summary
    lines = (run / "history.jsonl").read_text().splitlines()
    assert lines[:len(old_lines)] == old_lines and len(lines) > len(old_lines)
    resumes = summary["resumes"]
    assert len(resumes) == 1 and resumes[0]["from_iteration"] == 3 and resumes[0]["previous_status"] == "interrupted"
    assert resumes[0]["candidates_before"] == 4 and set(resumes[0]["changed"]) == {"base_url"}  # the model's new port
    steps = [e for e in read_history(run).of(StepEvent) if e.node == "resume"]
    assert len(steps) == 1 and steps[0].came_from == "begin"
    assert summary["workload"]["seed"] == before["workload"]["seed"]
    capsys.readouterr()
    assert agent_main(["runs", "show", str(run)]) == 0
    shown = capsys.readouterr().out
    assert "resumed 1 time" in shown and "from iteration 3 (was interrupted" in shown, shown
    assert "from iteration 3 (was interrupted" in (run / "report.html").read_text()


def test_resume_after_kill_9_with_a_torn_last_line(env: dict[str, Path]) -> None:  # noqa: F811
    run = env["results"] / "run-001"
    with ScriptedModel([proposal(FAST, "fast"), {**proposal(SLOW), "sleep": 60}, proposal(FASTER, "faster"),
                        proposal(SLOW, "slower")]) as model:
        cmd = [sys.executable, "-m", "kernelopt_agent", "optimize", "--workload", "tiny_add", "--max-iterations", "3",
               "--harness", str(env["harness"]), "--workspace", str(env["ws"]), "--results-dir", str(env["results"]),
               "--base-url", model.url, "--iterations", "3", "--warmup", "1", "--quiet"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        deadline = time.monotonic() + 120
        while len(model.requests) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert len(model.requests) == 2, proc.communicate()[0] if proc.poll() is not None else "no second request"
        proc.kill()  # kill -9 while iteration 2's model request is out
        proc.communicate(timeout=60)
        assert read(run / "summary.json")["status"] == "running"  # nothing could say otherwise
        history = run / "history.jsonl"
        whole = history.read_bytes()
        cut = whole.rstrip(b"\n").rfind(b"\n") + 1
        history.write_bytes(whole[:cut + (len(whole) - cut) // 2])  # the last line torn, as by a kill mid-write
        assert read_history(run).problems and "cut short" in read_history(run).problems[0]
        # a resume cannot lower what was done; the workload is the frozen one
        code = optimize(env, model, "--resume", str(run), "--max-iterations", "3")
    assert code == 0 and not model.steps and not model.exhausted
    history = read_history(run)
    assert history.problems == []  # the torn line was cut off before anything was appended
    assert labels(run) == ["000-reference", "001-initial", "002-it1", "003-it2", "004-it3"]
    summary = read(run / "summary.json")
    assert summary["status"] == "completed" and summary["best"]["label"] == "003-it2"
    assert summary["resumes"][0]["previous_status"] == "interrupted" and summary["resumes"][0]["from_iteration"] == 2
    assert any("cut short" in n and "dropped" in n for n in summary["notes"])
    assert summary["tokens"]["calls"] == 3  # it1, and it2 and it3 after the resume: the killed request had no answer
    assert summary["files"]["replay"] and all((run / f).is_file() for f in summary["files"]["replay"].values())


def test_a_completed_run_is_refused_unless_more_iterations_are_asked_for(env: dict[str, Path],  # noqa: F811
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    run = env["results"] / "run-001"
    with ScriptedModel([proposal(FAST, "fast")]) as model:
        assert optimize(env, model, "--workload", "tiny_add", "--max-iterations", "1") == 0
    snapshot = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    capsys.readouterr()
    with ScriptedModel([]) as model:
        assert optimize(env, model, "--resume", "1") == 2
        assert optimize(env, model, "--resume", "1", "--max-iterations", "1") == 2
    err = stderr(capsys)
    assert "has done 1 of its --max-iterations 1 (status completed)" in err and "--max-iterations N, N > 1" in err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == snapshot and not model.requests
    with ScriptedModel([proposal(FASTER, "faster")]) as model:
        assert optimize(env, model, "--resume", "1", "--max-iterations", "2") == 0
    summary = read(run / "summary.json")
    assert (summary["status"] == "completed"
            and summary["iterations"] == {"max": 2, "used": 2, "candidates_per_iteration": 1})
    assert summary["best"]["label"] == "003-it2" and labels(run)[-2:] == ["002-it1", "003-it2"]
    assert summary["resumes"][0]["previous_status"] == "completed"
    assert summary["resumes"][0]["changed"]["max_iterations"] == [1, 2]
    assert json.loads((run / "config.json").read_text())["max_iterations"] == 1  # the options it started with stay


def test_conflicting_options_are_refused(env: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    run = env["results"] / "run-001"
    with ScriptedModel([proposal(FAST), ctrl_c]) as model:
        assert optimize(env, model, "--workload", "tiny_add", "--max-iterations", "3") == 130
    snapshot = (run / "history.jsonl").read_bytes()
    capsys.readouterr()
    with ScriptedModel([]) as model:
        assert optimize(env, model, "--resume", "run-001", "--workload", "tiny2", "--model", "gpt-5") == 2
        err = stderr(capsys)
        assert "--workload 'tiny2' (the run has 'tiny_add')" in err and "--model 'gpt-5'" in err
        assert "keeps the options it started with" in err
        assert optimize(env, model, "--resume", "run-001", "--use-nsight") == 2
        assert "--use-nsight" in stderr(capsys)
        assert optimize(env, model, "--resume", "run-009") == 2
        assert "run-009: no such run directory" in stderr(capsys)
        summary_file, sleeper = run / "summary.json", subprocess.Popen(["sleep", "60"])
        saved = summary_file.read_bytes()
        try:  # a run whose process is alive is not resumed under it
            summary_file.write_text(json.dumps({**read(summary_file), "status": "running", "pid": sleeper.pid}))
            assert optimize(env, model, "--resume", "run-001") == 2
            assert f"run-001 is still running (process {sleeper.pid})" in stderr(capsys)
        finally:
            sleeper.kill()
            sleeper.wait()
            summary_file.write_bytes(saved)
        # the same options as recorded are no conflict; nothing was asked or written by the refusals
        assert not model.requests and (run / "history.jsonl").read_bytes() == snapshot
    with ScriptedModel([proposal(SLOW), proposal(SLOW + "// 2\n")]) as model:
        assert optimize(env, model, "--resume", "run-001", "--workload", "tiny_add", "--max-tokens", "10000000") == 0
    summary = read(run / "summary.json")
    assert summary["status"] == "completed" and summary["resumes"][0]["changed"]["max_tokens"] == [None, 10000000]


def test_max_cost_counts_what_was_spent_before(env: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    # gpt-5-mini list prices: 0.25 USD per M input tokens, 2 USD per M output tokens -> 0.45 USD an answer
    def costly(source: str) -> dict[str, Any]:
        return {**proposal(source), "usage": {"prompt_tokens": 1_000_000, "completion_tokens": 100_000}}

    run = env["results"] / "run-001"
    with ScriptedModel([costly(FAST)]) as model:
        assert optimize(env, model, "--workload", "tiny_add", "--max-iterations", "5", "--max-cost", "0.4") == 0
    assert read(run / "summary.json")["status"] == "stopped"
    capsys.readouterr()
    with ScriptedModel([]) as model:
        assert optimize(env, model, "--resume", "run-001") == 2
    assert "has spent about 0.4500 USD, --max-cost 0.4 already" in stderr(capsys)
    with ScriptedModel([costly(FASTER), costly(SLOW)]) as model:
        assert optimize(env, model, "--resume", "run-001", "--max-cost", "0.8") == 0
    assert len(model.steps) == 1  # 0.45 spent before + 0.45 now reaches 0.8: the third answer was never asked for
    summary = read(run / "summary.json")
    assert summary["status"] == "stopped" and summary["stop_reason"].startswith("--max-cost 0.8 USD reached")
    assert summary["tokens"]["cost_usd"] == pytest.approx(0.9) and summary["tokens"]["calls"] == 2
    assert summary["best"]["label"] == "003-it2" and summary["resumes"][0]["previous_status"] == "stopped"
