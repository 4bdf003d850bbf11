"""`kernelopt runs show RUN_DIR`: read a run, finished, running or interrupted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .rundir import pid_alive, read_json


def load_run(path: Path) -> dict[str, Any]:
    """summary.json and history.json of a run; a run that died without a word is marked interrupted."""
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such run directory")
    summary: dict[str, Any] = {}
    history: list[dict[str, Any]] = []
    notes = []
    try:
        summary = read_json(path / "summary.json")
    except FileNotFoundError:
        notes.append("no summary.json: the run ended before its first record")
    except json.JSONDecodeError as exc:
        notes.append(f"summary.json unreadable: {exc}")
    try:
        history = read_json(path / "history.json")
    except (FileNotFoundError, json.JSONDecodeError):
        pass
    if summary.get("status") == "running" and not pid_alive(summary.get("pid")):
        summary["status"] = "interrupted"
        summary["stop_reason"] = f"process {summary.get('pid')} ended without finishing (killed or crashed)"
    candidates = [h for h in history if h.get("event") == "candidate"]
    if not candidates:  # fall back on the candidate directories
        for result in sorted(path.glob("candidates/*/result.json")):
            try:
                res = read_json(result).get("result", {})
            except (OSError, json.JSONDecodeError):
                continue
            candidates.append({"label": result.parent.name, "status": res.get("status", "?"), "score_ms": res.get("score_ms"),
                               "speedup": res.get("speedup"), "case_ms": {}})
    return {"summary": summary, "candidates": candidates, "history": history, "notes": notes}


def show(path: Path, out: Console, as_json: bool = False) -> int:
    run = load_run(path)
    s = run["summary"]
    if as_json:
        print(json.dumps({"summary": s, "candidates": run["candidates"], "notes": run["notes"]}, indent=2))
        return 0
    wl = s.get("workload", {})
    out.print(f"[bold]{escape(path.name)}[/] · {escape(str(wl.get('name', '?')))} · status [bold]{s.get('status', '?')}[/]"
              + (f" ({escape(str(s.get('stop_reason')))})" if s.get("stop_reason") else ""), highlight=False)
    if s.get("error"):
        out.print(f"[red]error:[/] {escape(str(s['error']))}", highlight=False)
    model = s.get("model", {})
    tokens = s.get("tokens", {})
    cost = tokens.get("cost_usd")
    if s.get("strategy") == "tune" and not tokens.get("calls"):
        out.print("strategy tune: the workload's tunable kernel was autotuned (no model)", highlight=False)
    else:
        out.print(f"model {escape(str(model.get('name')))} ({model.get('reasoning_effort')}), {tokens.get('total_tokens', 0):,} tokens"
                  f" in {tokens.get('calls', 0)} calls" + (f", about {cost:.4f} USD" if cost else ""), highlight=False)
    ref = (wl.get("reference") or {}).get("note")
    if ref:
        out.print(f"reference: {escape(ref)}", highlight=False)
    perf = wl.get("performance_cases") or []
    table = Table()
    for col in ("candidate", "status", "score ms", "vs reference", *perf):
        table.add_column(col, justify="left" if col in ("candidate", "status") else "right")
    best = (s.get("best") or {}).get("label")
    for c in run["candidates"]:
        case_ms = c.get("case_ms") or {}
        table.add_row(escape(c["label"] + (" *" if c["label"] == best else "")), c.get("status", "?"),
                      f"{c['score_ms']:.4g}" if c.get("score_ms") else "", f"{c['speedup']:.2f}x" if c.get("speedup") else "",
                      *(f"{case_ms[p]:.4g}" if p in case_ms else "" for p in perf))
    out.print(table)
    if s.get("best"):
        b = s["best"]
        out.print(f"best: {b['label']}, score {b['score_ms']:.4g} ms" if b.get("score_ms") else f"best: {b['label']}", highlight=False)
    for note in [*run["notes"], *s.get("notes", [])]:
        out.print(f"[yellow]note:[/] {escape(str(note))}", highlight=False)
    files = [p.name for p in sorted(path.iterdir())]
    out.print(f"files: {escape(', '.join(files))}", highlight=False)
    return 0
