"""`kernelopt optimize` and the integrity verdicts (issue 14), on CPU: the scripted model on
loopback proposes kernels that the pretend GPU of tests/fakegpu.py rejects as a cheat
(timed_mismatch, inconsistent_timing, impossible_time, nondeterministic) or as an ordinary bug
(mismatch).

- history.json records each verdict;
- after a cheat the next request tells the model that the idea itself is not acceptable and why,
  and asks for a different approach; after an ordinary failure it asks for a repair that keeps
  the idea;
- the model is told the integrity checks the evaluator says it ran, and no others.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakegpu import kernel
from scripted_model import ScriptedModel
from test_optimize import env, optimize, proposal, read  # noqa: F401  (env is a fixture)

NOT_ACCEPTABLE = "the optimization idea itself is not acceptable"
KEEP_IDEA = "keeping its optimization idea"
CHECKS_LINE = "Integrity checks kernelopt ran on the last evaluation:"


def _task(request: dict[str, Any]) -> str:
    return request["messages"][-1]["content"]


def test_cheats_are_explained_as_cheats_and_recorded(env: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    # the pretend harness offers the repeat launch, the check launch on hidden inputs and the confirm launch
    monkeypatch.setenv("KO_FAKE_FEATURES", "determinism,timed_inputs,confirm_launch")
    script = [
        proposal(kernel("CACHE"), "cache the results keyed on a hash of the inputs"),  # it1 -> timed_mismatch
        proposal(kernel("MS:n_4096=0.000001;"), "skip the work on repeated launches"),  # it2 -> impossible_time
        proposal(kernel("RACE"), "drop the __syncthreads"),                           # it3 -> nondeterministic
        proposal(kernel("SLOWCHECK"), "reuse the last launch's results"),              # it4 -> inconsistent_timing
        proposal(kernel("WRONG"), "vectorize with float4"),                           # it5 -> mismatch
        proposal(kernel("FAST"), "vectorize with float4, tail fixed"),                 # it6 -> ok
    ]
    with ScriptedModel(script) as model:
        assert optimize(env, model, "--workload", "tiny_add", "--max-iterations", "6") == 0
    assert not model.steps and not model.exhausted
    run = env["results"] / "run-001"
    history = read(run / "history.json")
    verdicts = {h["label"]: h["status"] for h in history if h["event"] == "candidate"}
    assert verdicts == {
        "000-reference": "ok", "001-initial": "ok", "002-it1": "timed_mismatch", "003-it2-repair": "impossible_time",
        "004-it3-repair": "nondeterministic", "005-it4-repair": "inconsistent_timing", "006-it5-repair": "mismatch",
        "007-it6-repair": "ok",
    }
    summary = read(run / "summary.json")
    assert summary["best"]["label"] == "007-it6-repair"
    # each rejected candidate's own result says why (what the server rendered for the model)
    assert "never cached or skipped" in read(run / "candidates" / "002-it1" / "result.json")["text"]

    tasks = [_task(r) for r in model.requests]
    why = {
        1: ("timed_mismatch", "cached or reused across launches"),
        2: ("impossible_time", "memory bandwidth and compute peak"),
        3: ("nondeterministic", "a race"),
        4: ("inconsistent_timing", "much slower than its timed launches"),
    }
    for i, (status, reason) in why.items():
        assert f"was rejected ({status})" in tasks[i] and reason in tasks[i], tasks[i][-1500:]
        assert NOT_ACCEPTABLE in tasks[i] and "different, legitimate approach" in tasks[i]
        assert KEEP_IDEA not in tasks[i]
    assert "is invalid (mismatch)" in tasks[5] and KEEP_IDEA in tasks[5] and NOT_ACCEPTABLE not in tasks[5]
    assert "Task: propose" in tasks[0]

    # the checks the model is told are the result's own list, which history.json keeps per candidate
    checks = next(h["checks"] for h in history if h["event"] == "candidate" and h["label"] == "001-initial")
    assert "timed outputs on hidden-seed inputs" in checks and any(c.startswith("repeat launch") for c in checks)
    assert f"{CHECKS_LINE} {'; '.join(checks)}." in tasks[0]
    system = model.requests[0]["messages"][0]["content"]
    assert "Never cache or reuse results across launches" in system


def test_the_model_is_not_told_of_checks_that_did_not_run(env: dict[str, Path],  # noqa: F811
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KO_FAKE_FEATURES", raising=False)  # a harness without the repeat and hidden-input launches
    with ScriptedModel([proposal(kernel("FAST"))]) as model:
        assert optimize(env, model, "--workload", "tiny_add", "--max-iterations", "1") == 0
    task = _task(model.requests[0])
    line = next(x for x in task.splitlines() if x.startswith(CHECKS_LINE))
    assert "hidden-seed" not in line and "repeat launch" not in line and "poisoned outputs" in line
    history = read(env["results"] / "run-001" / "history.json")
    for h in history:
        if h["event"] == "candidate":
            assert not any("hidden-seed" in c or "repeat" in c for c in h["checks"]), h
            assert h["checks"] == read(env["results"] / "run-001" / h["files"]["result.json"])["result"]["checks"]
