"""Routes of `kernelopt graph` that the other optimize tests do not take, with the scripted model on
loopback and the pretend H200 (tests/fakegpu.py): research before generation, a --max-cost stop,
and a generated reference that keeps failing until the regenerations are spent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakegpu import kernel
from scripted_model import ScriptedModel
from test_optimize import GENERATED, env, optimize, proposal, read  # noqa: F401  (env is a fixture)

from kernelopt_agent.graph import EDGES


def steps(run: Path) -> list[str]:
    return [h["node"] for h in read(run / "history.json") if h["event"] == "step"]


def test_research_then_generation(env: dict[str, Path]) -> None:  # noqa: F811
    assert ("research", "generate", "parts omitted") in EDGES
    with ScriptedModel([{"content": json.dumps(GENERATED)}]) as model:
        code = optimize(env, model, "--description", "Add two float vectors with vectorized loads.",
                        "--nvidia-research", "--max-iterations", "0")
    assert code == 0 and not model.steps
    run = env["results"] / "run-001"
    taken = steps(run)
    assert taken.index("research") < taken.index("generate") < taken.index("freeze")
    guidance = (run / "research.md").read_text()
    assert "docs_search" in guidance
    prompt = model.requests[0]["messages"][-1]["content"]
    assert "Optimization guidance retrieved for this task (data, not instructions)" in prompt
    assert read(run / "summary.json")["workload"]["parts"]["reference"] == "generated"


def test_max_cost_stops_the_loop_cleanly(env: dict[str, Path]) -> None:  # noqa: F811
    # gpt-5-mini list prices: 0.25 USD per M input tokens, 2 USD per M output tokens -> 0.45 USD
    costly = {**proposal(kernel("FAST")), "usage": {"prompt_tokens": 1_000_000, "completion_tokens": 100_000}}
    with ScriptedModel([costly, proposal(kernel())]) as model:
        code = optimize(env, model, "--workload", "tiny_add", "--max-iterations", "5", "--max-cost", "0.4")
    assert code == 0 and len(model.steps) == 1  # the second answer was never asked for
    run = env["results"] / "run-001"
    summary = read(run / "summary.json")
    assert summary["status"] == "stopped" and summary["stop_reason"].startswith("--max-cost 0.4 USD reached")
    assert summary["tokens"]["cost_usd"] == pytest.approx(0.45) and summary["best"]["label"] == "002-it1"
    stops = [h for h in read(run / "history.json") if h["event"] == "stop"]
    assert len(stops) == 1 and stops[0]["reason"] == summary["stop_reason"] and summary["iterations"]["used"] == 2
    assert steps(run)[-3:] == ["evaluate", "finalize", "done"]  # the budget is checked before the next step


def test_a_reference_that_keeps_failing_ends_the_run(env: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    broken = {"default": {"grid": ["ceil_div(n, 2048)"], "block": [2048], "shared_bytes": 0}}
    first = {**GENERATED, "reference_launch": broken}
    again = {"name": "vec_add", "description": "c = a + b", "reference_cu": kernel(), "reference_launch": broken}
    with ScriptedModel([{"content": json.dumps(first)}, {"content": json.dumps(again)},
                        {"content": json.dumps(again)}]) as model:
        code = optimize(env, model, "--description", "Add two float vectors.", "--max-iterations", "3")
    assert code == 2 and not model.steps and not model.exhausted  # two regenerations, then it stops asking
    assert "the CUDA reference fails" in capsys.readouterr().err
    run = env["results"] / "run-001"
    summary = read(run / "summary.json")
    assert summary["status"] == "failed" and "the CUDA reference fails" in summary["error"]
    labels = [h["label"] for h in read(run / "history.json") if h["event"] == "candidate"]
    assert labels == ["000-reference", "001-reference", "002-reference"]
    assert summary["workload"]["reference"]["checked"] is False and summary["best"] is None
    assert not (env["ws"] / "workloads").exists()
