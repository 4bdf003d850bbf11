"""NumPy oracles run in confined worker processes, never in the server.

An oracle is Python: in ``kernelopt optimize`` description runs the model writes it, and a
configured workload's is whatever its author wrote. Run in the server it would have the
server's user, environment (API keys), files and network. Here every call goes to a worker
(``kernelopt_mcp/_oracle_worker.py``) started with an empty environment in an empty private
directory, which confines itself with Landlock before it imports the oracle (read-only: the
Python installation, NumPy's directory, the oracle's own directory; no file written, no program
executed, no TCP where the kernel's Landlock ABI >= 4) and caps itself with rlimits (address
space, CPU time, file size, open files, no new processes). The parent kills it at the wall-time
limit. Inputs go to it and outputs come back as raw bytes over its pipes (no pickling, no file
the worker reads by name); the parent checks every output's name, dtype and size against the
signature before it allocates a byte.

Workers are kept per oracle file (path, size and modification time) and reused, so a session
pays the start (~0.3 s) once. Where the kernel has no Landlock, oracles are refused unless the
user accepted unconfined code runners (the compiler's setting, ``--unconfined-compiler``); then
the worker still has the empty environment and the limits, and a warning is logged once.
"""

from __future__ import annotations

import ast
import atexit
import json
import logging
import os
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..compile_options import CompileLimits
from ..errors import WorkloadError
from ..executables import close_worker, exit_code_and_tail, kill_group
from ..sandbox import WorkerCaps, landlock_abi

__all__ = ["OracleLimits", "OraclePool", "call_oracle", "default_pool"]

WORKER_SCRIPT = Path(__file__).resolve().parent.parent / "_oracle_worker.py"
DEFAULT_TIMEOUT_S = 600.0
STARTUP_TIMEOUT_S = 60.0
MAX_IDLE_WORKERS = 4
MAX_HEADER_BYTES = 1 << 20
ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "int4", "uint4")

log = logging.getLogger("kernelopt.oracle")


def _widen_pipes(*fds: int) -> None:
    """1 MiB pipe buffers (Linux's F_SETPIPE_SZ): fewer wake-ups for large arrays. Where fcntl
    does not exist (Windows) or the call is refused, the default size works too. Imported here so
    that the public API loads where fcntl is missing."""
    try:
        import fcntl
    except ImportError:
        return
    for fd in fds:
        try:
            fcntl.fcntl(fd, 1031, 1 << 20)
        except OSError:
            pass


@dataclass(frozen=True)
class OracleLimits(WorkerCaps):
    """Caps on one oracle worker: wall time per call (s), memory beyond what Python and NumPy
    take (MiB; 0: half the physical memory), CPU time over the worker's life (s; 0: the wall
    time on every CPU); ``landlock`` False acts as if the kernel had none, ``accept_unconfined``
    runs oracles unconfined where there is none (with a warning) instead of refusing them."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_mb: int = 0
    cpu_s: int = 0
    landlock: bool = True
    accept_unconfined: bool = False

    @classmethod
    def following(cls, compile_limits: CompileLimits | None) -> OracleLimits:
        """The confinement the user chose for compiles (Settings.compile_limits()), default caps."""
        if compile_limits is None:
            return cls()
        return cls(landlock=compile_limits.landlock, accept_unconfined=compile_limits.accept_unconfined)


@dataclass(frozen=True)
class _Spec:
    oracle: str
    stamp: tuple[int, int]  # size, mtime_ns: an oracle rewritten in place gets a fresh worker
    read: tuple[str, ...]
    python_path: tuple[str, ...]
    confine: str  # "landlock" | "none"
    memory_mb: int
    cpu_s: int


_warned: set[str] = set()
_warn_lock = threading.Lock()


def _warn_once(message: str) -> None:
    with _warn_lock:
        if message in _warned:
            return
        _warned.add(message)
    log.warning("WARNING: %s", message)


def _warn_unconfined_once(reason: str) -> None:
    _warn_once(
        f"NumPy oracles run UNCONFINED ({reason}): an oracle can read and write any file of this user "
        "(its environment is still empty, sockets and signals are refused where seccomp works). Accepted with "
        "--unconfined-compiler / KERNELOPT_UNCONFINED_COMPILER=1."
    )


def _confine_mode(limits: OracleLimits, oracle: Path) -> str:
    reason = None
    if not limits.landlock:
        reason = "Landlock turned off by the settings (KERNELOPT_COMPILE_LANDLOCK=0)"
    elif landlock_abi() < 1:
        reason = "this kernel has no Landlock (Linux >= 5.13 with Landlock enabled is needed)"
    if reason is None:
        return "landlock"
    if not limits.accept_unconfined:
        raise WorkloadError(
            f"{oracle}: refusing to run the NumPy oracle: it cannot be confined ({reason}), and unconfined "
            "it is Python with your user's files and network. Run on a kernel with Landlock, or accept the "
            "risk for oracles you trust with --unconfined-compiler or KERNELOPT_UNCONFINED_COMPILER=1"
        )
    _warn_unconfined_once(reason)
    return "none"


def _python_dirs() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(directories the worker may read, directories it imports from): the standard library and
    the directories holding NumPy and ml_dtypes."""
    import ml_dtypes  # here, not at the top: loading it takes most of a second (kernelopt_mcp.dtypes says why)

    paths = sysconfig.get_paths()
    stdlib = [paths["stdlib"], paths["platstdlib"], os.path.join(paths["platstdlib"], "lib-dynload")]
    sites = [str(Path(m.__file__ or "").resolve().parent.parent) for m in (np, ml_dtypes)]
    return tuple(dict.fromkeys([*stdlib, *sites])), tuple(dict.fromkeys(sites))


def _lookup_store(oracle: Path) -> list[str]:
    """kernelopt's own lookup oracle (an imported PyTorch problem's ``reference.py``, unchanged but
    for its docstring) reads the outputs stored where the problem was imported: that ``expected/``."""
    from ..torch_store import ORACLE_TEMPLATE

    try:
        if oracle.stat().st_size > 1 << 20:  # the template is a few KiB
            return []
        text = oracle.read_text(encoding="utf-8")
        cut = text.index("\nfrom __future__")
        head = ast.parse(text[:cut]).body
        values = {
            t.id: ast.literal_eval(n.value) for n in ast.parse(text[cut:]).body
            if isinstance(n, ast.Assign) for t in n.targets
            if isinstance(t, ast.Name) and t.id in ("IMPORTED_TO", "INPUTS", "SCALARS", "OUTPUT")
        }
        expected = ORACLE_TEMPLATE.format(
            name="", problem="", torch_version="", home=values["IMPORTED_TO"], inputs=values["INPUTS"],
            scalars=values["SCALARS"], output=values["OUTPUT"],
        )
    except Exception:  # noqa: BLE001 - any file that is not the template (literal_eval's errors vary)
        return []
    if not isinstance(values["IMPORTED_TO"], str):
        return []
    docstring_only = len(head) == 1 and isinstance(head[0], ast.Expr) and isinstance(head[0].value, ast.Constant)
    if not docstring_only or expected[expected.index("\nfrom __future__"):] != text[cut:]:
        return []
    return [str(Path(values["IMPORTED_TO"]) / "expected")]


class _Worker:
    """One worker process serving one oracle file."""

    def __init__(self, spec: _Spec) -> None:
        self.spec = spec
        self.confinement = ""
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker
        self._cwd = tempfile.TemporaryDirectory(prefix="kernelopt-oracle-")
        argv = [sys.executable, "-I", "-S", "-B", str(WORKER_SCRIPT), "--oracle", spec.oracle,
                "--confine", spec.confine, "--memory-mb", str(spec.memory_mb), "--cpu-s", str(spec.cpu_s)]
        for d in spec.read:
            argv += ["--read", d]
        for d in spec.python_path:
            argv += ["--python-path", d]
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, cwd=self._cwd.name,
                env={},  # nothing of the server's environment (API keys, tokens) reaches the oracle
                start_new_session=True,  # its own process group: a kill takes everything it started
            )
        except OSError as exc:
            self.close()
            raise WorkloadError(f"cannot start the oracle worker {WORKER_SCRIPT}: {exc}") from None
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in = self.proc.stdin.fileno()
        self._out = self.proc.stdout.fileno()
        _widen_pipes(self._in, self._out)
        self._buffer = b""
        self._timed_out = False
        self.cpu_s = 0.0

    # --- the stream, under a watchdog that kills the worker at the deadline ---------------------

    def _watch(self, timeout_s: float) -> threading.Timer:
        self._timed_out = False

        def expire() -> None:
            self._timed_out = True
            self.kill()

        timer = threading.Timer(timeout_s, expire)
        timer.daemon = True
        timer.start()
        return timer

    def _line(self) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            if len(self._buffer) > MAX_HEADER_BYTES:
                raise _Broken(f"it sent a header line over {MAX_HEADER_BYTES} bytes")
            chunk = os.read(self._out, 1 << 16)
            if not chunk:
                raise _Dead
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            answer = json.loads(line)
        except ValueError:
            raise _Broken(f"it sent a line that is not JSON: {line[:200]!r}") from None
        if not isinstance(answer, dict):
            raise _Broken(f"it sent {type(answer).__name__}, not an object")
        return answer

    def _fill(self, view: memoryview) -> None:
        take = min(len(self._buffer), len(view))
        view[:take] = self._buffer[:take]
        self._buffer = self._buffer[take:]
        got = take
        while got < len(view):
            n = os.readv(self._out, [view[got:]])
            if n == 0:
                raise _Dead
            got += n

    def _write(self, data: memoryview) -> None:
        while len(data):
            try:
                data = data[os.write(self._in, data):]
            except OSError:
                raise _Dead from None

    # --- life -------------------------------------------------------------------------------------

    def start(self) -> None:
        timer = self._watch(STARTUP_TIMEOUT_S)
        try:
            hello = self._line()
        except _Dead:
            raise WorkloadError(f"{self.spec.oracle}: the oracle worker did not start: {self._death()}") from None
        except _Broken as exc:
            raise WorkloadError(f"{self.spec.oracle}: the oracle worker did not start: {exc}") from None
        finally:
            timer.cancel()
        if "failure" in hello:
            self.kill()
            printed = str(hello.get("printed") or "")
            raise _StartFailure(f"{self.spec.oracle}: {hello['failure']}" + _printed(printed),
                                bool(hello.get("unconfined")))
        self.confinement = str(hello.get("confinement", ""))
        if "not restricted" in self.confinement:
            _warn_once(f"NumPy oracles run with part of their confinement missing: {self.confinement}")

    def call(
        self, arrays: Mapping[str, np.ndarray], scalars: Mapping[str, Any], outputs: Mapping[str, tuple[int, ...]],
        case: str, timeout_s: float,
    ) -> dict[str, np.ndarray]:
        sent = {name: _native(a) for name, a in arrays.items()}
        header = {
            "case": case, "scalars": dict(scalars),
            "inputs": [{"name": n, "dtype": a.dtype.name, "shape": list(a.shape)} for n, a in sent.items()],
            "outputs": {n: int(np.prod(s, dtype=np.int64)) for n, s in outputs.items()},
        }
        timer = self._watch(timeout_s)
        try:
            self._write(memoryview(json.dumps(header).encode() + b"\n"))
            for a in sent.values():
                if a.nbytes:
                    self._write(_bytes_of(a))
            answer = self._line()
            self.cpu_s = float(answer.get("cpu_s") or 0.0)
            if "error" in answer:
                raise _Failed(answer)
            return self._receive(answer, outputs, case)
        except _Dead:
            if self._timed_out:
                raise WorkloadError(
                    f"{self.spec.oracle}: reference() did not finish within {timeout_s:g} s on case {case!r}; "
                    "the oracle worker was killed (an endless loop, or far too slow for the case's size)"
                ) from None
            raise WorkloadError(f"{self.spec.oracle}: reference() on case {case!r}: {self._death()}") from None
        except _Broken as exc:
            self.kill()
            raise WorkloadError(f"{self.spec.oracle}: the oracle worker broke the protocol on "
                                f"case {case!r}: {exc}") from None
        finally:
            timer.cancel()

    def _receive(self, answer: dict[str, Any], outputs: Mapping[str, tuple[int, ...]],
                 case: str) -> dict[str, np.ndarray]:
        """The outputs the answer announces, each checked against the signature before it is read."""
        described = answer.get("outputs")
        if (not isinstance(described, list)
                or [d.get("name") if isinstance(d, dict) else None for d in described] != list(outputs)):
            raise _Broken(f"it announced outputs {str(described)[:300]}, not {list(outputs)}")
        result: dict[str, np.ndarray] = {}
        for d in described:
            name, shape = d["name"], outputs[d["name"]]
            dtype = _dtype(d.get("dtype"))
            if dtype is None:
                raise _Broken(f"it announced {name!r} as {str(d.get('dtype'))[:40]!r}, not a numeric dtype")
            size = int(np.prod(shape, dtype=np.int64))
            if d.get("size") != size:
                raise _Broken(f"it announced {str(d.get('size'))[:40]} elements for {name!r}; "
                              f"the signature says shape {shape}")
            array = np.empty(shape, dtype=dtype)
            if array.nbytes:
                self._fill(_bytes_of(array))
            result[name] = array
        return result

    def _death(self) -> str:
        code, tail = exit_code_and_tail(self.proc, self.stderr, self.kill)
        tail = f"; its stderr ends: {tail[-400:]}" if tail else ""
        if code is not None and code < 0:
            sig = -code
            name = signal.Signals(sig).name if sig in {s.value for s in signal.Signals} else str(sig)
            why = {
                int(signal.SIGXCPU): f"it used up its CPU-time limit ({self.spec.cpu_s} s)",
                int(signal.SIGSEGV): "the oracle crashed (a segmentation fault: ctypes, or a broken extension module)",
                int(signal.SIGKILL): "killed (out of memory, or from outside)",
            }.get(sig, "the oracle crashed")
            return f"the oracle worker died of signal {sig} ({name}): {why}{tail}"
        return f"the oracle worker exited with code {code} without answering{tail}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            kill_group(self.proc)

    def close(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is not None:
            close_worker(proc, self.kill)
        self.stderr.close()
        self._cwd.cleanup()


class _Dead(Exception):
    """The worker's pipe closed: it died, or the watchdog killed it."""


class _Broken(Exception):
    """The worker sent something the protocol does not allow."""


class _Failed(Exception):
    """The worker answered with an error (the oracle raised, ran out of memory, returned wrongly)."""

    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__(str(answer.get("error")))
        self.answer = answer


class _StartFailure(WorkloadError):
    def __init__(self, message: str, unconfined: bool) -> None:
        super().__init__(message)
        self.unconfined = unconfined


def _printed(text: str) -> str:
    text = text.strip()
    return f" (it printed, last: {text[-300:]!r})" if text else ""


def _native(array: np.ndarray) -> np.ndarray:
    array = np.ascontiguousarray(array)
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


def _bytes_of(array: np.ndarray) -> memoryview:
    """A C-contiguous array's bytes (also for bfloat16, which the buffer protocol does not know)."""
    flat: Any = array.reshape(-1).view(np.uint8)
    return memoryview(flat)


def _dtype(name: object) -> np.dtype[Any] | None:
    """The dtype a worker may return: numbers, booleans and ml_dtypes' narrow floats; never objects."""
    if not isinstance(name, str):
        return None
    if name in ML_DTYPES:
        import ml_dtypes

        narrow: np.dtype[Any] = np.dtype(getattr(ml_dtypes, name))
        return narrow
    try:
        dtype = np.dtype(name)
    except TypeError:
        return None
    return dtype if dtype.kind in "biufc" else None


class OraclePool:
    """Oracle workers, kept per oracle file for reuse; thread-safe (each call takes a worker)."""

    def __init__(self, max_idle: int = MAX_IDLE_WORKERS) -> None:
        self.max_idle = max_idle
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self.started = 0  # workers started so far (tests read it)

    def call(
        self, oracle: Path, arrays: Mapping[str, np.ndarray], scalars: Mapping[str, Any],
        outputs: Mapping[str, tuple[int, ...]], *, case: str, limits: OracleLimits,
    ) -> dict[str, np.ndarray]:
        """``reference(**arrays, **scalars)`` of ``oracle`` in a confined worker: ``outputs``' arrays.

        Raises:
            WorkloadError: the oracle cannot be confined (and that was not accepted), fails to import,
                raises, runs out of time or memory, crashes, or returns a missing, non-numeric or
                wrongly sized output.
        """
        oracle = oracle.resolve()
        try:
            st = oracle.stat()
        except OSError as exc:
            raise WorkloadError(f"{oracle}: the NumPy oracle cannot be read: {exc.strerror}") from None
        read, python_path = _python_dirs()
        spec = _Spec(str(oracle), (st.st_size, st.st_mtime_ns), (*read, *_lookup_store(oracle)), python_path,
                     _confine_mode(limits, oracle), limits.memory_cap_mb(), limits.cpu_cap_s())
        worker = self._take(spec, limits)
        try:
            try:
                result = worker.call(arrays, scalars, outputs, case, limits.timeout_s)
            except _Failed as exc:
                raise WorkloadError(_failure_message(oracle, exc.answer, outputs, case, spec)) from None
        except BaseException:
            if not worker.alive():
                worker.close()
            else:
                self._give_back(worker)
            raise
        self._give_back(worker)
        return result

    def _take(self, spec: _Spec, limits: OracleLimits) -> _Worker:
        with self._lock:
            for i in range(len(self._idle) - 1, -1, -1):
                if self._idle[i].spec == spec and self._idle[i].alive():
                    return self._idle.pop(i)
            self.started += 1
        try:
            return self._start(spec)
        except _StartFailure as exc:
            if not (exc.unconfined and spec.confine == "landlock"):
                raise
            # Landlock is there but refused (a seccomp filter, another LSM): as on a kernel without it
            if not limits.accept_unconfined:
                raise WorkloadError(
                    f"{exc}. Oracles are refused rather than run unconfined; to accept the risk for oracles you "
                    "trust pass --unconfined-compiler or set KERNELOPT_UNCONFINED_COMPILER=1"
                ) from None
            _warn_unconfined_once(str(exc))
            return self._start(replace(spec, confine="none"))

    @staticmethod
    def _start(spec: _Spec) -> _Worker:
        worker = _Worker(spec)
        try:
            worker.start()
        except BaseException:
            worker.kill()
            worker.close()
            raise
        return worker

    def _give_back(self, worker: _Worker) -> None:
        stale: list[_Worker] = [worker]
        with self._lock:
            if worker.alive() and worker.cpu_s < worker.spec.cpu_s / 2:  # retired before its CPU limit
                self._idle.append(worker)
                stale = [self._idle.pop(0) for _ in range(len(self._idle) - self.max_idle)]
        for w in stale:
            w.close()

    def close(self) -> None:
        """Stop every idle worker."""
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()


def _failure_message(
    oracle: Path, answer: dict[str, Any], outputs: Mapping[str, tuple[int, ...]], case: str, spec: _Spec
) -> str:
    error, kind = str(answer.get("error"))[:2000], answer.get("kind")
    printed = _printed(str(answer.get("printed") or ""))
    if kind == "memory":
        return (f"{oracle}: reference() ran out of memory on case {case!r} ({error}): the oracle worker may use "
                f"{spec.memory_mb} MiB beyond what Python and NumPy take{printed}")
    if kind == "size":
        name = str(answer.get("name"))
        return (f"{oracle}: {name!r} has {answer.get('size')} elements on case {case!r}; the signature says shape "
                f"{outputs.get(name)}")
    if kind == "result":
        return f"{oracle}: {error} on case {case!r}{printed}"
    return f"{oracle}: reference() failed on case {case!r}: {error}{printed}"


_default_pool = OraclePool()
atexit.register(_default_pool.close)


def default_pool() -> OraclePool:
    return _default_pool


def call_oracle(
    oracle: Path, arrays: Mapping[str, np.ndarray], scalars: Mapping[str, Any], outputs: Mapping[str, tuple[int, ...]],
    *, case: str, limits: OracleLimits | None = None,
) -> dict[str, np.ndarray]:
    """Run ``oracle``'s ``reference()`` in a confined worker of the default pool (see :class:`OraclePool`)."""
    return _default_pool.call(oracle, arrays, scalars, outputs, case=case, limits=limits or OracleLimits())
