"""The run report's figures as inline SVG strings (kernelopt_mcp.report_page draws and inlines them)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.ticker import MaxNLocator

from kernelopt_mcp.report_page import figure, svg_text

VALID, INVALID, BEST, REFERENCE = "#1f77b4", "#d62728", "#2ca02c", "#7f7f7f"


@dataclass
class ScorePoint:
    """One evaluated candidate in the order the run evaluated it."""

    label: str
    score_ms: float | None  # None: invalid or untimed
    valid: bool


@dataclass
class BoxStats:
    """One timing distribution, from the benchmark's summary (the harness keeps no raw samples)."""

    label: str
    median_ms: float
    q1_ms: float
    q3_ms: float
    min_ms: float
    max_ms: float


def _log_scale_wanted(values: Sequence[float]) -> bool:
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) / min(positive) > 20


def score_plot(points: Sequence[ScorePoint], reference_ms: float | None) -> str:
    """Score (geometric-mean latency) of each candidate in evaluation order, the best-so-far line,
    invalid candidates as red crosses along the bottom and the CUDA reference as a dashed line."""
    fig = figure(max(8.0, min(14.0, 0.35 * len(points) + 5)), 3.6)
    ax = fig.add_subplot()
    xs = list(range(len(points)))
    timed = [(x, p.score_ms) for x, p in zip(xs, points, strict=True) if p.valid and p.score_ms]
    if timed:
        ax.plot([x for x, _ in timed], [s for _, s in timed], "o", color=VALID, label="valid candidate", zorder=3)
        best_x, best_y, best = [], [], math.inf
        for x, score in timed:
            best = min(best, score)
            best_x.append(x)
            best_y.append(best)
        best_x.append(xs[-1])
        best_y.append(best)
        ax.step(best_x, best_y, where="post", color=BEST, linewidth=2, label="best so far", zorder=2)
    if reference_ms:
        ax.axhline(reference_ms, color=REFERENCE, linestyle="--", linewidth=1, label="CUDA reference "
                   f"{reference_ms:.4g} ms")
    invalid = [x for x, p in zip(xs, points, strict=True) if not p.valid]
    if invalid:
        ax.plot(invalid, [0.02] * len(invalid), "x", color=INVALID, markersize=8, mew=2, label="invalid",
                transform=ax.get_xaxis_transform(), clip_on=False, zorder=4)
    if _log_scale_wanted([s for _, s in timed] + ([reference_ms] if reference_ms else [])):
        ax.set_yscale("log")
    ax.set_xticks(xs, labels=[p.label for p in points], rotation=30, ha="right", fontsize=8)
    ax.set_xlim(-0.5, max(len(points) - 0.5, 0.5))
    ax.set_ylabel("score: geometric-mean latency (ms)", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title("score over the run (lower is better)", fontsize=10)
    fig.tight_layout()
    return svg_text(fig, "score")


def timing_boxes(cases: Sequence[str], boxes: dict[str, list[BoxStats]]) -> str:
    """One panel per performance case, one box per candidate: quartiles, median, min-max whiskers."""
    shown = [c for c in cases if boxes.get(c)]
    widest = max((len(boxes[c]) for c in shown), default=1)
    columns = 1 if widest > 6 else min(2, len(shown))
    rows = math.ceil(len(shown) / columns)
    fig = figure(max(6.0, min(14.0, (0.45 * widest + 2.5) * columns)), 3.4 * rows)
    for n, case in enumerate(shown):
        ax = fig.add_subplot(rows, columns, n + 1)
        stats = [{"label": b.label, "med": b.median_ms, "q1": b.q1_ms, "q3": b.q3_ms, "whislo": b.min_ms,
                  "whishi": b.max_ms, "fliers": []} for b in boxes[case]]
        parts = ax.bxp(stats, showfliers=False, patch_artist=True, widths=0.6)
        for box, b in zip(parts["boxes"], boxes[case], strict=True):
            box.set_facecolor("#dddddd" if b.label.endswith("reference") else "#aec7e8")
        for median in parts["medians"]:
            median.set_color("#d62728")
        if _log_scale_wanted([b.median_ms for b in boxes[case]]):
            ax.set_yscale("log")
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        for tick in ax.get_xticklabels():
            tick.set_horizontalalignment("right")
        ax.set_ylabel("ms per launch", fontsize=9)
        ax.set_title(case, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return svg_text(fig, "timing")


def tuning_plot(label: str, scores: Sequence[float | None]) -> str:
    """Score of each configuration in the order the tuner measured it, with the best-so-far line;
    configurations that failed (compile error, mismatch, bad launch) as red crosses."""
    fig = figure(8.0, 3.0)
    ax = fig.add_subplot()
    ok = [(i, s) for i, s in enumerate(scores) if s]
    if ok:
        ax.plot([i for i, _ in ok], [s for _, s in ok], ".", color=VALID, markersize=7, label="configuration")
        best, best_y = math.inf, []
        for _, s in ok:
            best = min(best, s)
            best_y.append(best)
        ax.step([i for i, _ in ok], best_y, where="post", color=BEST, linewidth=2, label="best so far")
    failed = [i for i, s in enumerate(scores) if not s]
    if failed:
        ax.plot(failed, [0.02] * len(failed), "x", color=INVALID, mew=2, label="failed",
                transform=ax.get_xaxis_transform(), clip_on=False)
    if _log_scale_wanted([s for _, s in ok]):
        ax.set_yscale("log")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("configuration, in the order measured", fontsize=9)
    ax.set_ylabel("score (ms)", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(f"tuning {label}", fontsize=10)
    fig.tight_layout()
    return svg_text(fig, f"tuning-{label}")
