"""PyTorch eager and torch.compile timed beside a candidate (torch_baseline.py, _torch_baseline_child.py):
the statistics and records, the cache, the wiring into `kernelopt evaluate`'s result and the
`kernelopt kernelbench` table, and the real confined child refusing where torch sees no GPU.

The GPU is the one thing CI cannot reach: where a test needs the child's timings it replaces
the confined child (``run_torch_child`` as torch_baseline calls it) with a stand-in that
writes an answer of the child's shape (per case the per-call times in ms, the compile note) into
the staging directory, and counts its calls. tests/gpu/test_torch_baseline_gpu.py runs the real
child on the H200."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from fakegpu import kernel, write_harness, write_tiny_workload
from test_torch_tolerance import imported_style

from kernelopt_mcp import suite, torch_baseline
from kernelopt_mcp.cli import main
from kernelopt_mcp.confined_python import ChildLimits, ChildResult
from kernelopt_mcp.evaluation.candidate import EvaluateOptions
from kernelopt_mcp.evaluation.stats import summarize
from kernelopt_mcp.suite import NOT_MEASURED, SolutionOutcome, SuiteOptions, run_suite
from kernelopt_mcp.torch_baseline import (
    CHILD_START_S,
    BaselineCache,
    BaselineJob,
    BaselineOptions,
    BaselineReport,
    BaselineTiming,
    CaseBaseline,
    compare,
    imported_problem,
    measure_baselines,
    measure_batch,
    workload_baselines,
    workloads_baselines,
)
from kernelopt_mcp.workload import load_workload

PROBLEM = '''import torch
import torch.nn as nn

n = 4096


class Model(nn.Module):
    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.rand(n), torch.randn(n)]


def get_init_inputs():
    return []
'''
EAGER_MS = [0.010 + 0.0001 * (i % 5) for i in range(100)]  # median 0.0102 ms
COMPILE_MS = [0.008 + 0.0001 * (i % 3) for i in range(100)]  # median 0.0081 ms
COMPILE_FAILED = "torch.compile failed: BackendCompilerFailed: backend='inductor' raised: no ptxas"


class FakeChild:
    """Stands in for the confined timing child (the GPU is out of reach): answers every case with
    the given per-call times and remembers each request."""

    def __init__(self, eager: list[float] | None = EAGER_MS, compiled: list[float] | None = COMPILE_MS,
                 error: str | None = None, blocked: bool = False) -> None:
        self.eager, self.compiled, self.error, self.blocked = eager, compiled, error, blocked
        self.requests: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []

    def __call__(self, module: str, args: Sequence[str], **kw: Any) -> ChildResult:
        request = json.loads(Path(args[0]).read_text())
        self.requests.append(request)
        self.calls.append({"module": module, **kw})
        problems = []
        for problem in request["problems"]:
            assert Path(problem["problem"]).read_text()  # the problem's copy lies in the staging directory
            cases = [
                {"name": c["name"], "eager": {"times_ms": self.eager} if self.eager else None, "eager_note": None,
                 "compile": {"times_ms": self.compiled} if self.compiled else None,
                 "compile_note": None if self.compiled else COMPILE_FAILED}
                for c in problem["cases"]
            ]
            problems.append({"label": problem["label"], "cases": cases, "error": None, "finished": True})
        answer = {"torch_version": "2.11.0+cu130", "device_name": "NVIDIA H200", "mode": "default", "error": self.error,
                  "blocked": self.blocked, "problems": [] if self.error else problems, "finished": not self.error}
        Path(request["answer"]).write_text(json.dumps(answer))
        return ChildResult(0)


@pytest.fixture
def child(monkeypatch: pytest.MonkeyPatch) -> FakeChild:
    fake = FakeChild()
    monkeypatch.setattr(torch_baseline, "run_torch_child", fake)
    monkeypatch.setattr(torch_baseline, "torch_version", lambda python_path=(): "2.11.0+cu130")
    return fake


def imported_workload(parent: Path, problem: str = PROBLEM, name: str = "p1_add") -> Path:
    """An imported-style workload (the importer's rules) holding its problem file, as import-torch writes it."""
    write_tiny_workload(parent, imported_style(name=name))
    (parent / name / "problem.py").write_text(problem)
    return parent / name


# --- statistics and records ------------------------------------------------------------------


def test_times_are_summarized_by_the_harness_statistics() -> None:
    options = BaselineOptions(warmup=3, iterations=100)
    timing = torch_baseline.baseline_timing(EAGER_MS, options)
    stats = summarize(EAGER_MS)
    assert ((timing.median_ms, timing.iqr_ms, timing.cv, timing.samples)
            == (stats.median_ms, stats.iqr_ms, stats.cv, 100))
    assert timing.median_ms == pytest.approx(0.0102) and not timing.noisy
    # too few samples, spread: flagged like a candidate's
    assert torch_baseline.baseline_timing([1.0, 1.0, 5.0], options).noisy


def test_options_follow_the_evaluations_timing_rules() -> None:
    options = BaselineOptions.following(EvaluateOptions(warmup=4, iterations=50, flush_l2=False, stop="precision",
                                                        adaptive_rse=0.01))
    assert ((options.warmup, options.iterations, options.flush_l2, options.stop, options.precision_rse)
            == (4, 50, False, "precision", 0.01))
    assert BaselineOptions.following(EvaluateOptions()).timing() == {**BaselineOptions().timing()}
    assert "timeout_s" not in options.timing()  # the deadline changes no time: not in the cache key
    assert "compile_ahead" not in options.timing()  # nor where compiling happened (times are taken alone)


def test_the_childs_answer_becomes_case_records(tmp_path: Path, child: FakeChild) -> None:
    child.compiled = None
    report = measure_baselines(PROBLEM, [("perf", {"n": 4096}), ("big", {"n": 8192})], device=1,
                               options=BaselineOptions(warmup=2, iterations=7), workdir=tmp_path)
    [request] = child.requests
    assert request["device"] == 1 and (request["warmup"], request["iterations"], request["flush_l2"]) == (2, 7, True)
    [problem] = request["problems"]
    assert problem["cases"] == [{"name": "perf", "values": {"n": 4096}}, {"name": "big", "values": {"n": 8192}}]
    call = child.calls[0]
    assert call["module"] == "kernelopt_mcp._torch_baseline_child"  # run_torch_child: GPU, torch required
    assert call["env"]["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
    assert call["each_job"] is True  # each problem in a confined process of its own
    assert list(tmp_path.iterdir()) == []  # the staging directory is removed
    assert [c.case for c in report.cases] == ["perf", "big"] and report.note is None
    perf = report.cases[0]
    assert perf.eager is not None and perf.eager.median_ms == pytest.approx(0.0102) and perf.compile is None
    assert perf.compile_note == COMPILE_FAILED and perf.mode == "default" and perf.device_name == "NVIDIA H200"
    assert report.geomean_ms("eager") == pytest.approx(0.0102) and report.geomean_ms("compile") is None
    assert report.why_missing("compile") == f"perf: {COMPILE_FAILED}; big: {COMPILE_FAILED}"


def test_a_child_without_an_answer_is_a_note_never_an_exception(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch_baseline, "run_torch_child",
                        lambda *a, **k: ChildResult(None, stderr_tail="Traceback\nMemoryError: x\n", timed_out=True))
    report = measure_baselines(PROBLEM, [("perf", {})], device=0, workdir=tmp_path)
    assert report.cases == [] and "gave no answer (timed out): MemoryError: x" in (report.note or "")
    monkeypatch.setattr(torch_baseline, "run_torch_child",
                        lambda *a, **k: ChildResult(125, refused="torch cannot be imported by python", missing="torch"))
    missing = measure_baselines(PROBLEM, [("perf", {})], device=0, workdir=tmp_path)
    assert missing.blocked and "torch is not installed" in (missing.note or "")


# --- the cache ----------------------------------------------------------------------------------


def test_a_second_evaluation_reads_the_cache_and_a_change_measures_again(tmp_path: Path, child: FakeChild) -> None:
    wl_dir = imported_workload(tmp_path / "wl")
    cache = BaselineCache(tmp_path / "cache")

    def baselines(options: BaselineOptions | None = None, device_name: str = "NVIDIA H200") -> BaselineReport:
        return workload_baselines(load_workload(wl_dir), device=0, device_name=device_name, options=options,
                                  cache=cache, workdir=tmp_path)

    first = baselines()
    assert (len(child.requests) == 1
            and child.requests[0]["problems"][0]["cases"] == [{"name": "n_4096", "values": {"n": 4096}}])
    assert not first.cases[0].cached
    again = baselines()
    assert len(child.requests) == 1 and again.cases[0].cached and again.cases[0].eager == first.cases[0].eager
    baselines(BaselineOptions(flush_l2=False))  # another timing rule
    assert len(child.requests) == 2
    baselines(device_name="NVIDIA H100")  # another device
    assert len(child.requests) == 3
    (wl_dir / "problem.py").write_text(PROBLEM.replace("a + b", "b + a"))  # the problem changed
    baselines()
    assert len(child.requests) == 4
    baselines()
    assert len(child.requests) == 4
    key = BaselineCache.key(hashlib.sha256(PROBLEM.encode()).hexdigest(), "n_4096", {"n": 4096}, "NVIDIA H200",
                            "2.11.0+cu130", BaselineOptions())
    assert cache.get(key) is not None and cache.get(key.replace("a", "b")) is None


def test_the_cache_key_carries_the_version_torch_itself_reports(tmp_path: Path) -> None:
    """The cache is keyed by the version torch's import would say, and records are stored only where
    the child said the same: a wheel's metadata says ``2.11.0`` while ``torch.__version__`` says
    ``2.11.0+cu130`` (found on the H100: nothing was ever cached). Read from ``torch/version.py``
    without importing torch; the metadata's where that file is missing."""
    site = tmp_path / "site"
    (site / "torch-2.11.0.dist-info").mkdir(parents=True)
    (site / "torch-2.11.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0\n")
    assert torch_baseline.torch_version([str(site)]) == "2.11.0"
    (site / "torch").mkdir()
    (site / "torch" / "version.py").write_text("from typing import Optional\n__version__ = '2.11.0+cu130'\n"
                                               "cuda: Optional[str] = '13.0'\n")
    assert torch_baseline.torch_version([str(site)]) == "2.11.0+cu130"


def test_the_installed_torchs_version_is_the_one_its_import_reports(torch: Any) -> None:
    assert torch_baseline.torch_version() == torch.__version__


def test_a_bundled_workload_runs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*a: Any, **k: Any) -> ChildResult:
        raise AssertionError("no child for a workload that is not an imported problem")

    monkeypatch.setattr(torch_baseline, "run_torch_child", never)
    bundled = load_workload(write_tiny_workload(tmp_path / "b") / "tiny_add")
    assert imported_problem(bundled) is None
    report = workload_baselines(bundled, device=0, device_name="x")
    assert report.cases == [] and "not an imported PyTorch problem" in (report.note or "")
    # an imported-style spec without its problem file is not one either
    assert imported_problem(load_workload(write_tiny_workload(tmp_path / "c", imported_style())
                                          / "imported_add")) is None


# --- kernelopt evaluate ---------------------------------------------------------------------------


def test_evaluate_reports_eager_compile_and_the_speedups(tmp_path: Path, child: FakeChild,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    harness = write_harness(tmp_path, "fake")
    wl = imported_workload(tmp_path / "wl")
    good = tmp_path / "good.cu"
    good.write_text(kernel("FAST"))
    argv = ["evaluate", str(wl), str(good), "--harness", str(harness), "--warmup", "2", "--iterations", "5"]
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    base = result["torch_baseline"]
    assert child.requests[0]["warmup"] == 2 and child.requests[0]["iterations"] == 5  # the candidate's rules
    assert base["mode"] == "default" and base["torch_version"] == "2.11.0+cu130" and not base["cached"]
    [case] = base["cases"]
    ours = result["score_ms"]
    assert case["case"] == "n_4096" and case["ours_ms"] == pytest.approx(ours)
    assert case["eager"]["median_ms"] == pytest.approx(0.0102) and case["compile"]["median_ms"] == pytest.approx(0.0081)
    assert (case["speedup_eager"] == pytest.approx(0.0102 / ours)
            and base["speedup_compile"] == pytest.approx(0.0081 / ours))
    assert base["eager_ms"] == pytest.approx(0.0102) and base["ours_ms"] == pytest.approx(ours)
    # a second evaluation: the baselines come from the cache, and the text says so
    assert main(argv) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert len(child.requests) == 1
    assert "torch.compile mode default (cached)" in text and "vs eager" in text and "speedup vs PyTorch eager" in text
    # --no-torch-baseline, and a bundled workload: nothing of it
    assert main([*argv, "--json", "--no-torch-baseline"]) == 0
    assert "torch_baseline" not in json.loads(capsys.readouterr().out)
    bundled = write_tiny_workload(tmp_path / "b") / "tiny_add"
    assert main(["evaluate", str(bundled), str(good), "--harness", str(harness), "--iterations", "3", "--json"]) == 0
    assert "torch_baseline" not in json.loads(capsys.readouterr().out) and len(child.requests) == 1


def test_evaluate_says_in_one_line_why_there_is_no_baseline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    fake = FakeChild(error="torch 2.11.0+cu130 sees no CUDA device (RuntimeError: Found no NVIDIA driver)",
                     blocked=True)
    monkeypatch.setattr(torch_baseline, "run_torch_child", fake)
    harness = write_harness(tmp_path, "fake")
    good = tmp_path / "good.cu"
    good.write_text(kernel("FAST"))
    argv = ["evaluate", str(imported_workload(tmp_path / "wl")), str(good), "--harness", str(harness),
            "--iterations", "3"]
    assert main(argv) == 0  # never fails the evaluation
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "sees no CUDA device" in line]
    assert len(lines) == 1 and "PyTorch eager and torch.compile not timed" in lines[0]


def test_compare_without_our_times_still_shows_the_baselines() -> None:
    from kernelopt_mcp.evaluation.outcomes import EvaluationResult, Status

    timing = BaselineTiming(median_ms=2.0, iqr_ms=0.1, cv=0.01, samples=100)
    report = BaselineReport(cases=[CaseBaseline(case="perf", eager=timing, compile_note="torch.compile failed: X")])
    result = EvaluationResult(workload="w", candidate="c", status=Status("mismatch"), message="x", arch="sm_90")
    comparison = compare(result, report)
    assert (comparison.eager_ms == 2.0 and comparison.speedup_eager is None
            and comparison.compile_note == "perf: torch.compile failed: X")


# --- the MCP benchmark tool ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_benchmark_tool_puts_pytorch_beside_a_passing_result(tmp_path: Path, child: FakeChild) -> None:
    """benchmark on an imported problem: eager and torch.compile beside a result that passed (timed by
    the call's rules, once, then from the cache); nothing for validate, a failing kernel or a bundled workload."""
    from fakegpu import ADD_LAUNCH, in_memory_server, tool_text

    from kernelopt_mcp.config import Settings
    from kernelopt_mcp.server_config import ServerConfig

    imported_workload(tmp_path / "wl")
    bundled = write_tiny_workload(tmp_path / "b")
    settings = Settings(harness=write_harness(tmp_path, "fake"), cache_dir=tmp_path / "cache", timeout_s=20,
                        workload_dirs=(tmp_path / "wl", bundled))
    async with in_memory_server(ServerConfig(settings=settings, workspace=tmp_path / "ws")) as (client, _):
        args = {"workload": "p1_add", "source": kernel("FAST"), "launch": ADD_LAUNCH, "warmup": 2, "iterations": 5}
        r = await client.call_tool("benchmark", args)
        assert not r.is_error, tool_text(r)
        out = r.structured_content
        base = out["torch_baseline"]
        assert out["status"] == "ok" and child.requests[0]["warmup"] == 2 and child.requests[0]["iterations"] == 5
        assert base["eager_ms"] == pytest.approx(0.0102) and base["compile_ms"] == pytest.approx(0.0081)
        assert base["speedup_eager"] == pytest.approx(0.0102 / out["score_ms"]) and not base["cached"]
        assert "torch.compile mode default" in tool_text(r) and "eager: 0.0102 ms" in tool_text(r)
        again = (await client.call_tool("benchmark", args)).structured_content["torch_baseline"]
        assert again["cached"] and len(child.requests) == 1
        for tool, source, workload in (("validate", kernel("FAST"), "p1_add"), ("benchmark", kernel("WRONG"), "p1_add"),
                                       ("benchmark", kernel("FAST"), "tiny_add")):
            r = await client.call_tool(tool, {**args, "source": source, "workload": workload})
            assert r.structured_content.get("torch_baseline") is None, (tool, workload)
        assert len(child.requests) == 1


def test_a_run_records_pytorch_beside_its_candidates() -> None:
    """kernelopt optimize keeps the summary of a benchmark's torch_baseline on the candidate's record (its
    event, the summary's best, the console line, the report's cards), per-case detail left in result.json."""
    from kernelopt_agent.records import CandidateRecord, pytorch_times
    from kernelopt_agent.report import _overview

    beside = {"mode": "default", "torch_version": "2.11.0+cu130", "eager_ms": 0.02, "compile_ms": 0.01, "ours_ms": 0.01,
              "speedup_eager": 2.0, "speedup_compile": 1.0, "eager_note": None, "cases": [{"case": "perf"}],
              "cached": False}
    rec = CandidateRecord(0, "001-it1", "proposal", 1, "src", {}, status="ok", pytorch=pytorch_times(beside))
    assert rec.pytorch == {"eager_ms": 0.02, "compile_ms": 0.01, "speedup_eager": 2.0, "speedup_compile": 1.0,
                           "mode": "default", "torch_version": "2.11.0+cu130", "cached": False}
    assert rec.versus_pytorch() == "2.00x vs PyTorch eager, 1.00x vs torch.compile"
    assert rec.as_event().pytorch == rec.pytorch
    unmeasured = CandidateRecord(1, "002-it2", "proposal", 2, "src", {}, status="ok",
                                 pytorch=pytorch_times({"note": "PyTorch eager and torch.compile not timed: no GPU"}))
    assert unmeasured.versus_pytorch() == "" and pytorch_times(None) is None
    cards = _overview({"best": {"label": "001-it1", "speedup_vs_eager": 2.0, "speedup_vs_compile": 1.0,
                                "pytorch": rec.pytorch}}, [])
    assert "vs PyTorch eager" in cards and "vs torch.compile" in cards
    assert "vs PyTorch eager" not in _overview({"best": {"label": "x"}}, [])


# --- kernelopt kernelbench ------------------------------------------------------------------------


def _suite_dir(root: Path, out: Path, names: list[str]) -> None:
    """KernelBench's layout with level1/<name>.py problems, already imported into out/ (as a run
    with torch leaves it)."""
    entries = {}
    for name in names:
        problem = root / "level1" / f"{name}.py"
        problem.parent.mkdir(parents=True, exist_ok=True)
        problem.write_text(PROBLEM.replace("a + b", f"a + b  # {name}"))
        wl = imported_workload(out / "workloads" / "level1", problem.read_text(), name=f"p{name}")
        entries[f"level1/{name}.py"] = {"sha256": hashlib.sha256(problem.read_bytes()).hexdigest(),
                                        "tolerance": "strict", "imported": True, "workload": str(wl)}
    (out / "state.json").write_text(json.dumps({"problems": entries}))


def test_the_suite_table_gets_eager_and_compile_from_the_runner(tmp_path: Path) -> None:
    root, out = tmp_path / "kb", tmp_path / "out"
    _suite_dir(root, out, ["1_Add", "2_Sub", "3_Mul"])
    timing = BaselineTiming(median_ms=3.0, iqr_ms=0.01, cv=0.01, samples=100)
    fast = BaselineTiming(median_ms=1.5, iqr_ms=0.01, cv=0.01, samples=100)
    asked: list[str] = []

    def one(workload_dir: Path) -> BaselineReport:
        asked.append(workload_dir.name)
        if workload_dir.name == "p3_Mul":
            return BaselineReport(cases=[CaseBaseline(case="n_4096",
                                                      eager_note="the module failed on the GPU: RuntimeError: x",
                                                      compile_note="torch.compile not run: the module fails eagerly")])
        compile_ = fast if workload_dir.name == "p1_Add" else None
        return BaselineReport(cases=[CaseBaseline(case="n_4096", eager=timing, compile=compile_,
                                                  compile_note=None if compile_ else COMPILE_FAILED)])

    def baseline(workload_dirs: list[Path]) -> list[BaselineReport]:
        return [one(d) for d in workload_dirs]

    def evaluate(workload_dir: Path, cu: Path, launch: Path) -> SolutionOutcome:
        return SolutionOutcome("ok", 1.0)

    solutions = tmp_path / "solutions"
    solutions.mkdir()
    for name in ("1_Add", "2_Sub", "3_Mul"):
        (solutions / f"{name}.cu").write_text(kernel())
        (solutions / f"{name}.launch.json").write_text("{}")
    options = SuiteOptions(problems_dir=root, out_dir=out, levels=(1,), solutions=solutions)
    records = run_suite(options, evaluate, None, baseline)
    by = {r.problem: r for r in records}
    add, sub, mul = by["level1/1_Add.py"], by["level1/2_Sub.py"], by["level1/3_Mul.py"]
    assert (add.eager_ms, add.compile_ms, add.speedup("eager"), add.speedup("compile")) == (3.0, 1.5, 3.0, 1.5)
    assert sub.eager_ms == 3.0 and sub.compile_ms is None and sub.compile_note == f"n_4096: {COMPILE_FAILED}"
    assert mul.eager_ms is None and mul.eager_note == "n_4096: the module failed on the GPU: RuntimeError: x"
    table = (out / "table.md").read_text()
    assert "| 1 | 3 | 3 | 3 (100.0%) | 66.7% | 66.7% | 66.7% | 3.00x |" in table  # fast_0/1/2 vs eager, geomean
    assert f"- n_4096: {COMPILE_FAILED}" in table and NOT_MEASURED not in table
    data = json.loads((out / "results.json").read_text())
    assert data["levels"][0]["fast"]["compile"]["1"] == pytest.approx(1 / 3)
    # a second run without baselines keeps the times measured before
    again = {r.problem: r for r in run_suite(options, evaluate, None, None)}
    assert (again["level1/1_Add.py"].eager_ms == 3.0
            and again["level1/2_Sub.py"].compile_note == f"n_4096: {COMPILE_FAILED}")


def test_a_machine_that_cannot_time_says_so_once_for_the_whole_suite(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    root, out = tmp_path / "kb", tmp_path / "out"
    _suite_dir(root, out, ["1_Add", "2_Sub"])
    asked: list[str] = []

    def baseline(workload_dirs: list[Path]) -> list[BaselineReport]:
        asked.append([d.name for d in workload_dirs])
        return [BaselineReport.unmeasured("PyTorch eager and torch.compile not timed: torch 2.11 sees no CUDA device",
                                          blocked=True)
                for _ in workload_dirs]

    monkeypatch.setattr(suite, "BASELINE_BATCH", 1)  # one problem a batch: the second batch is never asked for
    records = run_suite(SuiteOptions(problems_dir=root, out_dir=out, levels=(1,)), None, None, baseline)
    assert asked == [["p1_Add"]]  # not asked again for the second problem
    assert all(r.eager_ms is None and "sees no CUDA device" in (r.eager_note or "") for r in records)


def test_a_torch_child_runs_confined_with_the_gpu_and_torch_required(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    """run_torch_child (the baseline and reference children's launcher): the GPU's device files
    open, torch required before the module runs, this package readable and first on the path."""
    from kernelopt_mcp import confined_python

    seen: dict[str, Any] = {}

    def fake(module: str, args: Sequence[str], **kw: Any) -> ChildResult:
        seen.update(kw, module=module)
        return ChildResult(0)

    monkeypatch.setattr(confined_python, "run_confined_python", fake)
    confined_python.run_torch_child("m", [], staging=tmp_path, read=["/x"], env={"A": "1"})
    package = Path(confined_python.__file__).resolve().parent
    assert seen["gpu"] is True and seen["requires"] == ["torch"] and seen["module"] == "m"
    assert seen["python_path"][0] == str(package.parent) and str(package) in seen["read"] and "/x" in seen["read"]
    assert seen["env"]["A"] == "1" and seen["env"]["CUDA_CACHE_PATH"] == str(tmp_path / ".nv")


# --- several problems in one timing child ------------------------------------------------------


class BatchChild:
    """Stands in for the timing child over a batch: ``stop_at`` names the problem (label) it stops in,
    the way the real one does past a problem's deadline (its entry unfinished, exit 3)."""

    def __init__(self, stop_at: str | None = None) -> None:
        self.stop_at = stop_at
        self.requests: list[dict[str, Any]] = []
        self.backstops: list[float] = []

    def __call__(self, module: str, args: Sequence[str], **kw: Any) -> ChildResult:
        request = json.loads(Path(args[0]).read_text())
        self.requests.append(request)
        self.backstops.append(kw["limits"].timeout_s)
        problems: list[dict[str, Any]] = []
        answer = {"torch_version": "2.11.0+cu130", "device_name": "NVIDIA H200", "mode": "default", "error": None,
                  "blocked": False, "problems": problems, "finished": False, "startup_s": 7.0}
        for problem in request["problems"]:
            if problem["label"] == self.stop_at:
                problems.append({"label": problem["label"], "cases": [], "finished": False,
                                 "error": "the problem ran past its 45 s deadline in the timing child after 0 case(s)"})
                self.stop_at = None  # a new child gets past it
                Path(request["answer"]).write_text(json.dumps(answer))
                return ChildResult(3)
            problems.append({"label": problem["label"], "error": None, "finished": True, "seconds": 1.5, "cases": [
                {"name": c["name"], "eager": {"times_ms": EAGER_MS}, "eager_note": None,
                 "compile": {"times_ms": COMPILE_MS}, "compile_note": None, "compile_s": 2.0}
                for c in problem["cases"]]})
        answer["finished"] = True
        Path(request["answer"]).write_text(json.dumps(answer))
        return ChildResult(0)


def test_a_batch_is_timed_in_one_child_and_a_problem_past_its_deadline_does_not_stop_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    child = BatchChild(stop_at="b.py")
    monkeypatch.setattr(torch_baseline, "run_torch_child", child)
    jobs = [BaselineJob(PROBLEM.replace("a + b", f"a + b * {k}"), [("perf", {"n": 4096})], f"{name}.py")
            for k, name in enumerate("abcd")]
    reports = measure_batch(jobs, device=0, limits=ChildLimits(timeout_s=45), workdir=tmp_path,
                            options=BaselineOptions(compile_ahead=3))
    # the first child had all four, stopped in b; the second took the two after it
    assert [[p["label"] for p in r["problems"]] for r in child.requests] == [["a.py", "b.py", "c.py", "d.py"],
                                                                             ["c.py", "d.py"]]
    assert child.requests[0]["problem_timeout_s"] == 45 and child.requests[0]["compile_ahead"] == 3
    # the backstop: each problem's deadline when compiled ahead (3 at once: 2 rounds) and when timed, and the start
    assert child.backstops == [45 * (4 + 2) + CHILD_START_S, 45 * (2 + 1) + CHILD_START_S]
    a, b, c, d = reports
    assert all(r.cases[0].eager is not None and r.note is None for r in (a, c, d))
    # where the time went: the child's start once a batch, each problem's seconds, each compile's
    assert (a.startup_s, a.seconds, a.cases[0].compile_s) == (7.0, 1.5, 2.0)
    assert b.cases == [] and not b.blocked
    assert (b.note == "PyTorch eager and torch.compile not timed: the problem ran past its 45 s deadline in the timing "
            "child after 0 case(s)")
    assert [r.problem_sha256 for r in reports] == [hashlib.sha256(j.problem_text.encode()).hexdigest() for j in jobs]
    assert list(tmp_path.iterdir()) == []  # each child's staging directory removed


def test_a_batch_whose_child_cannot_run_gets_its_reason_on_every_problem(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def dead(module: str, args: Sequence[str], **kw: Any) -> ChildResult:
        calls.append(1)
        return ChildResult(-11, stderr_tail="Segmentation fault\n")

    monkeypatch.setattr(torch_baseline, "run_torch_child", dead)
    jobs = [BaselineJob(PROBLEM, [("perf", {})], f"{k}.py") for k in range(3)]
    reports = measure_batch(jobs, device=0, workdir=tmp_path)
    assert len(calls) == 1  # never started again: it would die again
    assert all("gave no answer (exit -11): Segmentation fault" in (r.note or "") for r in reports)
    monkeypatch.setattr(torch_baseline, "run_torch_child",
                        FakeChild(error="torch 2.11 sees 0 CUDA device(s)", blocked=True))
    assert all(r.blocked and "sees 0 CUDA device" in (r.note or "")
               for r in measure_batch(jobs, device=0, workdir=tmp_path))


def test_workloads_share_one_child_and_the_cache_answers_the_second_time(tmp_path: Path, child: FakeChild) -> None:
    dirs = [imported_workload(tmp_path / "wl", PROBLEM.replace("a + b", f"a + {k} * b"), name=f"p{k}_add")
            for k in range(3)]
    cache = BaselineCache(tmp_path / "cache")

    def run() -> list[BaselineReport]:
        return workloads_baselines([load_workload(d) for d in dirs], device=0, device_name="NVIDIA H200", cache=cache,
                                   workdir=tmp_path)

    first = run()
    assert len(child.requests) == 1 and len(child.requests[0]["problems"]) == 3
    # what each problem holds on the GPU, for the child's compile-ahead phase: a, b and c of 4096 float32
    assert [p["bytes"] for p in child.requests[0]["problems"]] == [3 * 4096 * 4] * 3
    assert all(r.cases[0].eager is not None and not r.cases[0].cached for r in first)
    again = run()
    assert len(child.requests) == 1 and all(r.cases[0].cached for r in again)


def test_a_spent_time_budget_starts_no_batch_and_the_next_run_continues(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    root, out = tmp_path / "kb", tmp_path / "out"
    _suite_dir(root, out, ["1_Add", "2_Sub", "3_Mul"])
    timing = BaselineTiming(median_ms=3.0, iqr_ms=0.01, cv=0.01, samples=100)
    asked: list[list[str]] = []
    clock = [0.0]

    def baseline(workload_dirs: list[Path]) -> list[BaselineReport]:
        asked.append([d.name for d in workload_dirs])
        clock[0] += 100.0  # each batch takes 100 s
        return [BaselineReport(cases=[CaseBaseline(case="n_4096", eager=timing, compile_note=COMPILE_FAILED)])
                for _ in workload_dirs]

    monkeypatch.setattr(suite, "BASELINE_BATCH", 1)
    monkeypatch.setattr(suite, "_clock", lambda: clock[0])
    records = run_suite(SuiteOptions(problems_dir=root, out_dir=out, levels=(1,), time_budget_s=150), None,
                        None, baseline)
    assert asked == [["p1_Add"], ["p2_Sub"]]  # the third batch would start at 200 s, past the 150 s budget
    assert [r.eager_ms for r in records] == [3.0, 3.0, None] and records[2].eager_note == NOT_MEASURED
    assert (out / "table.md").is_file()  # the tables say what was timed
    again = run_suite(SuiteOptions(problems_dir=root, out_dir=out, levels=(1,)), None, None, baseline)
    assert asked[2:] == [["p1_Add"], ["p2_Sub"], ["p3_Mul"]] and [r.eager_ms for r in again] == [3.0, 3.0, 3.0]
