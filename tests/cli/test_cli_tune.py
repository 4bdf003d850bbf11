"""`kernelopt tune` on the fake GPU (tests/fakegpu.py) with the test-only tunable kernel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakegpu import write_harness, write_tiny_workload

from kernelopt_mcp.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tune"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    workload = write_tiny_workload(tmp_path / "wl") / "tiny_add"
    return {"harness": str(write_harness(tmp_path, "fake")), "workload": str(workload)}


def test_tune_prints_a_table_and_saves_the_run(tmp_path: Path, env: dict[str, str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    argv = ["tune", env["workload"], str(FIXTURES / "add.json"), "--harness", env["harness"], "--iterations", "3",
            "--warmup", "0", "-o", str(run)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "exhaustive search, 14 of 14 configurations" in out and "0 (untuned)" in out
    assert "best {'BLOCK': 32, 'UNROLL': 4}" in out and "1 skipped by constraints" in out
    assert ({"tune.json", "tune.csv", "best.cu", "best_params.json", "best.launch.json"}
            <= {p.name for p in run.iterdir()})
    saved = json.loads((run / "tune.json").read_text())
    assert saved["best_params"] == {"BLOCK": 32, "UNROLL": 4} and len(saved["table"]) == 14
    # the saved best is a plain kernel + launch that `kernelopt evaluate` runs as it is
    assert main(["evaluate", env["workload"], str(run / "best.cu"), "--launch", str(run / "best.launch.json"),
                 "--harness", env["harness"], "--iterations", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "ok"
    # a second run with the same cache measures nothing
    assert main([*argv[:-2], "-o", str(tmp_path / "run2"), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["counts"]["measured"] == 0 and again["counts"]["cached"] == 14


def test_tune_argument_errors(env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    base = ["tune", env["workload"], "--harness", env["harness"]]
    assert main(base) == 2
    assert "has no tunable.json" in capsys.readouterr().err
    assert main([*base[:2], str(FIXTURES / "add.json"), *base[2:], "--budget-evals", "0"]) == 2
    assert "at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*base, "--strategy", "grid"])
    assert "invalid choice: 'grid'" in capsys.readouterr().err


def test_configurations_are_compiled_ahead_and_only_once(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 17: while the GPU measures one configuration, the next ones of an ordered strategy
    compile in the background; each reaches NVRTC exactly once (the evaluation finds it cached,
    or waits for the compile in flight), and the best is what a plain run finds."""
    from kernelopt_mcp import compiler

    pool = compiler.default_pool()
    sources: list[tuple[str, ...]] = []
    real = pool.compile

    def counting(source: str, filename: str, options: list[str], *args: object, **kwargs: object) -> object:
        sources.append(tuple(o for o in options if o.startswith("-D")))
        return real(source, filename, options, *args, **kwargs)

    monkeypatch.setattr(pool, "compile", counting)
    argv = ["tune", env["workload"], str(FIXTURES / "add.json"), "--harness", env["harness"], "--iterations", "3",
            "--warmup", "0", "--json", "-o", str(tmp_path / "run")]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["best_params"] == {"BLOCK": 32, "UNROLL": 4}
    measured = result["counts"]["measured"]
    assert result["counts"]["compiled_ahead"] >= measured - 2  # all but the first (and what the lookahead saw last)
    tunable = [s for s in sources if any(o.startswith("-DBLOCK") for o in s)]
    assert len(tunable) == len(set(tunable)) == measured, sorted(tunable)


def test_tune_spreads_over_every_device_and_finds_the_same_best(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    workload = str(write_tiny_workload(tmp_path / "wl") / "tiny_add")
    harness = write_harness(tmp_path, "fake", devices=2)
    base = ["tune", workload, str(FIXTURES / "add.json"), "--harness", str(harness), "--iterations", "3", "--warmup",
            "0", "--no-cache", "--json", "--seed", "7"]
    assert main([*base, "--device", "0", "-o", str(tmp_path / "one")]) == 0
    one = json.loads(capsys.readouterr().out)
    (tmp_path / "harness-requests.jsonl").unlink()
    assert main([*base, "-o", str(tmp_path / "all")]) == 0  # default: every visible device
    both = json.loads(capsys.readouterr().out)
    assert one["devices"] == ["device 0: NVIDIA H200 (fake)"]
    assert both["devices"] == ["device 0: NVIDIA H200 (fake)", "device 1: NVIDIA H200 (fake)"]
    assert both["best_params"] == one["best_params"] == {"BLOCK": 32, "UNROLL": 4}
    assert [r["params"] for r in both["table"]] == [r["params"] for r in one["table"]]  # the same search, in order
    assert {r["device"] for r in both["table"]} == {"device 0", "device 1"}
    served = {json.loads(line)["device"] for line in (tmp_path / "harness-requests.jsonl").read_text().splitlines()}
    assert served == {0, 1}
    assert both["evals_per_min_per_device"] > 0 and both["counts"]["measured"] == 14
