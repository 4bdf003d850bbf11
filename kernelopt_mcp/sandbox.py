"""Confine the current process with Landlock (Linux >= 5.13), through ctypes.

The compile worker calls :func:`restrict` once, after NVRTC is loaded and warmed up and before
it reads any request: from then on the kernel itself refuses every file it opens outside the
directories named here (NVRTC's ``#include`` of ``/etc/passwd`` or ``/proc/self/environ`` fails
with "cannot open source file"), and, where the kernel's Landlock ABI knows them, TCP binds and
connects, signals to processes outside the sandbox and abstract UNIX sockets.

Landlock is stackable and unprivileged; ``PR_SET_NO_NEW_PRIVS`` is set first (it requires it).
A restriction can never be lifted, and it is inherited by every child.

This module imports only the standard library: the worker loads it by path.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass

# syscall numbers are the same on every architecture that has Landlock (asm-generic table)
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# filesystem access rights, and the ABI version that introduced each group
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

_FILE_ONLY = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
_READ = FS_READ_FILE | FS_READ_DIR


def fs_rights(abi: int) -> int:
    """Every filesystem access right Landlock ABI ``abi`` knows (all of them are handled)."""
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def vm_kib() -> dict[str, int]:
    """This process's VmSize and VmData in KiB, from /proc/self/status ({} if unreadable).

    The workers read it before they confine themselves (/proc is closed to them after) and limit
    their growth from it rather than from zero: NVRTC and NumPy reserve address space when they
    load (13 GB of VmSize for NVRTC on the H200 machine)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            fields = dict(line.split(":", 1) for line in f if line.startswith(("VmSize:", "VmData:")))
        return {k: int(v.split()[0]) for k, v in fields.items()}
    except (OSError, ValueError):
        return {}


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class LandlockError(OSError):
    """Landlock is missing or refused the restriction."""


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is missing or disabled."""
    try:
        libc = _libc()
    except OSError:
        return 0
    abi = libc.syscall(ctypes.c_long(_SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                       ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return int(abi) if abi > 0 else 0


@dataclass(frozen=True)
class Confinement:
    """What :func:`restrict` applied: ``describe()`` is recorded with every compile."""

    abi: int
    read_dirs: tuple[str, ...]
    write_dirs: tuple[str, ...]

    def describe(self) -> str:
        return f"landlock abi {self.abi}"


def restrict(
    read: Iterable[str], write: Iterable[str] = (), execute: Iterable[str] = (), list_only: Iterable[str] = (),
) -> Confinement:
    """Allow this process (and its children) to open only files beneath ``read`` (read-only:
    read files, list directories), ``execute`` (also map as code: shared libraries) and
    ``write`` (read-write, create, remove); directories beneath ``list_only`` may be listed, not
    their files read (a checkout on sys.path whose package alone is readable); no TCP, no
    signals or abstract sockets outside, where the ABI knows those. Paths that do not exist are
    skipped.

    Raises:
        LandlockError: the kernel has no usable Landlock, or a call failed (errno attached).
    """
    abi = landlock_abi()
    if abi < 1:
        raise LandlockError(errno.EOPNOTSUPP,
                            "Landlock is not available in this kernel (needs Linux >= 5.13 with lsm=landlock)")
    libc = _libc()
    handled = fs_rights(abi)
    attr = _RulesetAttr(handled_access_fs=handled)
    size = 8
    if abi >= 4:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
        size = 16
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = 24
    fd = libc.syscall(ctypes.c_long(_SYS_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"landlock_create_ruleset failed: {os.strerror(err)}")
    read_dirs: list[str] = []
    write_dirs: list[str] = []
    try:
        rules = ((read, _READ, read_dirs), (execute, _READ | FS_EXECUTE, read_dirs), (write, handled, write_dirs),
                 (list_only, FS_READ_DIR, read_dirs))
        for paths, rights, kept in rules:
            for path in dict.fromkeys(paths):
                try:
                    pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue  # a directory that is not there needs no rule
                try:
                    allowed = rights & handled
                    if not os.path.isdir(path):
                        allowed &= _FILE_ONLY
                    if not allowed:
                        continue  # list_only on a file
                    rule = _PathBeneathAttr(allowed_access=allowed, parent_fd=pfd)
                    if libc.syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(fd), ctypes.c_int(_RULE_PATH_BENEATH),
                                    ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
                        err = ctypes.get_errno()
                        raise LandlockError(err, f"landlock_add_rule({path}) failed: {os.strerror(err)}")
                    kept.append(path)
                finally:
                    os.close(pfd)
        # full-width arguments: the kernel refuses PR_SET_NO_NEW_PRIVS unless arg3..5 are 0
        zero = ctypes.c_ulong(0)
        if libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), zero, zero, zero) != 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(err)}")
        if libc.syscall(ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(fd), ctypes.c_uint32(0)) < 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"landlock_restrict_self failed: {os.strerror(err)}")
    finally:
        os.close(fd)
    return Confinement(abi, tuple(dict.fromkeys(read_dirs)), tuple(write_dirs))


# --- seccomp: the syscalls Landlock does not cover, for the oracle worker ----------------------

_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
# (audit arch, socket, socketpair, kill, tkill, tgkill)
_SYSCALLS = {
    "x86_64": (0xC000003E, 41, 53, 62, 200, 234),
    "aarch64": (0xC00000B7, 198, 199, 129, 130, 131),
}
# the other ways to signal a process by its pid, whose first argument is that pid (rt_sigqueueinfo,
# rt_tgsigqueueinfo): allowed for this process alone, as kill and tgkill are
_QUEUE_SIGNALS = {"x86_64": (129, 297), "aarch64": (138, 240)}
# refused outright: a signal through a pidfd (pidfd_send_signal), another process's file
# descriptors (pidfd_getfd), memory (process_vm_readv/writev) or execution (ptrace). Landlock keeps
# these within the sandbox where the kernel has it; this filter is what holds where it does not
_REACH_PROCESSES = {"x86_64": (424, 438, 310, 311, 101), "aarch64": (424, 438, 270, 271, 117)}
# what a UNIX socket could reach anything with: connect, sendto, sendmsg, sendmmsg
_REACH = {"x86_64": (42, 44, 46, 307), "aarch64": (203, 206, 211, 269)}
# a new process, for a child that may start threads only: clone (allowed with CLONE_THREAD), clone3
# (ENOSYS: glibc then starts threads with clone), fork and vfork (x86_64 only)
_CLONE = {"x86_64": (56, 435, (57, 58)), "aarch64": (220, 435, ())}
_CLONE_THREAD = 0x00010000
_AF_UNIX = 1


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


Insn = tuple[int, int, int, int]


def _assemble(lines: list[tuple[str | None, int, str | int, str | int, int]]) -> list[Insn]:
    """Classic BPF from ``(label, code, jt, jf, k)`` lines whose jump targets are labels (or 0: the
    next instruction): the offsets are counted here, not by hand."""
    at = {label: i for i, (label, *_rest) in enumerate(lines) if label}
    def offset(i: int, target: str | int) -> int:
        return target if isinstance(target, int) else at[target] - i - 1

    return [(code, offset(i, jt), offset(i, jf), k) for i, (_label, code, jt, jf, k) in enumerate(lines)]


def _filter_program(arch: str, pid: int, *, unix_sockets: bool = False, processes: bool = True) -> list[Insn]:
    """A classic-BPF seccomp program: EPERM for socket/socketpair, tkill, and kill, tgkill,
    rt_sigqueueinfo and rt_tgsigqueueinfo of any process but ``pid``; EPERM for pidfd_send_signal,
    pidfd_getfd, process_vm_readv/writev and ptrace (another process reached through them); EPERM
    for every syscall of a foreign ABI (i386 via int 0x80, x32).

    ``unix_sockets`` (a child that runs CUDA: the driver makes a UNIX socket as it starts and gives
    up with CUDA error 304 when it cannot): socket() is allowed for AF_UNIX, and what such a socket
    could reach anything with (connect, sendto, sendmsg, sendmmsg) fails with ENOENT, as where no
    daemon listens; socketpair stays refused, so the socket reaches nothing.

    ``processes`` False: no new process (clone without CLONE_THREAD, fork, vfork: EPERM; clone3:
    ENOSYS), threads only: the process's rlimits then bound everything it can ever hold."""
    audit, socket_nr, socketpair_nr, kill_nr, tkill_nr, tgkill_nr = _SYSCALLS[arch]
    # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, ...|BPF_JGE, BPF_RET|BPF_K
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    lines: list[tuple[str | None, int, str | int, str | int, int]] = [
        (None, ld, 0, 0, 4),  # arch
        (None, jeq, 0, "deny", audit),
        (None, ld, 0, 0, 0),  # syscall number
        (None, jge, "deny", 0, 0x40000000),  # x32
        (None, jeq, "socket" if unix_sockets else "deny", 0, socket_nr),
        (None, jeq, "deny", 0, socketpair_nr),
        (None, jeq, "deny", 0, tkill_nr),
        (None, jeq, "check_pid", 0, kill_nr),
        (None, jeq, "check_pid", 0, tgkill_nr),
        *((None, jeq, "check_pid", 0, nr) for nr in _QUEUE_SIGNALS[arch]),
        *((None, jeq, "deny", 0, nr) for nr in _REACH_PROCESSES[arch]),
    ]
    if unix_sockets:
        lines += [(None, jeq, "absent", 0, nr) for nr in _REACH[arch]]
    clone_nr, clone3_nr, forks = _CLONE[arch]
    if not processes:
        lines += [(None, jeq, "clone", 0, clone_nr), (None, jeq, "nosys", 0, clone3_nr),
                  *((None, jeq, "deny", 0, nr) for nr in forks)]
    lines += [
        (None, ret, 0, 0, _RET_ALLOW),
        ("check_pid", ld, 0, 0, 16),  # args[0], low word (little-endian)
        (None, jeq, "allow", "deny", pid & 0xFFFFFFFF),
    ]
    if unix_sockets:
        lines += [
            ("socket", ld, 0, 0, 16),  # the family
            (None, jeq, "allow", "deny", _AF_UNIX),
            ("absent", ret, 0, 0, _RET_ERRNO | errno.ENOENT),
        ]
    if not processes:
        lines += [
            ("clone", ld, 0, 0, 16),  # the flags, low word
            (None, 0x45, "allow", "deny", _CLONE_THREAD),  # BPF_JSET
            ("nosys", ret, 0, 0, _RET_ERRNO | errno.ENOSYS),
        ]
    lines += [("allow", ret, 0, 0, _RET_ALLOW), ("deny", ret, 0, 0, _RET_ERRNO | errno.EPERM)]
    return _assemble(lines)


def restrict_syscalls(*, unix_sockets: bool = False, processes: bool = True) -> str:
    """Refuse (EPERM) every new socket (UDP, UNIX sockets by path: what Landlock does not cover)
    and signals to any other process, with a seccomp filter; binds this process and its children.
    Sets ``PR_SET_NO_NEW_PRIVS``. Returns a description of what was applied. ``unix_sockets``: see
    :func:`_filter_program` (a UNIX socket may be made, and can reach nothing); ``processes``
    False: threads only, no new process.

    Raises:
        LandlockError: seccomp is not available here (another architecture, or the call failed).
    """
    arch = os.uname().machine
    if arch not in _SYSCALLS:
        raise LandlockError(errno.EOPNOTSUPP, f"no seccomp filter for the {arch} architecture")
    program = _filter_program(arch, os.getpid(), unix_sockets=unix_sockets, processes=processes)
    filters = (_SockFilter * len(program))(*(_SockFilter(*insn) for insn in program))
    fprog = _SockFprog(len(program), filters)
    libc = _libc()
    zero = ctypes.c_ulong(0)
    if libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), zero, zero, zero) != 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(err)}")
    if libc.prctl(ctypes.c_int(_PR_SET_SECCOMP), ctypes.c_ulong(_SECCOMP_MODE_FILTER), ctypes.byref(fprog),
                  zero, zero) != 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"prctl(PR_SET_SECCOMP) failed: {os.strerror(err)}")
    return ("seccomp: no sockets" + (" but unconnected UNIX ones" if unix_sockets else "") + ", no signals out"
            + ("" if processes else ", threads only (no new process)"))


# --- a bound on tasks: what RLIMIT_NPROC holds, for root too ------------------------------------

_PR_SET_KEEPCAPS = 8
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE = 47, 2
_CAPABILITY_V3 = 0x20080522
#: what a confined process that started as root keeps once it has a uid of its own: file access as
#: root had it (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH; Landlock decides what it may open), nothing
#: else: no CAP_SETUID to return to root, no CAP_SYS_RESOURCE or CAP_SYS_ADMIN to pass the bound,
#: no CAP_CHOWN or CAP_FOWNER (Landlock does not cover chown and chmod), no CAP_KILL, CAP_NET_*
_FILE_CAPS = (1, 2)
#: a confined process that started as root runs as this + its process id: a uid no account has, its
#: own for its process tree, whose tasks the kernel counts against that tree's bound alone
CONFINED_UID_BASE = 0x7A000000


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _tasks_of(uid: int) -> int:
    """Tasks (threads) of processes whose real uid is ``uid``, from /proc (0 where it cannot be read)."""
    count = 0
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue  # gone meanwhile
        if fields.get("Uid", "").split()[:1] == [str(uid)]:
            count += int(fields.get("Threads", "1").strip() or 1)
    return count


def give(directories: Iterable[str], uid: int) -> None:
    """Everything beneath ``directories`` to ``uid`` (no link followed; what cannot be given is
    skipped): to a confined process of root's, what it writes, which programs check with access(2)
    for their real uid (a compiler's TMPDIR); back to root once it ended."""
    for top in directories:
        for path in [top, *(os.path.join(r, n) for r, dirs, files in os.walk(top) for n in dirs + files)]:
            with contextlib.suppress(OSError):
                os.chown(path, uid, -1, follow_symlinks=False)


def limit_tasks(new: int, own: Iterable[str] = (), *, own_uid: bool = True) -> str:
    """At most ``new`` more tasks (processes and threads: a fork bomb ends there, EAGAIN; 0: none,
    ever) in this process and everything it starts, by RLIMIT_NPROC, which the kernel counts per
    real uid and never enforces for root. So a process that runs as root first moves to a uid of its own
    (CONFINED_UID_BASE + its pid), keeping only root's file access (_FILE_CAPS, also across exec as
    ambient capabilities: Landlock confines its files either way); it cannot become root again, and
    access(2) answers for that uid without capabilities, so the directories it writes (``own``) are
    given to it first (``own_uid`` False: root stays root, unbounded). Another user's process is
    bounded at the tasks its uid has now plus ``new``.
    Call it while this process has one thread (a capability set is a thread's own). Returns what
    was applied.

    Raises:
        LandlockError: the uid changed but its file access could not be kept.
    """
    import resource  # a worker's module: Linux only by design

    if os.getuid() != 0:
        set_rlimit(resource.RLIMIT_NPROC, _tasks_of(os.getuid()) + new if new else 0)
        return f"at most {new} more tasks" if new else "no new task"
    if not own_uid:
        return "tasks not bounded (root: CUDA does not start under a uid of its own here)"
    uid = CONFINED_UID_BASE + os.getpid()
    with open("/proc/self/status", encoding="ascii") as f:
        mine = next((int(line.split()[1]) for line in f if line.startswith("Threads:")), 1)
    # 0 for none: a bound at the tasks it has now would let one of its threads that ends make room
    set_rlimit(resource.RLIMIT_NPROC, mine + new if new else 0)
    libc = _libc()
    zero = ctypes.c_ulong(0)
    libc.prctl(ctypes.c_int(_PR_SET_KEEPCAPS), ctypes.c_ulong(1), zero, zero, zero)
    # best effort: what cannot be given (a file system that refuses chown) stays writable through
    # CAP_DAC_OVERRIDE; only access(2) checks of it would then fail
    give(own, uid)
    try:
        os.setresuid(uid, uid, uid)
    except OSError as exc:  # a user namespace that maps no such uid: the bound does not hold
        return f"tasks not bounded (root cannot take uid {uid}: {exc.strerror})"
    caps = sum(1 << c for c in _FILE_CAPS)
    data = (_CapData * 2)(_CapData(caps, caps, caps), _CapData(0, 0, 0))
    if libc.capset(ctypes.byref(_CapHeader(_CAPABILITY_V3, 0)), data) != 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"capset after moving to uid {uid} failed: {os.strerror(err)}")
    for cap in _FILE_CAPS:
        if libc.prctl(ctypes.c_int(_PR_CAP_AMBIENT), ctypes.c_ulong(_PR_CAP_AMBIENT_RAISE), ctypes.c_ulong(cap),
                      zero, zero) != 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"PR_CAP_AMBIENT_RAISE({cap}) failed: {os.strerror(err)}")
    return (f"at most {new} more tasks" if new else "no new task") + f" (uid {uid}, root's file access only)"


def mapped_files() -> list[str]:
    """The files this process has mapped, from /proc/self/maps, each once, in order (none where it
    cannot be read)."""
    found: dict[str, None] = {}
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                path = parts[5].strip() if len(parts) == 6 else ""
                if path.startswith("/") and not path.endswith("(deleted)"):
                    found[path] = None
    except OSError:
        pass
    return list(found)


def mapped_library_dirs() -> list[str]:
    """Directories of the shared libraries this process has mapped (read before confining it): a
    library loaded lazily later (libgcc_s for a thread's exit, a torch extension) lies beside them."""
    return list(dict.fromkeys(os.path.dirname(p) for p in mapped_files() if ".so" in p))


def dynamic_loader() -> list[str]:
    """The dynamic loader this process was started with (``ld-linux-x86-64.so.2`` and the like, as
    mapped): a child allowed to execute programs needs it executable too, or every dynamically
    linked one fails with EACCES (the kernel opens the loader for execution as it starts them)."""
    return [p for p in mapped_files() if os.path.basename(p).startswith(("ld-linux", "ld-musl", "ld64.so"))]


def set_rlimit(kind: int, value: int) -> None:
    """Set both limits of resource ``kind`` to ``value``, never above the hard limit."""
    import resource  # a worker's module: Linux only by design

    _, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(kind, (value, value))


class WorkerCaps:
    """Default caps of a confined worker, for dataclasses with ``memory_mb``, ``cpu_s`` (0: the
    default) and ``timeout_s``: memory half the physical memory (at least 2 GiB), CPU time the
    wall time on every CPU."""

    memory_mb: int
    cpu_s: int
    timeout_s: float

    def memory_cap_mb(self) -> int:
        if self.memory_mb > 0:
            return self.memory_mb
        physical = _physical_memory_mb()
        return max(2048, physical // 2) if physical else 16384

    def cpu_cap_s(self) -> int:
        return self.cpu_s if self.cpu_s > 0 else int(self.timeout_s * max(1, os.cpu_count() or 1)) + 10


def _physical_memory_mb() -> int:
    from .compile_options import physical_memory_mb  # a worker loads this file alone: only the server asks

    return physical_memory_mb()

