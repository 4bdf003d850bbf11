"""The ``kernelopt kernelbench`` command (parser and handler; cli.py registers them): arguments ->
:func:`~kernelopt_mcp.suite.run_suite`, with an evaluator that keeps one harness for the run."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from . import app
from .config import Settings, find_workload
from .errors import KerneloptError, WorkloadError
from .evaluation.candidate import Candidate
from .evaluation.device import DeviceInfo
from .files import read_text
from .launch import LaunchSpec
from .progress_bar import ProgressBar, add_progress_flag, progress_wanted
from .suite import SolutionOutcome, SuiteOptions, run_suite
from .suite_imports import IMPORT_TIMEOUT_S
from .torch_baseline import BaselineReport, imported_problem, settings_batch_baselines
from .torch_import import TOLERANCE_MODES
from .workload import Workload, load_workload


def add_parser(sub: Any) -> None:
    """Add ``kernelbench`` to the CLI's subcommands."""
    sp = sub.add_parser(
        "kernelbench",
        help="import every problem of a KernelBench checkout (level1/ ... level3/, N_Name.py), evaluate the solutions "
        "found, and write a table (correct %%, fast_p, speedups) and JSON; a second run continues",
    )
    sp.add_argument("problems_dir", help="the directory holding level1/, level2/, level3/ (KernelBench's KernelBench/)")
    sp.add_argument("--level", type=int, nargs="+", default=[1, 2, 3], choices=[1, 2, 3, 4],
                    help="levels (default 1 2 3)")
    sp.add_argument("--solutions",
                    help="directory of <problem>.cu + <problem>.launch.json (or levelL/ folders of them)")
    sp.add_argument("-o", "--output", default="kernelbench-out",
                    help="where workloads, state.json, table.md, results.json and report.html go "
                         "(default ./kernelbench-out)")
    sp.add_argument("--tolerance", choices=TOLERANCE_MODES, default="strict",
                    help="strict (default): by the output's dtype; kernelbench: atol = rtol = 1e-2")
    sp.add_argument("--no-baselines", action="store_true",
                    help="do not time PyTorch eager and torch.compile (by default each imported problem's are timed on "
                    "the GPU, in a child process, and cached)")
    sp.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1),
                    help="problems imported at once, each in a process of its own (default: the CPUs, at most 8)")
    sp.add_argument("--import-timeout", type=float, default=IMPORT_TIMEOUT_S, metavar="S",
                    help=f"seconds one import may take (default {IMPORT_TIMEOUT_S:.0f}): "
                    "past it the problem is refused")
    sp.add_argument("--time-budget", type=float, metavar="S",
                    help="start no evaluation and no batch of PyTorch baselines after S seconds: the tables are "
                    "written with what was done and a second run continues (for a GPU lent by the hour)")
    sp.add_argument("--json", action="store_true", help="print results.json instead of the table")
    add_progress_flag(sp)  # problems done / total
    sp.set_defaults(fn=cmd_kernelbench)


class _Evaluator:
    """Evaluates each solution in a harness process of its own: what one problem's evaluation keeps
    on the device (its expected values, up to 30% of the GPU's memory) is gone before the next
    problem's PyTorch reference runs beside the harness, and a harness one problem broke ends
    with it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.device: DeviceInfo | None = None

    def __call__(self, workload_dir: Path, kernel: Path, launch_file: Path) -> SolutionOutcome:
        try:
            workload = find_workload(workload_dir, self.settings)
            candidate = _candidate(kernel, launch_file)
        except (KerneloptError, ValueError) as exc:
            return SolutionOutcome("error", None, str(exc))
        if self.device is None:
            self.device = app.gpu_info(self.settings)
        with app.open_harness(self.settings) as proc, app.open_session(self.settings, workload, proc,
                                                                        self.device) as session:
            checked = app.evaluate_kernel(session, candidate)
            steps = {step: round(ms / 1e3, 2) for step, ms in session.prepare_ms.items()}
            expected_from = session.record.expected_from
        return SolutionOutcome(checked.status, checked.result.score_ms, checked.message, steps, expected_from)


class _Baselines:
    """PyTorch eager and torch.compile on imported problems' performance cases, a batch at a time in
    one timing child, on the evaluator's device (asked for at the first batch when no solution
    started a harness)."""

    def __init__(self, settings: Settings, evaluator: _Evaluator) -> None:
        self.settings, self.evaluator = settings, evaluator

    def __call__(self, workload_dirs: list[Path]) -> list[BaselineReport]:
        reports: list[BaselineReport | None] = [None] * len(workload_dirs)
        loaded: list[tuple[int, Workload]] = []
        for i, directory in enumerate(workload_dirs):
            try:
                workload = load_workload(directory)
            except KerneloptError as exc:
                reports[i] = BaselineReport.unmeasured(f"PyTorch eager and torch.compile not timed: {exc}")
                continue
            if imported_problem(workload) is None:
                reports[i] = BaselineReport.unmeasured(f"not timed: {directory} is not an imported PyTorch "
                                                       "problem (no problem.py)")
            else:
                loaded.append((i, workload))
        if loaded:
            try:
                if self.evaluator.device is None:
                    self.evaluator.device = app.gpu_info(self.settings)
            except KerneloptError as exc:
                blocked = BaselineReport.unmeasured(
                    f"PyTorch eager and torch.compile not timed: no GPU here ({exc})", blocked=True)
                return [r or blocked for r in reports]
            timed = settings_batch_baselines(self.settings, [w for _, w in loaded], self.evaluator.device,
                                             app.evaluate_options(self.settings))
            for (i, _), report in zip(loaded, timed, strict=True):
                reports[i] = report
        return [r or BaselineReport.unmeasured("not timed") for r in reports]


def _candidate(kernel: Path, launch_file: Path) -> Candidate:
    if not launch_file.is_file():
        raise WorkloadError(f"{kernel}: no launch configuration: add {launch_file.name} beside it")
    data = json.loads(read_text(launch_file, "launch file", KerneloptError))
    options: list[str] = []
    if isinstance(data, dict) and "launch" in data:
        options, data = list(data.get("compile_options") or []), data["launch"]
    return Candidate(read_text(kernel, "kernel source", KerneloptError), LaunchSpec.model_validate(data),
                     options, kernel.stem)


def cmd_kernelbench(args: argparse.Namespace, out: Console) -> int:
    options = SuiteOptions(
        problems_dir=Path(args.problems_dir), out_dir=Path(args.output), levels=tuple(args.level),
        solutions=Path(args.solutions) if args.solutions else None, tolerance=args.tolerance, jobs=max(1, args.jobs),
        import_timeout_s=args.import_timeout, time_budget_s=args.time_budget,
    )
    settings = Settings.from_env()

    bar = ProgressBar("kernelbench", enabled=progress_wanted(args.progress))

    def progress(done: int, total: int, line: str) -> None:
        if bar.active:
            bar.step(line, done, total)  # problems done / total
        elif not args.json:
            out.print(f"[dim][{done}/{total}][/] {escape(line)}", highlight=False)

    with bar:
        evaluator = _Evaluator(settings)
        baselines = None if args.no_baselines else _Baselines(settings, evaluator)
        records = run_suite(options, evaluator if options.solutions else None, progress, baselines)
    table = (options.out_dir / ("results.json" if args.json else "table.md")).read_text()
    if args.json:
        print(table)
    else:
        out.print(escape(table), highlight=False)
        out.print(escape(f"written: {options.out_dir / 'table.md'}, {options.out_dir / 'results.json'}, "
                         f"{options.out_dir / 'report.html'}"),
                  highlight=False)
    return 0 if records else 1
