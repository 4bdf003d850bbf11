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
from rich.console import Console

from fakegpu import TINY_SPEC, kernel, write_harness, write_tiny_workload
from scripted_model import ScriptedModel

from kernelopt_agent.cli import main as agent_main
from kernelopt_agent.options import OptimizeOptions
from kernelopt_agent.rundir import RunDir

REPO = Path(__file__).resolve().parent.parent
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
SYNTAX_ERROR = 'extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {\n  c[0] = oops;\n}\n'


def proposal(source: str, rationale: str = "an idea", launch: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"content": json.dumps({"rationale": rationale, "source": source, "launch": launch or LAUNCH, "compile_options": []})}


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
    for name in ("config.json", "signature.json", "input_cases.json", "supplied-reference.cu", "supplied-reference.launch.json",
                 "initial.cu", "initial.launch.json", "reference.py", "history.json", "summary.json", "best.cu",
                 "best.launch.json", "heatmap.png", "heatmap.svg", "server.log", "workload/tiny2/workload.json"):
        assert (run / name).is_file(), name
    labels = sorted(p.name for p in (run / "candidates").iterdir())
    assert labels == ["000-reference", "001-initial", "002-it1", "003-it2-repair", "004-it3-repair", "005-it5"]
    for label in labels:
        for f in ("source.cu", "launch.json", "request.json", "result.json"):
            assert (run / "candidates" / label / f).is_file()
    assert not list(run.rglob("*.tmp")) and not list(run.rglob(".*.tmp"))

    # best by geometric mean, not arithmetic
    summary = read(run / "summary.json")
    assert summary["status"] == "completed" and summary["error"] is None
    assert summary["best"]["label"] == "004-it3-repair"
    assert summary["best"]["score_ms"] == pytest.approx((0.004 * 1.0) ** 0.5, rel=0.05)
    assert (run / "best.cu").read_text() == fast_uneven.rstrip() + "\n"
    assert summary["best"]["speedup_vs_initial"] == pytest.approx(0.1 / 0.0632, rel=0.05)
    assert summary["candidates"] == {"total": 6, "valid": 4, "invalid": ["002-it1: compile_error", "003-it2-repair: mismatch"]}
    assert summary["iterations"] == {"max": 5, "used": 5}
    tokens = summary["tokens"]
    assert tokens["calls"] == 7 and tokens["total_tokens"] > 0 and tokens["cost_usd"] > 0
    responses = sorted((run / "model").glob("*-response.json"))
    assert len(responses) == 7 and len(list((run / "model").glob("*-request.json"))) == 7
    assert sum(read(p)["usage"]["total_tokens"] for p in responses) == tokens["total_tokens"]
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
    refused = [h for h in history if h["event"] == "no_proposal"]
    assert refused and refused[0]["status"] == "refused" and refused[0]["iteration"] == 4
    model_tool = [read(p) for p in (run / "tools").glob("*-compile.json") if read(p)["caller"] == "model"]
    assert model_tool and model_tool[0]["structured"]["status"] == "error"

    # the secret never reaches the disk
    for path in run.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".log", ".cu", ".md", ".py", ".svg"):
            assert SECRET not in path.read_text(errors="replace"), path
    assert read(run / "config.json")["api_key"] == "set"

    # inputs, expected outputs and replay requests: the harness alone reproduces the expected outputs
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
        expected = np.load(run / "expected" / case / "c.npy")
        np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    assert read(run / replays["big_a"])["cases"][0]["timing"] == {"warmup": 1, "iterations": 3}
    assert set(summary["files"]["replay_reference"]) == set(replays)
