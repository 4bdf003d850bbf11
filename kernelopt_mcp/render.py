"""Rendering results for a terminal (rich): what the ``kernelopt`` commands print without --json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .evaluation.calibrate import Calibration
from .evaluation.device import DeviceInfo
from .evaluation.outcomes import EvaluationResult
from .results import CheckedEvaluation
from .sanitizer import SANITIZER_ERROR, SanitizerReport

__all__ = ["print_calibration", "print_evaluation", "print_result", "print_sanitizer", "print_tune", "size_text"]


def print_evaluation(
    out: Console, checked: CheckedEvaluation, reference: EvaluationResult | None, *, sanitize_asked: bool
) -> None:
    """One kernel's evaluation: the case table, then compute-sanitizer's verdict when it ran."""
    print_result(out, checked.result, reference)
    if checked.sanitizer is not None:
        print_sanitizer(out, checked.sanitizer, checked.sanitizer_message, checked.clean)
    elif sanitize_asked:
        out.print("[dim]sanitizer not run: the kernel must pass validation first[/]", highlight=False)


def print_sanitizer(out: Console, reports: list[SanitizerReport], verdict_line: str, clean: bool) -> None:
    table = Table(title="compute-sanitizer on the correctness cases")
    for col in ("case", "tool", "result", "errors", "first finding"):
        table.add_column(col)
    for r in reports:
        first = r.findings[0].summary() if r.findings else r.message
        table.add_row(
            r.case, r.tool.value, "[green]clean[/]" if r.passed else "[red]errors[/]", str(r.errors), escape(first),
        )
    out.print(table)
    out.print(f"[bold]{'ok' if clean else SANITIZER_ERROR}[/]: {escape(verdict_line)}", highlight=False)


def print_result(out: Console, result: EvaluationResult, reference: EvaluationResult | None) -> None:
    out.print(
        f"[bold]{result.workload}[/] · {result.candidate} · {result.device or result.arch} · seed {result.seed}",
        highlight=False,
    )
    if result.compile is not None and result.compile.ok:
        out.print(f"  {escape(result.compile.summary())}", highlight=False)
    table = Table()
    for col in ("case", "kind", "status", "max rel err", "median ms", "IQR ms", "ref ms", "speedup", "GB/s", "TFLOP/s"):
        table.add_column(col, justify="right" if col not in ("case", "kind", "status") else "left")
    for c in result.cases:
        t = c.timing
        err = max((o.max_rel_error for o in c.outputs), default=None)
        style = "green" if c.status == "ok" else "red"
        table.add_row(
            c.name, c.kind, f"[{style}]{c.status.value}[/]",
            f"{err:.2e}" if err is not None else "",
            f"{t.median_ms:.4f}" if t else "",
            f"{t.iqr_ms:.4f}" if t else "",
            f"{c.reference_median_ms:.4f}" if c.reference_median_ms else "",
            f"{c.speedup:.2f}x" if c.speedup else "",
            f"{c.bytes_per_s / 1e9:.0f}" if c.bytes_per_s else "",
            f"{c.flops_per_s / 1e12:.2f}" if c.flops_per_s else "",
        )
    out.print(table)
    for c in result.cases:
        if c.message:
            out.print(f"  [red]{c.name}[/]: {escape(c.message)}", highlight=False)
    line = f"[bold]{result.status.value}[/]: {escape(result.message)}"
    if result.speedup:
        line += f"; speedup vs CUDA reference {result.speedup:.2f}x (reference score {result.reference_score_ms:.4g} ms)"
    out.print(line, highlight=False)
    out.print(f"[dim]expected outputs: {escape(result.expected_from)}[/]", highlight=False)
    if result.inputs_from:
        out.print(f"[dim]inputs: {escape(result.inputs_from)}[/]", highlight=False)
    if result.phases is not None:
        out.print(f"[dim]{escape(result.phases.text())}[/]", highlight=False)
    for note in result.notes:
        out.print(f"[yellow]note:[/] {escape(note)}", highlight=False)


def print_calibration(out: Console, info: DeviceInfo, cal: Calibration, cache_root: Path) -> None:
    table = Table(title=f"calibration of {escape(info.summary())}, measured {cal.measured_at}")
    for col in ("", "measured", "theoretical", "%", "median ms", "IQR ms"):
        table.add_column(col, justify="left" if not col else "right")
    for label, value, theory, unit, t in (
        ("copy bandwidth (read + write)", cal.copy_bytes_per_s, cal.theoretical_bytes_per_s, "TB/s", cal.copy_timing),
        ("FP32 FMA rate", cal.fma_flops_per_s, cal.theoretical_flops_per_s, "TFLOP/s", cal.fma_timing),
    ):
        table.add_row(
            label, f"{value / 1e12:.2f} {unit}", f"{theory / 1e12:.2f} {unit}" if theory else "",
            f"{100 * value / theory:.0f}%" if theory else "", f"{t.median_ms:.4f}", f"{t.iqr_ms:.4f}",
        )
    out.print(table)
    if cal.clocks is not None:
        out.print(f"[dim]clocks after: {escape(cal.clocks.summary())}[/]", highlight=False)
    out.print(f"[dim]cached in {escape(str(cache_root / 'calibration'))}; "
              "`kernelopt gpu --calibrate --force` measures again[/]", highlight=False)


def print_tune(out: Console, result: Any, top: int) -> None:
    names = list(result.untuned_params)
    table = Table(title=f"{result.workload}: {result.strategy} search, {result.counts.tried} of "
                  f"{result.valid_space_size if result.valid_space_size is not None else result.space_size} configurations")
    for col in ("#", *names, "status", "score ms", "vs untuned", "vs ref", "cached"):
        table.add_column(col, justify="left" if col == "status" else "right")
    rows = result.ranked()
    shown = rows[:top] + [r for r in rows[top:] if r.index == 0]  # the untuned row always
    for r in shown:
        style = "green" if r.status == "ok" else "yellow" if r.status == "stopped_early" else "red"
        mark = " (untuned)" if r.index == 0 else ""
        score = f"{r.score_ms:.4g}" if r.score_ms else f">= {r.score_bound_ms:.4g}" if r.score_bound_ms else ""
        table.add_row(
            f"{r.index}{mark}", *(str(r.params.get(n)) for n in names), f"[{style}]{r.status}[/]",
            score, f"{r.speedup_vs_untuned:.2f}x" if r.speedup_vs_untuned else "",
            f"{r.speedup_vs_reference:.2f}x" if r.speedup_vs_reference else "", "yes" if r.cached else "",
        )
    out.print(table)
    if len(rows) > len(shown):
        out.print(f"[dim]({len(rows) - len(shown)} more rows in tune.csv)[/]")


def size_text(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)
