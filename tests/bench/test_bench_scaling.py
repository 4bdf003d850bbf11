"""bench/scaling.py runs end to end on pretend GPUs (1 device vs 2, the same search), so a change that
breaks it is caught on CPU. Only what does not depend on the machine's speed is asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_scripts import load_bench_script


def test_the_scaling_bench_compares_one_device_with_two(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setenv("KERNELOPT_CACHE", "restored after the test")  # the script sets it for its runs
    monkeypatch.chdir(tmp_path)
    module = load_bench_script("scaling.py")
    assert module.main(["--devices", "1,2", "--budget-evals", "6", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["devices"], r["measured"]) for r in rows] == [(1, 6), (2, 6)]
    assert all(r["same_best"] for r in rows) and rows[0]["vs_first"] == 1.0 and rows[1]["configs_per_min"] > 0
