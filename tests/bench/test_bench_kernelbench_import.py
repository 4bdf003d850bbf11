"""bench/kernelbench_import.py on a small KernelBench-shaped directory: every problem imported in its
own process, the table counts them per level with their time and disk, refusals grouped by reason,
and an import that kills its process is one more row."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from bench_scripts import load_bench_script

pytest.importorskip("torch", reason="torch is not installed (pip install torch): PyTorch problems cannot be run")

PROBLEMS = Path(__file__).resolve().parents[1] / "torch_problems"
NUMBER_OUTPUT = """\
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2, 3  # a tensor and a number: refused


def get_inputs():
    return [torch.rand(8)]


def get_init_inputs():
    return []
"""


def test_the_table_counts_imports_and_refusals_per_level(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench_script("kernelbench_import.py")
    (tmp_path / "level1").mkdir()
    (tmp_path / "level2").mkdir()
    shutil.copy(PROBLEMS / "elementwise_gelu.py", tmp_path / "level1" / "1_Gelu.py")
    (tmp_path / "level2" / "1_Two.py").write_text(NUMBER_OUTPUT)
    exits = NUMBER_OUTPUT.replace("import torch\n", "import os\nos._exit(3)\n", 1)
    (tmp_path / "level2" / "2_Exit.py").write_text(exits)
    record = tmp_path / "records.json"
    assert bench.main([str(tmp_path), "--level", "1", "2", "--jobs", "2", "--json", str(record)]) == 0
    table = capsys.readouterr().out
    assert "| 1 | 1 | 1 | 100.0 |" in table and "| 2 | 2 | 0 | 0.0 |" in table and "| all | 3 | 1 | 33.3 |" in table
    assert "forward's output _ (of _) is of type int, not a tensor" in table  # the refusal's kind, its numbers left out
    rows = {Path(r["problem"]).name: r for r in json.loads(record.read_text())}
    assert rows["1_Gelu.py"]["imported"] and rows["1_Gelu.py"]["seconds"] > 0 and rows["1_Gelu.py"]["bytes"] > 0
    assert not rows["1_Two.py"]["imported"] and "output 1 (of 2) is of type int" in rows["1_Two.py"]["refusal"]
    # an import that kills its process is a row of the table, the others go on
    assert not rows["2_Exit.py"]["imported"] and "the import died (exit 3" in rows["2_Exit.py"]["refusal"]
