"""`kernelopt kernelbench` (suite.py, kernelbench_cli.py) on CPU: KernelBench's layout walked,
refusals recorded with their reason, solutions evaluated on the pretend GPU, baselines said to
be unmeasured (never invented), and a second run continuing where the first stopped."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest
from fakegpu import ADD_LAUNCH, kernel, write_harness, write_tiny_workload
from test_torch_tolerance import imported_style

from kernelopt_mcp.cli import main
from kernelopt_mcp.suite import NOT_MEASURED, TORCH_MISSING, find_problems

no_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
PROBLEM = "import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs():\n    return []\n"


def kernelbench_dir(root: Path) -> Path:
    for rel in ("level1/1_Square_matmul_.py", "level1/2_Sum.py", "level1/10_Relu.py", "level2/1_Conv_ReLU.py",
                "level3/1_MLP.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(PROBLEM)
    (root / "level1" / "README.md").write_text("not a problem")
    (root / "level1" / "helpers.py").write_text("not a problem either")
    return root


def test_problems_are_found_in_kernelbench_order(tmp_path: Path) -> None:
    root = kernelbench_dir(tmp_path / "kb")
    found = [f"{level}/{p.name}" for level, p in find_problems(root, (1, 2))]
    assert found == ["1/1_Square_matmul_.py", "1/2_Sum.py", "1/10_Relu.py", "2/1_Conv_ReLU.py"]


def test_an_empty_directory_says_what_layout_it_expects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernelbench", str(tmp_path), "-o", str(tmp_path / "out")]) != 0
    assert "level1/ ... level3/" in capsys.readouterr().err


@no_torch
def test_without_torch_every_problem_is_refused_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, out = kernelbench_dir(tmp_path / "kb"), tmp_path / "out"
    assert main(["kernelbench", str(root), "--level", "1", "2", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "[4/4] level2/1_Conv_ReLU.py: refused: torch is not installed" in printed
    table = (out / "table.md").read_text()
    assert f"- 3 x {TORCH_MISSING}" not in table and f"- 4 x {TORCH_MISSING}" in table
    assert "| 1 | 3 | 0 | 0 (0.0%) | no solutions |" in table and f"- {NOT_MEASURED}" in table
    assert "- level 1: eager timed on 0 of 0 imported problems, torch.compile on 0" in table
    data = json.loads((out / "results.json").read_text())
    assert [lv["refusals"] for lv in data["levels"]] == [{TORCH_MISSING: 3}, {TORCH_MISSING: 1}]
    assert all(p["eager_ms"] is None and p["eager_note"] == NOT_MEASURED for p in data["problems"])


def _imported_already(root: Path, out: Path) -> None:
    """out/ as a run with torch left it: level1/1_Square_matmul_ imported (an imported-style workload)."""
    problem = root / "level1" / "1_Square_matmul_.py"
    write_tiny_workload(out / "workloads" / "level1", imported_style(name="p1_Square_matmul"))
    entry = {"sha256": hashlib.sha256(problem.read_bytes()).hexdigest(), "tolerance": "strict", "imported": True,
             "workload": str(out / "workloads" / "level1" / "p1_Square_matmul")}
    (out / "state.json").write_text(json.dumps({"problems": {"level1/1_Square_matmul_.py": entry}}))


@no_torch
def test_solutions_are_evaluated_once_and_a_second_run_continues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, out, solutions = kernelbench_dir(tmp_path / "kb"), tmp_path / "out", tmp_path / "solutions"
    _imported_already(root, out)
    (solutions / "level1").mkdir(parents=True)
    (solutions / "level1" / "1_Square_matmul_.cu").write_text(kernel("FAST"))
    (solutions / "level1" / "1_Square_matmul_.launch.json").write_text(json.dumps(ADD_LAUNCH))
    (solutions / "2_Sum.cu").write_text(kernel())  # a problem that did not import: nothing to evaluate
    monkeypatch.setenv("KERNELOPT_HARNESS", str(write_harness(tmp_path, "fake")))
    starts = tmp_path / "harness-env.jsonl"

    def run() -> dict:
        assert main(["kernelbench", str(root), "--level", "1", "-o", str(out), "--solutions", str(solutions),
                     "--json"]) == 0
        return json.loads((out / "results.json").read_text())

    first = run()
    row = next(p for p in first["problems"] if p["problem"] == "level1/1_Square_matmul_.py")
    assert row["correct"] and row["status"] == "ok" and row["ours_ms"] == pytest.approx(0.05, rel=0.05)
    assert row["speedup_eager"] is None  # eager was not measured: no speedup is made up
    assert first["levels"][0]["correct"] == 1 and first["levels"][0]["fast"]["eager"]["1"] is None
    n = len(starts.read_text().splitlines())
    second = run()
    assert second["problems"] == first["problems"] and len(starts.read_text().splitlines()) == n  # nothing re-run
    # a changed solution is evaluated again: now wrong
    (solutions / "level1" / "1_Square_matmul_.cu").write_text(kernel("WRONG"))
    third = run()
    assert next(p for p in third["problems"] if p["problem"] == "level1/1_Square_matmul_.py")["status"] == "mismatch"
    assert third["levels"][0]["correct"] == 0


GOOD = """\
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


n = 4096


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
"""


def test_imports_run_in_processes_of_their_own_at_once_and_are_not_repeated(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """--jobs 3: each problem imported in a child of its own; one that never returns is refused at the
    import deadline and one that kills its process is refused with its exit code, while the good one
    imports and records its seconds; a second run imports nothing again."""
    pytest.importorskip("torch", reason="torch is not installed (pip install torch): PyTorch problems cannot be run")
    root, out = tmp_path / "kb", tmp_path / "out"
    (root / "level1").mkdir(parents=True)
    (root / "level1" / "1_Relu.py").write_text(GOOD)
    (root / "level1" / "2_Forever.py").write_text(
        GOOD.replace("    return [torch.randn(n)]", "    while True:\n        pass"))
    (root / "level1" / "3_Exit.py").write_text(GOOD.replace("import torch\n", "import os\nos._exit(7)\n", 1))
    argv = ["kernelbench", str(root), "--level", "1", "-o", str(out), "--no-baselines", "--jobs", "3",
            "--import-timeout", "20"]
    assert main(argv) == 0
    state = json.loads((out / "state.json").read_text())["problems"]
    good, forever, died = (state[f"level1/{n}"] for n in ("1_Relu.py", "2_Forever.py", "3_Exit.py"))
    assert (good["imported"] and 0 < good["import_s"] < 20
            and (out / "workloads" / "level1" / "p1_Relu" / "workload.json").is_file())
    assert not forever["imported"] and forever["refusal"] == "the import ran past its 20 s deadline"
    assert not died["imported"] and "the import died (exit 7" in died["refusal"]
    assert "imported 1_Relu.py" in capsys.readouterr().out
    assert main(argv) == 0
    assert json.loads((out / "state.json").read_text())["problems"] == state  # nothing imported again
    assert "imported 1_Relu.py" not in capsys.readouterr().out


def solved_suite(tmp_path: Path, stems: tuple[str, ...], mode: str = "", root: Path | None = None,
                 ) -> tuple[Path, Path, Path, dict[str, dict[str, object]]]:
    """A suite already imported (state.json naming a workload per level-1 problem ``stems``) with a
    solution for each: (problems root, output, solutions, the state's entries)."""
    root = root or tmp_path / "kb"
    out, solutions = tmp_path / "out", tmp_path / "solutions"
    entries: dict[str, dict[str, object]] = {}
    for stem in stems:
        (root / "level1").mkdir(parents=True, exist_ok=True)
        if not (root / "level1" / f"{stem}.py").exists():
            (root / "level1" / f"{stem}.py").write_text(PROBLEM)
        name = f"p{stem.rstrip('_')}"
        write_tiny_workload(out / "workloads" / "level1", imported_style(name=name))
        entries[f"level1/{stem}.py"] = {"sha256": hashlib.sha256(PROBLEM.encode()).hexdigest(), "tolerance": "strict",
                                        "imported": True, "workload": str(out / "workloads" / "level1" / name)}
        (solutions / "level1").mkdir(parents=True, exist_ok=True)
        (solutions / "level1" / f"{stem}.cu").write_text(kernel(mode))
        (solutions / "level1" / f"{stem}.launch.json").write_text(json.dumps(ADD_LAUNCH))
    (out / "state.json").write_text(json.dumps({"problems": entries}))
    return root, out, solutions, entries


def test_a_problem_whose_evaluation_fails_is_recorded_and_the_suite_goes_on(tmp_path: Path) -> None:
    """A problem whose reference cannot run (on the H100 the module ran out of memory at its full
    size) is that problem's error, recorded with its message; the next problems are evaluated and
    the tables written; a second run tries it again (found: one such problem ended the whole suite)."""
    from kernelopt_mcp.errors import DeviceUnavailable, WorkloadError
    from kernelopt_mcp.suite import SolutionOutcome, SuiteOptions, run_suite

    root, out, solutions, _ = solved_suite(tmp_path, ("1_Square_matmul_", "2_Sum"))
    calls: list[str] = []

    def evaluate(workload: Path, cu: Path, launch: Path) -> SolutionOutcome:
        calls.append(workload.name)
        if workload.name == "p1_Square_matmul":
            raise WorkloadError(f"{workload.name}: the module fails on case 'perf': OutOfMemoryError: CUDA out of "
                                "memory")
        return SolutionOutcome("ok", 0.5, "all 3 cases pass")

    options = SuiteOptions(root, out, levels=(1,), solutions=solutions)
    records = {r.problem: r for r in run_suite(options, evaluate)}
    failed, passed = records["level1/1_Square_matmul_.py"], records["level1/2_Sum.py"]
    assert failed.status == "error" and failed.ours_ms is None and passed.status == "ok" and passed.ours_ms == 0.5
    state = json.loads((out / "state.json").read_text())["problems"]
    assert "OutOfMemoryError" in state["level1/1_Square_matmul_.py"]["message"]
    assert (out / "table.md").is_file() and calls == ["p1_Square_matmul", "p2_Sum"]
    assert "level1/2_Sum.py" in (out / "report.html").read_text()  # the page beside the tables
    run_suite(options, evaluate)
    assert calls == ["p1_Square_matmul", "p2_Sum", "p1_Square_matmul"]  # the error is tried again; the pass is kept

    def no_gpu(workload: Path, cu: Path, launch: Path) -> SolutionOutcome:
        raise DeviceUnavailable("no CUDA device")

    with pytest.raises(DeviceUnavailable):  # the machine's failure, not a problem's: the run stops with it
        run_suite(options, no_gpu)


@no_torch
def test_each_solution_is_evaluated_in_a_harness_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One harness process per solution: what a problem's evaluation keeps on the device (its expected
    values) never sits beside the next problem's reference (on an 80 GB H100 a 7 GiB problem's
    reference ran out of memory beside the earlier problems' kept values)."""
    root, out, solutions, entries = solved_suite(tmp_path, ("1_Square_matmul_", "10_Relu"), "FAST",
                                                 root=kernelbench_dir(tmp_path / "kb"))
    monkeypatch.setenv("KERNELOPT_HARNESS", str(write_harness(tmp_path, "fake")))
    assert main(["kernelbench", str(root), "--level", "1", "-o", str(out), "--solutions", str(solutions),
                 "--no-baselines", "--json"]) == 0
    rows = json.loads((out / "results.json").read_text())["problems"]
    assert [r["status"] for r in rows if r["problem"] in entries] == ["ok", "ok"]
    state = json.loads((out / "state.json").read_text())["problems"]
    for entry in (state[k] for k in entries):  # where a problem's time went, for the next run to read
        assert entry["evaluate_s"] >= entry["prepare_s"]["total"] > 0, entry
        assert "inputs" in entry["prepare_s"], entry
        assert entry["expected_from"].startswith("NumPy oracle"), entry
    starts = [json.loads(line)["argv"] for line in (tmp_path / "harness-env.jsonl").read_text().splitlines()]
    assert starts.count(["--device-info", "--device", "0"]) == 1  # the device read once
    assert sum(1 for argv in starts if "serve" in argv) == 2, starts


def test_a_spent_time_budget_starts_no_evaluation_and_the_next_run_continues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget bounds the solutions' evaluations too: a device lent for minutes gets the tables of
    what was done (a capped H200 run was killed among the evaluations with no table written)."""
    from kernelopt_mcp import suite
    from kernelopt_mcp.suite import SolutionOutcome, SuiteOptions, run_suite

    root, out, solutions, _ = solved_suite(tmp_path, ("1_Add", "2_Sub", "3_Mul"))
    evaluated: list[str] = []
    clock = [0.0]

    def evaluate(workload: Path, cu: Path, launch: Path) -> SolutionOutcome:
        evaluated.append(workload.name)
        clock[0] += 100.0  # each evaluation takes 100 s
        return SolutionOutcome("ok", 1.0, "all cases pass")

    monkeypatch.setattr(suite, "_clock", lambda: clock[0])
    records = run_suite(SuiteOptions(root, out, levels=(1,), solutions=solutions, time_budget_s=150), evaluate)
    assert evaluated == ["p1_Add", "p2_Sub"]  # the third would start at 200 s, past the 150 s budget
    assert [r.status for r in records] == ["ok", "ok", None] and (out / "table.md").is_file()
    run_suite(SuiteOptions(root, out, levels=(1,), solutions=solutions), evaluate)
    assert evaluated[2:] == ["p3_Mul"]  # the evaluated ones kept, the one left evaluated

