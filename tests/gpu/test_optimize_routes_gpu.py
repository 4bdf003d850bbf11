"""`kernelopt optimize` routes of issue 15 on a real GPU, against the scripted model of
tests/scripted_model.py: a description run whose generated reference launches blocks of 2048
threads (more than any NVIDIA GPU allows) is regenerated and then runs, leaving nothing in the
workspace; `--use-nsight` on this machine either profiles or says once why it cannot;
`--candidates 4` on a description run and on a `--workload` run; and a `--workload` run
interrupted by Ctrl-C goes on with `--resume`.

Run with --run-gpu (scripts/device_gpu_tests.sh tests/gpu/test_optimize_routes_gpu.py).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from scripted_model import ScriptedModel

from kernelopt_agent.cli import main as agent_main

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]

ADD = 'extern "C" __global__ void vec_add(const float* a, const float* b, float* c, int n) {\n' \
      "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) c[i] = a[i] + b[i];\n}\n"
ADD4 = 'extern "C" __global__ void vec_add(const float* a, const float* b, float* c, int n) {\n' \
       "    int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;\n" \
       "    if (i + 3 < n) {\n" \
       "        float4 x = *reinterpret_cast<const float4*>(a + i), y = *reinterpret_cast<const float4*>(b + i);\n" \
       "        *reinterpret_cast<float4*>(c + i) = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);\n" \
       "    } else {\n        for (; i < n; ++i) c[i] = a[i] + b[i];\n    }\n}\n"


def launch(block: int, per_thread: int = 1) -> dict[str, Any]:
    return {"default": {"grid": [f"ceil_div(n, {block * per_thread})"], "block": [block], "shared_bytes": 0}}


GENERATED = {
    "name": "vec_add_issue15", "description": "c = a + b, float32",
    "signature": {"entry": "vec_add", "params": [
        {"kind": "buffer", "name": "a", "dtype": "float32", "role": "in", "shape": ["n"]},
        {"kind": "buffer", "name": "b", "dtype": "float32", "role": "in", "shape": ["n"]},
        {"kind": "buffer", "name": "c", "dtype": "float32", "role": "out", "shape": ["n"]},
        {"kind": "scalar", "name": "n", "dtype": "int32"}]},
    "inputs": {"a": {"generator": "uniform", "low": -1, "high": 1}, "b": {"generator": "normal"}},
    "cases": [{"name": "one", "kind": "correctness", "scalars": {"n": 1}},
              {"name": "odd_1001", "kind": "correctness", "scalars": {"n": 1001}},
              {"name": "big", "kind": "performance", "scalars": {"n": 1 << 24}}],
    "tolerance": {"c": {"rtol": 1e-6, "atol": 1e-6}},
    "cost": {"flops": "n", "bytes": "12 * n"},
    "reference_cu": ADD, "reference_launch": launch(2048),
    "initial_cu": ADD, "initial_launch": launch(128),
}


def read(path: Path) -> Any:
    return json.loads(path.read_text())


def test_a_failing_generated_reference_is_regenerated_on_the_gpu(tmp_path: Path, harness_binary: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-scripted")
    monkeypatch.setenv("KERNELOPT_DOCS_OFFLINE", "1")
    monkeypatch.setenv("PYTHONPATH",
                       os.pathsep.join(filter(None, [str(REPO), str(REPO / "clients"), os.environ.get("PYTHONPATH")])))
    fixed = {"name": GENERATED["name"], "description": GENERATED["description"], "reference_cu": ADD,
             "reference_launch": launch(256)}
    faster = {"rationale": "float4 loads and stores", "source": ADD4, "launch": launch(256, 4), "compile_options": []}
    script = [{"content": json.dumps(GENERATED)}, {"content": json.dumps(fixed)}, {"content": json.dumps(faster)}]
    results, ws = tmp_path / "results", tmp_path / "ws"
    with ScriptedModel(script) as model:
        code = agent_main(["optimize", "--description", "Add two float32 vectors.", "--max-iterations", "1",
                           "--use-nsight", "--base-url", model.url, "--harness", str(harness_binary), "--workspace",
                           str(ws), "--results-dir", str(results), "--warmup", "2", "--iterations", "10", "--quiet"])
    run = results / "run-001"
    summary = read(run / "summary.json")
    assert code == 0 and not model.steps and not model.exhausted, summary
    status = [(h["label"], h["status"]) for h in read(run / "history.json") if h["event"] == "candidate"]
    assert status[0][0] == "000-reference" and status[0][1] != "ok"  # 2048 threads per block cannot launch
    assert status[1:] == [("001-reference", "ok"), ("002-initial", "ok"), ("003-it1", "ok")]
    assert summary["reference"]["label"] == "001-reference" and summary["workload"]["reference"]["checked"] is True
    assert not (ws / "workloads").exists()  # run-scoped: nothing registered in the workspace
    profiles = list((run / "tools").glob("*-ncu_profile.json"))
    notes = [n for n in summary["notes"] if n.startswith("--use-nsight")]
    if notes:  # no usable ncu here: said once, tried once
        assert len(profiles) == 1 and "nothing was profiled" in notes[0]
    else:  # profiled: the initial kernel and the proposal
        assert len(profiles) == 2 and (run / "profiles").is_dir()
    print(json.dumps({"statuses": status, "notes": summary["notes"], "best": summary["best"]["label"]}, indent=1))


@pytest.mark.parametrize("route", ["description", "workload"])
def test_four_candidates_per_iteration_on_the_gpu(tmp_path: Path, harness_binary: Path,
                                                   monkeypatch: pytest.MonkeyPatch, route: str) -> None:
    """--candidates 4 on the real GPU, on a generated workload (--description) and on a bundled one
    (--workload vector_add): 4 lanes x 2 iterations of distinct kernels (block sizes, float4), one
    duplicate evaluated once, every candidate recorded with its lane, the fastest valid one best."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-scripted")
    monkeypatch.setenv("KERNELOPT_DOCS_OFFLINE", "1")
    monkeypatch.setenv("PYTHONPATH",
                       os.pathsep.join(filter(None, [str(REPO), str(REPO / "clients"), os.environ.get("PYTHONPATH")])))
    add, add4 = (ADD, ADD4) if route == "description" else (ADD.replace("vec_add", "vector_add"),
                                                            ADD4.replace("vec_add", "vector_add"))
    kernels = {(1, 1): (add, launch(128)), (1, 2): (add, launch(512)), (1, 3): (add4, launch(256, 4)),
               (1, 4): (add, launch(512)),  # the same as candidate 2: evaluated once
               (2, 1): (add4, launch(128, 4)), (2, 2): (add4, launch(512, 4)), (2, 3): (add, launch(1024)),
               (2, 4): (add4, launch(64, 4))}

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        state = body["messages"][-1]["content"]
        it = int(state.split("Iteration ", 1)[1].split(" ", 1)[0])
        slot = int(state.split("You are candidate ", 1)[1].split(" ", 1)[0])
        source, how = kernels[(it, slot)]
        return {"content": json.dumps({"rationale": f"candidate {it}.{slot}", "source": source, "launch": how,
                                       "compile_options": [], "tunables": None})}

    results, ws = tmp_path / "results", tmp_path / "ws"
    if route == "description":  # the model first writes the workload's parts
        script, what = [{"content": json.dumps({**GENERATED, "reference_launch": launch(256)})}], \
            ["--description", "Add two float32 vectors."]
    else:
        script, what = [], ["--workload", "vector_add"]
    with ScriptedModel([*script, *[answer] * 8]) as model:
        code = agent_main(["optimize", *what, "--max-iterations", "2",
                           "--candidates", "4", "--base-url", model.url, "--harness", str(harness_binary),
                           "--workspace", str(ws), "--results-dir", str(results), "--warmup", "2", "--iterations", "10",
                           "--quiet"])
    run = results / "run-001"
    summary = read(run / "summary.json")
    assert code == 0 and not model.steps and not model.exhausted, summary
    history = read(run / "history.json")
    candidates = [h for h in history if h["event"] == "candidate" and h["iteration"] is not None]
    assert len(candidates) == 7 and all(h["status"] == "ok" for h in candidates), candidates
    assert (sorted((h["iteration"], h["slot"]) for h in candidates if h["iteration"] == 2)
            == [(2, 1), (2, 2), (2, 3), (2, 4)])
    dup = [h for h in history if h["event"] == "duplicate"]
    assert len(dup) == 1 and dup[0]["iteration"] == 1 and dup[0]["slot"] in (2, 4)
    ranked = [h for h in history if h["event"] == "candidate" and h["kind"] != "reference" and h["valid"]]
    fastest = min(ranked, key=lambda h: h["score_ms"])  # the initial kernel competes too
    assert summary["best"]["label"] == fastest["label"] and summary["iterations"]["candidates_per_iteration"] == 4
    assert (run / "heatmap.png").is_file() and (run / "history.jsonl").is_file()
    assert summary["workload"]["name"] == ("vector_add" if route == "workload"
                                           else GENERATED["name"]), summary["workload"]
    print(json.dumps({"best": summary["best"]["label"], "scores": {h["label"]: h["score_ms"] for h in candidates}},
                     indent=1))


def test_an_interrupted_workload_run_resumes_on_the_gpu(tmp_path: Path, harness_binary: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """--workload vector_add interrupted (Ctrl-C) in iteration 2, then `--resume` to 3 iterations: the same
    directory, the numbering going on, the frozen inputs unchanged, the best over both sessions."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-scripted")
    monkeypatch.setenv("KERNELOPT_DOCS_OFFLINE", "1")
    monkeypatch.setenv("PYTHONPATH",
                       os.pathsep.join(filter(None, [str(REPO), str(REPO / "clients"), os.environ.get("PYTHONPATH")])))
    vadd, vadd4 = ADD.replace("vec_add", "vector_add"), ADD4.replace("vec_add", "vector_add")

    def answer(source: str, how: dict[str, Any], why: str) -> dict[str, Any]:
        return {"content": json.dumps({"rationale": why, "source": source, "launch": how, "compile_options": []})}

    def ctrl_c(body: dict[str, Any]) -> dict[str, Any]:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the model is thinking about iteration 2
        return answer(vadd, launch(1024), "never evaluated")

    results, ws = tmp_path / "results", tmp_path / "ws"
    where = ["--harness", str(harness_binary), "--workspace", str(ws), "--quiet"]
    with ScriptedModel([answer(vadd4, launch(256, 4), "float4"), ctrl_c]) as model:
        code = agent_main(["optimize", "--workload", "vector_add", "--max-iterations", "3", "--base-url", model.url,
                           "--results-dir", str(results), "--warmup", "2", "--iterations", "10", *where])
    run = results / "run-001"
    first = read(run / "summary.json")
    assert code == 130 and first["status"] == "interrupted", first
    inputs = (run / "input_cases.json").read_bytes()
    with ScriptedModel([answer(vadd, launch(512), "block 512"),
                        answer(vadd4, launch(128, 4), "float4, block 128")]) as model:
        code = agent_main(["optimize", "--resume", str(run), "--base-url", model.url, *where])
    summary = read(run / "summary.json")
    assert code == 0 and not model.steps and not model.exhausted, summary
    history = read(run / "history.json")
    candidates = [h for h in history if h["event"] == "candidate"]
    assert [h["label"] for h in candidates] == ["000-reference", "001-initial", "002-it1", "003-it2", "004-it3"]
    assert all(h["status"] == "ok" for h in candidates), candidates
    fastest = min((h for h in candidates if h["kind"] != "reference"), key=lambda h: h["score_ms"])
    assert summary["best"]["label"] == fastest["label"] and summary["status"] == "completed"
    assert summary["iterations"]["used"] == 3 and summary["tokens"]["calls"] == 3
    assert summary["resumes"][0]["from_iteration"] == 2 and summary["resumes"][0]["previous_status"] == "interrupted"
    assert ((run / "input_cases.json").read_bytes() == inputs
            and summary["workload"]["seed"] == first["workload"]["seed"])
    assert summary["provenance"]["device"] == first["provenance"]["device"]
    assert all((run / f).is_file() for f in summary["files"]["replay"].values())
    print(json.dumps({"best": summary["best"]["label"], "scores": {h["label"]: h["score_ms"] for h in candidates}},
                     indent=1))
