"""`kernelopt optimize` end to end on CPU: a scripted OpenAI-compatible model on loopback (real
HTTP) and kernelopt-mcp over stdio with the pretend-H200 harness of tests/fakegpu.py.

The fake harness computes c = a + b; markers in a kernel's source make it wrong, crash or set
per-case latencies (MS:<case>=<ms>;), so ranking, repair and the records can be checked exactly.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakegpu import TINY_SPEC, kernel, write_harness, write_tiny_workload
from scripted_model import ScriptedModel
from test_profiler import stub  # noqa: F401  (fixture: a stub ncu in front of the pretend harness)

from kernelopt_agent.cli import main as agent_main
from kernelopt_agent.options import OptimizeOptions
from kernelopt_agent.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-test-do-not-leak-4f9a"

# Two performance cases, so a geometric mean and an arithmetic mean rank candidates differently.
TWO_PERF = json.loads(json.dumps(TINY_SPEC))
TWO_PERF["name"] = "tiny2"
TWO_PERF["cases"] = [
    {"name": "one", "kind": "correctness", "scalars": {"n": 1}},
    {"name": "odd_1001", "kind": "correctness", "scalars": {"n": 1001}},
    {"name": "big_a", "kind": "performance", "scalars": {"n": 4096}},
    {"name": "big_b", "kind": "performance", "scalars": {"n": 8192}},
]
LAUNCH = {"default": {"grid": ["ceil_div(n, 256)"], "block": ["256"], "shared_bytes": "0"}, "cases": []}
SYNTAX_ERROR = ('extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {\n'
                '  c[0] = oops;\n}\n')


def proposal(source: str, rationale: str = "an idea", launch: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"content": json.dumps({"rationale": rationale, "source": source, "launch": launch or LAUNCH,
                                   "compile_options": []})}


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A fake GPU, a workspace, the test workloads, and the environment the orchestrator sees."""
    harness = write_harness(tmp_path, "fake")
    extra = write_tiny_workload(tmp_path / "extra")
    write_tiny_workload(extra, TWO_PERF)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("KERNELOPT_WORKLOADS", str(extra))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), str(REPO / "clients")]))
    monkeypatch.setenv("KERNELOPT_DOCS_OFFLINE", "1")  # docs_search from the shipped notes: no network in tests
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    return {"tmp": tmp_path, "harness": harness, "extra": extra, "results": tmp_path / "results", "ws": tmp_path / "ws"}


def optimize(env: dict[str, Path], model: ScriptedModel | None, *args: str) -> int:
    argv = ["optimize", "--harness", str(env["harness"]), "--workspace", str(env["ws"]), "--results-dir",
            str(env["results"]), "--iterations", "3", "--warmup", "1", "--quiet", *args]
    if model is not None:
        argv += ["--base-url", model.url]
    return agent_main(argv)


def read(path: Path) -> Any:
    return json.loads(path.read_text())


def test_the_whole_loop(env: dict[str, Path]) -> None:
    fast_uneven = kernel("MS:big_a=0.004;big_b=1.0;")  # geometric mean 0.063 ms, arithmetic 0.502
    fast_even = kernel("MS:big_a=0.08;big_b=0.08;")     # geometric mean 0.08 ms, arithmetic 0.08
    script = [
        {"tool_calls": [("compile", {"source": SYNTAX_ERROR})]},       # iteration 1: the model checks a compile
        {"content": "Sure! I would tile the loop and vectorize it."},  # ... answers without JSON (malformed)
        proposal(SYNTAX_ERROR, "vectorize"),                           # ... then a kernel that does not compile
        proposal(kernel("WRONG"), "fix the typo"),                     # iteration 2: repair -> wrong
        proposal(fast_uneven, "unrolled"),                             # iteration 3: repair -> valid
        {"refusal": "I can't help with that."},                        # iteration 4: a refusal
        proposal(fast_even, "balanced"),                               # iteration 5: valid, better arithmetic mean
    ]
    with ScriptedModel(script) as model:
        code = optimize(env, model, "--workload", "tiny2", "--max-iterations", "5")
    assert code == 0
    assert not model.exhausted and not model.steps
    run = env["results"] / "run-001"

    # layout
    for name in ("config.json", "signature.json", "input_cases.json", "supplied-reference.cu",
                 "supplied-reference.launch.json", "initial.cu", "initial.launch.json", "reference.py", "history.json",
                 "summary.json", "best.cu",
                 "best.launch.json", "heatmap.png", "heatmap.svg", "server.log", "workload/tiny2/workload.json"):
        assert (run / name).is_file(), name
    labels = sorted(p.name for p in (run / "candidates").iterdir())
    assert labels == ["000-reference", "001-initial", "002-it1", "003-it2-repair", "004-it3-repair", "005-it5"]
    for label in labels:
        for f in ("source.cu", "launch.json", "request.json", "result.json"):
            assert (run / "candidates" / label / f).is_file()
    timing = read(run / "candidates" / "004-it3-repair" / "request.json")["arguments"]
    assert (timing["warmup"], timing["iterations"], timing["stop"]) == (1, 3, "count")  # a count was given
    assert not list(run.rglob("*.tmp")) and not list(run.rglob(".*.tmp"))

    # best by geometric mean, not arithmetic
    summary = read(run / "summary.json")
    assert summary["status"] == "completed" and summary["error"] is None
    assert summary["best"]["label"] == "004-it3-repair"
    assert summary["best"]["score_ms"] == pytest.approx((0.004 * 1.0) ** 0.5, rel=0.05)
    assert (run / "best.cu").read_text() == fast_uneven.rstrip() + "\n"
    assert summary["best"]["speedup_vs_initial"] == pytest.approx(0.1 / 0.0632, rel=0.05)
    assert summary["candidates"] == {
        "total": 6, "valid": 4, "invalid": ["002-it1: compile_error", "003-it2-repair: mismatch"], "duplicates": []}
    assert summary["iterations"] == {"max": 5, "used": 5, "candidates_per_iteration": 1}
    tokens = summary["tokens"]
    assert tokens["calls"] == 7 and tokens["total_tokens"] > 0 and tokens["cost_usd"] > 0
    responses = sorted((run / "model").glob("*-response.json"))
    assert len(responses) == 7 and len(list((run / "model").glob("*-request.json"))) == 7
    assert sum(read(p)["usage"]["total_tokens"] for p in responses) == tokens["total_tokens"]
    assert [c["total_tokens"] for c in tokens["per_call"]] == [read(p)["usage"]["total_tokens"] for p in responses]
    assert summary["workload"]["reference"]["numpy_oracle"] is True
    assert summary["provenance"]["device"] == "NVIDIA H200 (fake)"
    assert summary["model"]["name"] == "gpt-5-mini" and summary["model"]["reasoning_effort"] == "medium"

    # what the model was sent: tools, structured output, feedback, repair
    first = model.requests[0]
    assert first["model"] == "gpt-5-mini" and first["reasoning_effort"] == "medium"
    assert first["response_format"]["type"] == "json_schema"
    assert {t["function"]["name"] for t in first["tools"]} == {"gpu_properties", "compile"}
    assert model.headers[0]["authorization"] == f"Bearer {SECRET}"
    tool_reply = model.requests[1]["messages"][-1]
    assert tool_reply["role"] == "tool" and "line 2" in tool_reply["content"]  # the compile tool's diagnostics
    assert "could not be used" in model.requests[2]["messages"][-1]["content"]  # the malformed answer was sent back
    repair = model.requests[3]["messages"][-1]["content"]
    assert "Repair it" in repair and "compile_error" in repair and "oops" in repair
    repair2 = model.requests[4]["messages"][-1]["content"]
    assert "mismatch" in repair2 and "elements off" in repair2
    after_valid = model.requests[6]["messages"][-1]["content"]
    assert "Per performance case" in after_valid and "big_b" in after_valid and "Task: propose" in after_valid

    # history: candidates, the refusal, the unparseable answer
    history = read(run / "history.json")
    events = [h["event"] for h in history]
    assert events.count("candidate") == 6 and "unparseable_answer" in events
    # where each evaluation went, as the server measured it (compile errors stop before validation)
    evaluated = [h for h in history if h["event"] == "candidate" and h["status"] != "compile_error"]
    assert evaluated and all(h["host_ms"]["total_ms"] >= h["host_ms"]["validate_ms"] > 0 for h in evaluated)
    refused = [h for h in history if h["event"] == "no_proposal"]
    assert refused and refused[0]["status"] == "refused" and refused[0]["iteration"] == 4
    model_tool = [read(p) for p in (run / "tools").glob("*-compile.json") if read(p)["caller"] == "model"]
    assert model_tool and model_tool[0]["structured"]["status"] == "error"

    # the secret never reaches the disk
    for path in run.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".log", ".cu", ".md", ".py", ".svg"):
            assert SECRET not in path.read_text(errors="replace"), path
    assert read(run / "config.json")["api_key"] == "set"

    # inputs, expected outputs and replay requests: the run kept how to draw its inputs, not their bytes;
    # drawn again, the harness alone reproduces the expected outputs
    assert summary["files"]["data"] == "data.json" and not list((run / "inputs").rglob("*.bin"))
    assert agent_main(["runs", "restore", str(run), "--harness", str(env["harness"]), "--workspace",
                       str(env["ws"])]) == 0
    manifest = read(run / "input_cases.json")
    for case in manifest["cases"]:
        for gen in case["inputs"].values():
            data = (run / gen["path"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == gen["sha256"]
    replays = summary["files"]["replay"]
    assert set(replays) == {"one", "odd_1001", "big_a", "big_b"}
    proc = subprocess.run([str(env["harness"]), "serve"], input="".join(
        json.dumps(read(run / replays[c])) + "\n" for c in replays), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert all(json.loads(line)["cases"][0]["status"] == "ok" for line in proc.stdout.splitlines())
    for case in replays:
        out = np.fromfile(run / "replay" / "outputs" / case / "c.bin", dtype="<f4")
        entry = read(run / "expected" / "manifest.json")[case]["c"]
        expected = np.fromfile(run / entry["path"], dtype="<f8").reshape(entry["shape"])
        np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    assert read(run / replays["big_a"])["cases"][0]["timing"] == {"warmup": 1, "iterations": 3}
    assert set(summary["files"]["replay_reference"]) == set(replays)


GENERATED = {
    "name": "vec_add", "description": "c = a + b",
    "signature": TINY_SPEC["signature"],
    "inputs": {"a": {"generator": "uniform", "low": -1, "high": 1}, "b": {"generator": "normal"}},
    "cases": TINY_SPEC["cases"],
    "tolerance": {"c": {"rtol": 1e-6, "atol": 1e-6}},
    "cost": {"flops": "n", "bytes": "12 * n"},
    "reference_cu": kernel(),
    "reference_launch": {"default": {"grid": ["ceil_div(n, 128)"], "block": [128], "shared_bytes": 0}},
    "initial_cu": kernel(), "initial_launch": {"grid": ["ceil_div(n, 64)"], "block": [64]},
}


def test_omitted_parts_are_generated_run_scoped(env: dict[str, Path]) -> None:
    with_file = {**GENERATED, "inputs": {"a": {"generator": "file", "path": "/etc/passwd"},
                                         "b": {"generator": "normal"}}}
    script = [
        {"content": "```json\n" + json.dumps(with_file) + "\n```"},  # data files are refused: declarative only
        {"content": json.dumps(GENERATED)},
        proposal(kernel("FAST"), "faster"),
    ]
    with ScriptedModel(script) as model:
        code = optimize(env, model, "--description", "Add two float vectors.", "--max-iterations", "1")
    assert code == 0 and not model.steps and not model.exhausted
    assert "declarative" in model.requests[1]["messages"][-1]["content"]
    run = env["results"] / "run-001"
    summary = read(run / "summary.json")
    parts = summary["workload"]["parts"]
    assert parts["signature"] == parts["input_cases"] == parts["reference"] == parts["initial"] == "generated"
    assert "registered" not in parts and not (env["ws"] / "workloads").exists()  # nothing left in the workspace
    assert (run / "workload" / "vec_add" / "workload.json").is_file()
    note = summary["workload"]["reference"]
    assert note["model_generated"] and not note["independent_oracle"] and "NOT an independent" in note["note"]
    assert (run / "reference.cu").is_file() and not (run / "supplied-reference.cu").exists()
    assert not (run / "reference.py").exists() and not (run / "expected").exists()
    assert summary["best"]["label"] == "002-it1" and summary["best"]["score_ms"] == pytest.approx(0.05, rel=0.05)
    assert set(summary["files"]["replay_reference"]) == {"one", "odd_1001", "n_4096"}
    assert read(run / "signature.json")["name"] == "vec_add"

    # a second generated run has its own copy under the same name; a name the server knows is avoided
    with ScriptedModel([{"content": json.dumps(GENERATED)},
                        {"content": json.dumps({**GENERATED, "name": "tiny_add"})}]) as model:
        assert optimize(env, model, "--description", "Add two float vectors.", "--max-iterations", "0") == 0
        assert optimize(env, model, "--description", "Add two float vectors.", "--max-iterations", "0") == 0
    second = read(env["results"] / "run-002" / "summary.json")
    assert second["workload"]["name"] == "vec_add" and (env["results"] / "run-002" / "workload" / "vec_add").is_dir()
    assert read(env["results"] / "run-003" / "summary.json")["workload"]["name"] == "tiny_add_gen1"
    assert not (env["ws"] / "workloads").exists()


def test_a_run_continues_from_its_files(env: dict[str, Path]) -> None:
    best = kernel("MS:n_4096=0.03;")
    with ScriptedModel([proposal(best, "faster")]) as model:
        assert optimize(env, model, "--workload", "tiny_add", "--max-iterations", "1") == 0
    first = env["results"] / "run-001"
    assert (first / "best.cu").read_text() == best.rstrip() + "\n"
    argv = ["--description", "c = a + b", "--input-cases", str(first / "input_cases.json"),
            "--reference", str(first / "supplied-reference.cu"), "--initial-kernel", str(first / "best.cu"),
            "--max-iterations", "0"]
    assert optimize(env, None, *argv) == 2  # the run kept how to draw its inputs, not the files: restore them first
    assert agent_main(["runs", "restore", str(first), "--harness", str(env["harness"]), "--workspace",
                       str(env["ws"])]) == 0
    # the original tool's command; no model is needed when nothing is generated and no iteration runs
    code = optimize(env, None, "--description", "c = a + b", "--input-cases", str(first / "input_cases.json"),
                    "--reference", str(first / "supplied-reference.cu"), "--initial-kernel", str(first / "best.cu"),
                    "--max-iterations", "0")
    assert code == 0
    second = env["results"] / "run-002"
    summary = read(second / "summary.json")
    parts = summary["workload"]["parts"]
    assert parts["signature"] == f"inferred: {first / 'signature.json'}"
    assert (parts["oracle"] == f"inferred: {first / 'reference.py'}"
            and parts["initial"] == f"supplied: {first / 'best.cu'}")
    assert summary["workload"]["name"] == "tiny_add" and summary["workload"]["reference"]["numpy_oracle"]
    assert summary["initial"]["case_ms"]["n_4096"] == pytest.approx(0.03, rel=0.05)  # best.cu with best.launch.json
    assert read(second / "initial.launch.json") == read(first / "best.launch.json")
    old, new = read(first / "input_cases.json"), read(second / "input_cases.json")
    assert [c["inputs"] for c in old["cases"]] == [c["inputs"] for c in new["cases"]]  # same files, same hashes
    assert all(g["sha256"] for c in new["cases"] for g in c["inputs"].values())
    assert summary["tokens"]["calls"] == 0


def test_max_tokens_stops_the_loop_cleanly(env: dict[str, Path]) -> None:
    script = [{**proposal(kernel("FAST")), "usage": {"prompt_tokens": 4000, "completion_tokens": 1000}},
              proposal(kernel())]
    with ScriptedModel(script) as model:
        code = optimize(env, model, "--workload", "tiny_add", "--max-iterations", "5", "--max-tokens", "3000")
    assert code == 0 and len(model.steps) == 1  # the second answer was never asked for
    summary = read(env["results"] / "run-001" / "summary.json")
    assert summary["status"] == "stopped" and "--max-tokens 3000" in summary["stop_reason"]
    assert summary["tokens"]["total_tokens"] == 5000 and summary["candidates"]["total"] == 3
    assert summary["best"]["label"] == "002-it1" and (env["results"] / "run-001" / "best.cu").is_file()


def test_missing_api_key_is_a_clear_error_before_a_run_directory(env: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    # without a key the default is --strategy tune (tests/optimize/test_optimize_tune.py); asking for the model is an
    # error
    assert optimize(env, None, "--workload", "tiny_add", "--strategy", "llm") == 2
    assert "OPENAI_API_KEY is not set" in " ".join(capsys.readouterr().err.split())
    assert not env["results"].exists()  # a run that cannot start leaves no run directory


def test_unreachable_endpoint_is_a_clear_error_kept_in_the_run(
    env: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (env["tmp"] / "cfg.json").write_text(json.dumps({"max_retries": 0, "base_url": f"http://127.0.0.1:{port}/v1"}))
    assert optimize(env, None, "--workload", "tiny_add", "--config", str(env["tmp"] / "cfg.json")) == 2
    assert f"cannot reach http://127.0.0.1:{port}/v1" in capsys.readouterr().err
    run = env["results"] / "run-001"
    summary = read(run / "summary.json")
    assert summary["status"] == "failed" and "cannot reach" in summary["error"]
    assert (run / "model" / "0001-request.json").is_file() and (run / "model" / "0001-error.json").is_file()
    assert summary["candidates"]["valid"] == 2 and summary["best"]["label"] == "001-initial"  # the baseline is kept


def test_unparseable_answers_use_up_only_their_iteration(env: dict[str, Path]) -> None:
    """Also: a reader polling the run's records while it runs never sees a partial file (atomic writes)."""
    script = [{"content": "no json here"}, {"content": "{not json"}, {"content": '{"source": "int x;"}'},
              proposal(kernel("FAST"))]
    run_dir = env["results"] / "run-001"
    stop, seen, torn = threading.Event(), [0], []

    def reader() -> None:
        while not stop.is_set():
            for name in ("summary.json", "history.json", "candidates/001-initial/result.json"):
                try:
                    text = (run_dir / name).read_text()
                except FileNotFoundError:
                    continue
                try:
                    json.loads(text)
                    seen[0] += 1
                except json.JSONDecodeError:
                    torn.append(name)

    watcher = threading.Thread(target=reader)
    watcher.start()
    try:
        with ScriptedModel(script) as model:
            assert optimize(env, model, "--workload", "tiny_add", "--max-iterations", "2") == 0
    finally:
        stop.set()
        watcher.join()
    assert not torn and seen[0] > 10
    history = read(env["results"] / "run-001" / "history.json")
    gave_up = [h for h in history if h["event"] == "no_proposal"]
    assert len(gave_up) == 1 and gave_up[0]["status"] == "unparseable" and "__global__" in gave_up[0]["message"]
    assert read(env["results"] / "run-001" / "summary.json")["best"]["label"] == "002-it2"


def _spawn(env: dict[str, Path], model: ScriptedModel, results: Path) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "kernelopt_agent", "optimize", "--workload", "tiny_add", "--max-iterations", "3",
           "--harness", str(env["harness"]), "--workspace", str(env["ws"]), "--results-dir", str(results),
           "--base-url", model.url, "--iterations", "3", "--warmup", "1"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ),
                            start_new_session=True)


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "kill"])
def test_an_interrupted_run_is_readable(env: dict[str, Path], how: str, capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedModel([{**proposal(kernel()), "sleep": 60}]) as model:
        proc = _spawn(env, model, env["results"])
        assert model.received.wait(90), proc.communicate()[0] if proc.poll() is not None else "no model request"
        time.sleep(0.3)
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole process group
        elif how == "sigterm":
            proc.terminate()
        else:
            proc.kill()
        out, _ = proc.communicate(timeout=60)
    run = env["results"] / "run-001"
    summary = read(run / "summary.json")
    if how != "kill":
        assert proc.returncode == 130, out
        assert summary["status"] == "interrupted" and "interrupted" in summary["error"]
        assert (run / "best.cu").is_file() and summary["best"]["label"] == "001-initial"
        assert (run / "heatmap.png").is_file() and summary["files"]["replay"]
    else:
        assert summary["status"] == "running"  # nothing could be written; `runs show` tells the truth
    assert summary["candidates"]["valid"] == 2 and (run / "candidates" / "001-initial" / "result.json").is_file()
    capsys.readouterr()
    assert agent_main(["runs", "show", str(run)]) == 0
    shown = capsys.readouterr().out
    assert "status interrupted" in shown and "001-initial" in shown
    if how == "kill":
        assert "ended without finishing" in shown


def test_run_numbers_are_claimed_atomically(tmp_path: Path) -> None:
    (tmp_path / "run-007").mkdir()
    claimed: list[str] = []
    lock = threading.Lock()

    def claim() -> None:
        name = RunDir.create(tmp_path).name
        with lock:
            claimed.append(name)

    threads = [threading.Thread(target=claim) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == [f"run-{n:03d}" for n in range(8, 24)]


def test_runs_are_found_by_path_name_number_or_as_the_newest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kernelopt_agent.runs import resolve_run

    results = tmp_path / "results"
    assert agent_main(["runs", "show", "--results-dir", str(results)]) == 2
    assert "no run-NNN directories" in capsys.readouterr().err
    for n in (2, 10, 9):  # numeric order, not name order or creation order
        (results / f"run-{n:03d}").mkdir(parents=True)
    (results / "run-x").mkdir()
    assert resolve_run(None, results).name == "run-010"
    assert resolve_run("9", results) == resolve_run("run-009", results) == results / "run-009"
    assert resolve_run(str(results / "run-002"), results) == results / "run-002"
    with pytest.raises(FileNotFoundError, match="runs list"):
        resolve_run("4", results)
    # runs without records are listed (and shown) as what they are, not skipped
    assert agent_main(["runs", "list", "--results-dir", str(results), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in rows] == ["run-002", "run-009", "run-010"] and {r["status"] for r in rows} == {"?"}
    assert agent_main(["runs", "show", "--results-dir", str(results)]) == 0
    assert "run-010" in capsys.readouterr().out


def test_options_flags_beat_environment_beat_config(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("# secrets\nexport OPENAI_API_KEY='sk-from-dotenv'\n"
                                   "OPENAI_BASE_URL=http://dotenv/v1\n")
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"description": "gemm", "max-iterations": 3, "model": "m-config",
                               "base_url": "http://config/v1"}))
    opts = OptimizeOptions.build({"config": str(cfg), "model": "m-flag"}, environ={}, cwd=tmp_path)
    assert ((opts.model, opts.max_iterations, opts.base_url, opts.api_key)
            == ("m-flag", 3, "http://dotenv/v1", "sk-from-dotenv"))
    opts = OptimizeOptions.build({"config": str(cfg)},
                                 environ={"OPENAI_API_KEY": "sk-env", "OPENAI_BASE_URL": "http://u:p@env/v1"},
                                 cwd=tmp_path)
    assert (opts.api_key == "sk-env" and opts.as_json()["base_url"] == "http://env/v1"
            and "sk-env" not in json.dumps(opts.as_json()))
    assert OptimizeOptions.build({"description": "x"}, environ={}, cwd=tmp_path / "nowhere").max_iterations == 7
    cfg.write_text(json.dumps({"api_key": "sk-x"}))
    with pytest.raises(ValueError, match="keep the API key out"):
        OptimizeOptions.build({"config": str(cfg)}, environ={}, cwd=tmp_path)
    with pytest.raises(ValueError, match="say what to optimize"):
        OptimizeOptions.build({}, environ={}, cwd=tmp_path)


def test_the_loop_times_candidates_to_a_precision_unless_a_count_is_given(tmp_path: Path) -> None:
    """Issue 17: searching stops on the median's precision by default; --warmup/--iterations
    (the seed's 10 + 100) give an exact count; --stop says which outright."""
    def args(**flags: Any) -> dict[str, Any]:
        return OptimizeOptions.build({"description": "x", **flags}, environ={}, cwd=tmp_path).timing_args

    assert args() == {"stop": "precision"}
    assert args(warmup=10, iterations=100) == {"warmup": 10, "iterations": 100, "stop": "count"}
    assert args(iterations=400, stop="precision") == {"iterations": 400, "stop": "precision"}
    with pytest.raises(ValueError, match="--stop must be count or precision"):
        args(stop="soon")


def test_example_config_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    opts = OptimizeOptions.build({"config": str(REPO / "clients" / "example.json")}, environ={}, cwd=REPO)
    assert opts.description and opts.max_iterations == 7 and opts.model == "gpt-5-mini"
    with pytest.raises(SystemExit):
        agent_main(["optimize", "-h"])
    text = capsys.readouterr().out
    for flag in ("--description", "--max-iterations", "--signature", "--reference", "--initial-kernel", "--input-cases",
                 "--workload", "--use-nsight", "--nvidia-research", "--config", "--model", "--reasoning-effort",
                 "--base-url", "--results-dir", "--max-tokens"):
        assert flag in text


def test_graph_and_the_kernelopt_command(capsys: pytest.CaptureFixture[str]) -> None:
    from kernelopt_agent.entry import main as kernelopt_main  # the `kernelopt` console script

    assert kernelopt_main(["graph"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("flowchart TD") and '-.->|"valid and --use-nsight"| profile' in text
    for route in ("--nvidia-research", "invalid, iterations left", "budget spent", "finalize --> done"):
        assert route in text
    assert kernelopt_main(["graph", "--no-nsight"]) == 0 and "profile" not in capsys.readouterr().out
    # importing the library (and its CLI) imports neither openai nor mcp
    code = "import sys, kernelopt_mcp, kernelopt_mcp.cli; sys.exit(bool({'openai', 'mcp'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)}).returncode == 0


def test_nsight_profiles_and_nvidia_research(env: dict[str, Path], stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setenv("KERNELOPT_NCU", str(stub))
    script = [
        {"tool_calls": [("docs_search", {"query": "vectorized loads"})]},
        proposal(kernel("FAST"), "float4 loads"),
        proposal(kernel("MS:n_4096=0.07;"), "something else"),
    ]
    with ScriptedModel(script) as model:
        code = optimize(env, model, "--workload", "tiny_add", "--max-iterations", "2", "--use-nsight",
                        "--nvidia-research")
    assert code == 0 and not model.steps
    run = env["results"] / "run-001"
    assert "docs_search" in (run / "research.md").read_text()
    first = model.requests[0]
    assert ({t["function"]["name"] for t in first["tools"]}
            == {"gpu_properties", "compile", "docs_search", "ncu_profile"})
    assert "NVIDIA optimization guidance" in first["messages"][1]["content"]
    assert model.requests[1]["messages"][-1]["role"] == "tool"
    for label in ("001-initial", "002-it1", "003-it2"):
        profile = read(run / "candidates" / label / "profile.json")
        assert profile["case"] == "n_4096" and not profile["is_error"], profile
    reports = sorted(p.name for p in (run / "profiles").glob("*.ncu-rep"))
    assert reports == ["001-initial-n_4096.ncu-rep", "002-it1-n_4096.ncu-rep", "003-it2-n_4096.ncu-rep"]
    assert "Nsight Compute profile of 002-it1" in model.requests[2]["messages"][-1]["content"]
    summary = read(run / "summary.json")
    assert summary["best"]["label"] == "002-it1" and not summary["notes"]


def test_servers_without_structured_output_get_plain_json_requests(env: dict[str, Path]) -> None:
    script = [{"status": 400, "error": "response_format json_schema is not supported by this model"},
              {"content": "Here it is:\n```json\n" + json.dumps(json.loads(proposal(kernel("FAST"))["content"]))
               + "\n```\nDone."}]
    with ScriptedModel(script) as model:
        assert optimize(env, model, "--workload", "tiny_add", "--max-iterations", "1") == 0
    assert model.requests[0]["response_format"]["type"] == "json_schema"
    assert model.requests[1]["response_format"] == {"type": "json_object"}
    run = env["results"] / "run-001"
    summary = read(run / "summary.json")
    assert summary["best"]["label"] == "002-it1" and "using json_object" in summary["model"]["notes"][0]
    assert ("not supported" in read(run / "model" / "0001-error.json")["message"]
            and (run / "model" / "0002-response.json").is_file())
