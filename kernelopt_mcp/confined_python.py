"""Run a Python module of a client's (a PyTorch problem's import, a reference) in a confined child.

The child (``_confined_child.py``) runs under a supervisor of its own that reaps its whole
process tree; it gets :func:`~kernelopt_mcp.executables.child_env` (HOME inside its staging
directory, TMPDIR a directory of its own in /tmp), ``python -I`` (no PYTHON* variables, no user
site, neither the working directory nor a script's on sys.path), and confines itself like the NumPy
oracle worker before it runs anything: Landlock (it reads the Python installation and what the
caller names, writes only its staging directory and TMPDIR), seccomp (no sockets, no signals out),
rlimits, a bound on its tasks (for root under a uid of its own: ``sandbox.limit_tasks``). Its
output is read from pipes up to a deadline, never to an end of file that a process it left behind
could hold.

Where the kernel has no Landlock the run is refused unless the operator accepted unconfined code
runners (``ChildLimits.accept_unconfined``: the compiler's setting).

A child that runs torch on the GPU (``gpu=True``: PyTorch eager and ``torch.compile`` timed beside a
candidate, :mod:`.torch_baseline`) may also read and write the NVIDIA device files and read what the
CUDA driver reads about the devices (``_confined_child.GPU_READ``); ``execute`` names what it may run
(triton's ptxas, the C compiler triton builds its launcher with): nothing else is executable.
"""

from __future__ import annotations

import errno
import functools
import importlib.metadata
import json
import logging
import os
import re
import selectors
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .cgroups import BASE_ENV as CGROUP_ENV
from .compile_options import CompileLimits
from .executables import child_env, kill_group
from .sandbox import WorkerCaps, landlock_abi

log = logging.getLogger(__name__)

SUPERVISOR = Path(__file__).resolve().with_name("_confined_child.py")
REFUSED = 125  # _confined_child.REFUSED
TIMED_OUT = 124  # _confined_child.TIMED_OUT
GRACE_S = 15.0  # the supervisor's own start and reaping, past the child's deadline
DRAIN_S = 1.0  # reading after the supervisor exited: what is still in the pipes
MAX_STDOUT_BYTES = 4 << 20
STDERR_TAIL_BYTES = 8192


@dataclass(frozen=True)
class ChildLimits(WorkerCaps):
    """Caps on one confined child: wall time (s), data memory (MiB; 0: half the physical memory,
    at least 2 GiB), CPU time (s; 0: the wall time on every CPU), the largest file it may write
    (MiB), the tasks (processes and threads) its tree may start (0: 256 + 16 a CPU: torch's thread
    pools and triton's compiler processes fit, a fork bomb ends there); ``processes`` False starts
    threads only (seccomp: no new process, so the data-memory cap bounds all it holds, with or
    without a cgroup); ``landlock`` False acts as
    if the kernel had none, ``accept_unconfined`` runs the child without Landlock where there is
    none instead of refusing (seccomp, rlimits and the clean environment still apply)."""

    timeout_s: float = 600.0
    memory_mb: int = 0
    cpu_s: int = 0
    fsize_mb: int = 1024
    tasks: int = 0
    processes: bool = True
    landlock: bool = True
    accept_unconfined: bool = False

    def tasks_cap(self) -> int:
        return self.tasks if self.tasks > 0 else 256 + 16 * (os.cpu_count() or 1)

    @classmethod
    def following(cls, compile_limits: CompileLimits | None, timeout_s: float, fsize_mb: int = 1024, *,
                  processes: bool = True) -> ChildLimits:
        """These caps, with the confinement the operator chose for compiles (Settings.compile_limits())."""
        if compile_limits is None:
            return cls(timeout_s=timeout_s, fsize_mb=fsize_mb, processes=processes)
        return cls(timeout_s=timeout_s, fsize_mb=fsize_mb, processes=processes, landlock=compile_limits.landlock,
                   accept_unconfined=compile_limits.accept_unconfined)


@dataclass(frozen=True)
class ChildResult:
    """How a confined child ended: ``refused`` (why it never ran the module: a required module
    missing, named in ``missing``; no confinement possible), else its exit code (None: killed by the parent's backstop),
    ``timed_out``, what it printed on stdout (up to MAX_STDOUT_BYTES) and its stderr's tail."""

    returncode: int | None
    stdout: bytes = b""
    stderr_tail: str = ""
    timed_out: bool = False
    refused: str | None = None
    missing: str | None = None

    def last_line(self, skip: str = "", most: int = 300) -> str:
        """The last line of its stderr (a traceback's exception), printable, at most ``most``
        characters, lines starting with ``skip`` left out; "no output" where there is none."""
        lines = [line.strip() for line in self.stderr_tail.splitlines()
                 if line.strip() and not (skip and line.strip().startswith(skip))]
        last = "".join(c for c in (lines[-1] if lines else "") if c.isprintable())
        return last[:most] or "no output"


@dataclass(frozen=True)
class Installed:
    """Where installed distributions lie, for a ``python -I`` child: ``path``, the directories that
    hold them (on its sys.path, listed only); ``read``, the distributions' own top-level entries in
    them (their packages, modules, ``.libs`` and ``.dist-info``, from each one's RECORD), never a
    whole directory: whatever else lies beside them (a checkout's ``.env`` where metadata was found
    in the working directory) stays closed to the child."""

    path: tuple[str, ...]
    read: tuple[str, ...]


def installed_requirements(*packages: str) -> Installed:
    """The distributions of import packages ``packages`` (``kernelopt_mcp`` is distribution
    ``kernelopt``) and what they require (transitively, extras left out), as installed for this
    interpreter. A ``pip install --target DIR`` put on PYTHONPATH is among them, which ``-I`` would
    otherwise hide. Distributions not installed are left out (a package run from a checkout that
    was never installed has none), and so are the entries of one without a file list.

    Remembered per sys.path and the distributions in it (:func:`_path_stamp`): reading every
    RECORD costs about a second of this process's one interpreter, paid once, not by each of a
    suite's hundreds of children."""
    return _installed(packages, _path_stamp())


def _path_stamp() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """sys.path's entries, each with the distributions' metadata directories in it (their names
    carry the version: installing, upgrading or removing one changes them)."""
    stamp = []
    for entry in sys.path:
        try:
            with os.scandir(entry or ".") as it:
                names = sorted(e.name for e in it if e.name.endswith((".dist-info", ".egg-info")))
        except OSError:
            names = []
        stamp.append((entry, tuple(names)))
    return tuple(stamp)


@functools.lru_cache(maxsize=8)
def _installed(packages: tuple[str, ...], stamp: tuple[tuple[str, tuple[str, ...]], ...]) -> Installed:
    """:func:`installed_requirements` for one ``stamp`` of sys.path."""
    seen: set[str] = set()
    path: dict[str, None] = {}
    read: dict[str, None] = {}
    owners = importlib.metadata.packages_distributions()
    todo = [dist for package in packages for dist in owners.get(package, [])]
    while todo:
        key = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = importlib.metadata.distribution(key)
        except importlib.metadata.PackageNotFoundError:
            continue
        home = Path(str(dist.locate_file(""))).resolve()
        path[str(home)] = None
        for file in dist.files or ():
            top = file.parts[0] if file.parts else ""
            if top and top not in ("..", "__pycache__"):
                read[str(home / top)] = None
        for requirement in dist.requires or ():
            head, _, marker = requirement.partition(";")
            found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", head)
            if found and "extra" not in marker:
                todo.append(found.group(1))
    return Installed(tuple(path), tuple(read))


def run_confined_python(
    module: str, args: Sequence[str], *, staging: Path, python: str = sys.executable, python_path: Sequence[str] = (),
    read: Sequence[str] = (), requires: Sequence[str] = (), limits: ChildLimits | None = None,
    env: Mapping[str, str] | None = None, execute: Sequence[str] = (), gpu: bool = False, each_job: bool = False,
    own_uid: bool = True, on_stderr: Callable[[bytes], None] | None = None,
) -> ChildResult:
    """Run ``python -m module *args`` confined, in ``staging`` (its only writable directory).

    Args:
        python_path: directories put first on the child's sys.path; listed, not read: name the
            directories it may read in ``read`` (a package's own directory, not the checkout).
        requires: modules that must be importable (found, not imported) before the module runs.
        env: variables added to :func:`child_env` (HOME is the staging directory's; TMPDIR a
            directory of the child's own in /tmp, ``_confined_child.SYSTEM_TMP``).
        execute: files and directories the child may execute (and read), e.g. triton's ptxas.
        gpu: the NVIDIA device files are readable and writable (ioctl too), and what the CUDA
            driver reads about the devices readable: the child can run CUDA.
        each_job: the module confines not itself but each job it runs
            (``_confined_child.run_confined_job``: a process of its own per job, which writes only
            the job's directory): its own start (an import) is paid once for many jobs.
        own_uid: a child of root's runs under a uid of its own, its tasks bounded
            (``sandbox.limit_tasks``); False keeps it root, unbounded (:func:`gpu_child_own_uid`).
    """
    limits = limits or ChildLimits()
    confine = "landlock"
    if not limits.landlock or landlock_abi() < 1:
        if not limits.accept_unconfined:
            reason = ("Landlock is turned off (KERNELOPT_COMPILE_LANDLOCK=0)" if not limits.landlock
                      else "this kernel has no Landlock")
            return ChildResult(None, refused=f"the child cannot be confined ({reason}); run on a kernel with Landlock "
                               "(Linux >= 5.13), or accept unconfined code runners (--unconfined-compiler)")
        confine = "none"
    staging = staging.resolve()
    home, tmp = staging / ".home", staging / ".tmp"
    home.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    config = {
        "module": module, "args": list(args), "python_path": [str(p) for p in python_path],
        "read": [str(p) for p in read],
        "write": [str(staging)], "requires": list(requires), "timeout_s": limits.timeout_s, "confine": confine,
        "execute": [str(p) for p in execute], "gpu": gpu, "each_job": each_job,
        "memory_mb": limits.memory_cap_mb(), "cpu_s": limits.cpu_cap_s(), "fsize_mb": limits.fsize_mb,
        "tasks": limits.tasks_cap(), "own_uid": own_uid, "processes": limits.processes,
        "cgroup_base": os.environ.get(CGROUP_ENV),  # the operator's; the child's environment is an allowlist
    }
    proc = subprocess.Popen(
        [python, "-I", "-B", str(SUPERVISOR), json.dumps(config)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, cwd=staging, env=child_env({**(env or {}), "HOME": str(home), "TMPDIR": str(tmp)}),
        start_new_session=True,
    )
    try:
        out, err, ended = _read(proc, time.monotonic() + limits.timeout_s + GRACE_S, on_stderr)
    finally:
        if proc.poll() is None:
            kill_group(proc)  # the backstop: the supervisor itself did not end
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    tail = err[-STDERR_TAIL_BYTES:].decode(errors="replace")
    code = proc.returncode if ended else None
    if code == REFUSED:
        try:
            answer = json.loads(out.split(b"\n", 1)[0])
            missing = answer.get("missing")
            return ChildResult(code, out, tail, refused=str(answer["refused"]),
                               missing=str(missing) if missing else None)
        except (ValueError, KeyError, TypeError, AttributeError):
            pass  # the module's own exit code 125
    return ChildResult(code, out, tail, timed_out=code in (None, TIMED_OUT))


def _read(
    proc: subprocess.Popen[bytes], deadline: float, on_stderr: Callable[[bytes], None] | None = None,
) -> tuple[bytes, bytes, bool]:
    """stdout (up to MAX_STDOUT_BYTES) and stderr (its tail; each chunk to ``on_stderr`` as it
    comes) until both end, or DRAIN_S after the supervisor exited, or ``deadline``; and whether the
    supervisor exited."""
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    buffers = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    exited_at: float | None = None
    with selectors.DefaultSelector() as sel:
        for fd in buffers:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            stop = deadline if exited_at is None else min(deadline, exited_at + DRAIN_S)
            if now >= stop:
                break
            for key, _ in sel.select(timeout=min(0.2, stop - now)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                buf = buffers[key.fd]
                buf += chunk
                if buf is err and on_stderr is not None:
                    on_stderr(chunk)
                if buf is err and len(err) > 2 * STDERR_TAIL_BYTES:
                    del err[:-STDERR_TAIL_BYTES]
                elif buf is out and len(out) > MAX_STDOUT_BYTES:
                    del out[MAX_STDOUT_BYTES:]
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return bytes(out), bytes(err), False
    return bytes(out), bytes(err), True


def read_child_file(path: Path, max_bytes: int = MAX_STDOUT_BYTES) -> bytes:
    """What a confined child wrote into ``path``, read only where it is a plain file: opened without
    following a symbolic link (O_NOFOLLOW) nor waiting on a FIFO (O_NONBLOCK), a regular file of
    one link, at most ``max_bytes``. The child runs a client's code and may leave a link to any
    file this process can read, or a FIFO nobody writes: neither is read here.

    Raises:
        OSError: missing, not a plain file, or larger than ``max_bytes``.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            raise OSError(errno.EINVAL, f"{path.name}: not a plain file (a link or a special file the child left)")
        if st.st_size > max_bytes:
            raise OSError(errno.EFBIG, f"{path.name}: {st.st_size} bytes, more than the {max_bytes} expected")
        chunks, left = [], max_bytes + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise OSError(errno.EFBIG, f"{path.name}: more than the {max_bytes} bytes expected")
        return data
    finally:
        os.close(fd)


def check_plain_tree(root: Path) -> None:
    """Raise OSError unless everything beneath ``root`` (a directory a confined child wrote, about
    to be read or moved by this process) is a directory or a regular file of one link: no symbolic
    link, hard link, FIFO, socket or device a child could leave to make this process read or
    publish something else."""
    if not stat.S_ISDIR(os.lstat(root).st_mode):
        raise OSError(errno.EINVAL, f"{root.name}: not a directory (a link or a file the child left)")
    for directory, dirs, files in os.walk(root, followlinks=False):
        for name in (*dirs, *files):
            st = os.lstat(os.path.join(directory, name))
            if stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                rel = os.path.relpath(os.path.join(directory, name), root)
                raise OSError(errno.EINVAL, f"{rel}: not a plain file (a link or a special file the child left)")


@functools.cache
def gpu_child_own_uid(python: str = sys.executable) -> bool:
    """Whether a GPU child of a process run as root runs under a uid of its own (its tasks bounded:
    ``sandbox.limit_tasks``), asked once per process: ``_cuda_probe`` starts CUDA in a confined GPU
    child so; only where that fails and it starts as root do GPU children stay root (a warning says
    their tasks are unbounded). The probe runs no client code, so no client can make this False.
    Not root, or no CUDA driver here: True (nothing to decide)."""
    if os.getuid() != 0:
        return True
    package = Path(__file__).resolve().parent

    def init(own_uid: bool) -> object:
        with tempfile.TemporaryDirectory(prefix="kernelopt-cuda-probe-") as staging:
            result = run_confined_python(f"{package.name}._cuda_probe", [], staging=Path(staging), python=python,
                                         python_path=[str(package.parent)], read=[str(package)],
                                         limits=ChildLimits(timeout_s=120), gpu=True, own_uid=own_uid)
        try:
            return json.loads(result.stdout)["init"]
        except (ValueError, KeyError, TypeError):
            return f"no answer (exit {result.returncode}): {result.refused or result.stderr_tail[-300:]}"

    first = init(True)
    if first in (0, None):
        return True
    if init(False) == 0:
        log.warning("CUDA does not start in a GPU child under a uid of its own here (%s): GPU children run as root, "
                    "their processes and threads unbounded", first)
        return False
    return True


def run_torch_child(
    module: str, args: Sequence[str], *, staging: Path, python: str = sys.executable, python_path: Sequence[str] = (),
    read: Sequence[str] = (), execute: Sequence[str] = (), limits: ChildLimits | None = None,
    env: Mapping[str, str] | None = None, each_job: bool = False, gpu: bool = True,
    on_stderr: Callable[[bytes], None] | None = None,
) -> ChildResult:
    """:func:`run_confined_python` for a child of this package that imports torch (and, with ``gpu``,
    runs CUDA): this package and torch's distributions (with their requirements) readable and on its
    path, besides ``python_path`` (where torch lies outside the installation) and ``read``."""
    package = Path(__file__).resolve().parent
    installed = installed_requirements(package.name, "torch")
    return run_confined_python(
        module, args, staging=staging, python=python, python_path=[str(package.parent), *installed.path, *python_path],
        read=[str(package), *installed.read, *python_path, *read], execute=execute, requires=["torch"], limits=limits,
        env={**({"CUDA_CACHE_PATH": str(staging / ".nv")} if gpu else {}), **(env or {})}, gpu=gpu,
        each_job=each_job, own_uid=gpu_child_own_uid(python) if gpu else True, on_stderr=on_stderr,
    )
