"""A 100-iteration `kernelopt optimize` run stays within the context budget (issue 15): the scripted
model on loopback answers every iteration with a realistic proposal (a kernel of ~4,000 characters,
a long rationale; every seventh one wrong, then repaired), kernelopt-mcp evaluates each on the
pretend H200, and every request the model receives is measured.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fakegpu import kernel
from scripted_model import ScriptedModel
from test_optimize import env, optimize, proposal, read  # noqa: F401  (env is a fixture)

from kernelopt_agent import prompts

ITERATIONS = 100
BEST_AT = 37


def source(i: int, mode: str) -> str:
    notes = "".join(f"// iteration {i}: design note {k}: tile, stage and vectorize the loads; keep the sums exact\n"
                    for k in range(50))
    return kernel(mode).rstrip() + f"\n// KERNEL-OF-ITERATION-{i}\n" + notes


def answer(body: dict[str, Any]) -> dict[str, Any]:
    state = body["messages"][-1]["content"]
    i = int(re.search(r"Iteration (\d+) of", state).group(1))  # type: ignore[union-attr]
    if i % 7 == 3:
        mode = "WRONG"
    else:
        ms = 0.01 if i == BEST_AT else 0.02 + (i % 10) * 0.003
        mode = f"MS:n_4096={ms};"
    why = f"RATIONALE-{i}: " + "restructure the loads so that each warp reads contiguous 128-byte segments; " * 15
    return proposal(source(i, mode), why)


@pytest.mark.timeout(1200)
def test_a_hundred_iterations_stay_within_the_context_budget(env: dict[str, Path]) -> None:  # noqa: F811
    with ScriptedModel([answer] * ITERATIONS) as model:
        code = optimize(env, model, "--workload", "tiny_add", "--max-iterations", str(ITERATIONS))
    assert code == 0 and not model.exhausted and not model.steps
    run = env["results"] / "run-001"
    summary = read(run / "summary.json")
    assert summary["best"]["label"] == f"{BEST_AT + 1:03d}-it{BEST_AT}" and summary["iterations"]["used"] == ITERATIONS

    sizes = [prompts.estimate_tokens(body["messages"]) for body in model.requests]
    assert max(sizes) <= prompts.PROMPT_BUDGET_TOKENS  # no tool calls here: each request is the composed prompt
    assert max(sizes) <= prompts.REQUEST_BUDGET_TOKENS
    # bounded: past the middle of the run a candidate adds at most a compact verdict row
    assert sizes[-1] - sizes[ITERATIONS // 2] <= (ITERATIONS // 2) * 100 // prompts.CHARS_PER_TOKEN
    largest = json.dumps(model.requests[sizes.index(max(sizes))]["messages"])
    last = model.requests[-1]["messages"][-1]["content"]
    assert f"KERNEL-OF-ITERATION-{BEST_AT}" in last and f"Best so far: {BEST_AT + 1:03d}-it{BEST_AT}" in last
    for h in read(run / "history.json"):  # the verdict table: every candidate's row, with its score
        # (not yet evaluated)
        if h["event"] == "candidate" and h["kind"] != "reference" and h["iteration"] != ITERATIONS:
            row = f"  {h['label']}: {h['status']}" + (f" {h['score_ms']:.4g} ms" if h["score_ms"] else "")
            assert row in last, row
    assert "RATIONALE-1:" not in last and "RATIONALE-50:" not in last  # earlier rationales are not repeated forever
    assert f"RATIONALE-{ITERATIONS - 1}:" in last  # the last few candidates are shown in full
    assert "KERNEL-OF-ITERATION" in largest
    body = model.requests[-1]
    rest = (len(json.dumps(body)) - len(json.dumps(body["messages"]))) // prompts.CHARS_PER_TOKEN  # tools, schema
    print(json.dumps({"requests": len(sizes), "largest_tokens": max(sizes), "first_tokens": sizes[0],
                      "tools_and_schema_tokens": rest, "budget": prompts.PROMPT_BUDGET_TOKENS}))
