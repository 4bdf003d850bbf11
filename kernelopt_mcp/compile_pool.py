"""NVRTC compiles in capped worker processes, so a compile bomb cannot take the server down.

A kernel can make NVRTC run for hours or allocate without bound (a huge unrolled template,
deep recursive instantiation). In-process, that cannot be stopped. Here every compile runs in
a child process (``_compile_worker.py``) that caps its own address space (``RLIMIT_AS``), and
the parent kills it when the wall-time limit passes. Workers are plain subprocesses (no fork
of a threaded server, no multiprocessing machinery), kept and reused: a warm compile pays a
pipe round trip, not a Python start-up (~0.3 s, paid once per worker).

The outcome of a killed compile is a :class:`CompileFailure`; ``compiler.compile_kernel``
turns it into a ``CompileResult`` with status error.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import selectors
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ToolchainNotFound
from .executables import kill_group

WORKER_SCRIPT = Path(__file__).with_name("_compile_worker.py")
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MEMORY_MB = 8192
MAX_IDLE_WORKERS = 4


@dataclass(frozen=True)
class CompileLimits:
    """Caps on one compile: wall time in seconds, the worker's address space in MiB (0: none)."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB


class CompileFailure(Exception):
    """The compile did not finish: over the time limit, out of memory, or the worker died."""


@dataclass
class WorkerOutput:
    ok: bool
    log: str
    cubin: bytes | None
    ptx: str | None
    duration_ms: float


class _Worker:
    def __init__(self, memory_mb: int) -> None:
        self.memory_mb = memory_mb
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker
        # an empty working directory: a quoted #include "name" finds nothing of the server's
        self._cwd = tempfile.TemporaryDirectory(prefix="kernelopt-nvrtc-")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, str(WORKER_SCRIPT), "--memory-mb", str(memory_mb)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, cwd=self._cwd.name,
                start_new_session=True,  # its own process group: a kill takes everything it started
            )
        except OSError as exc:
            self.stderr.close()
            self._cwd.cleanup()
            raise ToolchainNotFound(f"cannot start the compile worker {WORKER_SCRIPT}: {exc}") from None
        self._buffer = b""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def compile(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # it died: reported below
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.kill()
                    raise CompileFailure(
                        f"compile exceeded the {timeout_s:g} s limit: a huge unrolled template or "
                        "recursion; reduce unrolling (#pragma unroll N, smaller template depth)"
                    )
                if not sel.select(timeout=remaining):
                    continue
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise CompileFailure(self._death())
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def _death(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        self.stderr.seek(0, os.SEEK_END)
        self.stderr.seek(max(0, self.stderr.tell() - 600))
        tail = self.stderr.read().decode(errors="replace").strip()
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        if "cuda" in tail.lower() and ("ModuleNotFoundError" in tail or "ImportError" in tail):
            raise ToolchainNotFound(
                f"the compile worker cannot import cuda-python ({tail[-300:]}); install it with "
                "`pip install 'cuda-bindings>=13,<14' 'nvidia-cuda-nvrtc>=13.0,<13.1'`"
            )
        return (
            f"the compile ran out of memory or crashed ({how}; the worker's limit is "
            f"{self.memory_mb} MiB of address space): a huge unrolled template or recursion; "
            "reduce unrolling" + (f". Worker stderr: {tail[-300:]}" if tail else "")
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            kill_group(self.proc)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
        self.stderr.close()
        self._cwd.cleanup()


class CompilePool:
    """Reusable compile workers; thread-safe (each compile takes a worker of its own)."""

    def __init__(self, max_idle: int = MAX_IDLE_WORKERS) -> None:
        self.max_idle = max_idle
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self.started = 0  # workers started so far (tests and benchmarks read it)

    def compile(self, source: str, filename: str, options: list[str], limits: CompileLimits) -> WorkerOutput:
        """Compile in a worker under ``limits``.

        Raises:
            CompileFailure: over the time limit, out of memory, or the worker crashed.
            ToolchainNotFound: the worker cannot start or cannot import cuda-python.
        """
        worker = self._take(limits.memory_mb)
        request = {"source": source, "filename": filename, "options": options}
        try:
            answer = worker.compile(request, limits.timeout_s)
        except BaseException:
            worker.kill()
            worker.close()
            raise
        self._give_back(worker)
        if "failure" in answer:
            raise CompileFailure(f"{answer['failure']}: a huge unrolled template or recursion; reduce unrolling")
        cubin = base64.b64decode(answer["cubin"]) if answer.get("cubin") else None
        return WorkerOutput(answer["ok"], answer["log"], cubin, answer.get("ptx"), answer["duration_ms"])

    def _take(self, memory_mb: int) -> _Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.alive() and worker.memory_mb == memory_mb:
                    return worker
                worker.close()
            self.started += 1
        return _Worker(memory_mb)

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            if worker.alive() and len(self._idle) < self.max_idle:
                self._idle.append(worker)
                return
        worker.close()

    def close(self) -> None:
        """Stop every idle worker (workers in use are stopped when their compile returns)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()


_default_pool = CompilePool()
atexit.register(_default_pool.close)
_default_limits = CompileLimits()


def default_pool() -> CompilePool:
    return _default_pool


def default_limits() -> CompileLimits:
    return _default_limits


def set_default_limits(limits: CompileLimits) -> None:
    """The limits compiles use when the caller passes none (entry points set them from Settings)."""
    global _default_limits
    _default_limits = limits
