"""bench/candidates_per_minute.py runs end to end (scripted model without delay, pretend H200), so a
change that breaks it is caught on CPU. No timing is asserted: the figures are in docs/optimize.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_scripts import load_bench_script


def test_the_candidates_bench_compares_each_n(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    for key in ("OPENAI_API_KEY", "KERNELOPT_WORKLOADS", "KERNELOPT_DOCS_OFFLINE", "KERNELOPT_CACHE", "PYTHONPATH"):
        monkeypatch.setenv(key, "restored after the test")  # the script sets them for its runs
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    module = load_bench_script("candidates_per_minute.py")
    assert module.main(["--delay", "0", "--iterations", "1", "--candidates", "1,2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["candidates_per_iteration"], r["evaluated"]) for r in rows] == [(1, 1), (2, 2)]
    assert rows[0]["vs_first"] == 1.0 and all(r["candidates_per_min"] > 0 for r in rows)
