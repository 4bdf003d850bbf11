"""The autotune tool's compact result (what a model reads), built from a :class:`TuneResult`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .space import Value
from .spec import Tunable
from .tuner import TrialRow, TuneCounts, TuneResult


class AutotuneOutput(BaseModel):
    status: str = Field(description="ok (a configuration passed every case) | no_valid_configuration")
    workload: str
    device: str | None = None
    strategy: str
    best_params: dict[str, Value] | None = None
    best_score_ms: float | None = Field(None, description="geometric mean of the performance cases' medians")
    best_case_ms: dict[str, float] = Field(default_factory=dict)
    best_launch: dict[str, Any] | None = Field(None, description="the launch spec with the best values substituted")
    untuned_params: dict[str, Value]
    untuned_status: str | None = None
    untuned_score_ms: float | None = None
    speedup_vs_untuned: float | None = None
    reference_score_ms: float | None = None
    speedup_vs_reference: float | None = None
    counts: TuneCounts
    space_size: int
    valid_space_size: int | None = None
    stop_reason: str = ""
    elapsed_s: float = 0.0
    top: list[TrialRow] = Field(default_factory=list, description="the fastest configurations, then failures")
    rows_not_shown: int = 0
    saved_to: str | None = Field(None, description="directory with tune.json, tune.csv, best.cu, best.launch.json")
    notes: list[str] = Field(default_factory=list, description="what the server changed in the request, and why")

    def text(self) -> str:
        c = self.counts
        lines = [
            (f"autotune {self.workload} on {self.device or '?'} ({self.strategy}): {self.status}; "
             f"{c.tried} of {self.valid_space_size if self.valid_space_size is not None else self.space_size} "
             f"configurations tried ({c.measured} measured, {c.cached} from the cache) in {self.elapsed_s:.1f} s; "
             f"{self.stop_reason}"),
        ]
        if self.best_params is not None and self.best_score_ms:
            line = f"best {self.best_params}: {self.best_score_ms:.4g} ms"
            if self.speedup_vs_untuned:
                line += (f", {self.speedup_vs_untuned:.3g}x vs untuned {self.untuned_params} "
                         f"({self.untuned_score_ms:.4g} ms)")
            if self.speedup_vs_reference:
                line += f", {self.speedup_vs_reference:.3g}x vs the CUDA reference ({self.reference_score_ms:.4g} ms)"
            lines.append(line)
            lines.append(f"best launch: {self.best_launch}")
        else:
            lines.append(f"no configuration passed every case; the untuned {self.untuned_params}: "
                         f"{self.untuned_status}")
        lines.append(
            f"ok {c.ok}, stopped early {c.stopped_early}, skipped by constraints {c.skipped_by_constraint}, "
            f"compile errors {c.compile_errors}, "
            f"invalid launches {c.invalid_launches}, other failures {c.failures}"
        )
        for r in self.top:
            score = f"{r.score_ms:.4g} ms" if r.score_ms else r.status
            extra = f" - {r.message[:160]}" if r.status != "ok" and r.message else ""
            lines.append(f"  #{r.index} {r.params}: {score}" + (" (cached)" if r.cached else "") + extra)
        if self.rows_not_shown:
            lines.append(f"  ... {self.rows_not_shown} more rows in tune.csv")
        if self.saved_to:
            lines.append(f"saved to {self.saved_to}")
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)


def autotune_output(result: TuneResult, tunable: Tunable, top: int, saved_to: str | None) -> AutotuneOutput:
    ranked = result.ranked()
    best = result.best
    untuned = result.untuned
    shown = best or untuned
    return AutotuneOutput(
        status="ok" if best is not None else "no_valid_configuration",
        workload=result.workload, device=shown.device if shown else None,
        strategy=result.strategy, best_params=result.best_params,
        best_score_ms=best.score_ms if best else None,
        best_case_ms={c.name: c.timing.median_ms for c in best.cases if c.timing} if best else {},
        best_launch=tunable.materialize(result.best_params)[1].model_dump(mode="json", exclude_none=True)
        if result.best_params is not None else None,
        untuned_params=result.untuned_params, untuned_status=untuned.status.value if untuned else None,
        untuned_score_ms=untuned.score_ms if untuned and untuned.ok else None,
        speedup_vs_untuned=result.speedup_vs_untuned, reference_score_ms=result.reference_score_ms,
        speedup_vs_reference=result.speedup_vs_reference, counts=result.counts, space_size=result.space_size,
        valid_space_size=result.valid_space_size, stop_reason=result.stop_reason, elapsed_s=result.elapsed_s,
        top=ranked[:top], rows_not_shown=max(0, len(ranked) - top), saved_to=saved_to,
    )
