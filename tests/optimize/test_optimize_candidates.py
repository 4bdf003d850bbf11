"""`kernelopt optimize --candidates N` on CPU: the scripted model on loopback (real HTTP) and
kernelopt-mcp over stdio with the pretend H200 (tests/fakegpu.py).

N lanes ask the model at once; the GPU evaluates what has arrived while other requests are still
in flight; an identical proposal is recorded once and evaluated once; each lane repairs its own
invalid candidate; history, summary, heatmap and `runs show` hold several candidates per iteration.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from fakegpu import kernel, write_harness
from scripted_model import ScriptedModel
from test_optimize import env, optimize, proposal, read  # noqa: F401  (env is a fixture)

from kernelopt_agent.cli import main as agent_main
from kernelopt_agent.graph import EDGES, edges_taken

WAIT_S = 120  # only a deadlock would wait this long; the test fails then instead of hanging


def where(body: dict[str, Any]) -> tuple[int, int]:
    """(iteration, candidate) of a request, from its state prompt."""
    state = body["messages"][2]["content"]
    iteration = int(re.search(r"Iteration (\d+) of", state).group(1))  # type: ignore[union-attr]
    slot = int(re.search(r"You are candidate (\d+) of 3", state).group(1))  # type: ignore[union-attr]
    return iteration, slot


def test_three_candidates_per_iteration(env: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    same = kernel("MS:n_4096=0.05;")
    answers = {
        (1, 1): proposal(same, "vectorize"), (1, 2): proposal(same, "vectorize too"),
        (1, 3): proposal(kernel("WRONG"), "risky"),
        (2, 1): proposal(kernel("MS:n_4096=0.04;"), "unroll"), (2, 2): proposal(kernel("MS:n_4096=0.03;"), "tile"),
        (2, 3): proposal(kernel("MS:n_4096=0.02;"), "fixed"),
    }
    first_round = threading.Barrier(3)  # the three first requests are in flight together, or this breaks
    lane1_asked_again = threading.Event()
    seen: list[tuple[int, int]] = []

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        it, slot = where(body)
        seen.append((it, slot))
        if it == 1:
            first_round.wait(WAIT_S)
        if (it, slot) == (2, 1):
            lane1_asked_again.set()
        if (it, slot) == (1, 3):  # held until lane 1's candidate was evaluated and lane 1 asked again
            assert lane1_asked_again.wait(WAIT_S)
        return answers[(it, slot)]

    with ScriptedModel([answer] * 6) as model:
        code = optimize(env, model, "--workload", "tiny_add", "--max-iterations", "2", "--candidates", "3")
    assert code == 0 and not model.exhausted and not model.steps
    assert sorted(seen) == sorted(answers)
    run = env["results"] / "run-001"
    history = read(run / "history.json")
    labels = [h["label"] for h in history if h["event"] == "candidate"]
    dup = [h for h in history if h["event"] == "duplicate"]
    assert len(dup) == 1 and dup[0]["iteration"] == 1 and dup[0]["slot"] in (1, 2)  # the same kernel, evaluated once
    first = next(h for h in history if h["event"] == "candidate" and h["kind"] == "proposal" and h["iteration"] == 1)
    assert dup[0]["same_as"] == first["label"]
    assert len(labels) == 2 + 5 and labels[:2] == ["000-reference", "001-initial"]
    assert any(label.endswith("-it2-3-repair") for label in labels)  # lane 3 repaired its own invalid candidate
    repair = next(b for b in model.requests if where(b) == (2, 3))["messages"][2]["content"]
    assert "Repair it" in repair and "KO_FAKE_WRONG" in repair
    lane2 = next(b for b in model.requests if where(b) == (1, 2))["messages"][2]["content"]
    assert "You are candidate 2 of 3" in lane2 and "Lean towards" in lane2
    summary = read(run / "summary.json")
    assert (summary["best"]["label"].endswith("-it2-3-repair")
            and summary["best"]["score_ms"] == pytest.approx(0.02, rel=0.05))
    assert (summary["candidates"]["total"] == 7
            and summary["iterations"] == {"max": 2, "used": 2, "candidates_per_iteration": 3})
    assert summary["candidates"]["duplicates"] == [f"iteration 1 candidate {dup[0]['slot']}: the same kernel as "
                                                   f"{first['label']}"]
    assert summary["best"]["iteration"] == 2 and summary["best"]["candidate"] == 3
    assert (run / "heatmap.png").is_file()
    # history.jsonl has every event, one a line, the same as history.json
    lines = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert lines == history
    steps = [(h["node"], h["came_from"], h["message"]) for h in history if h["event"] == "step"]
    assert edges_taken(steps) <= {(src, dst) for src, dst, _ in EDGES}  # three lanes, only the graph's routes
    capsys.readouterr()
    assert agent_main(["runs", "show", str(run)]) == 0
    shown = capsys.readouterr().out
    assert "iteration.candidate" in shown and "1 proposal(s) repeated an earlier candidate" in shown


def test_candidates_must_be_a_small_positive_number(env: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    for bad in ("0", "17"):
        assert optimize(env, None, "--workload", "tiny_add", "--candidates", bad) == 2
        assert "--candidates must be an integer from 1 to 16" in capsys.readouterr().err
    assert not env["results"].exists()


def test_candidates_spread_over_every_device(env: dict[str, Path]) -> None:  # noqa: F811
    write_harness(env["tmp"], "fake", devices=2)  # the same stand-in, now a machine of two GPUs
    slow = [kernel("SLOW") + f"// lane {i}\n" for i in range(4)]
    both_asked = threading.Barrier(2)

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        state = body["messages"][2]["content"]
        it = int(re.search(r"Iteration (\d+) of", state).group(1))  # type: ignore[union-attr]
        slot = int(re.search(r"You are candidate (\d+) of 2", state).group(1))  # type: ignore[union-attr]
        both_asked.wait(WAIT_S)  # the two lanes' candidates reach the server together
        return proposal(slow[2 * (it - 1) + slot - 1], f"lane {slot}")

    with ScriptedModel([answer] * 4) as model:
        code = optimize(env, model, "--workload", "tiny_add", "--max-iterations", "2", "--candidates", "2",
                        "--devices", "0,1")
    assert code == 0
    run = env["results"] / "run-001"
    history = read(run / "history.json")
    devices = {h["device"] for h in history if h["event"] == "candidate" and h["kind"] == "proposal"}
    assert {d.split()[0] for d in devices} == {"0", "1"}, devices  # each GPU evaluated some proposals
    summary = read(run / "summary.json")
    assert summary["devices"]["used"] == 2 and summary["devices"]["evaluations_per_minute_per_device"] > 0
    served = {json.loads(line)["device"] for line in (env["tmp"] / "harness-requests.jsonl").read_text().splitlines()}
    assert served == {0, 1}
