"""Atomic file writes: a reader never sees a partial file (results, caches, run directories)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename, so a reader never
    sees a partial file; ``durable`` also flushes it to disk before the rename.

    Safe under concurrent writers of the same path (threads and processes): each writes its own
    uniquely named temporary file in the same directory (``tempfile.mkstemp``), and the last
    rename wins with a whole file. The temporary file is removed if anything fails.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_UMASK)  # mkstemp makes 0600; keep what open() would make
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _read_umask() -> int:
    """The process's umask, read without changing it where /proc says it (os.umask can only be
    read by setting it, which would race with files created by other threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    current = os.umask(0o022)  # at import, before any worker thread writes
    os.umask(current)
    return current


_UMASK = _read_umask()
