"""bench/torch_baselines.py where nothing can be timed (no GPU here, maybe no torch): both runs go
through the real timing child, each problem's row says why it has no times, and no ratio of medians
is made up."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from bench_scripts import load_bench_script

PROBLEMS = Path(__file__).resolve().parents[1] / "torch_problems"


def test_the_table_says_why_nothing_was_timed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench_script("torch_baselines.py")
    for name in ("vector_add.py", "matmul.py"):
        (tmp_path / name).write_text((PROBLEMS / name).read_text())
    assert bench.main([str(tmp_path), "--ahead", "2", "--timeout", "120", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ahead"]["ahead"] == 2 and out["alone"]["ahead"] == 1
    for run in (out["ahead"], out["alone"]):
        assert sorted(run["problems"]) == ["matmul.py", "vector_add.py"]
        for row in run["problems"].values():
            assert row["eager_ms"] is None and row["compile_ms"] is None and row["note"], row
    assert bench.main([str(tmp_path), "--limit", "1"]) == 0
    table = capsys.readouterr().out
    assert table.startswith("1 problems: compiled ahead") and "| matmul.py | None / None |" in table
    assert "median ratio" not in table  # no compiled medians: no ratio


def test_each_problem_carries_its_buffers_bytes_where_torch_can_count_them(tmp_path: Path) -> None:
    """The bench gives each problem its buffers' bytes (torch's meta device), which bound how many
    compile at once on the GPU: vector_add's a, b and output of 4096 float32; 0 where torch is missing."""
    bench = load_bench_script("torch_baselines.py")
    (tmp_path / "vector_add.py").write_text((PROBLEMS / "vector_add.py").read_text())
    [job] = bench.jobs_in(tmp_path, 8)
    assert job.bytes == (3 * 4096 * 4 if importlib.util.find_spec("torch") is not None else 0)
