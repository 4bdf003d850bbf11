"""``kernelopt kernelbench``: walk a KernelBench checkout, import its problems, evaluate solutions.

The layout is KernelBench's own: ``PROBLEMS_DIR/level1/`` ... ``level3/``, one problem per file
named ``N_Name.py``. Each problem is imported with :func:`import_torch_problem` (where torch is
installed; else it is recorded as refused, with that reason) into ``OUT/workloads/levelL/``; a
solution ``SOLUTIONS/levelL/<stem>.cu`` (or ``SOLUTIONS/<stem>.cu``) with its
``<stem>.launch.json`` beside it is evaluated by the caller's ``evaluate`` (the CLI's: one
harness for the whole run). ``OUT/state.json`` is rewritten after every problem, so a second
run continues: a problem whose file is unchanged (sha256) is not imported again, a solution
whose source and launch are unchanged is not evaluated again. A refusal for want of torch is
retried on the next run.

PyTorch eager and ``torch.compile`` times need a runner of the module on the GPU that does not
exist yet: they are recorded as not measured (:data:`NOT_MEASURED`), never estimated.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .files import read_json, write_atomic
from .suite_table import ProblemRecord, render_markdown, to_json
from .torch_import import TorchImportOptions, import_torch_problem, safe_name
from .torch_problem import TorchProblemError

__all__ = ["NOT_MEASURED", "TORCH_MISSING", "SolutionOutcome", "SuiteOptions", "find_problems", "run_suite"]

NOT_MEASURED = "not measured: needs the GPU reference runner (PyTorch eager and torch.compile are not timed yet)"
TORCH_MISSING = "torch is not installed (pip install torch)"
PROBLEM_FILE = re.compile(r"^(\d+)_\w+\.py$")


@dataclass(frozen=True)
class SuiteOptions:
    problems_dir: Path
    out_dir: Path
    levels: tuple[int, ...] = (1, 2, 3)
    solutions: Path | None = None
    tolerance: str = "strict"


@dataclass(frozen=True)
class SolutionOutcome:
    """What evaluating one solution gave: the status ("ok" is correct) and our score."""

    status: str
    ours_ms: float | None
    message: str = ""


#: workload directory, kernel source, launch file -> the outcome
Evaluate = Callable[[Path, Path, Path], SolutionOutcome]


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
) -> list[ProblemRecord]:
    """Import and evaluate every problem of ``options.levels`` (continuing ``OUT/state.json``), write
    ``OUT/table.md`` and ``OUT/results.json``, and return the records (``evaluate`` None: import only)."""
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
    records = []
    for i, (level, path) in enumerate(problems):
        key = f"level{level}/{path.name}"
        entry = _import(options, level, path, entries.get(key) or {}, have_torch)
        if evaluate is not None and entry["imported"]:
            _evaluate(options, level, path, entry, evaluate)
        entries[key] = entry
        write_atomic(state_path, json.dumps(state, indent=2).encode(), durable=False)
        if progress:
            progress(i + 1, len(problems), f"{key}: " + ((entry.get("status") or "imported") if entry["imported"]
                                                         else f"refused: {entry['refusal']}"))
        records.append(ProblemRecord(
            problem=key, level=level, imported=entry["imported"], refusal=entry.get("refusal"),
            status=entry.get("status"), ours_ms=entry.get("ours_ms"), eager_note=NOT_MEASURED, compile_note=NOT_MEASURED,
        ))
    write_atomic(options.out_dir / "table.md", render_markdown(records).encode(), durable=False)
    write_atomic(options.out_dir / "results.json", to_json(records).encode(), durable=False)
    return records


def _import(options: SuiteOptions, level: int, path: Path, entry: dict[str, Any], have_torch: bool) -> dict[str, Any]:
    digest = _sha256(path)
    workload = options.out_dir / "workloads" / f"level{level}" / safe_name(path.stem)
    done = entry.get("sha256") == digest and entry.get("tolerance") == options.tolerance and (
        (entry.get("imported") and (workload / "workload.json").is_file())
        or (not entry.get("imported") and entry.get("refusal") != TORCH_MISSING)
    )
    if done:
        return entry
    fresh: dict[str, Any] = {"sha256": digest, "tolerance": options.tolerance, "workload": str(workload)}
    if not have_torch:
        return {**fresh, "imported": False, "refusal": TORCH_MISSING}
    try:
        import_torch_problem(path, workload, TorchImportOptions(overwrite=True, tolerance=options.tolerance))
    except TorchProblemError as exc:
        return {**fresh, "imported": False, "refusal": str(exc).removeprefix(f"{path}: ")}
    return {**fresh, "imported": True}


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
    outcome = evaluate(Path(entry["workload"]), cu, launch)
    entry.update(status=outcome.status, ours_ms=outcome.ours_ms, message=outcome.message[:500],
                 solution_sha256=digest, workload_sha256=entry["sha256"])
