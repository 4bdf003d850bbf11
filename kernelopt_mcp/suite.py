"""``kernelopt kernelbench``: walk a KernelBench checkout, import its problems, evaluate solutions.

The layout is KernelBench's own: ``PROBLEMS_DIR/level1/`` ... ``level3/``, one problem per file
named ``N_Name.py``. Each problem is imported with :func:`import_torch_problem` (where torch is
installed; else it is recorded as refused, with that reason) into ``OUT/workloads/levelL/``, in a
process of its own, ``jobs`` at once (:mod:`.suite_imports`: memory capped, a deadline); a
solution ``SOLUTIONS/levelL/<stem>.cu`` (or ``SOLUTIONS/<stem>.cu``) with its
``<stem>.launch.json`` beside it is evaluated by the caller's ``evaluate`` (the CLI's: one
harness for the whole run). ``OUT/state.json`` is rewritten after every problem, so a second
run continues: a problem whose file is unchanged (sha256) is not imported again, a solution
whose source and launch are unchanged is not evaluated again. A refusal for want of torch is
retried on the next run.

PyTorch eager and ``torch.compile`` are timed by the caller's ``baseline`` for every imported
problem, :data:`BASELINE_BATCH` problems at a time (the CLI's:
:func:`~kernelopt_mcp.torch_baseline.settings_batch_baselines`, on the GPU in one confined child per
batch, cached by problem, case, device, torch and timing rules, so a second run does not time them
again): the geometric mean over the problem's performance cases, as our score is. A
problem whose baseline could not be timed says why (the report's note); where nothing can be
timed on this machine (no torch, no GPU) the first problem's reason stands for the rest of the run.
Without a ``baseline`` (``--no-baselines``) the times of an earlier run are kept, else they are
recorded as not measured (:data:`NOT_MEASURED`), never estimated.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import DeviceUnavailable, KerneloptError, ToolchainNotFound
from .files import read_json, write_atomic
from .suite_imports import IMPORT_TIMEOUT_S, ImportJob, ImportLimits, import_many
from .suite_report import REPORT_NAME, render_html
from .suite_table import ProblemRecord, render_markdown, to_json
from .torch_baseline import BaselineReport
from .torch_import import safe_name
from .torch_problem import TorchProblemError

__all__ = ["NOT_MEASURED", "TORCH_MISSING", "SolutionOutcome", "SuiteOptions", "find_problems", "run_suite"]

NOT_MEASURED = ("not measured (PyTorch eager and torch.compile are timed on the GPU for imported problems, unless "
                "--no-baselines)")
TORCH_MISSING = "torch is not installed (pip install torch)"
PROBLEM_FILE = re.compile(r"^(\d+)_\w+\.py$")


@dataclass(frozen=True)
class SuiteOptions:
    problems_dir: Path
    out_dir: Path
    levels: tuple[int, ...] = (1, 2, 3)
    solutions: Path | None = None
    tolerance: str = "strict"
    jobs: int = 1  # imports at once, each in a process of its own
    import_timeout_s: float = IMPORT_TIMEOUT_S
    #: seconds after which no further evaluation or batch of baselines starts (None: no limit); the
    #: tables are written with what was done, and a second run continues
    time_budget_s: float | None = None


@dataclass(frozen=True)
class SolutionOutcome:
    """What evaluating one solution gave: the status ("ok" is correct) and our score."""

    status: str
    ours_ms: float | None
    message: str = ""
    #: wall seconds of each step of preparing the problem (inputs, the PyTorch reference, ..., ``total``)
    prepare_s: Mapping[str, float] = field(default_factory=dict)
    #: where the expected outputs came from and what the tolerance was (the module's own error at the
    #: real sizes, a tolerance widened for it)
    expected_from: str = ""


#: workload directory, kernel source, launch file -> the outcome
Evaluate = Callable[[Path, Path, Path], SolutionOutcome]
#: imported problems' workload directories -> PyTorch eager and torch.compile on each one's performance cases
Baseline = Callable[[list[Path]], list[BaselineReport]]
#: problems whose baselines one timing child takes at a time (torch's import and the CUDA context paid once
#: for them; the state saved after each batch)
BASELINE_BATCH = 8
_clock = time.monotonic  # the time budget's clock


def find_problems(problems_dir: Path, levels: tuple[int, ...]) -> list[tuple[int, Path]]:
    """(level, file) of every ``levelL/N_Name.py``, by level and problem number."""
    found = []
    for level in levels:
        directory = problems_dir / f"level{level}"
        if not directory.is_dir():
            continue
        for path in directory.iterdir():
            m = PROBLEM_FILE.match(path.name)
            if m and path.is_file():
                found.append((level, int(m.group(1)), path))
    return [(level, path) for level, _, path in sorted(found, key=lambda t: (t[0], t[1], t[2].name))]


def _sha256(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes() if p.is_file() else b"")
    return h.hexdigest()


def _solution(options: SuiteOptions, level: int, stem: str) -> tuple[Path, Path] | None:
    if options.solutions is None:
        return None
    for directory in (options.solutions / f"level{level}", options.solutions):
        cu = directory / f"{stem}.cu"
        if cu.is_file():
            return cu, directory / f"{stem}.launch.json"
    return None


def run_suite(
    options: SuiteOptions, evaluate: Evaluate | None, progress: Callable[[int, int, str], None] | None = None,
    baseline: Baseline | None = None,
) -> list[ProblemRecord]:
    """Import and evaluate every problem of ``options.levels`` (continuing ``OUT/state.json``), time
    the imported ones' PyTorch baselines, write ``OUT/table.md``, ``OUT/results.json`` and
    ``OUT/report.html``, and return the records (``evaluate`` None: import only; ``baseline`` None:
    no baselines timed)."""
    began = _clock()
    problems = find_problems(options.problems_dir, options.levels)
    if not problems:
        raise TorchProblemError(
            f"{options.problems_dir}: no problem files (expected KernelBench's layout: level1/ ... level3/ holding "
            "N_Name.py files; pass the directory that holds the level folders)"
        )
    state_path = options.out_dir / "state.json"
    state: dict[str, Any] = read_json(state_path) if state_path.is_file() else {}
    entries: dict[str, dict[str, Any]] = state.setdefault("problems", {})
    have_torch = importlib.util.find_spec("torch") is not None

    def save() -> None:
        write_atomic(state_path, json.dumps(state, indent=2).encode(), durable=False)

    _import_all(options, problems, entries, have_torch, progress, save)
    stop_at = began + options.time_budget_s if options.time_budget_s is not None else None
    for i, (level, path) in enumerate(problems):
        key = f"level{level}/{path.name}"
        entry = entries[key]
        left = stop_at is not None and _clock() >= stop_at  # past the budget: the next run evaluates it
        if evaluate is not None and entry["imported"] and not left:
            _evaluate(options, level, path, entry, evaluate)
            save()
        if progress:
            progress(i + 1, len(problems), f"{key}: " + ((entry.get("status") or "imported") if entry["imported"]
                                                         else f"refused: {entry['refusal']}")
                     + (" (the time budget is spent: left for the next run)" if left and evaluate else ""))
    if baseline is not None:
        _time_baselines([k for k in (f"level{lv}/{p.name}" for lv, p in problems) if entries[k]["imported"]], entries,
                        baseline, progress, save, stop_at)
    records = []
    for level, path in problems:
        key = f"level{level}/{path.name}"
        entry = entries[key]
        measured = entry["imported"] and "eager_note" in entry
        records.append(ProblemRecord(
            problem=key, level=level, imported=entry["imported"], refusal=entry.get("refusal"),
            status=entry.get("status"), ours_ms=entry.get("ours_ms"),
            eager_ms=entry.get("eager_ms") if measured else None,
            compile_ms=entry.get("compile_ms") if measured else None,
            eager_note=entry.get("eager_note") if measured else NOT_MEASURED,
            compile_note=entry.get("compile_note") if measured else NOT_MEASURED,
        ))
    write_atomic(options.out_dir / "table.md", render_markdown(records).encode(), durable=False)
    write_atomic(options.out_dir / "results.json", to_json(records).encode(), durable=False)
    write_atomic(options.out_dir / REPORT_NAME, render_html(records, str(options.out_dir)).encode(), durable=False)
    return records


def _import_all(
    options: SuiteOptions, problems: list[tuple[int, Path]], entries: dict[str, dict[str, Any]], have_torch: bool,
    progress: Callable[[int, int, str], None] | None, save: Callable[[], None],
) -> None:
    """Every problem's state entry in ``entries``, importing those new or changed since the last run
    (or whose workload is gone), ``options.jobs`` at a time, each in a process of its own; ``save``
    after each import, so an interrupted run keeps the imports it finished."""
    pending: dict[Path, tuple[str, Path]] = {}
    for level, path in problems:
        key = f"level{level}/{path.name}"
        entry, digest = entries.get(key) or {}, _sha256(path)
        workload = options.out_dir / "workloads" / f"level{level}" / safe_name(path.stem)
        done = entry.get("sha256") == digest and entry.get("tolerance") == options.tolerance and (
            (entry.get("imported") and (workload / "workload.json").is_file())
            or (not entry.get("imported") and entry.get("refusal") != TORCH_MISSING)
        )
        if done:
            entries[key] = entry
            continue
        # a new import drops the baselines timed for the file it replaces
        entries[key] = {"sha256": digest, "tolerance": options.tolerance, "workload": str(workload)}
        if not have_torch:
            entries[key].update(imported=False, refusal=TORCH_MISSING)
        else:
            pending[workload] = (key, path)

    def step(done: int, total: int, record: dict[str, Any]) -> None:
        if progress:
            alone = ", alone: it ran out of memory beside the others" if record.get("alone") else ""
            progress(done, total, f"imported {Path(record['problem']).name} ({record['seconds']:.1f} s{alone})"
                     if record["imported"] else f"{Path(record['problem']).name}: refused")

    jobs = [ImportJob(path, workload) for workload, (_, path) in pending.items()]
    limits = ImportLimits(tolerance=options.tolerance, timeout_s=options.import_timeout_s)
    for job, record in import_many(jobs, options.jobs, limits, step):
        entry = entries[pending[job.out][0]]
        entry.update(imported=record["imported"], import_s=round(record["seconds"], 2))
        if not record["imported"]:
            entry["refusal"] = str(record["refusal"]).removeprefix(f"{job.problem}: ")
        save()


def _evaluate(options: SuiteOptions, level: int, path: Path, entry: dict[str, Any], evaluate: Evaluate) -> None:
    found = _solution(options, level, path.stem)
    if found is None:
        for k in ("status", "ours_ms", "message", "solution_sha256"):
            entry.pop(k, None)
        return
    cu, launch = found
    digest = _sha256(cu, launch)
    if entry.get("solution_sha256") == digest and entry.get("workload_sha256") == entry["sha256"]:
        return
    began = time.perf_counter()
    try:
        outcome = evaluate(Path(entry["workload"]), cu, launch)
    except (DeviceUnavailable, ToolchainNotFound):
        raise  # the machine's, not the problem's: the run stops with its message
    except KerneloptError as exc:  # its reference, its workload or the harness failed: this problem alone, retried
        # by the next run (no solution digest kept)
        entry.update(status="error", ours_ms=None, message=str(exc)[:500])
        entry.pop("solution_sha256", None)
        return
    entry.update(status=outcome.status, ours_ms=outcome.ours_ms, message=outcome.message[:500],
                 solution_sha256=digest, workload_sha256=entry["sha256"],
                 evaluate_s=round(time.perf_counter() - began, 2), prepare_s=dict(outcome.prepare_s),
                 expected_from=outcome.expected_from)


def _time_baselines(
    keys: list[str], entries: dict[str, dict[str, Any]], baseline: Baseline,
    progress: Callable[[int, int, str], None] | None,
    save: Callable[[], None], stop_at: float | None = None,
) -> None:
    """Every imported problem's baselines, :data:`BASELINE_BATCH` problems to a timing child (the
    cache answers those timed before); a report that nothing can be timed here stands for the rest.
    Past ``stop_at`` (monotonic) no batch starts: the problems left keep what an earlier run timed."""
    blocked: BaselineReport | None = None
    for start in range(0, len(keys), BASELINE_BATCH):
        batch = keys[start:start + BASELINE_BATCH]
        if stop_at is not None and _clock() >= stop_at:
            if progress:
                progress(start, len(keys), f"PyTorch baselines: the time budget is spent; {len(keys) - start} "
                         "problem(s) left for the next run")
            return
        began = time.perf_counter()
        reports = [blocked] * len(batch) if blocked else baseline([Path(entries[k]["workload"]) for k in batch])
        share = (time.perf_counter() - began) / len(batch)
        for key, report in zip(batch, reports, strict=True):
            assert report is not None
            _record_baseline(entries[key], report, share)
            blocked = blocked or (report if report.blocked else None)
        save()
        if progress:
            progress(start + len(batch), len(keys), f"PyTorch baselines: {batch[-1]}")


def _record_baseline(entry: dict[str, Any], report: BaselineReport, seconds: float) -> None:
    """The problem's baselines in its state entry: geometric means over its performance cases, or
    why there is none (one line each), and its share of its batch's wall seconds (compiles included)."""
    eager, compiled = report.geomean_ms("eager"), report.geomean_ms("compile")
    cached = bool(report.cases) and all(c.cached for c in report.cases)
    entry.update(
        eager_ms=eager, compile_ms=compiled, eager_note=None if eager is not None else report.why_missing("eager"),
        compile_note=None if compiled is not None else report.why_missing("compile"), baseline_cached=cached,
    )
    if not cached:  # the child's own count where it gave one, else the problem's share of its batch
        entry["baseline_s"] = round(report.seconds if report.seconds is not None else seconds, 2)
        compiles = [c.compile_s for c in report.cases if c.compile_s is not None]
        if compiles:
            entry["compile_s"] = round(sum(compiles), 2)
