"""bench/vendor.py ("kernels against the vendor", issue 16) end to end against the fake GPU
(tests/fakegpu.py): an entry is tuned, its best configuration's performance cases are put beside
the vendor, and the ratio and verdict follow from the figures. No timing is asserted: the table's
figures come from the H200."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from bench_scripts import load_bench_script
from fakegpu import kernel, write_harness, write_tiny_workload

from kernelopt_mcp import Settings

COPY_RATE = 2e9  # bytes/s the pretend calibration reports


@pytest.fixture(scope="module")
def vendor() -> ModuleType:
    return load_bench_script("vendor.py")


@pytest.fixture
def bench(vendor: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    extra = write_tiny_workload(tmp_path / "extra")
    root = extra / "tiny_add"
    (root / "tunable.cu").write_text("#ifndef BLOCK\n#define BLOCK 128\n#endif\n" + kernel())
    (root / "tunable.json").write_text(json.dumps({
        "source": "tunable.cu", "params": {"BLOCK": [64, 128, 256]}, "constraints": [], "defaults": {"BLOCK": 128},
        "launch": {"default": {"grid": ["ceil_div(n, BLOCK)"], "block": ["BLOCK"]}},
    }))
    settings = Settings(harness=write_harness(tmp_path, "fake"), workload_dirs=(extra,), iterations=20, warmup=2)
    # the fake harness has no calibration op: the copy rate is what a calibration would report
    monkeypatch.setattr(vendor.app, "calibrate_gpu", lambda s: (None, SimpleNamespace(copy_bytes_per_s=COPY_RATE)))
    messages: list[str] = []
    return vendor.make_bench(settings, tmp_path / "bench", messages.append)


def test_a_tuned_entry_is_put_beside_the_copy_rate(vendor: ModuleType, bench, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vendor, "ENTRIES", {"tiny": vendor.Entry("tiny_add", "tunable.json", "copy", 0.5)})
    sec = vendor.vendor(bench, ["tiny"], budget=3)
    assert [r["case"] for r in sec.rows] == ["n_4096"]  # the performance cases only
    row = sec.rows[0]
    assert row["kernel"] == "tunable.json" and row["vendor"] == f"copy {COPY_RATE / 1e12:.2f} TB/s"
    # the ratio is our bytes per second over the copy rate: 12 * n bytes in our median time
    assert row["ratio"] == pytest.approx(12 * 4096 / (row["ours ms"] * 1e-3) / COPY_RATE, rel=1e-3)
    assert row["pass"] is (row["ratio"] >= 0.5) and sec.passed is row["pass"]
    assert any("tiny: tunable.json {'BLOCK':" in n for n in sec.notes), sec.notes
    vendor.print_section(vendor.Console(record=True, width=200), sec)
    json.dumps(sec.as_json(), default=str)


def test_a_vendor_that_cannot_run_is_named_and_not_judged(vendor: ModuleType, bench, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # as on a machine without torch
    monkeypatch.setattr(vendor, "ENTRIES", {"tiny": vendor.Entry("tiny_add", None, "torch", 1.0)})
    sec = vendor.vendor(bench, ["tiny"], budget=1)
    row = sec.rows[0]
    assert row["kernel"] == "reference" and row["vendor ms"] is None and row["ratio"] is None and row["pass"] is None
    assert sec.passed is None
    assert any("vendor not timed: torch unavailable" in n for n in sec.notes), sec.notes


def test_main_refuses_a_budget_below_one_and_says_when_there_is_no_gpu(
    vendor: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        vendor.main(["--budget", "0"])
    monkeypatch.setenv("KERNELOPT_HARNESS", str(write_harness(tmp_path, "nogpu")))
    assert vendor.main(["--only", "softmax", "--budget", "1"]) == 2
    assert "error: no usable CUDA device" in capsys.readouterr().err
