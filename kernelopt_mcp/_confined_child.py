"""Run one Python module confined, as a child of a supervisor that reaps its whole process tree.

Started by :mod:`kernelopt_mcp.confined_python` as ``python -I -B .../_confined_child.py CONFIG``
(by path, with an allowlisted environment, in its staging directory; CONFIG is one JSON object:
see ``confined_python._config``). This process is the **supervisor**; it

1. becomes a child subreaper (``PR_SET_CHILD_SUBREAPER``): a process its child starts that
   double-forks and ``setsid``\\ s is re-parented to it, not to init, when its parent dies;
2. checks that every module in ``requires`` can be found on the child's ``sys.path``
   (``importlib.util.find_spec``: nothing of it runs; the staging directory is on no path), else
   answers ``{"refused": why}`` and exits 125;
3. starts the **child**: this file again with ``--child``, which confines itself before it runs
   anything else: Landlock (read: the Python installation, the ``read`` directories, the
   libraries the loader may map; list only: ``python_path``; write: ``write`` alone, the staging
   directory; with ``gpu`` also the NVIDIA device files read-write and ``GPU_READ``; ``execute``
   executable), a seccomp filter (no new sockets, no signals to other processes), rlimits (data
   memory, CPU time, file size, no core files, ``tasks``: see ``sandbox.limit_tasks``, which moves
   a root child to a uid of its own); then runs ``module`` as ``__main__`` with ``args``;
4. waits for the child up to ``timeout_s`` (or until a file system it writes falls under its
   floor of free space or inodes: ``_DiskFloor``, checked every 0.1 s), then SIGKILLs every
   descendant it has (found in /proc by parent pid, again and again until none is left, reaping
   each), and exits with the child's exit code (128 + N for a signal N), 124 at the deadline, 137
   where it stopped the tree for the disk (saying so on stderr).

Where a cgroup can be made (``cgroups.make``: root, or ``KERNELOPT_CGROUP``) the child enters one
before step 3, whose memory bound is its data-memory cap: the kernel bounds the whole tree's memory
together, and at the end every process in it is killed and the cgroup removed.

The child's stdout and stderr are the supervisor's: once the supervisor has exited, no process
holds them. Only the standard library is imported; ``sandbox.py`` is loaded by path.

With ``each_job`` in CONFIG the child does not confine itself: it runs ``module``, which pays a slow
start once (torch's import: no client code, no CUDA context) and then hands each job to
:func:`run_confined_job`, which forks a process for it that confines itself as step 3 says, except
that it writes only the job's own directory, and kills the job at its deadline and every process
it left. Jobs cannot reach each other's files, their parent's, or signal either.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import importlib.util
import json
import os
import resource
import runpy
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REFUSED = 125
TIMED_OUT = 124
STOPPED = 128 + signal.SIGKILL  # its tree was killed: a file system it writes fell under its floor
_PR_SET_CHILD_SUBREAPER = 36
#: the confinement (CONFIG, JSON) a child started with ``each_job`` applies to each job it forks
EACH_JOB_ENV = "KERNELOPT_CONFINE_EACH_JOB"
#: what confined the child (or job), in words, for the module it runs
CONFINED_AS_ENV = "KERNELOPT_CONFINED_AS"
#: where a child's (and each job's) TMPDIR is made, a directory of its own, removed when it ends:
#: programs check their TMPDIR with access(2) for their real uid (a compiler's "Cannot create
#: temporary file"), and a child of root's has a uid of its own (sandbox.limit_tasks), for which a
#: directory below one only root may search (a workspace under /root) would fail that check
SYSTEM_TMP = "/tmp"
# files and directories any Python and its libraries read at run time (the loader's cache, time
# zones, the CPU count and topology that BLAS and OpenMP runtimes ask for)
SYSTEM_READ = (
    "/etc/ld.so.cache", "/etc/localtime", "/usr/share/zoneinfo", "/proc/cpuinfo", "/proc/meminfo",
    "/sys/devices/system/cpu", "/sys/fs/cgroup", "/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib",
    # torch seeds its default generator from /dev/urandom at import ("Unable to open /dev/urandom")
    "/dev/urandom",
    # world-readable by design (no secrets: those are in /etc/shadow); torch's getpass.getuser()
    # looks the uid up there ("getpwuid(): uid not found")
    "/etc/passwd",
)
# what the CUDA driver reads about the devices besides their files (/dev/nvidia*, read-write): the
# driver's own state, PCI topology and NUMA nodes, the modules loaded, and this process's maps
GPU_READ = (
    "/proc/driver/nvidia", "/sys/bus/pci", "/sys/devices", "/sys/module/nvidia", "/proc/modules", "/proc/devices",
    "/proc/self", "/proc/sys/vm", "/etc/nvidia",
)
GPU_DEVICE_FILES = "/dev/nvidia*"
# what the CUDA driver writes as it starts: its threads' names, /proc/self/task/<tid>/comm (cuInit fails
# with error 304 without it). Resolved in the child as it confines itself: its own task directory,
# never another process's (all of /proc would open /proc/sys)
GPU_WRITE = ("/proc/self/task",)


def _map_the_driver() -> None:
    """Load the CUDA driver library before confining: its directory (often outside the system
    library directories, e.g. where the container runtime mounts it) is then among the mapped ones
    the child may read, and torch's own dlopen later finds it loaded. A machine without it: nothing."""
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        pass


def _private_tmp() -> str | None:
    """A new directory of its own in SYSTEM_TMP, for one child or job (None where none can be made:
    the TMPDIR it was started with stays)."""
    try:
        return tempfile.mkdtemp(prefix="kernelopt-child-", dir=SYSTEM_TMP)
    except OSError:
        return None


def _refuse(message: str, **extra: str) -> int:
    sys.stdout.write(json.dumps({"refused": message, **extra}) + "\n")
    sys.stdout.flush()
    return REFUSED


# --- the supervisor -------------------------------------------------------------------------


def _descendants(root: int) -> list[int]:
    """Every living process below ``root``, from /proc (a process whose parent died is ours again)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _reap_all() -> None:
    """SIGKILL every descendant and reap them all: ends when this process has no child left. A
    process being killed cannot fork, and one forked meanwhile is found on the next pass."""
    for _ in range(10000):
        for pid in _descendants(os.getpid()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            while os.waitpid(-1, os.WNOHANG)[0] != 0:
                pass
        except ChildProcessError:
            return  # no child at all: every descendant would be one of ours or below one
        time.sleep(0.01)


@dataclass(frozen=True)
class _DiskFloor:
    """The least free space (bytes) and inodes the file system holding ``path`` keeps while the
    child runs: 5% of it (at least 1 GiB) and 1% of its inodes (at least 10,000), or half of what was
    free as it started where that is less (a nearly full disk still lets a child write)."""

    path: str
    free: int
    inodes: int

    @classmethod
    def of(cls, paths: Sequence[str]) -> list[_DiskFloor]:
        floors, seen = [], set()
        for path in paths:
            try:
                st, device = os.statvfs(path), os.stat(path).st_dev
            except OSError:
                continue
            if device not in seen:
                seen.add(device)
                free = min(max(1 << 30, st.f_blocks * st.f_frsize // 20), st.f_bavail * st.f_frsize // 2)
                inodes = min(max(10000, st.f_files // 100), st.f_favail // 2) if st.f_files else 0
                floors.append(cls(path, free, inodes))
        return floors

    def crossed(self) -> str | None:
        try:
            st = os.statvfs(self.path)
        except OSError:
            return None
        if st.f_bavail * st.f_frsize < self.free:
            return f"{(st.f_bavail * st.f_frsize) >> 20} MiB free, under the floor of {self.free >> 20} MiB"
        if self.inodes and st.f_favail < self.inodes:
            return f"{st.f_favail} inodes free, under the floor of {self.inodes}"
        return None


def _wait(child: subprocess.Popen[bytes], timeout_s: float, floors: Sequence[_DiskFloor] = ()) -> int | str | None:
    """The child's exit status; None at the deadline, or once this supervisor's own caller is gone
    (its parent changed: a caller killed outright never reaps its children), so nothing outlives
    the process that asked for it by more than a second; why, where a file system it writes fell
    under its floor (checked every 0.1 s: the tree then is stopped before it fills the disk)."""
    caller = os.getppid()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return child.wait(timeout=max(0.0, min(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            if os.getppid() != caller or time.monotonic() >= deadline:
                return None
            for floor in floors:
                if (why := floor.crossed()) is not None:
                    return f"the file system of {floor.path}, which it writes, had {why}"


def supervise(config: dict[str, Any]) -> int:
    why = _become_subreaper()
    if why is not None:
        return _refuse(why)
    sys.path[:0] = config["python_path"]
    for module in config["requires"]:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return _refuse(f"{module} cannot be imported by {sys.executable}", missing=module)
    tmp = None if config.get("each_job") else _private_tmp()  # each job makes its own
    group = _load("cgroups").make(config["memory_mb"], config.get("cgroup_base")) if config["memory_mb"] > 0 \
        else "no memory bound"
    where = {"cgroup": group.path, "cgroup_is": group.describe()} if not isinstance(group, str) else \
        {"cgroup_is": f"memory bounded per process (no cgroup: {group})"}
    try:
        child = subprocess.Popen(
            [sys.executable, "-I", "-B", __file__, "--child", json.dumps({**config, "tmp": tmp, **where})],
            stdin=subprocess.DEVNULL)
    except OSError as exc:
        return _refuse(f"cannot start the child: {exc}")
    code = _wait(child, config["timeout_s"], _DiskFloor.of([*config["write"], tmp or SYSTEM_TMP]))
    if isinstance(group, str):
        _reap_all()
    else:
        _end_tree(group)
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    if os.getuid() == 0 and not config.get("each_job"):  # what the child wrote is root's again
        _load("sandbox").give(config["write"], 0)
    if isinstance(code, str):
        print(f"the child was stopped: {code}; free space there (or give it a directory on a larger one) and "
              "run it again", file=sys.stderr, flush=True)
        return STOPPED
    if code is None:
        return TIMED_OUT
    return code if code >= 0 else 128 - code


def _end_tree(group: Any) -> None:
    """Kill every process in the tree's cgroup (``cgroups.TreeCgroup``), reap them, say whether the
    kernel killed any for the memory bound, and remove the cgroup."""
    group.kill()
    _reap_all()
    if killed := group.oom_kills():
        print(f"the child's processes together reached their memory bound of {group.memory_mb} MiB "
              f"(cgroup v{group.version}): the kernel killed {killed} of them; give the child more memory or make "
              "the problem smaller", file=sys.stderr, flush=True)
    group.remove()


# --- the child ------------------------------------------------------------------------------


def _load(name: str) -> Any:
    """This package's module ``name`` loaded by path (the child imports no package of kernelopt's)."""
    if f"kernelopt_{name}" in sys.modules:
        return sys.modules[f"kernelopt_{name}"]
    spec = importlib.util.spec_from_file_location(f"kernelopt_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _installation() -> list[str]:
    """The Python installation's directories: the standard library and site-packages, as this
    interpreter started (-I: no user site, no PYTHONPATH), and its prefixes' lib directories
    (a conda environment keeps the C++ runtime that torch's libraries load there)."""
    paths = sysconfig.get_paths()
    dirs = [p for p in sys.path if p and os.path.isabs(p)]
    dirs += [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths]
    dirs += [os.path.join(prefix, "lib") for prefix in dict.fromkeys((sys.prefix, sys.base_prefix))]
    return dirs




def _path_of_what_runs(execute: list[str]) -> None:
    """PATH cut to the directories beneath ``execute``: a program looked up by name is then one the
    child may run, or not found (FileNotFoundError, which programs handle: torch.compile asks for
    ``nvcc --version`` on every compile and goes on without it), never found and refused (EACCES,
    which they do not: torch.compile fails where /usr/local/cuda/bin is on PATH but not executable)."""
    roots = [os.path.realpath(p) for p in execute]
    kept = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and any(os.path.realpath(d) == r or os.path.realpath(d).startswith(r.rstrip("/") + "/")
                         for r in roots)]
    os.environ["PATH"] = os.pathsep.join(kept)


def confine(config: dict[str, Any]) -> str:
    """Landlock, seccomp and rlimits on this process, as CONFIG says; what was applied.

    Raises:
        OSError: Landlock was asked for and could not be applied.
    """
    sandbox = _load("sandbox")
    library_path = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    applied = "unconfined (accepted)"
    gpu = bool(config.get("gpu"))
    if gpu:
        _map_the_driver()
    # before Landlock (it reads /proc): for root, a uid of its own, so the kernel counts its tasks
    tmp = config.get("tmp")
    writes = [*config["write"], *([tmp] if tmp else [])]
    if tmp:
        os.environ["TMPDIR"] = tmp
        tempfile.tempdir = None
    was = os.getuid()
    bound = sandbox.limit_tasks(config["tasks"], own=writes, own_uid=config.get("own_uid", True))
    if os.getuid() != was and not any(os.environ.get(k) for k in ("LOGNAME", "USER", "LNAME", "USERNAME")):
        os.environ["LOGNAME"] = "kernelopt"  # getpass.getuser() (torch's caches): the uid has no passwd entry
    if config["confine"] == "landlock":
        done = sandbox.restrict(
            read=[*_installation(), *config["read"], *sandbox.mapped_library_dirs(), *library_path, *SYSTEM_READ,
                  *(GPU_READ if gpu else ())],
            write=[*writes, "/dev/null", *((*sorted(glob.glob(GPU_DEVICE_FILES)), *GPU_WRITE) if gpu else ())],
            # the dynamic loader with what may be executed: dynamically linked programs need it
            execute=[*config.get("execute", []), *(sandbox.dynamic_loader() if config.get("execute") else ())],
            list_only=config["python_path"],
        )
        applied = done.describe()
        _path_of_what_runs(config.get("execute", []))
    try:
        # the CUDA driver makes a UNIX socket as it starts (cuInit fails with error 304 without one)
        applied += ", " + sandbox.restrict_syscalls(unix_sockets=gpu, processes=config.get("processes", True))
    except OSError as exc:
        applied += f", sockets and signals not restricted ({exc})"
    if config["memory_mb"] > 0:
        sandbox.set_rlimit(resource.RLIMIT_DATA, config["memory_mb"] << 20)
    if config["cpu_s"] > 0:
        sandbox.set_rlimit(resource.RLIMIT_CPU, config["cpu_s"])
    sandbox.set_rlimit(resource.RLIMIT_FSIZE, config["fsize_mb"] << 20)
    sandbox.set_rlimit(resource.RLIMIT_CORE, 0)
    return f"{applied}, {bound}, {config.get('cgroup_is', 'memory bounded per process')}"


def _become_subreaper() -> str | None:
    """Make this process the reaper of its descendants' orphans; why not, where it cannot."""
    libc = ctypes.CDLL(None, use_errno=True)
    zero = ctypes.c_ulong(0)
    if libc.prctl(ctypes.c_int(_PR_SET_CHILD_SUBREAPER), ctypes.c_ulong(1), zero, zero, zero) != 0:
        return f"cannot become a child subreaper: {os.strerror(ctypes.get_errno())}"
    return None


def run_confined_job(directory: str, work: Callable[[], object], timeout_s: float) -> int | None:
    """Run ``work`` in a process of its own, forked from this child (started with ``each_job``),
    confined as the child would have been except that it may write ``directory`` alone (its
    HOME and working directory) and a TMPDIR of its own; then kill every process it left behind.
    Returns its exit status (0: ``work`` returned; 1: it raised, the traceback on stderr;
    ``REFUSED``: it could not confine itself, the reason on stderr; 128 + N: signal N), or None
    where it ran past ``timeout_s`` and was killed.

    What the job writes for its parent goes into ``directory``; read it only after this returns
    (then no process of the job's is left to change it)."""
    return run_confined_jobs([(directory, work)], timeout_s)[0]


def run_confined_jobs(jobs: Sequence[tuple[str, Callable[[], object]]], timeout_s: float, parallel: int = 1,
                      weights: Sequence[int] = (), capacity: int = 0) -> list[int | None]:
    """:func:`run_confined_job` for each of ``jobs`` (its directory, its work), up to ``parallel``
    at once, each with ``timeout_s`` from its own start; every process any of them left behind is
    killed once the last has ended (before that a job's leftovers may outlive it: run at once only
    jobs that may share the machine). With ``capacity``, the ``weights`` (a job's, e.g. the GPU
    memory it will hold) of the jobs running at once add up to at most that: the first waiting job
    that fits starts, and one that fits nowhere runs alone. Their exit statuses in order."""
    config = json.loads(os.environ[EACH_JOB_ENV])
    weight = [weights[i] if i < len(weights) else 0 for i in range(len(jobs))]
    tmps: list[str] = []
    statuses: list[int | None] = [None] * len(jobs)
    waiting = list(range(len(jobs)))
    running: dict[int, tuple[int, float]] = {}  # pid: (its job, its deadline)
    while waiting or running:
        while waiting and len(running) < max(1, parallel):
            used = sum(weight[i] for i, _ in running.values())
            fits = [i for i in waiting if capacity <= 0 or not running or used + weight[i] <= capacity]
            if not fits:
                break
            waiting.remove(i := fits[0])
            tmp = _private_tmp()
            tmps += [tmp] if tmp else []
            running[_fork_job(*jobs[i], {**config, "tmp": tmp})] = (i, time.monotonic() + timeout_s)
        for pid, (i, deadline) in list(running.items()):
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(raw)
                statuses[i] = code if code >= 0 else 128 - code
            elif time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            else:
                continue
            del running[pid]
        if running:
            time.sleep(0.02)
    _reap_all()  # the jobs' leftovers: orphans are re-parented to this child
    for tmp in tmps:
        shutil.rmtree(tmp, ignore_errors=True)
    if os.getuid() == 0:  # what the jobs wrote is root's again
        _load("sandbox").give([directory for directory, _ in jobs], 0)
    return statuses


def _fork_job(directory: str, work: Callable[[], object], config: dict[str, Any]) -> int:
    """The job's process (see :func:`run_confined_job`): its pid here; nothing of it runs before
    it is confined."""
    home, tmp = Path(directory) / ".home", Path(directory) / ".tmp"
    home.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(exist_ok=True)  # its TMPDIR where no directory of its own could be made in SYSTEM_TMP
    sys.stdout.flush()
    sys.stderr.flush()
    with warnings.catch_warnings():  # "this process is multi-threaded": torch's idle threads hold no lock the job needs
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.environ.pop(EACH_JOB_ENV, None)
        os.environ.update(HOME=str(home), TMPDIR=str(tmp))
        tempfile.tempdir = None
        os.chdir(directory)
        try:
            os.environ[CONFINED_AS_ENV] = confine({**config, "write": [directory]})
        except OSError as exc:
            print(f"the job could not confine itself: {exc}", file=sys.stderr)
            code = REFUSED
        else:
            work()
            code = 0
    except BaseException:  # noqa: BLE001 - whatever the job raises ends only the job
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def child(config: dict[str, Any]) -> int:
    if config.get("cgroup"):  # first: everything this process starts is in its tree's cgroup
        try:
            _load("cgroups").TreeCgroup(config["cgroup"], 0, 0).enter()
        except OSError as exc:
            return _refuse(f"the child could not enter its cgroup {config['cgroup']}: {exc}")
    if config.get("each_job"):
        # the module's own start runs unconfined (it imports, and runs no client code); each job
        # confines itself in its own process (run_confined_job)
        why = _become_subreaper()
        if why is not None:
            return _refuse(why)
        if config.get("gpu"):
            _map_the_driver()
        os.environ[EACH_JOB_ENV] = json.dumps(config)
    else:
        try:
            os.environ[CONFINED_AS_ENV] = confine(config)
        except OSError as exc:
            return _refuse(f"the child could not confine itself: {exc}")
    sys.path[:0] = config["python_path"]
    sys.argv = [config["module"], *config["args"]]
    try:
        runpy.run_module(config["module"], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        return child(json.loads(argv[1]))
    return supervise(json.loads(argv[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
