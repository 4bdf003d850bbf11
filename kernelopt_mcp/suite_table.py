"""The numbers a KernelBench-style suite is judged by, from per-problem records: pure arithmetic.

Definitions (KernelBench's): a problem's speedup is the baseline's time over ours (PyTorch eager,
or ``torch.compile``); ``fast_p`` is the share of *all* problems of a level that are correct and
more than ``p`` times faster than the baseline (a refused or failing problem counts against it);
the geometric-mean speedup is over the correct problems with both times. A time that was not
measured is never guessed: a problem without it cannot count as fast, the level says how many
lacked it, and a level where no problem has it shows no ``fast_p`` at all (``None``, rendered
"not measured") rather than a zero that reads as a result.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["BASELINES", "FAST_P", "PROBLEM_HEAD", "LevelSummary", "ProblemRecord", "baseline_coverage", "level_table",
           "problem_rows", "refusals_and_notes", "render_markdown", "summarize", "to_json"]

FAST_P = (0, 1, 2)
BASELINES = ("eager", "compile")


@dataclass(frozen=True)
class ProblemRecord:
    """One problem of the suite: whether it imported, how our kernel did, the baselines' times.

    ``status`` is the evaluation's status ("ok" is correct) or None where no solution was
    evaluated; ``eager_ms`` / ``compile_ms`` are None where not measured, with the reason in
    ``eager_note`` / ``compile_note``.
    """

    problem: str
    level: int
    imported: bool
    refusal: str | None = None
    status: str | None = None
    ours_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    eager_note: str | None = None
    compile_note: str | None = None

    @property
    def correct(self) -> bool:
        return self.imported and self.status == "ok"

    def speedup(self, baseline: str) -> float | None:
        """Baseline time / ours, for a correct problem with both times (else None)."""
        theirs = self.eager_ms if baseline == "eager" else self.compile_ms
        if not self.correct or not _positive(theirs) or not _positive(self.ours_ms):
            return None
        return float(theirs) / float(self.ours_ms)  # type: ignore[arg-type]


@dataclass
class LevelSummary:
    """A level's figures; ``fast`` and ``geomean_speedup`` keyed by baseline (None: not measured, or
    no solution of the level evaluated); ``timed``: the imported problems with that baseline's time."""

    level: int
    problems: int
    imported: int
    evaluated: int
    correct: int
    correct_pct: float
    fast: dict[str, dict[int, float | None]] = field(default_factory=dict)
    geomean_speedup: dict[str, float | None] = field(default_factory=dict)
    missing_time: dict[str, int] = field(default_factory=dict)
    timed: dict[str, int] = field(default_factory=dict)
    refusals: dict[str, int] = field(default_factory=dict)


def _positive(x: float | None) -> bool:
    return x is not None and math.isfinite(x) and x > 0


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summarize(records: list[ProblemRecord]) -> list[LevelSummary]:
    """Per level (ascending): correct %, ``fast_p`` for p in :data:`FAST_P` against each baseline
    (None where the baseline was not measured or no solution evaluated: a run that only times the
    baselines claims no 0%), the geometric-mean speedups, the baselines' coverage and the refusals
    by reason."""
    out = []
    for level in sorted({r.level for r in records}):
        rows = [r for r in records if r.level == level]
        n = len(rows)
        correct = [r for r in rows if r.correct]
        s = LevelSummary(
            level=level, problems=n, imported=sum(r.imported for r in rows),
            evaluated=sum(r.imported and r.status is not None for r in rows), correct=len(correct),
            correct_pct=100.0 * len(correct) / n,
            refusals=dict(Counter(r.refusal or "refused" for r in rows if not r.imported).most_common()),
        )
        for base in BASELINES:
            speedups = [sp for r in correct if (sp := r.speedup(base)) is not None]
            s.missing_time[base] = len(correct) - len(speedups)
            s.timed[base] = sum(r.imported and _positive(r.eager_ms if base == "eager" else r.compile_ms) for r in rows)
            known = s.timed[base] > 0 and s.evaluated > 0
            s.fast[base] = {p: (sum(sp > p for sp in speedups) / n if known else None) for p in FAST_P}
            s.geomean_speedup[base] = _geomean(speedups)
        out.append(s)
    return out


def _pct(x: float | None) -> str:
    return "not measured" if x is None else f"{100 * x:.1f}%"


def _times(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def level_table(records: list[ProblemRecord]) -> tuple[list[str], list[list[str]]]:
    """The per-level table's header and rows (text cells), as table.md and report.html show it."""
    head = ["level", "problems", "imported", "correct"]
    for base in BASELINES:
        head += [f"fast_{p} vs {base}" for p in FAST_P] + [f"geomean vs {base}"]
    rows = []
    for s in summarize(records):
        row = [str(s.level), str(s.problems), str(s.imported), f"{s.correct} ({s.correct_pct:.1f}%)"]
        for base in BASELINES:
            fast = [_pct(s.fast[base][p]) if s.evaluated else "no solutions" for p in FAST_P]
            row += fast + [_times(s.geomean_speedup[base])]
        rows.append(row)
    return head, rows


PROBLEM_HEAD = ["problem", "level", "status", "ours ms", "eager ms", "compile ms", "vs eager", "vs compile"]


def problem_rows(records: list[ProblemRecord]) -> list[tuple[ProblemRecord, list[str]]]:
    """Every problem (by level, then name) with its row's text cells (:data:`PROBLEM_HEAD`)."""
    out = []
    for r in sorted(records, key=lambda r: (r.level, r.problem)):
        status = (r.status or "not evaluated") if r.imported else f"refused: {r.refusal}"
        out.append((r, [r.problem, str(r.level), status, _ms(r.ours_ms), _ms(r.eager_ms), _ms(r.compile_ms),
                        _times(r.speedup("eager")), _times(r.speedup("compile"))]))
    return out


def baseline_coverage(records: list[ProblemRecord]) -> list[str]:
    """Per level, on how many of its imported problems each baseline was timed (the notes say why
    not on the others)."""
    return [f"level {s.level}: eager timed on {s.timed['eager']} of {s.imported} imported problems, "
            f"torch.compile on {s.timed['compile']}" for s in summarize(records)]


def refusals_and_notes(records: list[ProblemRecord]) -> tuple[Counter[str], list[str]]:
    """The refusals by reason (most first) and the reasons a baseline was not timed."""
    refusals = Counter(r.refusal or "refused" for r in records if not r.imported)
    return refusals, sorted({note for r in records for note in (r.eager_note, r.compile_note) if note})


def render_markdown(records: list[ProblemRecord]) -> str:
    """The per-level table, the refusals by reason and the per-problem rows, as markdown."""
    head, rows = level_table(records)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    refusals, notes = refusals_and_notes(records)
    if refusals:
        lines += ["", "Refused:"] + [f"- {count} x {reason}" for reason, count in refusals.most_common()]
    lines += ["", "Baseline times:"] + [f"- {line}" for line in baseline_coverage(records) + notes]
    lines += ["", "| " + " | ".join(PROBLEM_HEAD) + " |", "|" + "---|" * len(PROBLEM_HEAD)]
    lines += ["| " + " | ".join(cells) + " |" for _, cells in problem_rows(records)]
    return "\n".join(lines) + "\n"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def to_json(records: list[ProblemRecord]) -> str:
    """The summary per level and every problem's record, as JSON."""
    data: dict[str, Any] = {
        "definitions": {
            "fast_p": "share of all problems of the level that are correct and more than p times "
            "faster than the baseline",
            "geomean_speedup": "geometric mean of baseline time / ours over the correct problems with both times",
        },
        "levels": [asdict(s) for s in summarize(records)],
        "problems": [{**asdict(r), "correct": r.correct, "speedup_eager": r.speedup("eager"),
                      "speedup_compile": r.speedup("compile")} for r in records],
    }
    return json.dumps(data, indent=2)
