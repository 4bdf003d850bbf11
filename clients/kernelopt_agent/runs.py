"""`kernelopt runs list` and `kernelopt runs show [RUN]`: read runs, finished, running or interrupted."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelopt_mcp.result_view import EvaluationView

from .records import CandidateEvent, StopEvent, TuneEvent, read_history
from .rundir import RUN_RE, pid_alive, read_json


def run_dirs(results_dir: Path) -> list[Path]:
    """The ``run-NNN`` directories under ``results_dir``, oldest (lowest number) first."""
    if not results_dir.is_dir():
        return []
    runs = [(int(m.group(1)), p) for p in results_dir.iterdir() if (m := RUN_RE.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(runs)]


def resolve_run(arg: str | None, results_dir: Path) -> Path:
    """A run named on the command line: a directory, a run name under ``results_dir`` (``run-007``
    or ``7``), or, when omitted, the newest run there.

    Raises:
        FileNotFoundError: nothing matches (the message says where it looked).
    """
    if arg is None:
        runs = run_dirs(results_dir)
        if not runs:
            raise FileNotFoundError(f"no run-NNN directories under {results_dir}/: run `kernelopt optimize` first, "
                                    "or name a run directory (`kernelopt runs show PATH`)")
        return runs[-1]
    path = Path(arg)
    if path.is_dir():
        return path
    name = f"run-{int(arg):03d}" if arg.isdigit() else arg
    if (results_dir / name).is_dir():
        return results_dir / name
    raise FileNotFoundError(f"{arg}: no such run directory (nor {results_dir / name}); `kernelopt runs "
                            "list` shows the runs")


def load_run(path: Path) -> dict[str, Any]:
    """summary.json and the typed history (history.jsonl, else history.json) of a run; a run that died
    without a word is marked interrupted. ``candidates`` are CandidateEvent models."""
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such run directory")
    summary: dict[str, Any] = {}
    notes = []
    try:
        summary = read_json(path / "summary.json")
    except FileNotFoundError:
        notes.append("no summary.json: the run ended before its first record")
    except json.JSONDecodeError as exc:
        notes.append(f"summary.json unreadable: {exc}")
    history = read_history(path)
    notes.extend(history.problems)
    if summary.get("status") == "running" and not pid_alive(summary.get("pid")):
        summary["status"] = "interrupted"
        summary["stop_reason"] = f"process {summary.get('pid')} ended without finishing (killed or crashed)"
    candidates = history.candidates
    if not candidates:  # fall back on the candidate directories
        for index, result in enumerate(sorted(path.glob("candidates/*/result.json"))):
            try:
                res = EvaluationView.model_validate(read_json(result).get("result", {}))
            except (OSError, json.JSONDecodeError, ValidationError):
                continue
            status = res.status if "status" in res.model_fields_set else "?"
            candidates.append(CandidateEvent(index=index, label=result.parent.name, kind="?", status=status,
                                             valid=status == "ok", score_ms=res.score_ms, speedup=res.speedup))
    return {"summary": summary, "candidates": candidates, "history": history, "notes": notes}


def show(path: Path, out: Console, as_json: bool = False) -> int:
    run = load_run(path)
    s = run["summary"]
    if as_json:
        print(json.dumps({"summary": s, "candidates": [c.model_dump(mode="json") for c in run["candidates"]],
                          "notes": run["notes"]}, indent=2))
        return 0
    wl = s.get("workload", {})
    out.print(f"[bold]{escape(path.name)}[/] · {escape(str(wl.get('name', '?')))} · status "
              f"[bold]{s.get('status', '?')}[/]"
              + (f" ({escape(str(s.get('stop_reason')))})" if s.get("stop_reason") else ""), highlight=False)
    if s.get("error"):
        out.print(f"[red]error:[/] {escape(str(s['error']))}", highlight=False)
    model = s.get("model") or {}
    tokens = s.get("tokens", {})
    cost = tokens.get("cost_usd")
    tuned = bool(run["history"].of(TuneEvent))
    if s.get("strategy") == "tune" and not tokens.get("calls"):
        out.print("strategy tune: " + ("the workload's tunable kernel was autotuned (no model)" if tuned
                                       else "nothing was tuned (no model)"), highlight=False)
    elif not model:
        out.print("no model was asked", highlight=False)
    else:
        out.print(f"model {escape(str(model.get('name')))} ({model.get('reasoning_effort')}), "
                  f"{tokens.get('total_tokens', 0):,} tokens in {tokens.get('calls', 0)} calls"
                  + (f", about {cost:.4f} USD" if cost is not None else ", cost unknown"), highlight=False)
    ref = (wl.get("reference") or {}).get("note")
    if ref:
        out.print(f"reference: {escape(ref)}", highlight=False)
    perf = wl.get("performance_cases") or []
    table = Table()
    for col in ("candidate", "status", "score ms", "vs reference", *perf):
        table.add_column(col, justify="left" if col in ("candidate", "status") else "right")
    best = (s.get("best") or {}).get("label")
    per_iteration = max((c.slot or 0 for c in run["candidates"]), default=0)
    if per_iteration > 1:
        table.add_column("iteration.candidate", justify="right")
    for c in run["candidates"]:
        table.add_row(escape(c.label + (" *" if c.label == best else "")), c.status,
                      f"{c.score_ms:.4g}" if c.score_ms else "", f"{c.speedup:.2f}x" if c.speedup else "",
                      *(f"{c.case_ms[p]:.4g}" if p in c.case_ms else "" for p in perf),
                      *([f"{c.iteration}.{c.slot}" if c.slot else ""] if per_iteration > 1 else []))
    out.print(table)
    dups = [e for e in run["history"].events if e.event == "duplicate"]
    if dups:
        out.print(f"{len(dups)} proposal(s) repeated an earlier candidate and were not evaluated again",
                  highlight=False)
    for stop in run["history"].of(StopEvent):
        out.print(f"stopped: {escape(stop.reason)}", highlight=False)
    resumes = s.get("resumes") or []
    if resumes:
        out.print(f"resumed {len(resumes)} time(s): " + "; ".join(resume_text(r) for r in resumes), highlight=False)
    if s.get("best"):
        b = s["best"]
        out.print(f"best: {b['label']}, score {b['score_ms']:.4g} ms" if b.get("score_ms") else f"best: {b['label']}",
                  highlight=False)
    for note in [*run["notes"], *s.get("notes", [])]:
        out.print(f"[yellow]note:[/] {escape(str(note))}", highlight=False)
    files = [p.name for p in sorted(path.iterdir())]
    out.print(f"files: {escape(', '.join(files))}", highlight=False)
    return 0


def resume_text(resume: dict[str, Any]) -> str:
    """One --resume of a run, as `runs show` and the report say it."""
    changed = ", ".join(f"--{k.replace('_', '-')} {v[0]} -> {v[1]}" for k, v in (resume.get("changed") or {}).items())
    return (f"{_iso_utc(resume.get('at')) or '?'} from iteration {resume.get('from_iteration', '?')} "
            f"(was {resume.get('previous_status', '?')}" + (f"; {changed}" if changed else "") + ")")


def _iso_utc(epoch_s: float | None) -> str | None:
    if not isinstance(epoch_s, (int, float)):
        return None
    return datetime.fromtimestamp(epoch_s, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def list_runs(results_dir: Path, out: Console, as_json: bool = False) -> int:
    """One line per run under ``results_dir``: workload, strategy, status, best and when."""
    rows = []
    for path in run_dirs(results_dir):
        run = load_run(path)
        s, best = run["summary"], run["summary"].get("best") or {}
        started = (s.get("timings") or {}).get("started")
        rows.append({
            "run": path.name, "path": str(path), "workload": (s.get("workload") or {}).get("name"),
            "strategy": s.get("strategy"), "status": s.get("status", "?"), "best": best.get("label"),
            "score_ms": best.get("score_ms"), "speedup_vs_reference": best.get("speedup_vs_reference"),
            "candidates": (s.get("candidates") or {}).get("total", len(run["candidates"])),
            "started": started, "wall_s": (s.get("timings") or {}).get("wall_s"),
        })
    if as_json:  # times as ISO 8601 UTC strings, not epoch floats
        print(json.dumps([{**r, "started": _iso_utc(r["started"])} for r in rows], indent=2))
        return 0
    if not rows:
        out.print(f"no runs under {escape(str(results_dir))}/ (`kernelopt optimize` makes them)", highlight=False)
        return 0
    table = Table(title=f"runs under {escape(str(results_dir))}/")
    for col in ("run", "workload", "strategy", "status", "candidates", "best", "score ms", "vs reference",
                "started", "wall"):
        table.add_column(col, justify="right" if col in ("candidates", "score ms", "vs reference", "wall") else "left")
    for r in rows:
        table.add_row(
            r["run"], escape(str(r["workload"] or "?")), str(r["strategy"] or ""), r["status"], str(r["candidates"]),
            escape(str(r["best"] or "")), f"{r['score_ms']:.4g}" if r["score_ms"] else "",
            f"{r['speedup_vs_reference']:.2f}x" if r["speedup_vs_reference"] else "",
            time.strftime("%Y-%m-%d %H:%M", time.localtime(r["started"])) if r["started"] else "",
            f"{r['wall_s']:.0f} s" if r["wall_s"] is not None else "",
        )
    out.print(table)
    return 0
