"""bench/vendor.py ("kernels against the vendor", issue 16) end to end against the fake GPU
(tests/fakegpu.py): an entry is tuned, its best configuration's performance cases are put beside
the vendor, and the ratio and verdict follow from the figures. No timing is asserted: the table's
figures come from the H200."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType, SimpleNamespace

import numpy as np
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


def test_a_vendor_that_cannot_run_is_named_and_not_judged(
    vendor: ModuleType, bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # as on a machine without torch
    monkeypatch.setattr(vendor, "ENTRIES", {"tiny": vendor.Entry("tiny_add", None, "torch", 1.0)})
    sec = vendor.vendor(bench, ["tiny"], budget=1)
    row = sec.rows[0]
    assert row["kernel"] == "reference" and row["vendor ms"] is None and row["ratio"] is None and row["pass"] is None
    assert sec.passed is None
    assert any("vendor not timed: torch unavailable" in n for n in sec.notes), sec.notes


def test_a_vendor_near_its_own_tolerance_is_shown_and_named(
    vendor: ModuleType, bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The share of the tolerance the vendor's own output needs goes in its row; past TIGHT a note says the
    contract leaves a correct kernel little room (past 1, that the vendor itself fails it)."""
    monkeypatch.setattr(vendor, "ENTRIES", {"tiny": vendor.Entry("tiny_add", None, "torch", 1.0)})
    monkeypatch.setattr(vendor, "torch_timer", lambda: "timer")
    for used, says in ((0.1, None), (0.8, "little room"), (1.7, "it fails the contract")):
        monkeypatch.setattr(vendor, "torch_ms", lambda wl, case, timer, used=used: (0.5, used))
        sec = vendor.vendor(bench, ["tiny"], budget=1)
        assert sec.rows[0]["vendor tol"] == used and sec.rows[0]["vendor ms"] == 0.5
        tight = [n for n in sec.notes if "of the tolerance" in n]
        if says is None:
            assert not tight, tight
        else:
            assert len(tight) == 1 and f"needs {used:.2f} of the tolerance" in tight[0] and says in tight[0]
            assert "workloads/tiny_add/workload.json" in tight[0]


def test_the_vendors_inputs_are_the_workloads_own_draws(vendor: ModuleType) -> None:
    """Shapes, dtypes and distributions come from the workload: softmax's normal(0, 2), layernorm's
    mean-1 x and uniform [0.5, 1.5) gamma, attention's bf16 q at the case's (B, H, S, D)."""
    from kernelopt_mcp.dtypes import DType

    def small(name: str, case: str, scalars: dict[str, int]):
        return load_bench_script("bench_core.py").bench_workload(name, Settings(), scalars={case: scalars})

    x = vendor.host_input(small("softmax", "square_8192", {"rows": 64, "cols": 1024}), "square_8192", "x")
    assert x.shape == (64, 1024) and x.dtype == np.float32 and x.std() == pytest.approx(2, rel=0.05)
    ln = small("layernorm", "wide_16384x4096", {"rows": 64, "cols": 1024})
    x, gamma = (vendor.host_input(ln, "wide_16384x4096", n) for n in ("x", "gamma"))
    assert x.mean() == pytest.approx(1, abs=0.05) and gamma.shape == (1024,)
    assert gamma.min() >= 0.5 and gamma.max() < 1.5
    att = small("attention_fwd", "d64_4x32x4096", {"B": 1, "H": 2, "S": 128})
    q = vendor.host_input(att, "d64_4x32x4096", "q")
    assert q.shape == (1, 2, 128, 64) and q.dtype == DType.bfloat16.numpy


def test_tolerance_used_follows_the_harness_rule(vendor: ModuleType) -> None:
    """|a - e| <= atol * RMS(e) + rtol * |e|: the share of atol an output needs once rtol is taken off."""
    from kernelopt_mcp.workload import Tolerance

    e = np.array([3.0, -4.0, 0.0, 0.0])  # RMS 2.5
    tol = Tolerance(rtol=0.1, atol=0.2)
    assert vendor.tolerance_used(e.copy(), e, tol) == 0.0
    assert vendor.tolerance_used(e + [0.3, 0, 0, 0], e, tol) == 0.0  # inside rtol * |e| = 0.3
    assert vendor.tolerance_used(e + [0, 0, 0.5, 0], e, tol) == pytest.approx(1.0)  # atol * RMS = 0.5 exactly
    assert vendor.tolerance_used(e + [0, 0.4 + 0.25, 0, 0], e, tol) == pytest.approx(0.5)
    absolute = Tolerance(rtol=0.1, atol=0.2, absolute=True)
    assert vendor.tolerance_used(e + [0, 0, 0.5, 0], e, absolute) == pytest.approx(2.5)  # scale 1, not the RMS
    assert vendor.tolerance_used(e + [0, 0, np.nan, 0], e, tol) == math.inf
    assert vendor.tolerance_used(e + [0, 0, 1e-9, 0], e, Tolerance(rtol=0, atol=0)) == math.inf


def test_main_refuses_a_budget_below_one_and_says_when_there_is_no_gpu(
    vendor: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        vendor.main(["--budget", "0"])
    monkeypatch.setenv("KERNELOPT_HARNESS", str(write_harness(tmp_path, "nogpu")))
    assert vendor.main(["--only", "softmax", "--budget", "1"]) == 2
    assert "error: no usable CUDA device" in capsys.readouterr().err


def test_a_given_configuration_is_evaluated_instead_of_tuned(
    vendor: ModuleType, bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vendor, "ENTRIES", {"tiny": vendor.Entry("tiny_add", "tunable.json", "copy", 0.5)})
    sec = vendor.vendor(bench, ["tiny"], budget=40, configs={"tiny": {"BLOCK": 64}})
    assert any(n.startswith("tiny: tunable.json {'BLOCK': 64} (given)") for n in sec.notes), sec.notes
    assert any("ours: the given configuration" in n for n in sec.notes), sec.notes
    assert [r["case"] for r in sec.rows] == ["n_4096"] and sec.rows[0]["ours ms"] > 0
    # a value outside the space, or a parameter missing, fails the entry with the reason, not the run
    for config, reason in (({"BLOCK": 100}, "BLOCK=100 (one of [64, 128, 256])"), ({}, "names every parameter")):
        bad = vendor.vendor(bench, ["tiny"], budget=1, configs={"tiny": config})
        assert bad.passed is False and not bad.rows and any(reason in n for n in bad.notes), bad.notes


def test_parse_config_reads_entry_names_and_typed_values(vendor: ModuleType) -> None:
    assert vendor.parse_config("gemm_bf16_wgmma:BM=128,BN=256,STAGES=4") == (
        "gemm_bf16_wgmma", {"BM": 128, "BN": 256, "STAGES": 4})
    assert vendor.parse_config("softmax:TPR=128,X=0.5,MODE=fast")[1] == {"TPR": 128, "X": 0.5, "MODE": "fast"}
    for bad in ("nope:BM=1", "softmax", "softmax:", "softmax:BM"):
        with pytest.raises(ValueError, match="--config"):
            vendor.parse_config(bad)
    with pytest.raises(SystemExit):
        vendor.main(["--config", "softmax:TPR"])


def test_a_row_under_its_target_is_profiled_in_the_same_session(
    vendor: ModuleType, bench, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The stub ncu of tests/analysis/test_profiler.py runs the profiled request for real on the fake GPU and
    reports its CSV; a row that meets its target is not profiled."""
    from test_profiler import STUB_CSV, STUB_NCU

    script, ncu = tmp_path / "stub_ncu.py", tmp_path / "bin" / "ncu"
    script.write_text(STUB_NCU)
    ncu.parent.mkdir()
    ncu.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    ncu.chmod(0o755)
    (tmp_path / "stub.csv").write_text(STUB_CSV)
    for key, value in (("KO_STUB_CSV", tmp_path / "stub.csv"), ("KO_STUB_LOG", tmp_path / "calls.jsonl"),
                       ("KO_STUB_NCU", "ok")):
        monkeypatch.setenv(key, str(value))
    bench = replace(bench, settings=replace(bench.settings, ncu=ncu))
    # a second performance case: both miss the target, only the one furthest from it is profiled
    spec_path = tmp_path / "extra" / "tiny_add" / "workload.json"
    spec = json.loads(spec_path.read_text())
    spec["cases"].append({"name": "n_8192", "kind": "performance", "scalars": {"n": 8192}})
    spec_path.write_text(json.dumps(spec))
    monkeypatch.setattr(vendor, "ENTRIES", {"tiny": vendor.Entry("tiny_add", "tunable.json", "copy", 1e6)})
    sec = vendor.vendor(bench, ["tiny"], budget=1, profile_dir=tmp_path / "prof")
    assert [r["pass"] for r in sec.rows] == [False, False]
    worst = min(sec.rows, key=lambda r: r["ratio"])["case"]
    note = next(n for n in sec.notes if n.startswith(f"tiny {worst} under Nsight Compute: "))
    assert "hint: " in note  # the stub's CSV has no speed-of-light or stall figures, so only the hint
    assert "tiny_add" in (tmp_path / "prof" / f"tiny-{worst}" / "summary.txt").read_text()
    profiled = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert sum("run" in call for call in profiled) == 1  # one ncu run for the entry
    assert [p.name for p in (tmp_path / "prof").iterdir()] == [f"tiny-{worst}"]
    # met targets are not profiled; without ncu a miss says why
    monkeypatch.setattr(vendor, "ENTRIES", {"tiny": vendor.Entry("tiny_add", "tunable.json", "copy", 1e-9)})
    assert not any("Nsight" in n for n in vendor.vendor(bench, ["tiny"], budget=1, profile_dir=tmp_path / "p2").notes)
    bench = replace(bench, settings=replace(bench.settings, ncu=tmp_path / "no-ncu"))
    monkeypatch.setattr(vendor, "ENTRIES", {"tiny": vendor.Entry("tiny_add", "tunable.json", "copy", 1e6)})
    sec = vendor.vendor(bench, ["tiny"], budget=1, profile_dir=tmp_path / "p3")
    assert any(n.startswith("tiny n_") and ": not profiled: " in n for n in sec.notes), sec.notes


def test_profile_line_names_speed_of_light_occupancy_stalls_and_the_first_hint(vendor: ModuleType) -> None:
    from kernelopt_mcp.ncu_report import Occupancy, ProfileSummary, Stall, Throughput

    summary = ProfileSummary(
        workload="gemm_bf16", candidate="c", case="square_4096", kernel="gemm_bf16",
        throughput=Throughput(compute_pct=71.4, memory_pct=55.0, dram_pct=20.2),
        occupancy=Occupancy(achieved_pct=12.4, theoretical_pct=12.5, limiter="shared memory"),
        top_stalls=[Stall(reason="barrier", cycles_per_issue=3.0, share_pct=41.0),
                    Stall(reason="long_scoreboard", cycles_per_issue=1.5, share_pct=20.0),
                    Stall(reason="wait", cycles_per_issue=1.0), Stall(reason="not_selected", cycles_per_issue=0.5)],
        hints=["warps mostly wait at barriers", "second hint"],
    )
    assert vendor.profile_line(summary) == (
        "speed of light compute 71%, memory 55%, DRAM 20%; occupancy 12% (of 12%, limited by shared memory); "
        "stalls barrier 41%, long_scoreboard 20%, wait 1.0 cycles; hint: warps mostly wait at barriers")
    assert (vendor.profile_line(ProfileSummary(workload="w", candidate="c", case="x", kernel="k"))
            == "no figures in the report")


def test_every_entry_names_a_bundled_tunable_and_judges_performance_cases_only(vendor: ModuleType) -> None:
    """A typo in an entry (a spec, a case) would surface only on the GPU, after minutes of tuning."""
    from kernelopt_mcp.config import bundled_workloads_dir
    from kernelopt_mcp.tune.spec import load_tunable
    from kernelopt_mcp.workload import load_workload

    for name, entry in vendor.ENTRIES.items():
        workload = load_workload(bundled_workloads_dir() / entry.workload)
        if entry.spec is not None:
            assert load_tunable(workload.root / entry.spec, workload).spec.params, name
        performance = {c.name for c in workload.spec.performance_cases}
        assert set(entry.cases) <= performance, (name, set(entry.cases) - performance)


def test_every_known_configuration_is_a_point_of_its_entrys_space(vendor: ModuleType) -> None:
    """--known evaluates these on the GPU: one that names a parameter the space lost, or a value or
    combination it no longer allows, is caught here instead of failing the entry there."""
    from kernelopt_mcp.config import bundled_workloads_dir
    from kernelopt_mcp.tune.spec import load_tunable
    from kernelopt_mcp.workload import load_workload

    known = {name: e for name, e in vendor.ENTRIES.items() if e.known is not None}
    assert {"histogram", "transpose", "attention_fwd_tma", "softmax"} <= set(known)
    for name, entry in known.items():
        tunable = load_tunable(bundled_workloads_dir() / entry.workload / entry.spec,
                               load_workload(bundled_workloads_dir() / entry.workload))
        assert vendor.configured(tunable, entry.known).params == entry.known, name


def test_known_configurations_are_chosen_unless_a_given_one_overrides(vendor: ModuleType) -> None:
    assert vendor.chosen_configs([], known=False) == {}
    chosen = vendor.chosen_configs(["softmax:TPR=256,RPB=1,VPT=8,SMEM=1"], known=True)
    assert chosen["softmax"] == {"TPR": 256, "RPB": 1, "VPT": 8, "SMEM": 1}  # --config wins over the known one
    assert chosen["histogram"] == vendor.ENTRIES["histogram"].known
    assert set(chosen) == {n for n, e in vendor.ENTRIES.items() if e.known is not None}
    with pytest.raises(ValueError, match="--config"):
        vendor.chosen_configs(["softmax"], known=True)
