"""The run's typed history (clients/kernelopt_agent/records.py) and the context budget of the
prompts (prompts.py), without a server: events round-trip, history.jsonl is appended one durable
line per event and read back after a kill mid-write, and the state prompt stays bounded.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from kernelopt_agent import prompts
from kernelopt_agent.graph import EDGES, NODES, edges_taken
from kernelopt_agent.records import (
    CandidateEvent,
    CandidateRecord,
    DuplicateEvent,
    NoProposalEvent,
    OtherEvent,
    StepEvent,
    StopEvent,
    TuneEvent,
    parse_event,
    read_history,
)
from kernelopt_agent.rundir import RunDir


def test_every_event_round_trips_through_its_json() -> None:
    rec = CandidateRecord(3, "003-it2-1", "proposal", 2, "src", {"default": {"grid": [1], "block": [32]}}, status="ok",
                          score_ms=0.5, case_ms={"big": 0.5}, slot=1)
    events = [StepEvent(node="propose", came_from="evaluate", message="iteration 2"), rec.as_event(),
              DuplicateEvent(iteration=2, slot=2, same_as="003-it2-1"), NoProposalEvent(iteration=3, status="refused"),
              TuneEvent(label="it1", is_error=False, best_params={"BM": 64}),
              StopEvent(reason="--max-tokens 10 reached")]
    for event in events:
        back = parse_event(json.loads(json.dumps(event.model_dump(mode="json"))))
        assert type(back) is type(event) and back == event
    cand = events[1]
    assert isinstance(cand, CandidateEvent) and cand.valid and cand.slot == 1
    assert cand.files["source.cu"] == "candidates/003-it2-1/source.cu" and "source" not in cand.model_dump()


def test_unknown_and_malformed_events() -> None:
    newer = parse_event({"event": "something_new", "time": 1.0, "detail": 3})
    assert isinstance(newer, OtherEvent) and newer.model_dump()["detail"] == 3  # a newer run's event is kept
    with pytest.raises(ValueError, match="status"):
        parse_event({"event": "candidate", "index": 0, "label": "000-reference", "kind": "reference", "valid": True})
    with pytest.raises(ValueError, match="'event' field"):
        parse_event(["not", "an", "object"])


def test_history_jsonl_is_appended_durably_and_read_back_after_a_torn_write(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    threads = [threading.Thread(target=lambda i=i: run.append_jsonl(
        "history.jsonl", StepEvent(node="propose", message=f"lane {i} " + "x" * 5000).model_dump(mode="json")))
               for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = (tmp_path / "history.jsonl").read_text().splitlines()
    assert len(lines) == 8 and all(json.loads(line)["event"] == "step" for line in lines)  # never interleaved
    with open(tmp_path / "history.jsonl", "a") as fh:  # a kill in the middle of a write
        fh.write('{"event": "candidate", "index": 4, "lab')
    history = read_history(tmp_path)
    assert history.source == "history.jsonl" and len(history.events) == 8
    assert history.problems == ["history.jsonl line 9: cut short (the run was killed mid-write)"]


def test_runs_older_than_history_jsonl_are_read_from_history_json(tmp_path: Path) -> None:
    old = [{"event": "step", "node": "load", "message": "loading", "time": 1.0},
           {"event": "candidate", "index": 0, "label": "000-reference", "kind": "reference", "iteration": None,
            "status": "ok", "valid": True, "score_ms": 0.1, "time": 2.0}]
    (tmp_path / "history.json").write_text(json.dumps(old))
    history = read_history(tmp_path)
    assert history.source == "history.json" and [c.label for c in history.candidates] == ["000-reference"]
    assert read_history(tmp_path / "nothing-here").events == []


def test_edges_are_read_from_steps() -> None:
    assert {src for src, _, _ in EDGES} | {dst for _, dst, _ in EDGES} == set(NODES)
    steps = [("load", "begin", ""), ("freeze", "load", ""), ("baseline", "freeze", ""),
             ("finalize", "baseline", "completed"), ("done", "finalize", "completed")]
    assert edges_taken(steps) == {("begin", "load"), ("load", "freeze"), ("freeze", "baseline"),
                                  ("baseline", "finalize"), ("finalize", "done")}
    assert ("interrupt", "finalize") in edges_taken([("finalize", "propose", "interrupted")])


def _record(i: int, status: str = "ok", source_chars: int = 6000) -> CandidateRecord:
    src = 'extern "C" __global__ void k() {}\n' + f"// candidate {i}\n" + "x" * source_chars
    return CandidateRecord(i, f"{i:03d}-it{i}", "proposal", i, src, {"default": {"grid": [i], "block": [256]}},
                           rationale=f"RATIONALE-{i} " + "why " * 300, status=status,
                           score_ms=1.0 / (i + 1) if status == "ok" else None,
                           feedback=f"FEEDBACK-{i} " + "line\n" * 2000)


def test_the_state_prompt_is_bounded_however_long_the_run() -> None:
    budget = 40_000
    sizes = []
    for n in (10, 100, 400, 1000):
        records = [_record(i, "ok" if i % 3 else "mismatch") for i in range(1, n + 1)]
        best = min((r for r in records if r.valid), key=lambda r: r.score_ms or 1.0)
        text = prompts.state_prompt(records, best, records[-1], None, n, n, False, ["big"], budget_chars=budget)
        sizes.append(len(text))
        assert len(text) <= budget
        assert f"// candidate {best.index}" in text  # the best kernel's source, in full
        assert f"{best.label}: ok" in text and "(best)" in text  # its verdict row
        assert f"FEEDBACK-{n}" in text  # the last candidate's feedback
        assert "RATIONALE-1 " not in text  # an early candidate's rationale is not repeated forever
    assert "more earlier candidates" in prompts.state_prompt(
        [_record(i) for i in range(1, 400)], None, None, None, 400, 400, False, [], budget_chars=budget)


def test_a_request_is_fitted_by_cutting_the_oldest_tool_results() -> None:
    budget_chars = prompts.REQUEST_BUDGET_TOKENS * prompts.CHARS_PER_TOKEN
    messages = [{"role": "system", "content": "s" * 1000}, {"role": "user", "content": "u" * 30_000}]
    for i in range(12):
        messages.append({"role": "tool", "tool_call_id": str(i), "content": f"result {i} " + "r" * 8000})
    prompts.fit_request(messages)
    assert len(json.dumps(messages)) <= budget_chars
    assert messages[2]["content"].startswith("[cut") and messages[-1]["content"].startswith("result 11")


def test_the_heatmap_of_a_long_run_keeps_the_baseline_the_fastest_and_the_newest() -> None:
    from kernelopt_agent.heatmap import MAX_ROWS, pick_rows

    initial = CandidateRecord(1, "001-initial", "initial", None, "", {}, status="ok", score_ms=1.0)
    rows = [initial] + [_record(i, "ok" if i % 4 else "mismatch", 0) for i in range(2, 400)]
    best = min((r for r in rows if r.valid), key=lambda r: r.score_ms or 1.0)
    kept = pick_rows(rows, best)
    assert len(kept) == MAX_ROWS and kept == sorted(kept, key=lambda r: r.index)  # in run order
    assert initial in kept and best in kept and rows[-1] in kept
    fastest = sorted((r for r in rows if r.valid and r.iteration), key=lambda r: r.score_ms or 1.0)[:30]
    assert all(r in kept for r in fastest)
    assert pick_rows(rows[:10], best) == rows[:10]
