"""write_atomic under concurrent writers of one path (issue 13, item 8: two threads writing the
same compile-cache entry renamed each other's temporary file: FileNotFoundError in a benchmark)."""

from __future__ import annotations

import multiprocessing
import os
import stat
import threading
from pathlib import Path

import pytest

from kernelopt_mcp.files import write_atomic

WRITERS = 16
ROUNDS = 30


def _payload(writer: int) -> bytes:
    return f"writer {writer}\n".encode() * (200 + writer)  # different sizes: a torn file shows


def _write_many(path: str, writer: int) -> None:
    for _ in range(ROUNDS):
        write_atomic(Path(path), _payload(writer), durable=False)


def _check(path: Path) -> None:
    assert path.read_bytes() in {_payload(w) for w in range(WRITERS)}
    assert [p.name for p in path.parent.iterdir()] == [path.name], "temporary files were left behind"


def test_threads_writing_one_path_all_succeed(tmp_path: Path) -> None:
    path = tmp_path / "entry.json"
    errors: list[BaseException] = []
    start = threading.Barrier(WRITERS)

    def run(writer: int) -> None:
        try:
            start.wait()
            _write_many(str(path), writer)
        except BaseException as exc:  # noqa: BLE001 (collected and asserted below)
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    _check(path)


def test_processes_writing_one_path_all_succeed(tmp_path: Path) -> None:
    path = tmp_path / "entry.json"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_many, args=(str(path), w)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * len(procs)
    _check(path)


def test_a_failed_write_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "entry.json"

    def refuse(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space"):
        write_atomic(path, b"data")
    assert list(tmp_path.iterdir()) == []


def test_the_file_gets_the_usual_permissions(tmp_path: Path) -> None:
    path = tmp_path / "entry.json"
    write_atomic(path, b"data")
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
