"""A run's directory, ``results/run-NNN/``: every write atomic, every record numbered.

Layout (see the README's "Running the optimizer"):

    config.json            the merged options (no API key)
    signature.json         workload parts: signature (+ name, description, cost)
    input_cases.json       cases and tolerances; inputs as paths to inputs/<case>/<buffer>.bin
    reference.cu | supplied-reference.cu, initial.cu   (+ <name>.launch.json beside each)
    reference.py           the NumPy oracle, when there is one
    inputs/ expected/      input data; expected outputs (float64 .bin + expected/manifest.json, from the oracle):
                           drawn files and expected outputs over 1 MiB are removed when the run ends
                           (data.json says which; `kernelopt runs restore` draws them again; --keep-data keeps them)
    workload/<name>/       the frozen workload kernelopt-mcp evaluates (inputs = the files above)
    candidates/NNN-<label>/  source.cu, launch.json, request.json, result.json (+ profile.json)
    model/NNNN-*.json      every model request and response
    tools/NNNN-<tool>.json every MCP tool call with its result
    history.jsonl          every event as it happens (one JSON object a line; records.py has the types)
    history.json summary.json best.cu best.launch.json heatmap.png heatmap.svg
    replay/<case>.json     harness requests for the best kernel: kernelopt-harness run FILE
    profiles/              Nsight Compute reports (--use-nsight)

Run numbers are claimed with ``mkdir`` (atomic), so concurrent runs never share a directory.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Any

from kernelopt_mcp.files import write_atomic

RUN_RE = re.compile(r"^run-(\d{3,})$")
NUMBERED_RE = re.compile(r"^(\d{4,})-")


class RunDir:
    """One run's directory and its numbered records."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._counters: dict[str, int] = {}
        self._lock = threading.Lock()

    @classmethod
    def create(cls, results_dir: Path) -> RunDir:
        """Claim the next free ``run-NNN`` under ``results_dir`` (race-safe: mkdir, retry on EEXIST)."""
        results_dir.mkdir(parents=True, exist_ok=True)
        taken = [int(m.group(1)) for p in results_dir.iterdir() if (m := RUN_RE.match(p.name))]
        number = max(taken, default=0) + 1
        while True:
            path = results_dir / f"run-{number:03d}"
            try:
                path.mkdir()
            except FileExistsError:
                number += 1
                continue
            return cls(path.resolve())

    @classmethod
    def reopen(cls, path: Path) -> RunDir:
        """An existing run directory, to be continued (``--resume``): its record numbers go on from the
        highest already written (model/NNNN-*, tools/NNNN-*), so no earlier record is overwritten."""
        run = cls(path.resolve())
        for kind in ("model", "tools"):
            numbers = [int(m.group(1)) for p in (run.path / kind).glob("*.json") if (m := NUMBERED_RE.match(p.name))]
            run._counters[kind] = max(numbers, default=0)
        return run

    def drop_torn_line(self, relative: str | Path) -> str | None:
        """Cut a last line that has no newline (a kill mid-write) off a JSON-lines file, so the next append
        starts a line of its own (a whole last line only gets its newline); returns what was cut, else None."""
        path = self.path / relative
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if not data or data.endswith(b"\n"):
            return None
        keep = data.rfind(b"\n") + 1
        try:
            json.loads(data[keep:])
            whole = True  # cut just before its newline: the line itself is whole
        except ValueError:
            whole = False
        with self._lock, open(path, "r+b") as fh:
            if whole:
                fh.seek(0, os.SEEK_END)
                fh.write(b"\n")
            else:
                fh.truncate(keep)
            fh.flush()
            os.fsync(fh.fileno())
        return None if whole else data[keep:].decode("utf-8", errors="replace")

    @property
    def name(self) -> str:
        return self.path.name

    def next_number(self, kind: str) -> int:
        with self._lock:
            self._counters[kind] = self._counters.get(kind, 0) + 1
            return self._counters[kind]

    def write_text(self, relative: str | Path, text: str) -> Path:
        path = self.path / relative
        write_atomic(path, text.encode("utf-8"))
        return path

    def write_bytes(self, relative: str | Path, data: bytes) -> Path:
        path = self.path / relative
        write_atomic(path, data)
        return path

    def write_json(self, relative: str | Path, data: Any) -> Path:
        return self.write_text(relative, json.dumps(data, indent=2, default=_jsonable) + "\n")

    def append_jsonl(self, relative: str | Path, data: Any) -> None:
        """Append one JSON line and make it durable (flush + fsync) before returning: a run killed
        later keeps it. One line per call, written with a single write() under the lock, so lines from
        concurrent tasks never interleave."""
        line = json.dumps(data, default=_jsonable, separators=(",", ":")) + "\n"
        with self._lock, open(self.path / relative, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())

    def relative(self, path: Path) -> str:
        try:
            return str(path.resolve().relative_to(self.path))
        except ValueError:
            return str(path)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, (set, tuple)):
        return list(value)
    return repr(value)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    if os.name == "nt":  # there os.kill(pid, 0) ends the process (TerminateProcess); assume it runs
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
