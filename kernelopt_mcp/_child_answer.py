"""What the confined torch children share (:mod:`._torch_baseline_child`, :mod:`._torch_reference_child`):
one bounded line per exception, an answer file rewritten whole after every step (a child killed at its
deadline still leaves what it finished), and the ``main`` that runs one request file. Nothing goes to
stdout: a problem's own prints cannot corrupt an answer."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

NOTE_CHARS = 400


def line(exc: BaseException) -> str:
    """One line naming an exception: its type and the first line of its message, bounded."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:NOTE_CHARS]


class Answer:
    """The answer file (``data``, JSON), rewritten whole (temp file + rename) by :meth:`write`; one
    writer at a time (a thread may write it while the main thread does)."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path, self.data = path, data
        self.lock = threading.Lock()

    def write(self) -> None:
        with self.lock:
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(json.dumps(self.data))
            os.replace(tmp, self.path)


def main(argv: list[str], module: str, fresh: dict[str, Any], run: Callable[[dict[str, Any], Answer], None],
         what: str) -> int:
    """``python -m MODULE REQUEST.json``: ``run`` the request into a fresh answer (``fresh``, copied),
    an unexpected exception recorded as the answer's error (``what`` failed: ...), what was done kept."""
    if len(argv) != 1:
        print(f"usage: python -m {module} REQUEST.json", file=sys.stderr)
        return 2
    request = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    answer = Answer(Path(request["answer"]), json.loads(json.dumps(fresh)))
    try:
        run(request, answer)
    except Exception as exc:  # noqa: BLE001 - recorded as the answer's error, the steps done so far kept
        answer.data["error"] = f"{what} failed: {line(exc)}"
    answer.write()
    return 0
