"""Rendering results: what the ``kernelopt`` commands print (rich tables for a terminal, or the
result's JSON under --json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .evaluation.calibrate import Calibration
from .evaluation.device import DeviceInfo
from .evaluation.outcomes import EvaluationResult
from .results import CheckedEvaluation
from .sanitizer import SANITIZER_ERROR, SanitizerReport
from .torch_comparison import TorchComparison

if TYPE_CHECKING:
    from .workflows import Evaluations, Tuning

__all__ = [
    "print_calibration", "print_evaluation", "print_evaluations", "print_result", "print_sanitizer",
    "print_torch_baseline",
    "print_tune", "print_tuning", "size_text",
]


def print_evaluations(
    out: Console, run: Evaluations, beside: list[TorchComparison] | None, *, as_json: bool, sanitize_asked: bool,
) -> None:
    """Every kernel of a ``kernelopt evaluate`` (with PyTorch's times ``beside`` each, where
    measured), then the preparation's times; as JSON, one object per kernel (one kernel: the object)."""
    if as_json:
        payloads = [{**checked.as_json(run.reference), "preparation_ms": run.preparation_ms} for checked in run.checked]
        if beside is not None:
            for payload, comparison in zip(payloads, beside, strict=True):
                payload["torch_baseline"] = comparison.model_dump(mode="json")
        print(json.dumps(payloads[0] if len(payloads) == 1 else payloads, indent=2))
        return
    for i, checked in enumerate(run.checked):
        print_evaluation(out, checked, run.reference, sanitize_asked=sanitize_asked)
        if beside is not None:
            print_torch_baseline(out, beside[i])
    if run.preparation_ms:
        from .evaluation.evaluate import preparation_text

        out.print(f"[dim]{escape(preparation_text(run.preparation_ms))}[/]", highlight=False)


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
        line += (f"; speedup vs CUDA reference {result.speedup:.2f}x (reference score "
                 f"{result.reference_score_ms:.4g} ms)")
    out.print(line, highlight=False)
    out.print(f"[dim]expected outputs: {escape(result.expected_from)}[/]", highlight=False)
    if result.inputs_from:
        out.print(f"[dim]inputs: {escape(result.inputs_from)}[/]", highlight=False)
    if result.phases is not None:
        out.print(f"[dim]{escape(result.phases.text())}[/]", highlight=False)
    for note in result.notes:
        out.print(f"[yellow]note:[/] {escape(note)}", highlight=False)


def print_torch_baseline(out: Console, comparison: TorchComparison) -> None:
    """An imported problem's performance cases beside PyTorch eager and torch.compile (one line
    where they were not timed)."""
    if not comparison.cases:
        out.print(f"[yellow]PyTorch baselines:[/] {escape(comparison.note or 'not measured')}", highlight=False)
        return
    title = (f"PyTorch {comparison.torch_version or '?'} on {comparison.device_name or '?'}, torch.compile mode "
             f"{comparison.mode}{' (cached)' if comparison.cached else ''}")
    table = Table(title=escape(title))
    for col in ("case", "ours ms", "eager ms", "vs eager", "compile ms", "vs compile"):
        table.add_column(col, justify="left" if col == "case" else "right")

    def ms(x: float | None) -> str:
        return f"{x:.4f}" if x else ""

    def times(x: float | None) -> str:
        return f"{x:.2f}x" if x else ""

    for c in comparison.cases:
        table.add_row(c.case, ms(c.ours_ms), ms(c.eager.median_ms if c.eager else None), times(c.speedup_eager),
                      ms(c.compile.median_ms if c.compile else None), times(c.speedup_compile))
    if len(comparison.cases) > 1:
        table.add_row("geomean", ms(comparison.ours_ms), ms(comparison.eager_ms), times(comparison.speedup_eager),
                      ms(comparison.compile_ms), times(comparison.speedup_compile))
    out.print(table)
    line = []
    if comparison.speedup_eager:
        line.append(f"speedup vs PyTorch eager {comparison.speedup_eager:.2f}x")
    if comparison.speedup_compile:
        line.append(f"vs torch.compile {comparison.speedup_compile:.2f}x")
    if line:
        out.print(f"[bold]{escape(', '.join(line))}[/]", highlight=False)
    shown: set[str] = set()
    for label, note in (("note", comparison.note), ("eager", comparison.eager_note),
                        ("torch.compile", comparison.compile_note)):
        if note and note not in shown:
            shown.add(note)
            out.print(f"[yellow]{label}:[/] {escape(note)}", highlight=False)


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
                  f"{result.valid_space_size if result.valid_space_size is not None else result.space_size} "
                  "configurations")
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


def print_tuning(out: Console, tuning: Tuning, top: int, *, as_json: bool) -> None:
    """A ``kernelopt tune`` run: the ranked table, where it was saved and the summary line; as JSON,
    the result (without the compiles' details)."""
    from .tune.tuner import summary_line

    result = tuning.result
    if as_json:
        print(result.model_dump_json(indent=2, exclude={"best": {"compile"}, "untuned": {"compile"}}))
        return
    print_tune(out, result, top)
    out.print(f"saved in {escape(str(tuning.directory))}: {', '.join(tuning.written)}", highlight=False)
    out.print(escape(summary_line(result)), highlight=False)


def size_text(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)
