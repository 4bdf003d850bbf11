"""report.html: one self-contained page per run, for a person to look at.

Written by the orchestrator at the end of every run (finalize) and by ``kernelopt runs report
[RUN]`` for any run directory, finished, interrupted or older than this module. It reads only the
run's files (summary.json, history.json, candidates/, tuning/, heatmap.svg, config.json), so what
it shows is what the run recorded. Plots are matplotlib SVG inlined in the page and the styles sit
in it too: the page opens offline, and its Content-Security-Policy stops the browser from fetching
anything or running any script. Sections: overview, score over the run, heatmap, candidates (verdict,
diff against the best before it, launch, profile, source), tuning, timing distributions, provenance.
"""

from __future__ import annotations

import csv
import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelopt_mcp.report_page import escape, inline_svg, iso_time, render_page

from .report_plots import BoxStats, ScorePoint, score_plot, timing_boxes, tuning_plot
from .rundir import RunDir
from .runs import load_run, resume_text

REPORT_NAME = "report.html"
SECTIONS = {"overview": "Overview", "score": "Score", "heatmap": "Heatmap", "candidates": "Candidates",
            "tuning": "Tuning", "timing": "Timing", "provenance": "Provenance"}
TUNING_ROWS = 40  # rows of a tuning table shown; the rest stay in tune.csv


@dataclass
class Candidate:
    """One evaluated candidate as the run recorded it (history.json merged with candidates/<label>/)."""

    index: int
    label: str
    kind: str
    iteration: int | None
    status: str
    score_ms: float | None = None
    speedup: float | None = None
    case_ms: dict[str, float] = field(default_factory=dict)
    message: str = ""
    rationale: str = ""
    checks: list[str] = field(default_factory=list)
    source: str | None = None
    launch: Any = None
    result: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] | None = None
    previous: Candidate | None = None  # the best candidate before this one (what its diff is against)

    @property
    def valid(self) -> bool:
        return self.status == "ok"


def write_report(run_path: Path, summary: dict[str, Any] | None = None, output: Path | None = None) -> Path:
    """Write the run's report (``run_path/report.html`` unless ``output`` says where); returns its path.

    Args:
        run_path: a run directory (``results/run-NNN``).
        summary: the run's summary when the caller holds a newer one than summary.json (finalize).
        output: where to write the page (default: report.html in the run directory).

    Raises:
        FileNotFoundError: ``run_path`` is not a directory.
    """
    page = render_report(run_path, summary)
    target = output or run_path / REPORT_NAME
    return RunDir(target.parent).write_text(target.name, page)  # atomic: a reader never sees half a page


def finish_report(run_path: Path, summary: dict[str, Any]) -> None:
    """finalize's step: write report.html and list it in ``summary["files"]``; a failure becomes a
    note in the summary instead of an exception (a report must never lose the run's records)."""
    try:
        write_report(run_path, summary)
        summary.setdefault("files", {})["report"] = REPORT_NAME
    except Exception as exc:  # noqa: BLE001 (any failure is recorded, none may end finalize)
        summary.setdefault("notes", []).append(f"report: {type(exc).__name__}: {exc}")


def render_report(run_path: Path, summary: dict[str, Any] | None = None) -> str:
    """The report page's HTML for a run directory (see :func:`write_report`)."""
    run = load_run(run_path)
    if summary is not None:
        run["summary"] = summary
    s = run["summary"]
    candidates = load_candidates(run_path, run["candidates"])
    builders = {
        "overview": lambda: _overview(s, run["notes"]),
        "score": lambda: _score(candidates, s),
        "heatmap": lambda: _heatmap(run_path),
        "candidates": lambda: _candidates(candidates, s),
        "tuning": lambda: _tuning(run_path),
        "timing": lambda: _timing(candidates, s),
        "provenance": lambda: _provenance(run_path, s),
    }
    sections = []
    for key, build in builders.items():
        try:
            body = build()
        except Exception as exc:  # noqa: BLE001 (one broken section must not hide the others)
            body = f'<p class="bad">this section could not be drawn: {_e(type(exc).__name__)}: {_e(exc)}</p>'
        sections.append(f'<section id="{key}">\n<h2>{SECTIONS[key]}</h2>\n{body}\n</section>')
    workload = (s.get("workload") or {}).get("name") or "?"
    device = (s.get("provenance") or {}).get("device") or "?"
    return render_page(
        title=f"{run_path.name}: {workload} on {device}",
        subtitle=(f"status {s.get('status', '?')}" + (f" ({s['stop_reason']})" if s.get("stop_reason") else "")
                  + (f" · strategy {s['strategy']}" if s.get("strategy") else "")
                  + (f" · started {_iso(started)}" if (started := (s.get("timings") or {}).get("started")) else "")),
        nav=SECTIONS, sections="\n".join(sections), source=str(run_path),
    )


# --- reading the run ----------------------------------------------------------------------------

def load_candidates(run_path: Path, recorded: list[Any]) -> list[Candidate]:
    """Every candidate, in evaluation order, with its files; each linked to the best one before it
    (the reference for the first ones). ``recorded``: the run's candidate events (``load_run``'s
    ``candidates``: dicts or models); candidate directories without an event are read from their files."""
    dumped = [e if isinstance(e, dict) else e.model_dump(mode="json") for e in recorded]
    events = {h["label"]: h for h in dumped if h.get("event", "candidate") == "candidate" and h.get("label")}
    dirs = (sorted(p.name for p in (run_path / "candidates").iterdir() if p.is_dir())
            if (run_path / "candidates").is_dir() else [])
    labels = sorted(set(events) | set(dirs), key=lambda lab: (events.get(lab, {}).get("index", 10**9), lab))
    out = []
    for n, label in enumerate(labels):
        h = events.get(label, {})
        folder = run_path / "candidates" / label
        result_file = _json(folder / "result.json") or {}
        result = result_file.get("result") or {}
        launch = _json(folder / "launch.json")
        out.append(Candidate(
            index=h.get("index", n), label=label,
            kind=str(h.get("kind")) if h.get("kind") not in (None, "", "?") else _kind(label),
            iteration=h.get("iteration"),
            status=h.get("status") or result.get("status") or ("error" if result_file.get("is_error") else "?"),
            score_ms=h.get("score_ms", result.get("score_ms")), speedup=h.get("speedup", result.get("speedup")),
            case_ms=h.get("case_ms") or _case_medians(result), message=h.get("message") or result.get("message", ""),
            rationale=h.get("rationale", ""), checks=h.get("checks") or result.get("checks") or [],
            source=_text(folder / "source.cu"), launch=launch if launch is not None else h.get("launch"),
            result=result, profile=_json(folder / "profile.json"),
        ))
    reference = next((c for c in out if c.kind == "reference" and c.valid), None)
    best: Candidate | None = None
    for c in out:
        if c.kind == "reference":
            continue
        c.previous = best or reference
        if c.valid and (best is None
                        or (c.score_ms is not None and (best.score_ms is None or c.score_ms < best.score_ms))):
            best = c
    return out


def _kind(label: str) -> str:
    for kind in ("reference", "initial", "repair", "untuned", "tuned"):
        if label.endswith(kind):
            return kind
    return "proposal"


def _case_medians(result: dict[str, Any]) -> dict[str, float]:
    return {c["name"]: c["timing"]["median_ms"] for c in result.get("cases") or []
            if c.get("kind") == "performance" and (c.get("timing") or {}).get("median_ms") is not None}


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


# --- sections ------------------------------------------------------------------------------------

def _overview(s: dict[str, Any], notes: list[str]) -> str:
    best, ref = s.get("best") or {}, s.get("reference") or {}
    cands, its, tokens, timings = (s.get("candidates") or {}, s.get("iterations") or {}, s.get("tokens") or {},
                                   s.get("timings") or {})
    status = s.get("status", "?")
    cards = [
        ("status", f'<span class="{"ok" if status == "completed" else "bad"}">{_e(status)}</span>'),
        ("best", _e(best.get("label") or "none")),
        ("best score", _ms(best.get("score_ms"))),
        ("vs CUDA reference", _x(best.get("speedup_vs_reference"))),
        ("vs initial kernel", _x(best.get("speedup_vs_initial"))),
        *((("vs PyTorch eager", _x(best.get("speedup_vs_eager"))),
           ("vs torch.compile", _x(best.get("speedup_vs_compile"))))
          if best.get("pytorch") else ()),
        ("reference score", _ms(ref.get("score_ms"))),
        ("valid candidates", f"{cands.get('valid', '?')} of {cands.get('total', '?')}"),
        ("iterations", f"{its.get('used', '?')} of {its.get('max', '?')}"),
        ("model tokens", f"{tokens.get('total_tokens', 0):,}" + _cost(tokens.get("cost_usd"))),
        ("wall time", f"{timings['wall_s']:.1f} s" if isinstance(timings.get("wall_s"), (int, float)) else "?"),
    ]
    out = ['<div class="cards">'
           + "".join(f'<div class="card"><span class="muted">{k}</span><b>{v}</b></div>' for k, v in cards) + "</div>"]
    if s.get("error"):
        out.append(f'<p class="bad">error: {_e(s["error"])}</p>')
    if s.get("resumes"):  # kernelopt optimize --resume
        out.append("<p>Resumed " + "; ".join(_e(resume_text(r)) for r in s["resumes"]) + ".</p>")
    reference = ((s.get("workload") or {}).get("reference") or {}).get("note")
    if reference:
        out.append(f"<p>Reference: {_e(reference)}.</p>")
    if best.get("rationale"):
        out.append(f"<p>Best candidate's rationale: {_e(best['rationale'])}</p>")
    all_notes = [*notes, *(s.get("notes") or [])]
    if all_notes:
        out.append('<ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in all_notes) + "</ul>")
    return "\n".join(out)


def _score(candidates: list[Candidate], s: dict[str, Any]) -> str:
    points = [ScorePoint(c.label, c.score_ms, c.valid) for c in candidates if c.kind != "reference"]
    if not points:
        return '<p class="muted">no candidate was evaluated</p>'
    return score_plot(points, (s.get("reference") or {}).get("score_ms"))


def _heatmap(run_path: Path) -> str:
    text = _text(run_path / "heatmap.svg")
    if text is None:
        return '<p class="muted">no heatmap.svg: no candidate was timed against the reference</p>'
    return ('<p class="muted">Each cell: a candidate\'s median latency on a performance case relative to the CUDA '
            "reference's (below 1 is faster).</p>\n" + inline_svg(text))


def _candidates(candidates: list[Candidate], s: dict[str, Any]) -> str:
    if not candidates:
        return '<p class="muted">no candidate was evaluated</p>'
    perf = (s.get("workload") or {}).get("performance_cases") or sorted({k for c in candidates for k in c.case_ms})
    best = (s.get("best") or {}).get("label")
    head = "".join(f"<th>{_e(h)}</th>" for h in ("candidate", "kind", "iteration", "verdict", "score",
                                                 "vs reference", *perf))
    rows = []
    for c in candidates:
        cells = [f'<a href="#c-{_e(c.label)}">{_e(c.label)}</a>' + (" ★" if c.label == best else ""), _e(c.kind),
                 _e("" if c.iteration is None else c.iteration), _verdict(c.status)]
        nums = [_ms(c.score_ms), _x(c.speedup), *(_ms(c.case_ms.get(p)) for p in perf)]
        rows.append(f'<tr class="{"best" if c.label == best else ""}">' + "".join(f"<td>{x}</td>" for x in cells)
                    + "".join(f'<td class="num">{x}</td>' for x in nums) + "</tr>")
    out = [f"<table><tr>{head}</tr>{''.join(rows)}</table>"]
    out += [_candidate(c, c.label == best) for c in candidates]
    return "\n".join(out)


def _candidate(c: Candidate, is_best: bool) -> str:
    parts = [f'<details class="candidate" id="c-{_e(c.label)}"{" open" if is_best else ""}>',
             f"<summary>{_e(c.label)} · {_verdict(c.status)}" + (f" · {_ms(c.score_ms)}" if c.score_ms else "")
             + (" · best" if is_best else "") + "</summary>"]
    parts.append(f"<p><b>Verdict:</b> {_verdict(c.status)} {_e(c.message)}</p>")
    if c.rationale:
        parts.append(f"<p><b>Rationale:</b> {_e(c.rationale)}</p>")
    if c.checks:
        parts.append(f"<p><b>Checks run:</b> {_e(', '.join(c.checks))}</p>")
    cases = c.result.get("cases") or []
    if cases:
        parts.append("<h3>Cases</h3>" + _case_table(cases))
    kernels = (c.result.get("compile") or {}).get("kernels") or {}
    if kernels:
        parts.append("<h3>Kernel resources</h3>" + _table(
            ["kernel", "registers", "static shared B", "spill stores B", "spill loads B", "stack B"],
            [[k, v.get("registers"), v.get("static_shared_bytes"), v.get("spill_store_bytes"),
              v.get("spill_load_bytes"), v.get("stack_frame_bytes")] for k, v in kernels.items()]))
    parts.append('<h3>Launch</h3><pre class="wrap">' + _e(json.dumps(c.launch) if c.launch is not None
                                                          else "not recorded")
                 + "</pre>")
    if c.profile is not None:
        text = c.profile.get("text") or json.dumps(c.profile.get("result"), indent=2)
        parts.append(f"<h3>Profile summary (Nsight Compute, case {_e(c.profile.get('case', '?'))})"
                     f"</h3><pre>{_e(text)}</pre>")
    if c.previous is not None and c.source is not None and c.previous.source is not None:
        parts.append(f"<h3>Diff against {_e(c.previous.label)} (the best before it)</h3>" + _diff(c.previous, c))
    if c.source is not None:
        parts.append(f"<details><summary>source.cu ({len(c.source.splitlines())} "
                     f"lines)</summary><pre>{_e(c.source)}</pre></details>")
    parts.append("</details>")
    return "\n".join(parts)


def _case_table(cases: list[dict[str, Any]]) -> str:
    rows = []
    for case in cases:
        t = case.get("timing") or {}
        launch = case.get("launch") or {}
        rows.append([case.get("name"), case.get("kind"), _verdict(case.get("status", "?")),
                     f"{launch.get('grid')} x {launch.get('block')}" if launch else "",
                     _ms(t.get("median_ms")), _ms(t.get("iqr_ms")),
                     f"{_ms(t.get('min_ms'))} – {_ms(t.get('max_ms'))}" if t else "",
                     ("noisy: " + str(t.get("noisy_reason") or "")) if t.get("noisy") else "",
                     _x(case.get("speedup")), case.get("message") or ""])
    return _table(["case", "kind", "status", "grid x block", "median", "IQR", "min – max", "timing note",
                   "vs reference", "message"], rows, raw_columns={2})


def _diff(before: Candidate, after: Candidate) -> str:
    lines = list(difflib.unified_diff((before.source or "").splitlines(), (after.source or "").splitlines(),
                                      f"{before.label}/source.cu", f"{after.label}/source.cu", lineterm=""))
    if not lines:
        return '<p class="muted">same source</p>'
    styled = []
    for line in lines:
        cls = ("hunk" if line.startswith("@@") else "add" if line.startswith("+") else "del"
               if line.startswith("-") else "")
        styled.append(f'<span class="{cls}">{_e(line)}</span>' if cls else _e(line) + "\n")
    return '<pre class="diff">' + "".join(styled) + "</pre>"


def _tuning(run_path: Path) -> str:
    folders = sorted(p for p in (run_path / "tuning").iterdir() if p.is_dir()) if (run_path / "tuning").is_dir() else []
    if not folders:
        return '<p class="muted">nothing was tuned in this run</p>'
    out = []
    for folder in folders:
        res = (_json(folder / "autotune.json") or {}).get("result") or {}
        out.append(f"<h3>{_e(folder.name)}</h3>")
        counts = res.get("counts") or {}
        out.append(_kv({
            "strategy": res.get("strategy"), "status": res.get("status"), "best configuration": res.get("best_params"),
            "best score": _ms(res.get("best_score_ms")), "untuned score": _ms(res.get("untuned_score_ms")),
            "vs untuned": _x(res.get("speedup_vs_untuned")), "vs reference": _x(res.get("speedup_vs_reference")),
            "space": f"{res.get('valid_space_size', '?')} valid of {res.get('space_size', '?')} configurations",
            "counts": ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items()),
            "stopped": res.get("stop_reason"),
        }))
        rows = _csv(folder / "tune.csv")
        if rows:
            scores = [_float(r.get("score_ms")) if r.get("status") == "ok" else None for r in rows]
            out.append(tuning_plot(folder.name, scores))
            columns = [k for k in rows[0] if k not in ("cached", "seconds")]
            shown = sorted(rows, key=lambda r: (r.get("status") != "ok", _float(r.get("score_ms")) or float("inf")))
            out.append(_table(columns, [[r.get(k, "") for k in columns] for r in shown[:TUNING_ROWS]]))
            if len(rows) > TUNING_ROWS:
                out.append(f'<p class="muted">{len(rows) - TUNING_ROWS} more rows in {_e(folder.name)}/tune.csv</p>')
    return "\n".join(out)


def _timing(candidates: list[Candidate], s: dict[str, Any]) -> str:
    perf = (s.get("workload") or {}).get("performance_cases") or []
    boxes: dict[str, list[BoxStats]] = {}
    for c in candidates:
        if not c.valid:
            continue
        for case in c.result.get("cases") or []:
            t = case.get("timing") or {}
            if (case.get("kind") == "performance"
                    and all(t.get(k) is not None for k in ("median_ms", "q1_ms", "q3_ms", "min_ms", "max_ms"))):
                boxes.setdefault(case["name"], []).append(
                    BoxStats(c.label, t["median_ms"], t["q1_ms"], t["q3_ms"], t["min_ms"], t["max_ms"]))
    cases = [p for p in perf if p in boxes] + [p for p in boxes if p not in perf]
    if not cases:
        return '<p class="muted">no valid candidate was timed</p>'
    return ('<p class="muted">Per performance case and valid candidate: the box spans the quartiles of the timed '
            'launches, the red line is the median, the whiskers reach the fastest and slowest launch.</p>\n'
            + timing_boxes(cases, boxes))


def _provenance(run_path: Path, s: dict[str, Any]) -> str:
    wl, model, tokens, timings = (s.get("workload") or {}, s.get("model") or {}, s.get("tokens") or {},
                                  s.get("timings") or {})
    out = ["<h3>Machine and toolchain</h3>", _kv(s.get("provenance") or {})]
    out += ["<h3>Workload</h3>", _kv({k: wl.get(k) for k in ("name", "description", "prototype", "reference_file",
                                                            "expected_outputs", "seed", "cases", "performance_cases")}
                                     | {"parts": wl.get("parts"),
                                        "reference": (wl.get("reference") or {}).get("note")})]
    out += ["<h3>Model</h3>", _kv({"model": model.get("name"), "reasoning effort": model.get("reasoning_effort"),
                                   "endpoint": model.get("endpoint"), "calls": tokens.get("calls"),
                                   "tokens": tokens.get("total_tokens"),
                                   "cost (USD, estimate)": tokens.get("cost_usd")})
            if model else '<p class="muted">no model was asked</p>']
    out += ["<h3>Run</h3>", _kv({"run": s.get("run"), "path": s.get("path"), "status": s.get("status"),
                                 "stop reason": s.get("stop_reason"), "started": _iso(timings.get("started")),
                                 "ended": _iso(timings.get("ended")), "wall s": timings.get("wall_s"),
                                 "model s": timings.get("model_s"), "tools s": timings.get("tools_s"),
                                 "files": ", ".join(sorted(p.name for p in run_path.iterdir()))})]
    config = _json(run_path / "config.json")
    if isinstance(config, dict):
        out += ["<h3>Options (config.json)</h3>", _kv({k: v for k, v in config.items() if v is not None})]
    return "\n".join(out)


# --- small HTML helpers ---------------------------------------------------------------------------

_e = escape


def _ms(value: Any) -> str:
    return f"{value:.4g} ms" if isinstance(value, (int, float)) else ""


def _x(value: Any) -> str:
    return f"{value:.2f}x" if isinstance(value, (int, float)) else ""


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _iso(epoch_s: Any) -> str:
    return iso_time(epoch_s) if isinstance(epoch_s, (int, float)) else ""


def _verdict(status: str) -> str:
    return f'<span class="{"ok" if status == "ok" else "bad"}">{_e(status)}</span>'


def _table(header: list[str], rows: list[list[Any]], raw_columns: set[int] | None = None) -> str:
    raw = raw_columns or set()
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{v if i in raw else _e('' if v is None else v)}</td>"
                                    for i, v in enumerate(row)) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _kv(data: dict[str, Any]) -> str:
    items = []
    for k, v in data.items():
        if v is None or v == "" or v == [] or v == {}:
            continue
        text = v if isinstance(v, str) else json.dumps(v)
        items.append(f"<dt>{_e(k)}</dt><dd>{_e(text)}</dd>")
    return '<dl class="kv">' + "".join(items) + "</dl>"


def _csv(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    except OSError:
        return []


def _cost(usd: float | None) -> str:
    """The model cost beside the token count: an unknown model's is said to be unknown (never
    left out, which read as free), a real 0.0 shown as such."""
    return " (cost unknown)" if usd is None else f" (~{usd:.4f} USD)"
