"""``OUT/report.html`` of ``kernelopt kernelbench``: the suite's figures as one page for a person.

The same records and definitions as table.md and results.json (suite_table.py): per level the
correct share, ``fast_p`` and the geometric-mean speedups against PyTorch eager and
``torch.compile``; a plot of each correct problem's speedups; the refusals by reason, the reasons a
baseline was not timed, and every problem's row. Self-contained (report_page.py): it opens
offline, and a problem's name or message cannot run in it.
"""

from __future__ import annotations

import math

from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from .report_page import escape, figure, render_page, svg_text
from .suite_table import (
    BASELINES,
    PROBLEM_HEAD,
    ProblemRecord,
    baseline_coverage,
    level_table,
    problem_rows,
    refusals_and_notes,
)

__all__ = ["REPORT_NAME", "render_html"]

REPORT_NAME = "report.html"
SECTIONS = {"levels": "Levels", "speedups": "Speedups", "problems": "Problems", "notes": "Refusals and notes"}
_NAMES = {"eager": "PyTorch eager", "compile": "torch.compile"}


def render_html(records: list[ProblemRecord], source: str) -> str:
    """The page for ``records`` (``source``: the output directory, named in the footer)."""
    correct = sum(r.correct for r in records)
    sections = {
        "levels": _levels(records),
        "speedups": _speedups(records),
        "problems": _problems(records),
        "notes": _notes(records),
    }
    body = "\n".join(f'<section id="{key}">\n<h2>{SECTIONS[key]}</h2>\n{html}\n</section>'
                     for key, html in sections.items())
    return render_page(
        title="KernelBench suite",
        subtitle=f"{len(records)} problems, {sum(r.imported for r in records)} imported, {correct} correct",
        nav=SECTIONS, sections=body, source=source,
    )


def _levels(records: list[ProblemRecord]) -> str:
    head, rows = level_table(records)
    return ('<p class="muted">fast_p: the share of all problems of the level that are correct and more than p '
            "times faster than the baseline (KernelBench's definition: a refused or failing problem counts "
            "against it); geomean: the geometric mean of baseline time / ours over the correct problems with "
            "both times.</p>\n" + _table(head, [[(c, "num") for c in row] for row in rows]))


def _table(head: list[str], rows: list[list[tuple[str, str]]]) -> str:
    """An HTML table of text cells, each with its class ("" for none)."""
    lines = ["<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"]
    lines += ["<tr>" + "".join(f'<td class="{kind}">{escape(text)}</td>' if kind else f"<td>{escape(text)}</td>"
                               for text, kind in row) + "</tr>" for row in rows]
    return "\n".join(lines) + "\n</table>"


def _speedups(records: list[ProblemRecord]) -> str:
    """A bar per correct problem with a baseline time: its speedup over each baseline, log scale."""
    rows = [(r, [r.speedup(b) for b in BASELINES]) for r in records if r.correct]
    rows = [(r, s) for r, s in rows if any(x is not None for x in s)]
    if not rows:
        return '<p class="muted">No correct problem has a baseline time to compare with.</p>'
    rows.sort(key=lambda rs: max(x for x in rs[1] if x is not None))
    fig = figure(9.0, max(2.5, 0.28 * len(rows) + 1.2))
    ax = fig.add_subplot(1, 1, 1)
    height = 0.8 / len(BASELINES)
    for k, base in enumerate(BASELINES):
        ys = [i + (k - (len(BASELINES) - 1) / 2) * height for i in range(len(rows))]
        xs = [math.nan if (v := s[k]) is None else v for _, s in rows]
        ax.barh(ys, xs, height=height, label=f"vs {_NAMES[base]}")
    ax.axvline(1.0, color="#57606a", linewidth=1)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_yticks(range(len(rows)), [r.problem for r, _ in rows], fontsize=7)
    ax.set_xlabel("speedup (baseline time / ours; right of the line is faster)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return svg_text(fig, "speedups")


def _problems(records: list[ProblemRecord]) -> str:
    rows = []
    for r, cells in problem_rows(records):
        kind = "ok" if r.correct else "bad" if r.status or not r.imported else "muted"
        rows.append([(cells[0], ""), (cells[1], "num"), (cells[2], kind)] + [(c, "num") for c in cells[3:]])
    return _table(PROBLEM_HEAD, rows)


def _notes(records: list[ProblemRecord]) -> str:
    refusals, notes = refusals_and_notes(records)
    parts = []
    if refusals:
        parts.append('<h3>Refused</h3>\n<ul class="notes">' + "".join(
            f"<li>{count} x {escape(reason)}</li>" for reason, count in refusals.most_common()) + "</ul>")
    parts.append('<h3>Baseline times</h3>\n<ul class="notes">'
                 + "".join(f"<li>{escape(n)}</li>" for n in baseline_coverage(records) + notes) + "</ul>")
    return "\n".join(parts)
