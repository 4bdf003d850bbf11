"""`kernelopt optimize` records what happened, and only that (issue 15): the regenerated reference,
run-scoped generated workloads, runs that cannot start, --use-nsight without ncu, research queries
that fit docs_search, and the openai SDK floor. On CPU: the scripted model on loopback and
kernelopt-mcp over stdio with the pretend H200 of tests/fakegpu.py.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
from fakegpu import kernel, write_harness
from scripted_model import ScriptedModel
from test_optimize import GENERATED, REPO, env, optimize, proposal, read  # noqa: F401  (env is a fixture)
from test_optimize_tune import add_tunable

from kernelopt_agent.cli import main as agent_main
from kernelopt_agent.model import SENT_PARAMETERS
from kernelopt_agent.prompts import search_query

# The first openai release whose chat.completions.create() takes each keyword ModelClient sends
# (from the SDK's changelog: structured outputs' json_schema in 1.40.0, reasoning_effort in 1.58.0).
FIRST_RELEASE_WITH = {"model": (1, 0), "messages": (1, 0), "tools": (1, 0), "response_format": (1, 40),
                      "reasoning_effort": (1, 58)}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:2])


def test_a_failing_generated_reference_is_regenerated_and_nothing_is_registered(env: dict[str, Path]) -> None:  # noqa: F811
    too_big = {**GENERATED,
               "reference_launch": {"default": {"grid": ["ceil_div(n, 2048)"], "block": [2048], "shared_bytes": 0}}}
    fixed = {"name": "vec_add", "description": "c = a + b", "reference_cu": kernel(),
             "reference_launch": {"default": {"grid": ["ceil_div(n, 256)"], "block": [256], "shared_bytes": 0}}}
    script = [{"content": json.dumps(too_big)}, {"content": json.dumps(fixed)}, proposal(kernel("FAST"), "faster")]
    with ScriptedModel(script) as model:
        code = optimize(env, model, "--description", "Add two float vectors.", "--max-iterations", "1")
    assert code == 0 and not model.steps and not model.exhausted
    # the regeneration request carried the failure and asked only for the reference
    regen = model.requests[1]["messages"][-1]["content"]
    assert "An earlier version failed on the GPU" in regen and "reference_cu, reference_launch" in regen
    run = env["results"] / "run-001"
    summary = read(run / "summary.json")
    assert summary["status"] == "completed" and summary["workload"]["name"] == "vec_add"
    history = [h for h in read(run / "history.json") if h["event"] == "candidate"]
    assert [(h["label"], h["valid"]) for h in history] == [
        ("000-reference", False), ("001-reference", True), ("002-initial", True), ("003-it1", True)]
    assert read(run / "reference.launch.json")["launch"]["default"]["block"] == [256]
    assert summary["reference"]["label"] == "001-reference" and summary["best"]["label"] == "003-it1"
    # run-scoped: nothing in the user's workspace; the run's own copy is the workload
    assert not (env["ws"] / "workloads").exists()
    assert not list((run / "tools").glob("*-create_workload.json"))
    assert read(run / "workload" / "vec_add" / "workload.json")["reference"]["launch"]["default"]["block"] == [256]
    assert "registered" not in summary["workload"]["parts"]


def test_generated_parts_too_large_for_a_created_workload_are_sent_back(env: dict[str, Path]) -> None:  # noqa: F811
    huge = {**GENERATED,
            "cases": [*GENERATED["cases"], {"name": "huge", "kind": "performance", "scalars": {"n": 2**31 - 1}}]}
    with ScriptedModel([{"content": json.dumps(huge)}, {"content": json.dumps(GENERATED)}]) as model:
        assert optimize(env, model, "--description", "Add two float vectors.", "--max-iterations", "0") == 0
    assert "a generated workload may use at most" in model.requests[1]["messages"][-1]["content"]


def test_a_run_without_a_gpu_leaves_no_run_directory(env: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    (env["tmp"] / "nogpu").mkdir()
    nogpu = write_harness(env["tmp"] / "nogpu", "nogpu")
    add_tunable(env["extra"] / "tiny_add")
    for extra in (["--strategy", "tune", "--workload", "tiny_add"], ["--workload", "tiny_add"]):
        argv = ["optimize", "--harness", str(nogpu), "--workspace", str(env["ws"]), "--results-dir",
                str(env["results"]), "--max-iterations", "1", *extra]
        with ScriptedModel([]) as model:
            assert agent_main([*argv, "--base-url", model.url]) == 2
        assert not model.requests  # the model is not asked when there is no GPU to check its answer on
        out = capsys.readouterr()
        err = " ".join(out.err.split())
        assert "cannot use a GPU" in err and "no run directory was kept" in err
        assert "no candidate passed" not in out.out + out.err and "USD" not in out.out + out.err
        assert not env["results"].exists() or not list(env["results"].iterdir())


def test_runs_that_cannot_start_fail_before_a_run_directory(env: dict[str, Path], monkeypatch: pytest.MonkeyPatch,  # noqa: F811
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    def said(text: str) -> bool:  # the console wraps long lines
        return text in " ".join(capsys.readouterr().err.split())

    (env["tmp"] / "bad.json").write_text("{not json")
    assert optimize(env, None, "--workload", "tiny_add", "--input-cases", str(env["tmp"] / "bad.json")) == 2
    assert said("cannot read it as JSON")
    assert optimize(env, None, "--input-cases", str(env["tmp"] / "bad.json"), "--description", "x") == 2
    assert said("cannot read it as JSON")
    # a server that does not start: its stderr is in the message, since its log is not kept
    broken = [sys.executable, "-c", "import sys; sys.stderr.write('kernelopt-mcp: broken install\\n'); sys.exit(1)"]
    (env["tmp"] / "cfg.json").write_text(json.dumps({"server_command": broken}))
    assert optimize(env, None, "--workload", "tiny_add", "--max-iterations", "0", "--config",
                    str(env["tmp"] / "cfg.json")) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert ("could not start the MCP server" in err and "kernelopt-mcp: broken install" in err
            and "server.log" not in err)
    monkeypatch.delenv("OPENAI_API_KEY")
    assert optimize(env, None, "--description", "add two vectors") == 2
    assert said("OPENAI_API_KEY is not set")
    assert not list(env["results"].glob("run-*"))


def test_records_name_what_ran(env: dict[str, Path], capsys: pytest.CaptureFixture[str],  # noqa: F811
                               monkeypatch: pytest.MonkeyPatch) -> None:
    # a supplied reference that disagrees with the NumPy oracle: the summary must not claim it was checked
    bad_ref = env["tmp"] / "wrong.cu"
    bad_ref.write_text(kernel("WRONG"))
    (env["tmp"] / "wrong.launch.json").write_text(json.dumps({"grid": ["ceil_div(n, 128)"], "block": [128]}))
    assert optimize(env, None, "--workload", "tiny_add", "--reference", str(bad_ref), "--max-iterations", "0") == 2
    capsys.readouterr()
    summary = read(env["results"] / "run-001" / "summary.json")
    note = summary["workload"]["reference"]
    assert summary["status"] == "failed" and note["checked"] is False and "nothing was checked" in note["note"]
    assert "checked against the NumPy oracle" not in note["note"]
    assert summary["model"] is None  # no model was asked: no model is named
    assert agent_main(["runs", "show", str(env["results"] / "run-001")]) == 0
    shown = capsys.readouterr().out
    assert ("no model was asked" in shown and "gpt-5-mini" not in shown
            and "checked against the NumPy oracle" not in shown)

    # the parts' paths are absolute, whatever the working directory was
    monkeypatch.chdir(env["tmp"])
    assert optimize(env, None, "--workload", "extra/tiny_add", "--reference", "wrong.cu", "--max-iterations", "0") == 2
    parts = read(env["results"] / "run-002" / "summary.json")["workload"]["parts"]
    assert parts["reference"] == f"supplied: {bad_ref.resolve()}"
    assert parts["signature"] == f"workload: {(env['extra'] / 'tiny_add').resolve()}"


def test_nsight_without_a_usable_ncu_is_said_once(env: dict[str, Path], monkeypatch: pytest.MonkeyPatch,  # noqa: F811
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KERNELOPT_NCU", str(env["tmp"] / "no-such-ncu"))
    with ScriptedModel([proposal(kernel("FAST")), proposal(kernel("MS:n_4096=0.07;"))]) as model:
        argv = ["optimize", "--harness", str(env["harness"]), "--workspace", str(env["ws"]), "--results-dir",
                str(env["results"]), "--iterations", "3", "--warmup", "1", "--workload", "tiny_add", "--use-nsight",
                "--max-iterations", "2", "--base-url", model.url]
        assert agent_main(argv) == 0
    out = capsys.readouterr().out
    run = env["results"] / "run-001"
    assert len(list((run / "tools").glob("*-ncu_profile.json"))) == 1  # not retried for every valid candidate
    summary = read(run / "summary.json")
    [note] = [n for n in summary["notes"] if "--use-nsight" in n]
    assert "nothing was profiled" in note and "no-such-ncu" in note
    assert out.count("nothing was profiled") == 1
    assert [h["label"] for h in read(run / "history.json") if h["event"] == "profile_unavailable"] == ["001-initial"]
    # the model was not offered a tool that cannot work
    assert "ncu_profile" not in {t["function"]["name"] for t in model.requests[-1]["tools"]}


def test_long_descriptions_still_retrieve_guidance(env: dict[str, Path]) -> None:  # noqa: F811
    description = ("Row-wise softmax of a row-major float32 matrix: for every row subtract the row maximum, "
                   "exponentiate, and divide by the sum of the exponentials; the rows are independent, the number "
                   "of columns is a multiple of four, and the output is a separate buffer of the same shape as the "
                   "input, written once per element.")
    assert len(description) >= 276
    assert optimize(env, None, "--workload", "tiny_add", "--description", description, "--nvidia-research",
                    "--max-iterations", "0") == 0
    run = env["results"] / "run-001"
    summary = read(run / "summary.json")
    assert not [n for n in summary["notes"] if "docs_search" in n], summary["notes"]
    [call] = [read(p) for p in (run / "tools").glob("*-docs_search.json")]
    query = call["arguments"]["query"]
    assert not call["is_error"] and len(query) <= 300 and query.endswith("CUDA kernel optimization")
    assert "softmax" in query and (run / "research.md").is_file()


def test_search_query_keeps_keywords_and_word_boundaries() -> None:
    long = "the " + " ".join(f"keyword{i:03d}" for i in range(100))
    query = search_query(long, 300)
    assert len(query) <= 300 and query.endswith(" CUDA kernel optimization") and not query.startswith("the ")
    assert all(re.fullmatch(r"keyword\d{3}", w) for w in query.split()[:-3])  # no word cut in half
    assert search_query("Sum of a vector, sum of floats.", 300) == "Sum vector floats CUDA kernel optimization"


def test_the_openai_floor_accepts_every_keyword_sent() -> None:
    from openai.resources.chat.completions import AsyncCompletions

    accepted = set(inspect.signature(AsyncCompletions.create).parameters)
    assert set(SENT_PARAMETERS) <= accepted, set(SENT_PARAMETERS) - accepted
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    [spec] = [d for d in deps if re.match(r"openai\b", d)]
    floor = _version(spec.split(">=", 1)[1])
    assert set(SENT_PARAMETERS) <= set(FIRST_RELEASE_WITH), "a new keyword: add its first release to the table"
    needed = max(FIRST_RELEASE_WITH[k] for k in SENT_PARAMETERS)
    assert floor >= needed, f"pyproject allows openai {spec}, but reasoning_effort etc. need >= {needed}"


def test_requests_carry_only_the_keywords_the_floor_was_checked_for(env: dict[str, Path]) -> None:  # noqa: F811
    with ScriptedModel([{"tool_calls": [("compile", {"source": kernel()})]}, proposal(kernel("FAST"))]) as model:
        assert optimize(env, model, "--workload", "tiny_add", "--max-iterations", "1") == 0
    for body in model.requests:
        assert set(body) <= set(SENT_PARAMETERS), set(body) - set(SENT_PARAMETERS)
    assert set(model.requests[0]) == set(SENT_PARAMETERS)
