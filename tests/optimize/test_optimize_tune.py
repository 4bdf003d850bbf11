"""`kernelopt optimize --strategy tune` and proposals with tunables, end to end on the fake GPU
(kernelopt-mcp over stdio with tests/fakegpu.py's pretend H200; the scripted model on loopback).

The test-only tunable kernel (tests/fixtures/tune/add.cu) sets its own latency (0.0<b><UNROLL> ms, b
growing with BLOCK), so the best configuration is known: BLOCK=32, UNROLL=4 (see tests/server/test_server_tune.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from scripted_model import ScriptedModel
from test_optimize import env, optimize, read  # noqa: F401  (env is a fixture)

from kernelopt_agent.cli import main as agent_main
from kernelopt_agent.proposal import PROPOSAL_SCHEMA

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tune"


def add_tunable(workload_dir: Path) -> None:
    shutil.copy(FIXTURES / "add.cu", workload_dir / "add.cu")
    shutil.copy(FIXTURES / "add.json", workload_dir / "tunable.json")


def test_no_api_key_tunes_the_bundled_tunable(env: dict[str, Path], monkeypatch: pytest.MonkeyPatch,  # noqa: F811
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    add_tunable(env["extra"] / "tiny_add")
    code = optimize(env, None, "--workload", "tiny_add", "--tune-evals", "50")
    assert code == 0
    assert "no OPENAI_API_KEY: tuning the bundled tunable kernel instead of asking a model" in capsys.readouterr().err
    run = env["results"] / "run-001"
    for name in ("history.json", "summary.json", "best.cu", "best.launch.json", "heatmap.png", "heatmap.svg",
                 "tuning/workload/tune.csv", "tuning/workload/tune.json", "tuning/workload/autotune.json"):
        assert (run / name).is_file(), name
    assert (sorted(p.name for p in (run / "candidates").iterdir())
            == ["000-reference", "001-initial", "002-untuned", "003-tuned"])
    summary = read(run / "summary.json")
    assert summary["status"] == "completed" and summary["strategy"] == "tune"
    assert summary["best"]["label"] == "003-tuned" and summary["tokens"]["calls"] == 0
    assert summary["model"] is None  # no model was asked, so none is named
    assert summary["best"]["score_ms"] == pytest.approx(0.014 * 1.01)
    best = (run / "best.cu").read_text()
    assert "#define BLOCK 32\n#define UNROLL 4\n" in best
    assert read(run / "best.launch.json")["launch"]["default"]["block"] == [32]
    tuned = read(run / "tuning/workload/autotune.json")["result"]
    assert tuned["counts"]["tried"] == 14 and tuned["counts"]["skipped_by_constraint"] == 1
    assert any(h["event"] == "tune" for h in read(run / "history.json"))
    assert not (run / "model").exists() or not list((run / "model").iterdir())
    # `kernelopt runs show` reads it, named or (the newest run) not; `runs list` lists it
    assert agent_main(["runs", "show", str(run)]) == 0
    out = capsys.readouterr().out
    assert "strategy tune: the workload's tunable kernel was autotuned" in out and "003-tuned *" in out
    assert "gpt-5-mini" not in out
    assert agent_main(["runs", "show", "--results-dir", str(env["results"])]) == 0
    assert capsys.readouterr().out == out
    assert agent_main(["runs", "list", "--results-dir", str(env["results"]), "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["run"], row["workload"], row["strategy"], row["status"], row["best"]) == (
        "run-001", "tiny_add", "tune", "completed", "003-tuned")
    assert row["score_ms"] == pytest.approx(0.014 * 1.01) and row["candidates"] == 4


def test_tune_strategy_needs_a_tunable_and_a_workload(env: dict[str, Path], monkeypatch: pytest.MonkeyPatch,  # noqa: F811
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    assert optimize(env, None, "--description", "add two vectors", "--strategy", "tune") == 2
    err = capsys.readouterr().err
    assert "--strategy tune tunes a workload's tunable.json: pass --workload" in err
    # no key and no workload: nothing to tune, so the model's missing key is the error
    assert optimize(env, None, "--description", "add two vectors") == 2
    assert "OPENAI_API_KEY is not set" in capsys.readouterr().err
    assert not env["results"].exists()  # neither failure made a run directory
    assert optimize(env, None, "--workload", "tiny_add") == 2  # no tunable.json in this one
    out = capsys.readouterr()
    assert "has no tunable.json" in out.err + out.out
    assert not env["results"].exists()  # found before a run directory was made


def test_a_proposal_with_tunables_is_tuned_before_ranking(env: dict[str, Path]) -> None:  # noqa: F811
    source = (FIXTURES / "add.cu").read_text()
    launch = {"default": {"grid": ["ceil_div(n, BLOCK * UNROLL)"], "block": ["BLOCK"],
                          "shared_bytes": "0"}, "cases": []}
    tunables: dict[str, Any] = {
        "params": [{"name": "BLOCK", "values": ["32", "64", "128", "256"]},
                   {"name": "UNROLL", "values": ["1", "2", "4"]}],
        "constraints": ["BLOCK * UNROLL >= 64"],
        "defaults": [{"name": "BLOCK", "value": "256"}, {"name": "UNROLL", "value": "4"}],
    }
    answer = {"rationale": "unroll", "source": source, "launch": launch, "compile_options": [], "tunables": tunables}
    with ScriptedModel([{"content": json.dumps(answer)}]) as model:
        code = optimize(env, model, "--workload", "tiny_add", "--max-iterations", "1", "--tune-budget", "6")
    assert code == 0
    run = env["results"] / "run-001"
    assert model.requests[0]["response_format"]["json_schema"]["schema"] == PROPOSAL_SCHEMA["schema"]
    tuned = read(run / "tuning/it1/autotune.json")["result"]
    assert tuned["counts"]["tried"] == 6 and tuned["strategy"] == "tpe"  # 6 < the 11 valid configurations: model-based
    rec = next(h for h in read(run / "history.json") if h.get("event") == "candidate" and h["label"] == "002-it1")
    assert rec["status"] == "ok" and f"tuned 6 configurations: best {tuned['best_params']}" in rec["rationale"]
    src = (run / "candidates/002-it1/source.cu").read_text()
    assert f"#define BLOCK {tuned['best_params']['BLOCK']}\n" in src
    assert rec["score_ms"] == pytest.approx(tuned["best_score_ms"])


def test_proposal_tunables_parse_both_forms() -> None:
    from kernelopt_agent.proposal import ProposalError, parse_tunables

    listed = {"params": [{"name": "BM", "values": ["64", "128"]}, {"name": "V", "values": ["a", "0.5"]}],
              "constraints": ["BM >= 64"], "defaults": [{"name": "BM", "value": "64"}, {"name": "V", "value": "a"}]}
    as_file = {"params": {"BM": [64, 128], "V": ["a", 0.5]}, "constraints": ["BM >= 64"],
               "defaults": {"BM": 64, "V": "a"}}
    assert parse_tunables(listed) == parse_tunables(as_file) == as_file
    assert parse_tunables(None) is None and parse_tunables({"params": [], "defaults": []}) is None
    with pytest.raises(ProposalError, match="malformed"):
        parse_tunables({"params": [{"values": ["1"]}], "defaults": []})
    with pytest.raises(ProposalError, match="constraints"):
        parse_tunables({**as_file, "constraints": "BM > 1"})
