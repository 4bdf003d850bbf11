"""Reading and writing files safely: regular files only, size-capped and UTF-8 checked on the way
in (a name for /dev/zero or a FIFO fails at once), atomic on the way out (a reader never sees a
partial file: results, caches, run directories)."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from .errors import WorkloadError

MAX_FILE_BYTES = 16 * 2**20  # workload.json and the CUDA sources it names


def write_atomic(path: Path, data: bytes | memoryview, *, durable: bool = True) -> None:
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


def read_json(path: Path, error: type[Exception] = WorkloadError) -> Any:
    """A JSON file's value (a regular UTF-8 file of at most MAX_FILE_BYTES).

    Raises:
        error: the file is missing, unreadable, not regular, too large or not valid JSON; the
            message names the file (and the line for a syntax error).
    """
    try:
        text = _read_regular(path)
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:  # not UTF-8, or a NUL byte in the path
        raise error(f"{path}: cannot read ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{path}: line {exc.lineno} column {exc.colno}: invalid JSON ({exc.msg})") from None
    except RecursionError:
        raise error(f"{path}: invalid JSON (nested too deeply)") from None


def read_regular_bytes(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """A regular file's bytes, at most ``limit``: a name for /dev/zero or a FIFO must fail, not
    read (or wait for a writer) forever. The file is opened non-blocking (opening a FIFO for
    reading otherwise waits for a writer), checked to be regular on the open descriptor (no
    swap after the check), and read no further than ``limit`` + 1 bytes.

    Raises:
        OSError: missing, unreadable, not a regular file, or larger than ``limit``.
    """
    # (flags Windows lacks are 0 there; O_BINARY: no newline translation where it exists)
    fd = os.open(path,
                 os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
                 | getattr(os, "O_BINARY", 0))
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(f"larger than {limit} bytes")
    return data


def _read_regular(path: Path) -> str:
    """A regular file's UTF-8 text, at most MAX_FILE_BYTES (see :func:`read_regular_bytes`)."""
    return read_regular_bytes(path).decode("utf-8")


def read_text(path: Path, what: str, error: type[Exception] = WorkloadError) -> str:
    """A source file's text (regular, UTF-8, at most MAX_FILE_BYTES); ``error`` names ``what``."""
    try:
        return _read_regular(path)
    except FileNotFoundError:
        raise error(f"{path}: {what} not found; add the file or fix the path") from None
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, or a NUL byte in the path
        raise error(f"{path}: cannot read {what} "
                    f"({exc.strerror if isinstance(exc, OSError) and exc.strerror else exc})") from None


def missing_path_message(exc: FileNotFoundError) -> str:
    """What a FileNotFoundError means: the file is missing, or (to write one) its folder is."""
    name = exc.filename
    if name is None:
        return str(exc)
    folder = Path(os.fsdecode(name)).parent
    if not folder.is_dir():
        return (
            f"{os.fsdecode(name)}: the folder {folder} does not exist; create it (mkdir -p {folder}) "
            "or give a path in an existing folder"
        )
    return f"{os.fsdecode(name)}: file not found"
