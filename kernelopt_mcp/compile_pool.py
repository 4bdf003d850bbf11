"""NVRTC compiles in capped, confined worker processes: a compile bomb cannot take the server
down, and a kernel cannot make the compiler read what it should not.

A kernel can make NVRTC run for hours or allocate without bound (a huge unrolled template,
deep recursive instantiation), and NVRTC opens any file an ``#include`` names and quotes it in
its log. In-process, neither can be stopped. Here every compile runs in a child process
(``_compile_worker.py``) started with an empty environment, which confines itself with Landlock
(:mod:`sandbox`: it can read only the CUDA headers and NVRTC's own files, write only its scratch
directory) and caps the memory a compile may add (``RLIMIT_DATA``, ``RLIMIT_AS`` as a backstop);
the parent kills it when the
wall-time limit passes. Workers are plain subprocesses (no fork of a threaded server, no
multiprocessing machinery), kept and reused: a warm compile pays a pipe round trip, not a
Python start-up (~0.5 s with the warm-up compile, paid once per worker).

The pool bounds the whole, not only each worker: a compile reserves its worker's memory cap
from a pool-wide budget before it starts (and waits while the budget is taken), and the
number of live workers is capped.

Where the kernel has no Landlock, compiles are refused with :class:`UnconfinedCompilerRefused`
unless the user accepted an unconfined compiler (``CompileLimits.accept_unconfined``).

The outcome of a killed compile is a :class:`CompileFailure`; ``compiler.compile_kernel``
turns it into a ``CompileResult`` with status error.
"""

from __future__ import annotations

import atexit
import base64
import json
import logging
import os
import selectors
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .compile_options import CompileLimits
from .errors import ConfinementFailed, ToolchainNotFound, UnconfinedCompilerRefused
from .executables import close_worker, exit_code_and_tail, kill_group
from .sandbox import landlock_abi

WORKER_SCRIPT = Path(__file__).with_name("_compile_worker.py")
MAX_IDLE_WORKERS = 4
STARTUP_TIMEOUT_S = 120.0  # start, import cuda-python, warm-up compile, confine
UNCONFINED = "unconfined (accepted)"

log = logging.getLogger("kernelopt.compile")


class CompileFailure(Exception):
    """The compile did not finish: over the time limit, out of memory, or the worker died."""


@dataclass(frozen=True)
class Toolchain:
    """What a worker needs from the parent: the header directories it may read (the ``-I``
    directories), the NVRTC library to load and the directories holding cuda-python."""

    read_dirs: tuple[str, ...] = ()
    nvrtc_lib: str | None = None
    python_path: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkerSpec:
    memory_mb: int
    confine: str  # "landlock" | "none"
    toolchain: Toolchain = field(default_factory=Toolchain)


@dataclass
class WorkerOutput:
    ok: bool
    log: str
    cubin: bytes | None
    ptx: str | None
    duration_ms: float
    confinement: str = ""


_warned_unconfined = False
_warn_lock = threading.Lock()


def warn_unconfined_once(reason: str) -> None:
    """Log, once per process, that compiles run without confinement (the user accepted it)."""
    global _warned_unconfined
    with _warn_lock:
        if _warned_unconfined:
            return
        _warned_unconfined = True
    log.warning(
        "WARNING: NVRTC compiles run UNCONFINED (%s): a kernel's #include can read any file this "
        "user can read and its compile log may quote it. Accepted with --unconfined-compiler / "
        "KERNELOPT_UNCONFINED_COMPILER=1.", reason,
    )


def unconfined_reason(limits: CompileLimits) -> str | None:
    """Why compiles under ``limits`` cannot be confined (None: Landlock will confine them)."""
    if not limits.landlock:
        return "Landlock turned off by the settings (KERNELOPT_COMPILE_LANDLOCK=0)"
    if landlock_abi() < 1:
        return "this kernel has no Landlock (Linux >= 5.13 with Landlock enabled is needed)"
    return None


def confinement_mode(limits: CompileLimits) -> str:
    """``"landlock"`` or ``"none"`` (accepted) for compiles under ``limits``.

    Raises:
        UnconfinedCompilerRefused: no Landlock and the user did not accept an unconfined compiler.
    """
    reason = unconfined_reason(limits)
    if reason is None:
        return "landlock"
    if not limits.accept_unconfined:
        raise UnconfinedCompilerRefused(
            f"refusing to compile: NVRTC cannot be confined ({reason}), and unconfined it could read "
            "any file of this user into a compile log. Run on a kernel with Landlock (Linux >= 5.13, "
            "CONFIG_SECURITY_LANDLOCK, 'landlock' in lsm=), or accept the risk for trusted sources "
            "with --unconfined-compiler or KERNELOPT_UNCONFINED_COMPILER=1"
        )
    warn_unconfined_once(reason)
    return "none"


class WorkerLike(Protocol):
    spec: WorkerSpec

    def alive(self) -> bool: ...
    def compile(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]: ...
    def kill(self) -> None: ...
    def close(self) -> None: ...


class _Worker:
    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.memory_mb = spec.memory_mb
        self.confinement = ""
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker
        # an empty scratch directory, the only one the worker may write (and, besides the
        # headers, read): a quoted #include "name" finds nothing of the server's
        self._cwd = tempfile.TemporaryDirectory(prefix="kernelopt-nvrtc-")
        tc = spec.toolchain
        argv = [sys.executable, str(WORKER_SCRIPT), "--memory-mb", str(spec.memory_mb), "--confine", spec.confine]
        for d in tc.read_dirs:
            argv += ["--read", d]
        for d in tc.python_path:
            argv += ["--python-path", d]
        if tc.nvrtc_lib:
            argv += ["--nvrtc-lib", tc.nvrtc_lib]
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, cwd=self._cwd.name,
                env={},  # nothing of the server's environment (API keys, tokens) reaches NVRTC
                start_new_session=True,  # its own process group: a kill takes everything it started
            )
        except OSError as exc:
            self.stderr.close()
            self._cwd.cleanup()
            raise ToolchainNotFound(f"cannot start the compile worker {WORKER_SCRIPT}: {exc}") from None
        self._buffer = b""
        self._starting = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _start(self) -> None:
        """Wait for the worker's ready line (it has loaded NVRTC and confined itself)."""
        self._starting = True
        try:
            hello = self._read_line(STARTUP_TIMEOUT_S)
        except CompileFailure as exc:
            raise ToolchainNotFound(f"the compile worker did not start: {exc}") from None
        finally:
            self._starting = False
        if "failure" in hello:
            self.kill()
            raise (ConfinementFailed if hello.get("unconfined") else ToolchainNotFound)(
                f"{hello['failure']}. Compiles are refused rather than run unconfined; to accept the risk "
                "for trusted sources pass --unconfined-compiler or set KERNELOPT_UNCONFINED_COMPILER=1"
            )
        self.confinement = str(hello.get("confinement", ""))

    def compile(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        if not self.confinement:
            self._start()
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # it died: reported below
        return self._read_line(timeout_s)

    def _read_line(self, timeout_s: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
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
        code, tail = exit_code_and_tail(self.proc, self.stderr, self.kill)
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        if "cuda" in tail.lower() and ("ModuleNotFoundError" in tail or "ImportError" in tail):
            raise ToolchainNotFound(
                f"the compile worker cannot import cuda-python ({tail[-300:]}); install it with "
                "`pip install 'cuda-bindings>=13,<14' 'nvidia-cuda-nvrtc>=13.0,<13.1'`"
            )
        if self._starting:
            return f"{how}" + (f"; its stderr: {tail[-600:]}" if tail else "")
        return (
            f"the compile ran out of memory or crashed ({how}; the worker's limit is "
            f"{self.memory_mb} MiB of address space): a huge unrolled template or recursion; "
            "reduce unrolling" + (f". Worker stderr: {tail[-300:]}" if tail else "")
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            kill_group(self.proc)

    def close(self) -> None:
        close_worker(self.proc, self.kill)
        self.stderr.close()
        self._cwd.cleanup()


class CompilePool:
    """Reusable compile workers under a pool-wide memory budget; thread-safe (each compile
    takes a worker of its own).

    Args:
        max_idle: workers kept for reuse between compiles.
        memory_budget_mb: the sum of the memory caps of compiles running at once (None: from
            the limits of each call, :meth:`CompileLimits.budget_mb`). A compile whose cap does
            not fit waits until running ones finish; a cap above the budget takes all of it.
        max_workers: live workers (running and idle) at most (None: from the limits).
        worker_factory: starts a worker for a spec (tests pass fakes).
    """

    def __init__(
        self,
        max_idle: int = MAX_IDLE_WORKERS,
        *,
        memory_budget_mb: int | None = None,
        max_workers: int | None = None,
        worker_factory: Callable[[WorkerSpec], WorkerLike] = _Worker,
    ) -> None:
        self.max_idle = max_idle
        self.memory_budget_mb = memory_budget_mb
        self.max_workers = max_workers
        self._factory = worker_factory
        self._idle: list[WorkerLike] = []
        self._cond = threading.Condition()
        self._busy = 0
        self._reserved_mb = 0
        self.started = 0  # workers started so far (tests and benchmarks read it)
        self.peak_busy = 0  # most compiles running at once
        self.peak_reserved_mb = 0  # most memory reserved at once

    def compile(
        self, source: str, filename: str, options: list[str], limits: CompileLimits, toolchain: Toolchain | None = None
    ) -> WorkerOutput:
        """Compile in a confined worker under ``limits``; waits while the pool's budget is taken.

        Raises:
            CompileFailure: over the time limit, out of memory, or the worker crashed.
            UnconfinedCompilerRefused: no Landlock, and an unconfined compiler was not accepted.
            ToolchainNotFound: the worker cannot start, confine itself or import cuda-python.
        """
        spec = WorkerSpec(limits.memory_mb, confinement_mode(limits), toolchain or Toolchain())
        request = {"source": source, "filename": filename, "options": options}
        reserved = self._reserve(spec.memory_mb, limits)
        try:
            try:
                worker, answer = self._compile_in(spec, request, limits)
            except ConfinementFailed as exc:
                if not limits.accept_unconfined:
                    raise
                warn_unconfined_once(str(exc))  # accepted: as on a kernel without Landlock
                spec = WorkerSpec(spec.memory_mb, "none", spec.toolchain)
                worker, answer = self._compile_in(spec, request, limits)
        finally:
            self._release(reserved)
        if "failure" in answer:
            raise CompileFailure(f"{answer['failure']}: a huge unrolled template or recursion; reduce unrolling")
        cubin = base64.b64decode(answer["cubin"]) if answer.get("cubin") else None
        confinement = UNCONFINED if spec.confine == "none" else getattr(worker, "confinement", "")
        return WorkerOutput(answer["ok"], answer["log"], cubin, answer.get("ptx"), answer["duration_ms"], confinement)

    def _compile_in(
        self, spec: WorkerSpec, request: dict[str, Any], limits: CompileLimits
    ) -> tuple[WorkerLike, dict[str, Any]]:
        worker = self._take(spec, limits)
        try:
            answer = worker.compile(request, limits.timeout_s)
        except BaseException:
            worker.kill()
            worker.close()
            raise
        self._give_back(worker, limits)
        return worker, answer

    def _limits(self, limits: CompileLimits) -> tuple[int, int]:
        budget = self.memory_budget_mb if self.memory_budget_mb is not None else limits.budget_mb()
        workers = self.max_workers if self.max_workers is not None else limits.max_workers
        return max(1, budget), max(1, workers)

    def concurrency(self, limits: CompileLimits) -> int:
        """Compiles under ``limits`` that run at once without waiting for the budget: what a caller
        that queues compiles itself (the MCP server, in its event loop) lets through."""
        budget, workers = self._limits(limits)
        need = budget if limits.memory_mb <= 0 else min(limits.memory_mb, budget)
        return max(1, min(workers, budget // need))

    def _reserve(self, memory_mb: int, limits: CompileLimits) -> int:
        budget, workers = self._limits(limits)
        need = budget if memory_mb <= 0 else min(memory_mb, budget)
        with self._cond:
            while self._reserved_mb + need > budget or self._busy >= workers:
                self._cond.wait()
            self._reserved_mb += need
            self._busy += 1
            self.peak_busy = max(self.peak_busy, self._busy)
            self.peak_reserved_mb = max(self.peak_reserved_mb, self._reserved_mb)
        return need

    def _release(self, reserved: int) -> None:
        with self._cond:
            self._reserved_mb -= reserved
            self._busy -= 1
            self._cond.notify_all()

    def _take(self, spec: WorkerSpec, limits: CompileLimits) -> WorkerLike:
        _, workers = self._limits(limits)
        stale: list[WorkerLike] = []
        found: WorkerLike | None = None
        with self._cond:
            for i in range(len(self._idle) - 1, -1, -1):
                worker = self._idle[i]
                if not worker.alive():
                    stale.append(self._idle.pop(i))
                elif found is None and worker.spec == spec:
                    found = self._idle.pop(i)
            # the live cap: running compiles (this one included) plus idle workers
            while self._idle and self._busy + len(self._idle) > workers:
                stale.append(self._idle.pop(0))
            if found is None:
                self.started += 1
        for worker in stale:
            worker.close()
        return found if found is not None else self._factory(spec)

    def _give_back(self, worker: WorkerLike, limits: CompileLimits) -> None:
        _, workers = self._limits(limits)
        with self._cond:
            # _busy still counts this compile: after release, busy - 1 + idle + 1 <= workers
            if worker.alive() and len(self._idle) < self.max_idle and self._busy + len(self._idle) <= workers:
                self._idle.append(worker)
                return
        worker.close()

    def live_workers(self) -> int:
        """Workers running a compile plus idle ones."""
        with self._cond:
            return self._busy + len(self._idle)

    def close(self) -> None:
        """Stop every idle worker (workers in use are stopped when their compile returns)."""
        with self._cond:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()


_default_pool = CompilePool()
atexit.register(_default_pool.close)
def default_pool() -> CompilePool:
    return _default_pool


def warn_if_unconfined(limits: CompileLimits) -> None:
    """At an entry point's start-up: where compiles under ``limits`` (the settings' limits, passed
    to every compile) will run unconfined because the user accepted it, say so now (once, on
    stderr), so the warning is part of the server's or the CLI's start-up."""
    reason = unconfined_reason(limits)
    if reason is not None and limits.accept_unconfined:
        warn_unconfined_once(reason)
