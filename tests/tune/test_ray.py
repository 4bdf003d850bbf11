"""A cluster through Ray: a real local Ray instance started by the test, with two logical GPUs,
each actor's "GPU" a pretend-GPU harness (tests/fakegpu.py; Ray sets each actor's
CUDA_VISIBLE_DEVICES and the stand-in answers for that GPU, as CUDA would).

Ray starts in ~6 s on two cores; the tests share one instance.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakegpu import kernel, local_ray, spread_over_devices, write_harness, write_tiny_workload

from kernelopt_mcp.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tune"


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """The local cluster's address. Its processes inherit this environment: the checkout first on
    PYTHONPATH, so actors of every driver (this test, a server it starts) import this code."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install '.[ray]')")
    with local_ray(ray, num_cpus=2, num_gpus=2) as address:
        yield address


def served(tmp_path: Path) -> list[dict]:
    log = tmp_path / "harness-requests.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def tune_argv(tmp_path: Path) -> list[str]:
    workload = str(write_tiny_workload(tmp_path / "wl") / "tiny_add")
    harness = write_harness(tmp_path, "fake", devices=2)
    return ["tune", workload, str(FIXTURES / "add.json"), "--harness", str(harness), "--iterations", "3", "--warmup",
            "0", "--no-cache", "--json", "--seed", "7", "--ray", "auto", "-o", str(tmp_path / "run")]


def test_tune_on_ray_spreads_over_both_gpus(cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    assert main(tune_argv(tmp_path)) == 0
    result = json.loads(capsys.readouterr().out)
    assert len(result["devices"]) == 2 and all(d.startswith("ray ") for d in result["devices"]), result["devices"]
    assert result["best_params"] == {"BLOCK": 32, "UNROLL": 4}  # as on one local device (test_cli_tune)
    assert result["counts"]["measured"] == 14 and len({r["device"] for r in result["table"]}) == 2
    assert {r["physical"] for r in served(tmp_path)} == {0, 1}  # each actor's harness on its own GPU
    assert len({r["ppid"] for r in served(tmp_path)}) == 2  # two actors, a harness each
    saved = json.loads((tmp_path / "run" / "tune.json").read_text())  # results back in the one run directory
    assert len(saved["table"]) == 14


def test_a_killed_actor_loses_nothing_and_its_job_is_retried(cluster: None, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    argv = tune_argv(tmp_path)
    killed: list[int] = []

    def kill_one_actor() -> None:  # at the first request of the actor on GPU 1: it is preparing, mid-job
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            on_one = [r for r in served(tmp_path) if r["physical"] == 1]
            if on_one:
                actor = on_one[-1]["ppid"]  # the harness's parent: the actor's worker process (started by this test)
                os.kill(actor, signal.SIGKILL)
                killed.append(actor)
            time.sleep(0.01)

    watcher = threading.Thread(target=kill_one_actor)
    watcher.start()
    try:
        code = main(argv)
    finally:
        watcher.join()
    out = capsys.readouterr().out  # Ray prints a line of its own on the death, before or after the JSON
    result, _ = json.JSONDecoder().raw_decode(out[out.index("{\n"):])
    assert killed, "the actor was not killed: the run ended first"
    assert code == 0 and result["counts"]["measured"] == 14, result["counts"]
    assert sorted(r["index"] for r in result["table"]) == list(range(14))  # nothing lost, nothing twice
    lost = [n for n in result["notes"] if "GPU 1 was lost" in n]
    assert len(lost) == 1, result["notes"]
    if "retried on another worker" in lost[0]:  # lost mid-measurement (else while preparing the run's reference)
        assert len([r for r in result["table"] if r["message"].startswith("retried: ray")]) == 1
    assert all(r["device"].endswith("GPU 0") for r in result["table"]), "every answer came from the live actor"
    assert result["best_params"] == {"BLOCK": 32, "UNROLL": 4}


def test_without_ray_the_flag_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails as if it were not installed
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    argv = [a for a in tune_argv(tmp_path) if a != "--json"]
    assert main(argv) != 0
    err = capsys.readouterr()
    assert 'pip install "kernelopt-mcp[ray]"' in err.out + err.err


@pytest.mark.anyio
async def test_the_server_on_ray_runs_jobs_on_both_gpus_and_tags_them(cluster: str, tmp_path: Path) -> None:
    results, props = await spread_over_devices(tmp_path, "--ray", cluster, tool="benchmark")
    assert all(r["status"] == "ok" and r["score_ms"] for r in results), results
    assert len({r["device_uuid"] for r in results}) == 2, results  # each actor's GPU took some
    assert {r["physical"] for r in served(tmp_path)} == {0, 1}
    assert len(props["devices"]) == 2


@pytest.mark.anyio
async def test_an_actor_puts_pytorch_beside_an_imported_problems_benchmark(cluster: str, tmp_path: Path) -> None:
    """The benchmark of an imported PyTorch problem on a Ray actor carries torch_baseline, timed by the actor
    (here torch finds no GPU, or is missing: the result says so in one line, never fails)."""
    from fakegpu import ADD_LAUNCH, stdio_server, tool_text
    from test_torch_baseline import imported_workload

    imported_workload(tmp_path / "wl")
    env = {"KERNELOPT_HARNESS": str(write_harness(tmp_path, "fake", devices=2)),
           "KERNELOPT_WORKLOADS": str(tmp_path / "wl"), "KERNELOPT_CACHE": str(tmp_path / "cache")}
    async with stdio_server("--workspace", str(tmp_path / "ws"), "--ray", cluster, env=env) as client:
        r = await client.call_tool("benchmark", {"workload": "p1_add", "launch": ADD_LAUNCH, "source": kernel("FAST"),
                                                 "iterations": 3})
    out = r.structured_content
    assert not r.is_error and out["status"] == "ok", tool_text(r)
    base = out["torch_baseline"]
    assert base.get("eager_ms") or "not timed" in base["note"], base


def test_optimize_on_ray_spreads_candidates_over_both_gpus(
    cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scripted_model import ScriptedModel
    from test_optimize import SECRET, proposal

    from kernelopt_agent.cli import main as agent_main

    harness = write_harness(tmp_path, "fake", devices=2)
    extra = write_tiny_workload(tmp_path / "extra")
    monkeypatch.chdir(tmp_path)
    for key, value in {"OPENAI_API_KEY": SECRET, "KERNELOPT_WORKLOADS": str(extra), "KERNELOPT_DOCS_OFFLINE": "1",
                       "KERNELOPT_CACHE": str(tmp_path / "cache")}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    both_asked = threading.Barrier(2)

    def answer(body: dict) -> dict:
        both_asked.wait(120)  # the two lanes' candidates reach the server together
        return proposal(kernel("SLOW") + f"// {time.monotonic_ns()}\n", "a lane's idea")

    with ScriptedModel([answer] * 4) as model:
        code = agent_main(["optimize", "--harness", str(harness), "--workspace", str(tmp_path / "ws"), "--results-dir",
                           str(tmp_path / "results"), "--iterations", "3", "--warmup", "1", "--quiet", "--base-url",
                           model.url, "--workload", "tiny_add", "--max-iterations", "2", "--candidates", "2",
                           "--ray", cluster])
    assert code == 0
    run = tmp_path / "results" / "run-001"
    history = ([json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
               if (run / "history.jsonl").exists() else json.loads((run / "history.json").read_text()))
    devices = {h.get("device") for h in history if h.get("event") == "candidate"}
    assert len(devices - {None}) == 2, devices
    assert json.loads((run / "summary.json").read_text())["devices"]["used"] == 2
