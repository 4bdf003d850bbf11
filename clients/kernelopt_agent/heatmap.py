"""heatmap.png and heatmap.svg: candidates x performance cases, each cell the candidate's median
latency relative to the CUDA reference's (below 1 is faster), invalid candidates marked; where
PyTorch is the reference there is no CUDA reference to time, and the initial kernel is the baseline.

Long runs (many iterations, --candidates N) keep the figure readable: past MAX_ROWS candidates it
shows the baseline rows, the fastest valid ones and the newest, in run order, and says so."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Colormap, TwoSlopeNorm
from matplotlib.figure import Figure

from kernelopt_mcp.files import write_atomic

if TYPE_CHECKING:
    from .records import CandidateRecord


def write_heatmap(
    run_path: Path, records: list[CandidateRecord], cases: list[str], reference: CandidateRecord | None,
    best: CandidateRecord | None, title: str, *, versus: str = "the CUDA reference",
) -> list[str]:
    """Draw the heatmap (no pyplot: no global state, no display needed); returns the file names.
    ``reference``: the baseline each latency is divided by, named ``versus`` in the figure."""
    rows = [r for r in records if r.kind != "reference"] or records
    total = len(rows)
    rows = pick_rows(rows, best)
    if len(rows) < total:
        title += f" · {len(rows)} of {total} candidates: the fastest and the newest"
    columns = [*cases, "geo-mean"]
    ratios = np.full((len(rows), len(columns)), np.nan)
    for i, r in enumerate(rows):
        logs = []
        for j, case in enumerate(cases):
            ref_ms = reference.case_ms.get(case) if reference else None
            ms = r.case_ms.get(case)
            if r.valid and ms and ref_ms:
                ratios[i, j] = ms / ref_ms
                logs.append(math.log(ms / ref_ms))
        if logs and len(logs) == len(cases):
            ratios[i, -1] = math.exp(sum(logs) / len(logs))
    log2 = np.log2(ratios)
    finite = log2[np.isfinite(log2)]
    span = max(float(np.abs(finite).max()) if finite.size else 1.0, 0.1)
    fig = Figure(figsize=(max(6.0, 1.5 * len(columns) + 3), max(2.5, 0.45 * len(rows) + 1.6)), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    cmap = _cmap()
    image = ax.imshow(np.ma.masked_invalid(log2), cmap=cmap, norm=TwoSlopeNorm(0.0, -span, span), aspect="auto")
    ax.set_xticks(range(len(columns)), labels=columns, rotation=20, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), labels=[r.label + (" *" if r is best else "") for r in rows], fontsize=8)
    for i, r in enumerate(rows):
        for j in range(len(columns)):
            value = ratios[i, j]
            if math.isfinite(value):
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if abs(math.log2(value)) > 0.6 * span else "black")
            elif not r.valid:
                ax.text(j, i, "invalid" if j else f"invalid: {r.status}", ha="center", va="center", fontsize=6.5,
                        color="#444444")
    colorbar = fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
    colorbar.set_label(f"latency / {versus.removeprefix('the ')} (log scale)", fontsize=8)
    ticks = [t for t in range(-6, 7) if -span <= t <= span] or [0]
    colorbar.set_ticks(ticks, labels=[f"{2.0 ** t:g}" for t in ticks])
    ax.set_title(title + f"\nmedian latency relative to {versus} (< 1 is faster; * = best)", fontsize=9)
    fig.tight_layout()
    names = []
    for ext in ("png", "svg"):
        path = run_path / f"heatmap.{ext}"
        image_bytes = io.BytesIO()  # in memory, then write_atomic (a fixed temporary name could collide)
        fig.savefig(image_bytes, format=ext)
        write_atomic(path, image_bytes.getvalue())
        names.append(path.name)
    return names


MAX_ROWS = 60


def pick_rows(rows: list[CandidateRecord], best: CandidateRecord | None,
              limit: int = MAX_ROWS) -> list[CandidateRecord]:
    """At most ``limit`` rows in run order: the baseline (non-model) rows, the best, the fastest valid, the newest."""
    if len(rows) <= limit:
        return rows
    keep = {id(r) for r in rows if r.iteration is None}
    if best is not None:
        keep.add(id(best))
    fastest = sorted((r for r in rows if r.valid and r.score_ms), key=lambda r: r.score_ms or math.inf)
    newest = list(reversed(rows))
    for pool, share in ((fastest, limit * 2 // 3), (newest, limit)):
        for r in pool:
            if len(keep) >= share:
                break
            keep.add(id(r))
    return [r for r in rows if id(r) in keep]


def _cmap() -> Colormap:
    from matplotlib import colormaps

    return colormaps["RdYlGn_r"].with_extremes(bad="#d9d9d9")  # invalid candidates: grey
