"""The tuning cache: a JSON-lines file of measured configurations, so repeated or resumed tuning
re-measures nothing.

A line is ``{"key": <sha256>, "fields": {...}, "status", "score_ms", "result": {...}}``. The key
covers everything that changes a measurement: the source (with its compile options and launch
spec), the parameter values, the device (name and UUID), the driver, NVRTC, the target arch, the
timing options (warm-up, iterations, L2 flush) and the workload (name and its cases, inputs and
tolerances: what a kernel is checked and timed on, but not the random seed). Later lines win; a
torn last line (a killed process) is ignored. The file holds at most ``max_bytes``: a put that
passes it rewrites the file with the most recently measured entries, up to three quarters of it.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

from ..evaluation.candidate import EvaluateOptions
from ..evaluation.outcomes import EvaluationResult
from ..evaluation.session import Session
from ..files import read_regular_bytes
from .space import Config, config_key
from .spec import Tunable

CACHE_FILE = "tune.jsonl"
MAX_CACHE_BYTES = 256 * 2**20


def context_fields(session: Session, tunable: Tunable, options: EvaluateOptions | None = None) -> dict[str, Any]:
    """The parts of the key shared by every configuration of one tuning session."""
    from ..compiler import nvrtc_version

    wl = session.loaded  # as written: a tolerance widened at the real sizes varies with the hidden draws
    dev = session.device
    opts = options or session.options
    source = hashlib.sha256(json.dumps([
        tunable.source, tunable.spec.compile_options, tunable.spec.launch.model_dump(mode="json"),
    ]).encode()).hexdigest()
    cases = content_identity(wl.spec.model_dump(mode="json", include={"signature", "inputs", "cases", "tolerance"}))
    try:
        nvrtc = nvrtc_version()
    except Exception:  # noqa: BLE001 (NVRTC missing: compiling will say so; the key still works)
        nvrtc = None
    return {
        "source": source,
        "device": dev.name if dev else None,
        "device_uuid": dev.uuid if dev else None,
        "driver": dev.driver_version_str if dev else None,
        "nvrtc": nvrtc,
        "arch": session.arch,
        "timing": {
            "warmup": opts.warmup, "iterations": opts.iterations, "flush_l2": opts.flush_l2,
            "mode": opts.timing_mode, "blocking": opts.blocking, "adaptive_rse": opts.adaptive_rse, "stop": opts.stop,
        },
        "workload": wl.name,
        "cases": hashlib.sha256(json.dumps(cases, sort_keys=True).encode()).hexdigest(),
    }


def content_identity(spec: Any) -> Any:
    """``spec`` (a workload's JSON) with the paths of data files that carry a sha256 removed:
    the content names the data, so the same inputs copied elsewhere (each `kernelopt optimize`
    run freezes its workload into its own directory) still hit the cache."""
    if isinstance(spec, dict):
        drop_path = spec.get("generator") == "file" and bool(spec.get("sha256"))
        return {k: content_identity(v) for k, v in spec.items() if not (drop_path and k == "path")}
    if isinstance(spec, list):
        return [content_identity(v) for v in spec]
    return spec


def entry_key(context: dict[str, Any], config: Config) -> str:
    return hashlib.sha256(json.dumps([context, config_key(config)], sort_keys=True).encode()).hexdigest()


class TuneCache:
    """Measured configurations by key, backed by ``directory/tune.jsonl`` (or memory only)."""

    def __init__(self, directory: Path | None, *, max_bytes: int = MAX_CACHE_BYTES) -> None:
        self.path = directory / CACHE_FILE if directory is not None else None
        self.max_bytes = max_bytes
        self._entries: dict[str, dict[str, Any]] = {}  # oldest first
        self._lock = threading.Lock()
        self._file_bytes = 0
        self.evicted = 0  # entries dropped from the file so far (tests read it)
        if self.path is not None and self.path.is_file():
            try:  # a regular file (never a FIFO's wait), capped: a cache too large is started afresh
                data = read_regular_bytes(self.path, max(self.max_bytes, MAX_CACHE_BYTES))
            except OSError:
                data = b""
            self._file_bytes = len(data)
            for line in data.decode("utf-8", errors="replace").splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(entry, dict) and isinstance(entry.get("key"), str):
                    self._entries.pop(entry["key"], None)  # later lines win, and count as newer
                    self._entries[entry["key"]] = entry

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> EvaluationResult | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        try:
            return EvaluationResult.model_validate(entry["result"])
        except (KeyError, ValueError):
            return None

    def put(self, key: str, fields: dict[str, Any], config: Config, result: EvaluationResult) -> None:
        """Record a measured configuration. The input seed is left out: the key does not cover it
        (a cached result stands for any seed), and the file may lie where a client can read it
        (the MCP server's workspace) while the seed must stay private."""
        entry = {
            "key": key, "fields": fields, "params": config, "status": result.status.value,
            "score_ms": result.score_ms, "result": json.loads(result.model_dump_json(exclude={"seed"})),
        }
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = entry
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                line = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
                # one unbuffered O_APPEND write per line: lines from other processes never interleave
                with open(self.path, "ab", buffering=0) as f:
                    f.write(line)
                self._file_bytes += len(line)
                if self._file_bytes > self.max_bytes:
                    self._compact()

    def _compact(self) -> None:
        """Rewrite the file with the newest entries that fit in 3/4 of ``max_bytes`` (lock held).
        Lines another process appended since this one read the file are lost: a cache may forget."""
        from ..files import write_atomic

        assert self.path is not None
        kept: list[bytes] = []
        total = 0
        for entry in reversed(self._entries.values()):
            line = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
            if total + len(line) > self.max_bytes * 3 // 4:
                break
            kept.append(line)
            total += len(line)
        self.evicted += len(self._entries) - len(kept)
        write_atomic(self.path, b"".join(reversed(kept)), durable=False)
        self._file_bytes = total
