"""A frozen run's replay requests are built like every evaluation: from the settings, through the
application layer (app.freeze_workload -> app.open_session), so a server configured not to flush
L2, or with other warm-up and iteration counts, writes replays that do the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakegpu import write_harness, write_tiny_workload

from kernelopt_mcp.app import freeze_workload
from kernelopt_mcp.config import Settings
from kernelopt_mcp.evaluation.device import device_info
from kernelopt_mcp.freeze import write_replay
from kernelopt_mcp.launch import LaunchSpec


def _replays(tmp_path: Path, settings: Settings, **counts: int) -> dict[str, dict]:
    harness = write_harness(tmp_path, "fake")
    src = write_tiny_workload(tmp_path / "wl") / "tiny_add"
    spec = json.loads((src / "workload.json").read_text())
    frozen = freeze_workload(
        settings, spec, (src / "reference.cu").read_text(), (src / "initial.cu").read_text(), tmp_path / "run",
        oracle=src / "reference.py", data_path=Path, seed=7, device=device_info(harness, 0), arch="sm_90", **counts,
    )
    try:
        launch = LaunchSpec.model_validate(spec["initial"]["launch"])
        written, problem = write_replay(frozen, (src / "initial.cu").read_text(), launch, [], "replay")
        assert problem is None, problem
        return {case: json.loads((frozen.directory / path).read_text()) for case, path in written.items()}
    finally:
        frozen.close()


@pytest.mark.parametrize("flush", [True, False])
def test_replays_follow_the_settings(tmp_path: Path, flush: bool) -> None:
    replays = _replays(tmp_path, Settings(flush_l2=flush, warmup=3, iterations=17))
    assert replays and all(r["flush_l2"] is flush for r in replays.values())
    timed = [c["timing"] for r in replays.values() for c in r["cases"] if "timing" in c]
    assert timed and all(t.get("warmup") == 3 and t["iterations"] == 17 for t in timed)


def test_the_tools_counts_win_over_the_settings(tmp_path: Path) -> None:
    replays = _replays(tmp_path, Settings(warmup=3, iterations=17), warmup=5, iterations=40)
    timed = [c["timing"] for r in replays.values() for c in r["cases"] if "timing" in c]
    assert timed and all(t.get("warmup") == 5 and t["iterations"] == 40 for t in timed)
