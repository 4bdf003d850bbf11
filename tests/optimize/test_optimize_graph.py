"""Every route of `kernelopt graph` is taken (issue 15): scripted runs of `kernelopt optimize` (the
scripted model on loopback HTTP, kernelopt-mcp over stdio with the pretend H200 of tests/fakegpu.py)
whose histories, read back as typed step events, together take each edge of
kernelopt_agent.graph.EDGES at least once, and no route the graph does not declare.

Each scenario is a test of its own; the last test checks the union (running any scenario that was
deselected, so it holds however the module is run).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fakegpu import kernel
from scripted_model import ScriptedModel
from test_optimize import GENERATED, SYNTAX_ERROR, env, optimize, proposal, read  # noqa: F401  (env is a fixture)
from test_optimize_tune import FIXTURES, add_tunable

from kernelopt_agent.graph import EDGES, edges_taken
from kernelopt_agent.records import StepEvent, read_history

DECLARED = {(src, dst) for src, dst, _ in EDGES}
Scenario = Callable[[dict[str, Path]], tuple[int, Path]]
SCENARIOS: dict[str, Scenario] = {}
TAKEN: dict[str, set[tuple[str, str]]] = {}


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


def newest_run(paths: dict[str, Path]) -> Path:
    return max(paths["results"].glob("run-*"), key=lambda p: int(p.name.split("-")[1]))


def taken(run: Path) -> set[tuple[str, str]]:
    steps = [(e.node, e.came_from, e.message) for e in read_history(run).of(StepEvent)]
    return edges_taken(steps)


def tuned_answer(rationale: str) -> dict[str, Any]:  # (the rationale in a comment too: no two are the same kernel)
    launch = {"default": {"grid": ["ceil_div(n, BLOCK * UNROLL)"], "block": ["BLOCK"],
                          "shared_bytes": "0"}, "cases": []}
    tunables = {"params": [{"name": "BLOCK", "values": ["64", "128"]}, {"name": "UNROLL", "values": ["1", "2"]}],
                "constraints": [], "defaults": [{"name": "BLOCK", "value": "128"}, {"name": "UNROLL", "value": "1"}]}
    source = (FIXTURES / "add.cu").read_text() + f"// {rationale}\n"
    return {"content": json.dumps({"rationale": rationale, "source": source, "launch": launch,
                                   "compile_options": [], "tunables": tunables})}


@scenario
def description_research_nsight(paths: dict[str, Path]) -> tuple[int, Path]:
    """Research, generation retried, a generated reference regenerated, tool calls while proposing and
    repairing, profiles after valid candidates, iterations spent."""
    with_file = {**GENERATED, "inputs": {"a": {"generator": "file", "path": "/etc/passwd"},
                                         "b": {"generator": "normal"}}}
    too_big = {**GENERATED,
               "reference_launch": {"default": {"grid": ["ceil_div(n, 2048)"], "block": [2048], "shared_bytes": 0}}}
    fixed = {"name": "vec_add", "description": "c = a + b", "reference_cu": kernel(),
             "reference_launch": {"default": {"grid": ["ceil_div(n, 256)"], "block": [256], "shared_bytes": 0}}}
    script = [
        {"content": json.dumps(with_file)}, {"content": json.dumps(too_big)}, {"content": json.dumps(fixed)},
        {"tool_calls": [("compile", {"source": SYNTAX_ERROR})]}, proposal(kernel("MS:n_4096=0.05;"), "faster"),
        proposal(kernel("WRONG"), "wrong"),
        {"tool_calls": [("compile", {"source": kernel()})]}, proposal(kernel("MS:n_4096=0.04;"), "fixed"),
    ]
    with ScriptedModel(script) as model:
        code = optimize(paths, model, "--description", "Add two float vectors.", "--nvidia-research", "--use-nsight",
                        "--max-iterations", "3")
    assert not model.steps and not model.exhausted
    return code, newest_run(paths)


@scenario
def workload_tunables_refusal(paths: dict[str, Path]) -> tuple[int, Path]:
    """Research before a supplied workload; a proposal and a repair that carry tunables; a refusal in the
    last iteration."""
    script = [tuned_answer("tuned"), proposal(kernel("WRONG"), "wrong"), tuned_answer("repaired, tuned"),
              {"refusal": "I can't help with that."}]
    with ScriptedModel(script) as model:
        code = optimize(paths, model, "--workload", "tiny_add", "--nvidia-research", "--max-iterations", "4",
                        "--tune-budget", "2")
    assert not model.steps and not model.exhausted
    return code, newest_run(paths)


@scenario
def no_iterations(paths: dict[str, Path]) -> tuple[int, Path]:
    """All parts given, --max-iterations 0: no model."""
    return optimize(paths, None, "--workload", "tiny_add", "--max-iterations", "0"), newest_run(paths)


@scenario
def strategy_tune(paths: dict[str, Path]) -> tuple[int, Path]:
    add_tunable(paths["extra"] / "tiny_add")
    return optimize(paths, None, "--workload", "tiny_add", "--strategy", "tune", "--tune-evals", "3"), newest_run(paths)


@scenario
def invalid_initial_kernel(paths: dict[str, Path]) -> tuple[int, Path]:
    """A generated initial kernel that is wrong is repaired first; no usable repair in the last iteration."""
    script = [{"content": json.dumps({**GENERATED, "initial_cu": kernel("WRONG")})}, {"refusal": "No."}]
    with ScriptedModel(script) as model:
        code = optimize(paths, model, "--description", "Add two float vectors.", "--max-iterations", "1")
    assert not model.steps and not model.exhausted
    return code, newest_run(paths)


@scenario
def budget_spent_while_asking(paths: dict[str, Path]) -> tuple[int, Path]:
    """--max-tokens is reached in the middle of an iteration's tool calls."""
    script = [{"tool_calls": [("gpu_properties", {})], "usage": {"prompt_tokens": 50_000, "completion_tokens": 10}},
              proposal(kernel())]
    with ScriptedModel(script) as model:
        code = optimize(paths, model, "--workload", "tiny_add", "--max-iterations", "2", "--max-tokens", "20000")
    assert len(model.steps) == 1  # the answer after the tool call was never asked for
    assert read(newest_run(paths) / "summary.json")["status"] == "stopped"
    return code, newest_run(paths)


@scenario
def interrupted(paths: dict[str, Path]) -> tuple[int, Path]:
    """Ctrl-C (SIGINT to this process, which runs the optimizer) while the model is thinking."""
    def ctrl_c(body: dict[str, Any]) -> dict[str, Any]:
        os.kill(os.getpid(), signal.SIGINT)
        return proposal(kernel())

    with ScriptedModel([ctrl_c]) as model:
        code = optimize(paths, model, "--workload", "tiny_add", "--max-iterations", "2")
    assert read(newest_run(paths) / "summary.json")["status"] == "interrupted"
    return code, newest_run(paths)


@scenario
def interrupted_then_resumed(paths: dict[str, Path]) -> tuple[int, Path]:
    """--resume twice: after Ctrl-C with an invalid last candidate (a repair first), then after it completed
    (more iterations asked for: a proposal first)."""
    def ctrl_c(body: dict[str, Any]) -> dict[str, Any]:
        os.kill(os.getpid(), signal.SIGINT)
        return proposal(kernel())

    with ScriptedModel([proposal(kernel("WRONG"), "wrong"), ctrl_c]) as model:
        assert optimize(paths, model, "--workload", "tiny_add", "--max-iterations", "2") == 130
    run = newest_run(paths)
    with ScriptedModel([proposal(kernel("MS:n_4096=0.05;"), "fixed"),
                        proposal(kernel("MS:n_4096=0.04;"), "more")]) as model:
        assert optimize(paths, model, "--resume", str(run)) == 0
        code = optimize(paths, model, "--resume", str(run), "--max-iterations", "3")
    assert not model.steps and not model.exhausted and len(read(run / "summary.json")["resumes"]) == 2
    return code, run


EXPECTED_EXIT = {"interrupted": 130, "invalid_initial_kernel": 1}  # 1: no candidate passed


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_takes_only_declared_routes(env: dict[str, Path], name: str) -> None:  # noqa: F811
    code, run = SCENARIOS[name](env)
    assert code == EXPECTED_EXIT.get(name, 0), read(run / "summary.json")
    TAKEN[name] = taken(run)
    assert TAKEN[name] - DECLARED == set(), f"{name} took routes the graph does not declare"
    assert ("begin", "load") in TAKEN[name] and ("finalize", "done") in TAKEN[name]


@pytest.mark.timeout(1800)
def test_every_edge_of_the_graph_is_taken(env: dict[str, Path]) -> None:  # noqa: F811
    for name, run_scenario in SCENARIOS.items():
        if name not in TAKEN:  # deselected above: run it here, each in its own results directory
            env["results"] = env["tmp"] / f"results-{name}"
            TAKEN[name] = taken(run_scenario(env)[1])
    union = set().union(*TAKEN.values())
    missing = sorted(DECLARED - union)
    assert not missing, f"routes of kernelopt graph no scenario took: {missing}"
    assert union <= DECLARED
