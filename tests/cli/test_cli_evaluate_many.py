"""`kernelopt evaluate WORKLOAD A.cu B.cu ...`: several kernels in one session (one harness, one
set of inputs and expected outputs, one reference timing), each with its own launch from
<name>.launch.json beside it; on the pretend GPU of tests/fakegpu.py. The adversarial suite on
the GPU runs each of its kernels through this path cheaply (tests/gpu/test_adversarial_gpu.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakegpu import kernel, write_harness, write_tiny_workload

from kernelopt_mcp.cli import main


def test_several_kernels_share_one_session(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    harness = write_harness(tmp_path, "fake")
    wl = write_tiny_workload(tmp_path / "wl") / "tiny_add"
    good, wrong, other = tmp_path / "good.cu", tmp_path / "wrong.cu", tmp_path / "other.cu"
    good.write_text(kernel("FAST"))
    wrong.write_text(kernel("WRONG"))
    other.write_text(kernel("MS:n_4096=0.08;"))
    # other.cu's own launch and compile options, beside it
    (tmp_path / "other.launch.json").write_text(json.dumps(
        {"launch": {"default": {"grid": ["ceil_div(n, 32)"], "block": [32]}}, "compile_options": ["--use_fast_math"]}))
    argv = ["evaluate", str(wl), str(good), str(wrong), str(other), "--harness", str(harness),
            "--warmup", "1", "--iterations", "3", "--json"]
    assert main(argv) == 1  # one of them fails
    results = json.loads(capsys.readouterr().out)
    assert [r["candidate"] for r in results] == ["good", "wrong", "other"]
    assert [r["status"] for r in results] == ["ok", "mismatch", "ok"]
    assert len({r["seed"] for r in results}) == 1  # one session: the same inputs
    assert (results[0]["score_ms"] == pytest.approx(0.05, rel=0.05)
            and results[2]["score_ms"] == pytest.approx(0.08, rel=0.05))
    assert results[2]["cases"][0]["launch"]["block"][0] == 32 and results[0]["cases"][0]["launch"]["block"][0] == 64
    assert ("--use_fast_math" in results[2]["compile"]["options"]
            and "--use_fast_math" not in results[0]["compile"]["options"])

    # one kernel: the result object itself, as before
    assert main(["evaluate", str(wl), str(good), "--harness", str(harness), "--warmup", "1", "--iterations", "3",
                 "--json"]) == 0
    single = json.loads(capsys.readouterr().out)
    assert isinstance(single, dict) and single["status"] == "ok"
    # the session's one-time preparation, beside every result (the same for all: one session)
    assert {"inputs", "oracle", "reference", "total"} <= set(single["preparation_ms"])
    assert len({json.dumps(r["preparation_ms"]) for r in results}) == 1
    assert single["phases"]["total_ms"] >= single["phases"]["validate_ms"] > 0
    assert main(["evaluate", str(wl), str(good), "--harness", str(harness), "--warmup", "1", "--iterations", "3"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "prepared once in" in text and "reference" in text and "host time" in text


def test_kernelopt_fresh_launches_sets_the_redraw_subset_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """KERNELOPT_FRESH_LAUNCHES=N (Settings.fresh_launches) makes every evaluation built by the app layer
    (the CLI here; the MCP server and so kernelopt optimize alike) redraw before a hidden N measured
    launches, and the result says so; 0 or unset keeps a redraw before every launch."""
    monkeypatch.setenv("KO_FAKE_FEATURES",
                       "blocking,timed_inputs,fresh_inputs,timed_check,confirm_launch,fresh_launches")
    harness = write_harness(tmp_path, "fake")
    wl = write_tiny_workload(tmp_path / "wl") / "tiny_add"
    good = tmp_path / "good.cu"
    good.write_text(kernel())
    for value, expect in (("12", "before a hidden 12 of the 40 measured launches"), ("0", "for every timed launch")):
        monkeypatch.setenv("KERNELOPT_FRESH_LAUNCHES", value)
        assert main(["evaluate", str(wl), str(good), "--harness", str(harness), "--warmup", "1", "--iterations", "40",
                     "--json"]) == 0
        checks = json.loads(capsys.readouterr().out)["checks"]
        assert any(expect in c for c in checks), (value, checks)
