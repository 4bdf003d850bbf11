"""The on-disk caches under one location (``Settings.cache_root()``): what they hold and clearing them.

Layout::

    <cache root>/          KERNELOPT_CACHE, else $XDG_CACHE_HOME/kernelopt, else ~/.cache/kernelopt
      compile/             NVRTC results: <key>.json + .cubin (+ .ptx), LRU-evicted past compile_cache_mb
      tune/tune.jsonl      measured tuning configurations, oldest dropped past tune_cache_mb
      docs/                NVIDIA documentation pages fetched by docs_search (fresh for docs_ttl_s)
      calibration/         measured copy bandwidth and FP32 rate per device and driver
      torch-baselines/     PyTorch eager and torch.compile times per imported problem, case, device and torch
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from .config import Settings
from .errors import KerneloptError

# torch-baselines: torch_baseline.CACHE_DIR (that module is not imported here: `--help` stays light)
KINDS = ("compile", "tune", "docs", "calibration", "torch-baselines")


@dataclass
class CacheKind:
    kind: str
    path: str
    entries: int
    bytes: int
    bound_bytes: int | None


def _files(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            return [e for e in it if e.is_file(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _tune_entries(path: Path) -> int:
    keys = set()
    try:
        with open(path, "rb") as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and isinstance(entry.get("key"), str):
                    keys.add(entry["key"])
    except OSError:
        return 0
    return len(keys)


def cache_info(settings: Settings) -> list[CacheKind]:
    """Entries and bytes of each kind of cache (nothing is created)."""
    root = settings.cache_root()
    out = []
    for kind in KINDS:
        directory = root / kind
        files = _files(directory)
        size = sum(e.stat(follow_symlinks=False).st_size for e in files)
        if kind == "compile":
            entries = sum(1 for e in files if e.name.endswith(".json") and not e.name.startswith("."))
        elif kind == "tune":
            entries = _tune_entries(directory / "tune.jsonl")
        else:
            entries = sum(1 for e in files if e.name.endswith(".json") and not e.name.startswith("."))
        bound = {"compile": settings.compile_cache_bytes(), "tune": settings.tune_cache_bytes()}.get(kind)
        out.append(CacheKind(kind, str(directory), entries, size, bound))
    return out


def clear_cache(settings: Settings, kind: str | None = None) -> list[CacheKind]:
    """Remove one kind of cache (or all of them); returns what was there before.

    Only the kinds' own subfolders are removed, never the cache root itself (KERNELOPT_CACHE may
    name a directory that holds other things).

    Raises:
        KerneloptError: an unknown kind.
    """
    if kind is not None and kind not in KINDS:
        raise KerneloptError(f"no cache kind {kind!r}; kinds: {', '.join(KINDS)} (or none for all)")
    before = [k for k in cache_info(settings) if kind is None or k.kind == kind]
    for k in before:
        path = Path(k.path)
        if path.is_symlink():
            path.unlink()  # the link, not what it points at
        elif path.is_dir():
            shutil.rmtree(path)
    return before
