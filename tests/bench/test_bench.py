"""bench/run.py's sections run end to end against the fake GPU (tests/fakegpu.py), so a change
that breaks the bench is caught on CPU. No timing is asserted here: the figures come from the
H200 (bench/README.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
from bench_scripts import load_bench_script
from fakegpu import write_harness, write_tiny_workload
from rich.console import Console

from kernelopt_mcp import Settings

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run() -> ModuleType:
    return load_bench_script("run.py")


@pytest.fixture
def bench(run: ModuleType, tmp_path: Path):
    harness = write_harness(tmp_path, "fake")
    extra = write_tiny_workload(tmp_path / "extra")
    settings = Settings(harness=harness, workload_dirs=(extra,), ncu=tmp_path / "no-ncu", iterations=20, warmup=2)
    messages: list[str] = []
    b = run.make_bench(settings, tmp_path / "bench", messages.append)
    b.messages = messages
    return b


def check_rendering(run: ModuleType, sec) -> str:
    console = Console(record=True, width=200)
    run.print_section(console, sec)
    json.dumps(sec.as_json())
    return console.export_text()


def test_overhead_section(run: ModuleType, bench, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KO_FAKE_FEATURES", "progress")
    sec = run.overhead(bench, workload="tiny_add", cases=["one", "odd_1001", "n_4096"], trials=2)
    modes = [r["mode"] for r in sec.rows]
    assert modes[0].startswith("cold") and modes[1].startswith("warm (") and modes[4].startswith("baseline")
    assert modes[2] == "warm, one validation request per case" and len(modes) == 5
    assert modes[3] == "warm, precision rule (search's default stop)"
    for row in sec.rows:
        # the fake reports 0.1 ms launches: 2 warm-up + 20 measured + 2 validations of the one timed
        # case (the precision rule's first round is the 20 the options allow at most, and the
        # fake's identical times stop it there)
        assert row["kernel ms"] == pytest.approx(0.1 * 24, rel=0.05) or row["mode"].startswith("baseline")
        assert row["overhead ms (median)"] == pytest.approx(row["wall ms"] - row["kernel ms"], rel=0.5)
        assert row["vs baseline"] > 0
    assert sec.rows[4]["vs baseline"] == pytest.approx(1.0)
    (precision,) = [n for n in sec.notes if n.startswith("under search's precision rule")]
    assert f"{sec.rows[3]['overhead ms (median)']:.1f} ms" in precision
    # the warm evaluations taken apart: 2 requests (the 3 cases validated in one, 1 timing), the fake's steps
    (where,) = [n for n in sec.notes if n.startswith("warm, where it went")]
    assert "2 harness requests" in where and "setup" in where and "read_files" in where, where
    assert "Python on the requests" in where and "outside the requests" in where
    assert "cases " not in where.split("steps")[1].split(";")[0]  # the sum of the cases' steps is not a step
    assert sec.passed in (True, False)
    text = check_rendering(run, sec)
    assert "<= 50 ms" in text and ("PASS" in text or "FAIL" in text)
    assert any("baseline" in m for m in bench.messages)


def test_baseline_uses_one_harness_process_per_case(run: ModuleType, bench) -> None:
    wl = bench.workload("tiny_add")
    with bench.evaluator(wl, "b") as ev:
        wall, kernel, over = run._baseline(bench, ev, run.variant(run.reference(wl), "x"), "x")
    requests = sorted((bench.workdir / "baseline" / "x").glob("*/request.json"))
    assert [p.parent.name for p in requests] == ["n_4096", "odd_1001", "one"]
    assert json.loads(requests[0].read_text())["cases"][0]["timing"]["iterations"] == 20
    assert kernel == pytest.approx(0.1 * 23, rel=0.05) and wall > kernel and over == pytest.approx(wall - kernel)


def test_baseline_checks_outputs(run: ModuleType, bench) -> None:
    from fakegpu import kernel

    wl = bench.workload("tiny_add")
    wrong = run.reference(wl)
    wrong.source = kernel("WRONG")
    with bench.evaluator(wl, "w") as ev, pytest.raises(run.KerneloptError, match=r"baseline case .*"):
        run._baseline(bench, ev, wrong, "w")


def test_throughput_section(run: ModuleType, bench) -> None:
    sec = run.throughput(bench, workloads=("tiny_add",), n=2)
    modes = ("distinct (compile each)", "distinct, next compiles ahead", "same candidate (warm)")
    assert [(r["stop"], r["mode"]) for r in sec.rows] == [(stop, mode) for stop in ("count", "precision")
                                                          for mode in modes]
    # while the GPU works on one candidate the next compiles: all but the first began ahead
    assert [r["compiled ahead"] for r in sec.rows] == ["-", 1, "-"] * 2
    assert all(r["per minute"] > 0 and 0 < r["kernel share"] < 1 for r in sec.rows)
    # the pretend harness times exactly the launches asked for; tiny_add has no throughput target
    assert {r["launches"] for r in sec.rows} == {bench.options.iterations} and {r["target"] for r in sec.rows} == {"-"}
    assert sec.passed is None and "per minute" in check_rendering(run, sec)


def test_repeatability_section(run: ModuleType, bench) -> None:
    specs = (run.RepeatSpec("fake 4096", "tiny_add", "n_4096", 0.03, {"n": 2048}),)
    sec = run.repeatability(bench, specs=specs, repeats=3)
    [row] = sec.rows
    assert row["median score ms"] == pytest.approx(0.1, rel=0.02)
    assert row["CV"] == pytest.approx(0.0, abs=1e-9) and row["pass"] is True and sec.passed is True
    assert "CV <= 1%" in check_rendering(run, sec)


def test_checks_section_measures_the_new_checks_on_and_off(
    run: ModuleType, bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KO_FAKE_FEATURES",
                       "blocking,timed_inputs,fresh_inputs,timed_check,confirm_launch,fresh_launches")
    sec = run.checks(bench, workloads=("tiny_add",), trials=2)
    assert [(r["workload"], r["mode"]) for r in sec.rows] == [("tiny_add", m) for m in ("off", "on", "subset")]
    off, on, subset = sec.rows
    assert off["vs off"] == 1.0 and off["pass"] is None
    assert on["vs off"] == pytest.approx(on["overhead ms (median)"] / off["overhead ms (median)"])
    assert on["pass"] is (on["vs off"] <= run.CHECKS_RATIO)
    # the subset mode is the one judged against the target
    assert subset["pass"] is (subset["vs off"] <= run.CHECKS_RATIO) and sec.passed is subset["pass"]
    # the notes say which checks each mode really ran
    assert any("'on' ran:" in n and "fresh device-drawn inputs for every timed launch (buffers a, b)" in n
               for n in sec.notes), sec.notes
    assert any("'subset' ran:" in n and "fresh device-drawn inputs before a hidden " in n and "measured launches" in n
               for n in sec.notes), "\n".join(sec.notes)
    assert "vs off" in check_rendering(run, sec)


def test_agreement_skips_without_ncu(run: ModuleType, bench) -> None:
    sec = run.agreement(bench, specs=(("tiny_add", "n_4096"),))
    assert sec.skipped and "Nsight Compute not available" in sec.skipped and sec.passed is None
    assert "skipped" in check_rendering(run, sec)


def test_main_json(run: ModuleType, bench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KERNELOPT_HARNESS", str(bench.harness))
    monkeypatch.setenv("KERNELOPT_NCU", str(tmp_path / "no-ncu"))
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert run.main(["--json", "--only", "agreement"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in data["sections"]] == ["agreement"]
    assert "nvidia-ml-py" in data["meta"]["clocks_before"] and "H200" in data["meta"]["device"]


def test_record_timings_writes_fixtures_the_stats_tests_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = load_bench_script("record_timings.py")
    settings = Settings(harness=write_harness(tmp_path, "fake"),
                        workload_dirs=(write_tiny_workload(tmp_path / "extra"),))
    vectors = (("fake_4096", "tiny_add", "n_4096", None, True),
               ("fake_2048_noflush", "tiny_add", "n_4096", {"n": 2048}, False))
    written = module.record(settings, tmp_path / "out", vectors, iterations=30, warmup=2)
    assert [p.name for p in written] == ["fake_4096.json", "fake_2048_noflush.json"]
    from kernelopt_mcp.evaluation.stats import summarize

    for path in written:
        data = json.loads(path.read_text())
        assert set(data) >= {"kernel", "times_ms", "flush_l2"} and len(data["times_ms"]) == 30
        assert summarize(data["times_ms"]).median_ms == pytest.approx(0.101)
    assert "n': 2048" in json.loads(written[1].read_text())["kernel"]


def test_tuning_section_runs_one_search_three_ways(run: ModuleType, bench, tmp_path: Path) -> None:
    """tests/fixtures/tune/add.* as tiny_add's tunable.json: the fake's medians make BLOCK 32,
    UNROLL 4 the best; every way must find it, only the first compiles each configuration in its
    turn, and each row says its wall-time ratio to the first."""
    import shutil

    root = tmp_path / "extra" / "tiny_add"
    shutil.copy(REPO / "tests" / "fixtures" / "tune" / "add.json", root / "tunable.json")
    shutil.copy(REPO / "tests" / "fixtures" / "tune" / "add.cu", root / "add.cu")
    sec = run.tuning(bench, workload="tiny_add", budget=20)
    before, ahead, ours = sec.rows
    assert before["mode"].startswith("before issue 17") and ours["mode"].startswith("defaults")
    assert {r["best configuration"] for r in sec.rows} == {json.dumps({"BLOCK": 32, "UNROLL": 4})}
    assert before["measured"] == ahead["measured"] == ours["measured"] > 5  # nothing cached between them
    assert before["compiled ahead"] == 0 and ahead["compiled ahead"] >= ahead["measured"] - 2
    assert before["stopped early"] == ahead["stopped early"] == 0
    for row in (ahead, ours):
        assert row["speedup"] == pytest.approx(before["wall s"] / row["wall s"])
    assert ours["pass"] is (ours["speedup"] >= run.TUNE_SPEEDUP) and sec.passed is ours["pass"]
    assert "the same" in " ".join(sec.notes)
    assert ">= 2x faster than before issue 17" in check_rendering(run, sec)


def test_preparation_section_prepares_three_ways(run: ModuleType, bench, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KO_FAKE_FEATURES",
                       "blocking,device_compare,timed_inputs,input_draw,expected_dtype,input_cache,device_expected")
    sec = run.preparation(bench, workloads=("tiny_add",))
    [row] = sec.rows
    assert row["workload"] == "tiny_add" and all(row[column] > 0 for column, _, _ in run.PREPARATION_WAYS)
    assert row["host / device"] == pytest.approx(row["all on the host ms"] / row["on the device ms"])
    where = row["defaults: where it went"]
    assert "prepared once in" in where and "inputs" in where
    # the defaults drew the performance case on the device and kept its expected values there;
    # the second way drew it and wrote them to a file; the third made everything on the host
    dirs = {(i, e): bench.workdir / f"prepare-tiny_add-{i}-{e}"
            for i, e in ((True, True), (True, False), (False, False))}
    assert not list((dirs[True, True] / "inputs" / "n_4096").glob("*.bin"))
    assert not list((dirs[True, True] / "expected").rglob("n_4096/*"))
    assert not list((dirs[True, False] / "inputs" / "n_4096").glob("*.bin"))
    assert list((dirs[True, False] / "expected").rglob("n_4096/*"))
    made = list((dirs[False, False] / "inputs" / "n_4096").glob("*.bin"))
    assert {p.name for p in made} == {"a.bin", "b.bin"}
    # the support kernels' first compile (once per machine) is measured before the rows and named
    assert any(n.startswith("not in the rows: the support kernels' first compile") for n in sec.notes), sec.notes
    assert list((bench.workdir / "support-cold").glob("support-*.cubin"))
    assert sec.passed in (True, False)
    assert "< 2 s" in check_rendering(run, sec)
