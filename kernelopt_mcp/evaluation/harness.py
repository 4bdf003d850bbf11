"""Running the native harness: one process per GPU, requests over pipes, a deadline each.

The harness (``kernelopt-harness serve``) reads one JSON request per line and answers one
JSON line (see native_harness/PROTOCOL.md). A kernel that faults leaves the harness's CUDA
context unusable: it answers and exits with code 5, and the next request starts a fresh
process. A kernel that never finishes is killed (the whole process group) at the deadline
and reported as a timeout. Either way the caller gets data, never a dead server.

Every invocation runs in :func:`~kernelopt_mcp.executables.child_env`: the harness runs clients'
kernels, so none of the server's tokens or API keys is in its environment.
"""

from __future__ import annotations

import io
import json
import os
import selectors
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, Self

from ..errors import DeviceUnavailable, HarnessCancelled, HarnessError
from ..executables import child_env, find_executable, kill_group
from .protocol import (
    AnswerEnvelope,
    AnswerT,
    BaselineRequest,
    HarnessRequest,
    RunRequest,
    VersionAnswer,
    parse_answer,
    request_json,
)

HARNESS_NAME = "kernelopt-harness"
MAX_STDERR_BYTES = 64 * 1024
DROPPED_MARKER = "[... {} bytes dropped]"


class RequestSender(Protocol):
    """What a :class:`~kernelopt_mcp.evaluation.session.Session` needs of its harness: a
    :class:`HarnessProcess`, or :class:`kernelopt_mcp.freeze.RequestsOnly` (a session that only
    writes requests, for replay files; no binary)."""

    @property
    def device(self) -> int: ...

    @property
    def binary(self) -> Path | None: ...

    def request(
        self, payload: HarnessRequest | Mapping[str, Any], timeout_s: float,
        case_timeouts: Sequence[float] | None = None,
    ) -> HarnessReply: ...


class ExpectedMissing(HarnessError):
    """The request named expected values kept on the device (``kept:KEY``) that the harness no
    longer holds: a new process (the last one ended with a fault), or the cache evicted them.
    The CUDA reference's run with ``keep_expected`` puts them back."""

    def __init__(self, message: str, keys: list[str]) -> None:
        super().__init__(message)
        self.keys = keys


class ExitCode(IntEnum):
    """The harness's documented exit codes (native_harness/PROTOCOL.md)."""

    OK = 0
    INTERNAL = 1
    BAD_REQUEST = 2
    DRIVER_UNAVAILABLE = 3
    IO_ERROR = 4
    FATAL_CUDA = 5


def find_harness(explicit: str | Path | None = None) -> Path:
    """Locate the ``kernelopt-harness`` executable.

    Order: ``explicit`` (settings or ``KERNELOPT_HARNESS``), next to the running Python
    (the venv's scripts directory, where ``pip install`` puts it), then ``PATH``.

    Raises:
        ToolchainNotFound: with how to build it.
    """
    return find_executable(
        explicit, [Path(sys.executable).parent / HARNESS_NAME, shutil.which(HARNESS_NAME)],
        bad_explicit=f"the harness {explicit} does not exist or is not executable; rebuild it with "
        "`pip install .` from the kernelopt checkout, or unset KERNELOPT_HARNESS",
        missing=f"{HARNESS_NAME} not found next to {sys.executable} or on PATH; install kernelopt with "
        "`pip install .` (it builds the harness; needs CMake >= 3.24 and a C++17 compiler), "
        "or point KERNELOPT_HARNESS at a built binary",
    )


@dataclass
class HarnessReply:
    """One request's outcome: the JSON answer (when there is one) and how the process fared.

    ``answer`` is the JSON object as the harness printed it: the process does not know which
    op a request was, nor which of its fields the caller needs, so it parses nothing; callers
    read it through :meth:`parsed` with the model of what they asked (protocol.py), and quote
    the raw object in messages.
    """

    answer: dict[str, Any] | None
    exit_code: int | None = None
    timed_out: bool = False
    elapsed_s: float = 0.0
    stderr: str = ""  # the last MAX_STDERR_BYTES, after a DROPPED_MARKER line if cut
    stderr_truncated: int = 0  # bytes dropped from the front
    # a request with "progress": the cases begun, in order (the last one was running when a
    # deadline killed the process)
    started: list[str] = field(default_factory=list)

    def parsed(self, model: type[AnswerT]) -> AnswerT | None:
        """The answer as ``model`` (e.g. :class:`~.protocol.HarnessAnswer`), None without one.

        Raises:
            HarnessError: the answer lacks a field ``model`` needs, or has one of the wrong type
                (named in the message).
        """
        return None if self.answer is None else parse_answer(self.answer, model)

    @property
    def printed(self) -> tuple[str, int]:
        """What the process printed (kernel printf): the kept text without the dropped-bytes
        marker line, and how many bytes it printed in all."""
        kept = self.stderr.split("\n", 1)[-1] if self.stderr_truncated else self.stderr
        return kept, len(kept.encode()) + self.stderr_truncated

    @property
    def fatal(self) -> bool:
        return self.timed_out or self.exit_code not in (None, ExitCode.OK)


@dataclass
class _StderrSink:
    """Keeps the last MAX_STDERR_BYTES of the harness's stderr (kernel printf goes there).

    A printf flood costs memory only up to the cap: older bytes are dropped as they arrive and
    counted; :meth:`take` puts a ``[... N bytes dropped]`` line in front of what was kept.
    """

    data: bytearray = field(default_factory=bytearray)
    dropped: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def feed(self, chunk: bytes) -> None:
        with self.lock:
            self.data += chunk
            if len(self.data) > MAX_STDERR_BYTES:
                cut = len(self.data) - MAX_STDERR_BYTES
                self.dropped += cut
                del self.data[:cut]

    def take(self) -> tuple[str, int]:
        with self.lock:
            text, dropped = self.data.decode(errors="replace"), self.dropped
            if dropped:
                text = f"{DROPPED_MARKER.format(dropped)}\n{text}"
            self.data.clear()
            self.dropped = 0
            return text, dropped


class HarnessProcess:
    """A ``kernelopt-harness serve`` process, restarted as needed.

    ``env``: its whole environment; None (the default) is :func:`child_env` at each start.

    Not thread-safe: one request at a time (the GPU runs one job at a time anyway).
    """

    def __init__(self, binary: Path, device: int = 0, env: dict[str, str] | None = None) -> None:
        self.binary = binary
        self.device = device
        self.env = env
        self.restarts = 0
        self._start_lock = threading.Lock()
        self._cancelled = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sink = _StderrSink()
        self._stderr_thread: threading.Thread | None = None
        self._buffer = b""

    def _start(self) -> subprocess.Popen[bytes]:
        with self._start_lock:
            if self._cancelled.is_set():
                raise HarnessCancelled("the call was cancelled; the harness was stopped")
            return self._start_locked()

    def _start_locked(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        if self._proc is not None:
            self._release(self._proc)
            self.restarts += 1
        self._buffer = b""
        self._proc = subprocess.Popen(
            [str(self.binary), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, so a kill takes every child too
            env=child_env() if self.env is None else self.env,
        )
        proc = self._proc

        def drain() -> None:
            stream = proc.stderr
            if not isinstance(stream, io.BufferedReader):  # Popen's PIPE with default buffering is one
                return
            for chunk in iter(lambda: stream.read1(65536), b""):
                self._sink.feed(chunk)

        self._stderr_thread = threading.Thread(target=drain, daemon=True)
        self._stderr_thread.start()
        return proc

    def request(
        self, payload: HarnessRequest | Mapping[str, Any], timeout_s: float,
        case_timeouts: Sequence[float] | None = None,
    ) -> HarnessReply:
        """Send one request (typed, or a JSON object as is) and wait at most ``timeout_s`` for
        its answer.

        With ``case_timeouts`` (a request with ``progress``, one deadline per case), the harness's
        progress line before case i gives that case ``case_timeouts[i]`` seconds from then
        (``timeout_s`` runs until the first line), and the reply says which cases began.
        """
        proc = self._start()
        start = time.monotonic()
        data = request_json(payload) if isinstance(payload, RunRequest | BaselineRequest) else dict(payload)
        line = json.dumps(data, separators=(",", ":")).encode() + b"\n"
        try:
            assert proc.stdin is not None
            proc.stdin.write(line)
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the process died; the read below reports its exit code
        started: list[str] = []
        answer_line, timed_out = self._read_line(proc, start + timeout_s)
        while case_timeouts and (begun := _progress_case(answer_line)) is not None:
            name, index = begun
            started.append(name)
            deadline = time.monotonic() + case_timeouts[min(index, len(case_timeouts) - 1)]
            answer_line, timed_out = self._read_line(proc, deadline)
        exit_code = None
        if timed_out:
            self.kill()
            exit_code = proc.returncode
        elif answer_line is None or proc.poll() is not None or b'"runtime_error"' in answer_line:
            # A fatal CUDA error: the harness answers, then exits with code 5. Wait for it,
            # so the exit code is part of this reply and the next request starts afresh.
            try:
                exit_code = proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
                exit_code = proc.returncode
        if self._stderr_thread is not None and exit_code is not None:
            self._stderr_thread.join(timeout=2)
        elapsed = time.monotonic() - start
        stderr, dropped = self._sink.take()
        answer = None
        if answer_line:
            try:
                answer = json.loads(answer_line)
            except json.JSONDecodeError:
                raise HarnessError(
                    f"the harness answered with invalid JSON: {answer_line[:200]!r}; "
                    f"stderr: {stderr[-500:]}"
                ) from None
        return HarnessReply(answer, exit_code, timed_out, elapsed, stderr, dropped, started)

    def _read_line(self, proc: subprocess.Popen[bytes], deadline: float) -> tuple[bytes | None, bool]:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None, True
                if not sel.select(timeout=remaining):
                    continue
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    return (self._buffer or None), False
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line, False

    def cancel(self) -> None:
        """Kill the harness now and refuse to start another until :meth:`rearm`.

        Safe to call from another thread: a request in flight sees the process die and
        returns; one that has not started raises :class:`HarnessCancelled`.
        """
        with self._start_lock:
            self._cancelled.set()
        self.kill()

    def rearm(self) -> None:
        """Allow the harness to start again after :meth:`cancel`."""
        self._cancelled.clear()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def kill(self) -> None:
        """Kill the process group now (a hung kernel, a cancelled call)."""
        if self._proc is not None and self._proc.poll() is None:
            kill_group(self._proc)

    def close(self) -> None:
        """Ask the harness to exit (EOF on its stdin); kill it if it does not."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                assert proc.stdin is not None
                proc.stdin.close()
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        self._release(proc)
        self._proc = None

    def _release(self, proc: subprocess.Popen[bytes]) -> None:
        """Close a finished process's pipes once its stderr has been drained."""
        if self._stderr_thread is not None:
            self._stderr_thread.join(timeout=2)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_once(binary: Path, args: list[str], timeout_s: float = 60) -> tuple[int, dict[str, Any] | None, str]:
    """Run the harness with ``args`` (e.g. ``--device-info``) and parse its JSON answer."""
    try:
        proc = subprocess.run(
            [str(binary), *args], stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s,
            start_new_session=True,  # never inherit an MCP client's stdio pipe
            env=child_env(),
        )
    except subprocess.TimeoutExpired:
        raise HarnessError(f"{binary} {' '.join(args)} did not answer within {timeout_s} s") from None
    text = proc.stdout.decode(errors="replace").strip()
    try:
        answer = json.loads(text.splitlines()[-1]) if text else None
    except json.JSONDecodeError:
        answer = None
    return proc.returncode, answer, proc.stderr.decode(errors="replace")


def harness_features(binary: Path) -> frozenset[str]:
    """The optional protocol features ``binary --version`` lists (native_harness/PROTOCOL.md),
    e.g. ``"device_compare"``; empty for a protocol 1 harness. Cached per binary and mtime, so a
    rebuilt harness is asked again.

    Raises:
        HarnessError: the binary does not answer ``--version`` with a JSON object.
    """
    try:
        mtime_ns = binary.stat().st_mtime_ns
    except OSError as exc:
        raise HarnessError(f"cannot ask {binary} for its features: {exc}") from None
    return _harness_features(str(binary), mtime_ns)


@lru_cache(maxsize=16)
def _harness_features(binary: str, mtime_ns: int) -> frozenset[str]:
    code, answer, stderr = run_once(Path(binary), ["--version"])
    if code != ExitCode.OK or not isinstance(answer, dict):
        raise HarnessError(
            f"{binary} --version exited {code} without a JSON answer ({stderr.strip()[-300:]}); "
            "rebuild the harness with `pip install .`"
        )
    return frozenset(parse_answer(answer, VersionAnswer).features)


def _progress_case(line: bytes | None) -> tuple[str, int] | None:
    """(case, index) of a progress line (PROTOCOL.md, ``progress``); None for any other line.
    The answer stream is the harness's own, so what it says is the harness's word."""
    if not line or not line.startswith(b'{"progress"'):
        return None
    try:
        body = json.loads(line)["progress"]
        return str(body["case"]), int(body["index"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        raise HarnessError(f"the harness wrote a malformed progress line: {line[:200]!r}") from None


def raise_for_request_error(answer: AnswerEnvelope | None, exit_code: int | None) -> None:
    """Turn request-level failures that are the tool's fault into exceptions.

    ``answer``: the answer's envelope (any answer parses as one: ``reply.parsed(AnswerEnvelope)``),
    None when there is no answer.
    """
    error = answer.error if answer is not None else None
    kind = error.kind if error is not None else None
    message = error.message if error is not None and error.message is not None else ""
    if exit_code == ExitCode.DRIVER_UNAVAILABLE or kind == "driver_unavailable":
        raise DeviceUnavailable(
            f"no usable CUDA device: {message or 'the harness could not load the driver'} "
            "(check `nvidia-smi`)"
        )
    if kind == "expected_missing":
        raise ExpectedMissing(f"the harness no longer holds expected values: {message}",
                              list(error.missing) if error else [])
    if exit_code == ExitCode.BAD_REQUEST or kind == "bad_request":
        raise HarnessError(f"the harness refused the request: {message}")
    if exit_code == ExitCode.IO_ERROR or kind == "io_error":
        raise HarnessError(f"harness I/O error: {message}")
    if exit_code == ExitCode.INTERNAL or kind == "internal":
        raise HarnessError(f"internal harness error: {message}")

