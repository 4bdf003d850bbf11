"""What every section of bench/run.py is built on (bench/run.py imports it from here): the
:class:`Section` a section returns and its rendering as a table, the :class:`Bench` it runs
against, the candidates it evaluates (a workload's CUDA reference, equivalent variants of it) and
the kernels' own GPU time in an evaluation. bench/vendor.py reuses them through bench/run.py,
which puts the repository on sys.path before importing this module.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from kernelopt_mcp import (
    Candidate,
    EvaluateOptions,
    EvaluationResult,
    HarnessProcess,
    Session,
    Settings,
    app,
)
from kernelopt_mcp.compiler import CompileCache
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.errors import KerneloptError
from kernelopt_mcp.evaluation.device import DeviceInfo, device_info
from kernelopt_mcp.evaluation.evaluate import evaluate, prepare
from kernelopt_mcp.evaluation.harness import find_harness
from kernelopt_mcp.evaluation.outcomes import PhaseTimes
from kernelopt_mcp.workload import Workload


@dataclass
class Section:
    """One table: rows of figures, the target it is judged against, and the verdict."""

    name: str
    title: str
    target: str
    columns: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    passed: bool | None = None  # None: not judged (skipped, or no target)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None

    def as_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def bench_workload(name: str, settings: Settings, cases: list[str] | None = None,
                  scalars: dict[str, dict[str, Any]] | None = None) -> Workload:
    """A workload, optionally cut down to ``cases`` and with case scalars overridden."""
    wl = find_workload(name, settings)
    if cases is not None or scalars:
        chosen = [wl.spec.case(c) for c in cases] if cases is not None else list(wl.spec.cases)
        chosen = [c.model_copy(update={"scalars": {**c.scalars, **(scalars or {}).get(c.name, {})}})
                  for c in chosen]
        wl.spec = wl.spec.model_copy(update={"cases": chosen})
    return wl


@dataclass
class Bench:
    """What every section needs: settings, the harness binary, the device, a scratch directory."""

    settings: Settings
    harness: Path
    device: DeviceInfo
    workdir: Path
    options: EvaluateOptions = field(default_factory=EvaluateOptions)
    say: Callable[[str], None] = lambda message: None

    def workload(self, name: str, cases: list[str] | None = None,
                 scalars: dict[str, dict[str, Any]] | None = None) -> Workload:
        return bench_workload(name, self.settings, cases, scalars)

    @contextmanager
    def evaluator(
        self, wl: Workload, tag: str, *, time_reference: bool = False, options: EvaluateOptions | None = None,
    ) -> Iterator[Session]:
        # a compile cache of the bench's own (as the CLI and the server keep one: search compiles
        # ahead into it), so the user's cache neither serves nor keeps the bench's variants
        cache = CompileCache(self.workdir / "compile-cache")
        with HarnessProcess(self.harness, self.settings.device) as proc, app.open_session(
            self.settings, wl, proc, self.device, workdir=self.workdir / tag, options=options or self.options,
            cache=cache,
        ) as ev:
            prepare(ev, time_reference=time_reference)
            yield ev


def variant(candidate: Candidate, tag: str) -> Candidate:
    """The same kernel with a different comment: equivalent, but a new compile (no cache hit)."""
    return replace(candidate, source=f"// kernelopt bench variant {tag} {time.time_ns()}\n{candidate.source}")


def reference(wl: Workload) -> Candidate:
    if wl.reference_cu is None or wl.spec.reference.launch is None:
        raise KerneloptError(f"workload {wl.name} has no CUDA reference to benchmark with")
    return Candidate(wl.reference_cu, wl.spec.reference.launch, list(wl.spec.reference.compile_options), "reference")


def kernel_ms(result: EvaluationResult) -> float:
    """The kernels' own GPU time in one evaluation: measured + warm-up launches, and the two
    validation launches of each timed case (phase 1 and the one before timing). Launch times
    the harness does not report (warm-up, validation) are taken as the case's median."""
    ms = 0.0
    for case in result.cases:
        t = case.timing
        if t is None:
            continue
        samples = getattr(t, "samples", None) or t.iterations
        batch = getattr(t, "graph_batch", None) or 1  # graph mode: a sample is one launch of batch kernels
        ms += (t.mean_ms * samples + t.median_ms * t.warmup) * batch + t.median_ms * 2
        ms += getattr(t, "check_launch_ms", None) or 0.0  # protocol 2: the timed-inputs check launch
        ms += getattr(case, "confirm_launch_ms", None) or 0.0  # the confirm launch on fresh inputs
    return ms


def overhead_breakdown(phases: list[PhaseTimes], kernel_ms: float) -> str:
    """Where evaluations' host time went, each figure the median over ``phases``: the harness's
    steps (PROTOCOL.md, steps_ms; the kernels' ``kernel_ms`` are inside its launch and timing
    steps), what the round trips add to them (request parsing, answer, pipe), Python's work on
    the requests, the compile (a cache lookup when warm) and what is outside all of them."""
    if not phases:
        return "no evaluation to take apart"

    def med(values: list[float]) -> float:
        return statistics.median(values) if values else 0.0

    steps = sorted({k for p in phases for k in p.harness_steps_ms})
    step_ms = {k: med([p.harness_steps_ms.get(k, 0.0) for p in phases]) for k in steps}
    in_steps = med([sum(p.harness_steps_ms.values()) for p in phases])
    harness = med([p.harness_ms for p in phases])
    python = med([p.python_ms for p in phases])
    compile_ = med([p.compile_ms for p in phases])
    outside = med([p.total_ms - p.harness_ms - p.python_ms - p.compile_ms for p in phases])
    ranked = ", ".join(f"{k} {v:.1f}" for k, v in sorted(step_ms.items(), key=lambda kv: -kv[1]))
    return (
        f"{med([float(p.requests) for p in phases]):.0f} harness requests, {harness:.1f} ms round trip: "
        f"steps {in_steps:.1f} ms ({ranked or 'none reported'}; kernels {kernel_ms:.1f} ms inside), "
        f"parse/answer/pipe {harness - in_steps:.1f} ms; Python on the requests {python:.1f} ms; "
        f"compile {compile_:.1f} ms; outside the requests {outside:.1f} ms"
    )


def timed_evaluate(
    ev: Session, candidate: Candidate, phases: list[PhaseTimes] | None = None, options: EvaluateOptions | None = None,
) -> tuple[float, float, float]:
    """(wall ms, kernel ms, overhead ms) of one evaluation (``options``: the session's by default);
    its phases appended to ``phases``."""
    wall, k, _ = evaluate_counted(ev, candidate, phases, options)
    return wall, k, wall - k


def evaluate_counted(
    ev: Session, candidate: Candidate, phases: list[PhaseTimes] | None = None, options: EvaluateOptions | None = None,
) -> tuple[float, float, float]:
    """(wall ms, kernel ms, mean measured launches per timed case) of one evaluation; its
    phases (where the host time went) appended to ``phases``."""
    start = time.perf_counter()
    result = evaluate(ev, candidate, options)
    wall = (time.perf_counter() - start) * 1e3
    if not result.ok:
        raise KerneloptError(f"bench candidate failed: {result.status}: {result.message}")
    if phases is not None and result.phases is not None:
        phases.append(result.phases)
    samples = [t.samples or t.iterations for c in result.cases if (t := c.timing) is not None]
    return wall, kernel_ms(result), sum(samples) / max(len(samples), 1)


# --- output -----------------------------------------------------------------------------------


PERCENT_COLUMNS = ("CV", "difference", "kernel share")


def _cell(column: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "PASS" if value else "FAIL"
    if isinstance(value, float) and column == "vs off":
        return f"{value:.3f}x"
    if isinstance(value, float) and column == "vs baseline":
        return f"1/{1 / value:.0f}" if 0 < value < 0.5 else f"{value:.2f}x"
    if isinstance(value, float):
        return (f"{value:+.2%}" if column == "difference" else f"{value:.2%}" if column in PERCENT_COLUMNS
                else f"{value:.4g}")
    return str(value)


def print_section(out: Console, sec: Section) -> None:
    verdict = ("skipped" if sec.skipped
               else {True: "[green]PASS[/]", False: "[red]FAIL[/]", None: "reported"}[sec.passed])
    table = Table(title=f"{sec.title}\ntarget: {sec.target} -> {verdict}", title_justify="left")
    for col in sec.columns:
        table.add_column(col, justify="left" if col in ("mode", "kernel", "workload", "case") else "right")
    for row in sec.rows:
        table.add_row(*(_cell(col, row.get(col)) for col in sec.columns))
    out.print(table)
    for note in ([f"skipped: {sec.skipped}"] if sec.skipped else []) + sec.notes:
        out.print(f"[dim]{note}[/]", highlight=False)


def make_bench(settings: Settings, workdir: Path, say: Callable[[str], None]) -> Bench:
    harness = find_harness(settings.harness)
    options = app.evaluate_options(settings)
    return Bench(settings, harness, device_info(harness, settings.device), workdir, options, say)
