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
from fakegpu import REPO, write_harness, write_tiny_workload

from kernelopt_mcp.cli import main

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "tune"


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install '.[ray]')")
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING",
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    try:
        yield
    finally:
        ray.shutdown()


def served(tmp_path: Path) -> list[dict]:
    log = tmp_path / "harness-requests.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def tune_argv(tmp_path: Path) -> list[str]:
    workload = str(write_tiny_workload(tmp_path / "wl") / "tiny_add")
    harness = write_harness(tmp_path, "fake", devices=2)
    return ["tune", workload, str(FIXTURES / "add.json"), "--harness", str(harness), "--iterations", "3", "--warmup", "0",
            "--no-cache", "--json", "--seed", "7", "--ray", "auto", "-o", str(tmp_path / "run")]


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
