"""`kernelopt runs du` and `kernelopt runs prune`: what the runs take on disk, and removing whole runs.

A run in progress is never removed. The loop rewrites summary.json with ``status: running`` and its
process id from its first step on (a ``--resume`` does the same with its own), so a run is live when
that process still exists; a directory that has no summary.json yet is a run starting up, and is
left alone until it is :data:`STARTING_GRACE_S` old.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .rundir import pid_alive, read_json
from .runs import run_dirs

STARTING_GRACE_S = 3600.0  # a run directory without summary.json younger than this may be one starting up
AGE_RE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw]?)$")
AGE_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "": 86400.0}


class PruneError(ValueError):
    """The prune was asked for in a way that cannot be served; the message says what to give."""


def parse_age(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or a plain number of days, in seconds.

    Raises:
        PruneError: anything else.
    """
    m = AGE_RE.match(text.strip().lower())
    if m is None:
        raise PruneError(f"--older-than {text!r}: give an age such as 30d, 12h, 90m, "
                         "45s or 2w (a plain number is days)")
    return float(m.group(1)) * AGE_UNITS_S[m.group(2)]


def tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (links are not followed)."""
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_symlink() or p.is_file())


def usage(run: Path) -> dict[str, int]:
    """Bytes per top-level entry of a run directory, largest first."""
    sizes = {p.name + ("/" if p.is_dir() and not p.is_symlink() else ""): tree_bytes(p) for p in run.iterdir()}
    return dict(sorted(sizes.items(), key=lambda kv: -kv[1]))


@dataclass
class RunState:
    path: Path
    live: str | None  # why the run counts as in progress, else None
    age_s: float  # since the run last wrote its summary (else since its directory changed)


def run_state(path: Path, now: float | None = None) -> RunState:
    """Whether ``path`` is a run in progress, and how long ago it last recorded anything."""
    now = time.time() if now is None else now
    summary_path = path / "summary.json"
    try:
        summary: Any = read_json(summary_path)
        age = now - summary_path.stat().st_mtime
    except FileNotFoundError:
        age = now - path.stat().st_mtime
        why = "no summary.json yet: it may be starting" if age < STARTING_GRACE_S else None
        return RunState(path, why, age)
    except (OSError, ValueError):
        return RunState(path, None, now - path.stat().st_mtime)
    if isinstance(summary, dict) and summary.get("status") == "running" and pid_alive(summary.get("pid")):
        return RunState(path, f"running (process {summary.get('pid')})", age)
    return RunState(path, None, age)


def du(results_dir: Path, out: Console, as_json: bool = False) -> int:
    """Runs under ``results_dir`` by size, largest first, each with the entries that take the space."""
    rows: list[dict[str, Any]] = []
    for path in run_dirs(results_dir):
        parts = usage(path)
        rows.append({"run": path.name, "path": str(path), "bytes": sum(parts.values()), "entries": parts,
                     "live": run_state(path).live is not None})
    rows.sort(key=lambda r: -r["bytes"])
    if as_json:
        print(json.dumps({"results_dir": str(results_dir), "total_bytes": sum(r["bytes"] for r in rows),
                          "runs": rows}, indent=2))
        return 0
    if not rows:
        out.print(f"no runs under {escape(str(results_dir))}/", highlight=False)
        return 0
    table = Table(title=f"runs under {escape(str(results_dir))}/: {_human(sum(r['bytes'] for r in rows))}")
    for col in ("run", "size", "largest entries"):
        table.add_column(col, justify="right" if col == "size" else "left")
    for r in rows:
        top = ", ".join(f"{escape(name)} {_human(size)}" for name, size in list(r["entries"].items())[:4])
        table.add_row(r["run"] + (" (running)" if r["live"] else ""), _human(r["bytes"]), top)
    out.print(table)
    return 0


def prune_plan(results_dir: Path, *, keep: int | None,
               older_than_s: float | None) -> tuple[list[RunState], list[RunState]]:
    """(runs to remove, live runs spared): beyond the newest ``keep`` and older than ``older_than_s``
    (either bound alone, or both), never a run in progress.

    Raises:
        PruneError: neither bound given, or a negative one.
    """
    if keep is None and older_than_s is None:
        raise PruneError("say which runs to remove: --keep N (keep the newest N) and/or --older-than AGE (e.g. 30d)")
    if (keep is not None and keep < 0) or (older_than_s is not None and older_than_s < 0):
        raise PruneError("--keep and --older-than must not be negative")
    runs = run_dirs(results_dir)
    candidates = runs[: max(len(runs) - keep, 0)] if keep is not None else runs
    remove: list[RunState] = []
    spared: list[RunState] = []
    for path in candidates:
        state = run_state(path)
        if older_than_s is not None and state.age_s < older_than_s:
            continue
        (spared if state.live else remove).append(state)
    return remove, spared


def prune(results_dir: Path, out: Console, *, keep: int | None, older_than: str | None, dry_run: bool = False,
          as_json: bool = False) -> int:
    """Remove whole run directories (see :func:`prune_plan`); ``dry_run`` only says which."""
    remove, spared = prune_plan(results_dir, keep=keep, older_than_s=parse_age(older_than) if older_than else None)
    freed = 0
    for state in remove:
        freed += tree_bytes(state.path)
        if not dry_run:
            shutil.rmtree(state.path)
    if as_json:
        print(json.dumps({"removed" if not dry_run else "would_remove": [s.path.name for s in remove], "bytes": freed,
                          "spared_live": {s.path.name: s.live for s in spared}}, indent=2))
        return 0
    verb = "would remove" if dry_run else "removed"
    names = ", ".join(s.path.name for s in remove) or "nothing"
    out.print(f"{verb} {names} ({_human(freed)})", highlight=False)
    for s in spared:
        out.print(f"kept {s.path.name}: {escape(s.live or '')}", highlight=False)
    return 0


def _human(nbytes: int) -> str:
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
