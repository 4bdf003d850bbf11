"""The NumPy oracle worker: a child process that runs one ``reference.py`` for the server.

Run by :mod:`kernelopt_mcp.evaluation.oracle_sandbox` as ``python -I -S -B .../_oracle_worker.py
--oracle PATH ...`` (by path, with an EMPTY environment: no API key or token of the server's
reaches the oracle). Before it reads any request it

1. imports NumPy (and ml_dtypes where installed) from the ``--python-path`` directories and runs
   a small matrix product, so that BLAS has started its threads and loaded its pieces;
2. confines itself with Landlock (``--confine landlock``, :mod:`sandbox`): from then on it may
   only read the ``--read`` directories (the Python installation, the directories NumPy lives
   in, the oracle's own directory) and the directories of the libraries it has mapped; it can
   write no file, execute no program, and (Landlock ABI >= 4) neither bind nor connect TCP;
   ``--confine none`` (only when the user accepted unconfined oracles) skips this. Then, either
   way, a seccomp filter refuses every new socket and signals to other processes;
3. caps itself with rlimits: address space (what it holds after step 1 plus ``--memory-mb``),
   CPU time (``--cpu-s``), file size (its stderr file), open files, no core files, and (set
   before step 2, as root too: ``sandbox.limit_tasks`` moves a root worker to a uid of its own
   that keeps root's file access only) no new process or thread; the parent kills it at the
   wall-time limit;
4. imports the oracle and answers ``{"ready": true, "confinement": ...}``, or ``{"failure": str}``
   (``"unconfined": true`` when confinement failed) and exits 3.

Protocol: requests on stdin, answers on the descriptor that was stdout (the oracle's own
``print`` goes to a bounded buffer whose tail is returned, C-level writes to stderr):

    request  {"case": str, "inputs": [{"name", "dtype", "shape"}], "scalars": {...},
              "outputs": {name: element count}}\\n, then each input's raw bytes in order
    answer   {"ok": true, "outputs": [{"name", "dtype", "size"}], "cpu_s": float}\\n, then each
             output's raw bytes in order
          or {"error": str, "kind": "exception" | "memory" | "result", "printed": str}\\n

The worker exits at EOF on stdin. It imports nothing from kernelopt but ``sandbox.py`` (standard
library only), loaded by path.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

MAX_HEADER_BYTES = 1 << 20
PRINTED_TAIL = 4000
ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "int4", "uint4")


class _Tail(io.TextIOBase):
    """sys.stdout/sys.stderr of the oracle: keeps only the last characters printed."""

    def __init__(self) -> None:
        self.text = ""

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        self.text = (self.text + s)[-PRINTED_TAIL:]
        return len(s)

    def take(self) -> str:
        text, self.text = self.text, ""
        return text




def _limit(sandbox: Any, memory_mb: int, cpu_s: int, fsize_mb: int, base_kib: dict[str, int]) -> None:
    if memory_mb > 0:
        sandbox.set_rlimit(resource.RLIMIT_AS, base_kib.get("VmSize", 0) * 1024 + memory_mb * 2**20)
    if cpu_s > 0:
        sandbox.set_rlimit(resource.RLIMIT_CPU, cpu_s)
    sandbox.set_rlimit(resource.RLIMIT_FSIZE, fsize_mb * 2**20)
    sandbox.set_rlimit(resource.RLIMIT_CORE, 0)
    sandbox.set_rlimit(resource.RLIMIT_NOFILE, 64)


def _load_sandbox() -> Any:
    path = Path(__file__).with_name("sandbox.py")
    spec = importlib.util.spec_from_file_location("kernelopt_sandbox", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _import_oracle(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("kernelopt_oracle", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _dtype(np: Any, name: str) -> Any:
    if name in ML_DTYPES:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    dtype = np.dtype(name)
    if dtype.kind not in "biufc":
        raise TypeError(f"dtype {name!r} is not numeric")
    return dtype


def _read_exact(fd: int, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = os.readv(fd, [view[got:]])
        if n == 0:
            raise EOFError
        got += n


class _Requests:
    """The request stream: JSON header lines, each followed by raw array bytes."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""

    def line(self) -> bytes | None:
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_HEADER_BYTES:
                raise ValueError("request header too long")
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def fill(self, view: memoryview) -> None:
        take = min(len(self.buffer), len(view))
        view[:take] = self.buffer[:take]
        self.buffer = self.buffer[take:]
        if take < len(view):
            _read_exact(self.fd, view[take:])


def _bytes_of(array: Any) -> memoryview:
    """A C-contiguous array's bytes (also for dtypes the buffer protocol does not know: bfloat16)."""
    return memoryview(array.reshape(-1).view("u1"))


def _send(fd: int, answer: dict[str, Any], arrays: list[Any] | None = None) -> None:
    data = json.dumps(answer).encode() + b"\n"
    views = [memoryview(data)] + [_bytes_of(a) for a in arrays or []]
    for view in views:
        while len(view):
            view = view[os.write(fd, view):]


def _serve(np: Any, reference: Any, requests: _Requests, out_fd: int, printed: _Tail) -> bool:
    """Answer one request; False at EOF."""
    line = requests.line()
    if line is None:
        return False
    try:
        request = json.loads(line)
        kwargs: dict[str, Any] = {}
        for spec in request["inputs"]:
            array = np.empty(tuple(spec["shape"]), dtype=_dtype(np, spec["dtype"]))
            if array.nbytes:
                requests.fill(_bytes_of(array))
            kwargs[spec["name"]] = array
        kwargs.update(request["scalars"])
    except (MemoryError, ValueError, TypeError, KeyError, EOFError) as exc:
        # the stream's position is lost: answer and stop (the parent starts a fresh worker)
        _send(out_fd, {"error": f"receiving the inputs failed: {type(exc).__name__}: {exc}", "kind": "memory"
                       if isinstance(exc, MemoryError) else "protocol"})
        return False
    try:
        result = reference(**kwargs)
        kwargs.clear()
        answer, arrays = _check_result(np, result, request["outputs"])
    except MemoryError as exc:
        answer, arrays = {"error": f"MemoryError: {exc}", "kind": "memory"}, []
    except BaseException as exc:  # noqa: BLE001 - the oracle's failure (SystemExit too) is the answer
        answer, arrays = {"error": f"{type(exc).__name__}: {exc}", "kind": "exception"}, []
    answer["printed"] = printed.take()
    answer["cpu_s"] = time.process_time()
    _send(out_fd, answer, arrays)
    return True


def _check_result(np: Any, result: Any, outputs: dict[str, int]) -> tuple[dict[str, Any], list[Any]]:
    if not isinstance(result, dict):
        return {"error": f"reference() must return a dict, got {type(result).__name__}", "kind": "result"}, []
    described, arrays = [], []
    for name, size in outputs.items():
        if name not in result:
            return {"error": f"reference() returned no {name!r}", "kind": "result"}, []
        array = np.asarray(result[name])
        if array.dtype.kind not in "biufc" and array.dtype.name not in ML_DTYPES:
            return {"error": f"{name!r} is an array of {array.dtype} (dtype.kind {array.dtype.kind!r}); "
                             "return numbers (float64 for example)", "kind": "result"}, []
        if array.size != size:
            return {"error": f"{name!r} has {array.size} elements", "kind": "size", "name": name,
                    "size": int(array.size)}, []
        array = np.ascontiguousarray(array)
        if not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
        described.append({"name": name, "dtype": array.dtype.name, "size": int(array.size)})
        if array.size:
            arrays.append(array)
    return {"ok": True, "outputs": described}, arrays


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--oracle", required=True)
    parser.add_argument("--confine", choices=("landlock", "none"), default="landlock")
    parser.add_argument("--read", action="append", default=[], help="a directory (or file) the oracle may read")
    parser.add_argument("--python-path", action="append", default=[], help="a directory to import from (NumPy's)")
    parser.add_argument("--memory-mb", type=int, default=0)
    parser.add_argument("--cpu-s", type=int, default=0)
    parser.add_argument("--fsize-mb", type=int, default=16)
    args = parser.parse_args(argv)
    if sys.path and sys.path[0] == str(Path(__file__).parent):
        sys.path.pop(0)
    sys.path.extend(p for p in args.python_path if p not in sys.path)
    sys.dont_write_bytecode = True
    # the protocol's descriptors, apart from 0/1: the oracle's prints and reads reach neither
    in_fd, out_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    os.close(null)
    printed = _Tail()
    sys.stdout = sys.stderr = printed
    sys.stdin = io.StringIO()

    def fail(message: str, **extra: Any) -> int:
        _send(out_fd, {"failure": message, **extra})
        return 3

    sandbox = _load_sandbox()
    import numpy as np

    try:
        import ml_dtypes  # noqa: F401 - loaded before the sandbox, where the oracle's outputs need it
    except ImportError:
        pass
    warm = np.ones((64, 64)) @ np.ones((64, 64))
    assert float(warm[0, 0]) == 64.0
    base_kib = sandbox.vm_kib()
    oracle_dir = str(Path(args.oracle).parent)
    # no fork, no new thread, root too (then under a uid of its own); before Landlock: it reads /proc
    try:
        tasks = sandbox.limit_tasks(0)
    except OSError as exc:
        return fail(f"the oracle worker could not bound its tasks: {exc}")
    if args.confine == "none":
        confinement = "unconfined (accepted)"
    else:
        try:
            done = sandbox.restrict(read=[*args.read, oracle_dir, *sandbox.mapped_library_dirs(), "/etc/ld.so.cache"])
        except OSError as exc:
            return fail(f"the oracle worker could not confine itself with Landlock: {exc}", unconfined=True)
        confinement = done.describe() + ("" if done.abi >= 4 else " (TCP not restricted by Landlock: needs ABI 4)")
    try:  # UDP, UNIX sockets by path (an ssh-agent's, docker's) and signals to the server: seccomp
        confinement += ", " + sandbox.restrict_syscalls()
    except OSError as exc:
        confinement += f", sockets and signals not restricted ({exc})"
    _limit(sandbox, args.memory_mb, args.cpu_s, args.fsize_mb, base_kib)
    confinement += ", " + tasks
    try:
        module = _import_oracle(args.oracle)
    except BaseException as exc:  # noqa: BLE001 - SystemExit and the like from the oracle's import too
        return fail(f"importing the oracle failed: {type(exc).__name__}: {exc}", printed=printed.take())
    reference = getattr(module, "reference", None)
    if not callable(reference):
        return fail("defines no function `reference`; add `def reference(<inputs>, <scalars>) -> dict[str, "
                    "numpy.ndarray]`")
    _send(out_fd, {"ready": True, "confinement": confinement})
    requests = _Requests(in_fd)
    while _serve(np, reference, requests, out_fd, printed):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
