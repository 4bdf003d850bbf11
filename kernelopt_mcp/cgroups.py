"""A cgroup that holds one confined child's whole process tree, so the kernel bounds the memory
the tree holds together (an rlimit bounds one process: a child that forks 500 processes of 8 GiB
each would hold 4 TiB) and can kill every process in it, however it left its parent.

Loaded by path by ``_confined_child.py`` (standard library only). The supervisor makes the cgroup
(:func:`make`) before it starts the child; the child moves itself into it (:meth:`TreeCgroup.enter`)
before it confines itself, so everything it or its descendants start is inside: a process can
leave a cgroup only by writing a ``cgroup.procs`` file, which Landlock forbids the child (the
cgroup file system is readable to it, never writable). Where to make it, first that works:

1. ``KERNELOPT_CGROUP`` (read by ``confined_python``, handed on in CONFIG): a cgroup directory the
   operator prepared (v2 with the memory controller in its ``cgroup.subtree_control``, or a v1
   memory hierarchy's) and lets this user write;
2. the cgroup v2 this process is in, where the memory controller can be given to its children
   (the root cgroup, or one holding no process: the kernel's no-internal-process rule);
3. the cgroup of this process in a v1 memory hierarchy.

Where none works (a user without write access to any, a kernel without the memory controller)
:func:`make` says why and the child's memory stays bounded per process only.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from dataclasses import dataclass

BASE_ENV = "KERNELOPT_CGROUP"
PREFIX = "kernelopt-"


@dataclass(frozen=True)
class TreeCgroup:
    """A cgroup made for one child's tree: its directory, its cgroup version and memory bound."""

    path: str
    version: int
    memory_mb: int

    def describe(self) -> str:
        return f"tree memory {self.memory_mb} MiB (cgroup v{self.version} {self.path})"

    def enter(self) -> None:
        """Move this process (all its threads) into the cgroup; what it starts later is inside too."""
        _write(os.path.join(self.path, "cgroup.procs"), str(os.getpid()))

    def pids(self) -> list[int]:
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                return [int(line) for line in f if line.strip()]
        except OSError:
            return []

    def kill(self) -> None:
        """SIGKILL every process in the cgroup, again until none is left (a process being killed
        cannot fork; one forked meanwhile is found on the next pass). Reaping is the caller's."""
        with contextlib.suppress(OSError):
            _write(os.path.join(self.path, "cgroup.kill"), "1")  # v2, Linux >= 5.14: the kernel's own
        for _ in range(1000):
            alive = [pid for pid in self.pids() if _alive(pid)]
            if not alive:
                return
            for pid in alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def oom_kills(self) -> int:
        """How many of its processes the kernel killed for the cgroup's memory bound."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            with open(os.path.join(self.path, name)) as f:
                counts = dict(line.split() for line in f if len(line.split()) == 2)
        except (OSError, ValueError):
            return 0
        return int(counts.get("oom_kill", 0))

    def remove(self) -> None:
        """Remove the cgroup once its processes are gone (a zombie not yet reaped keeps it busy)."""
        for _ in range(200):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _mounts() -> list[tuple[str, str, str, str]]:
    """(mount point, root within the file system, type, super options) of every cgroup mount."""
    found = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as f:
        for line in f:
            before, _, after = line.partition(" - ")
            fields, tail = before.split(), after.split()
            if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                found.append((fields[4], fields[3], tail[0], tail[2]))
    return found


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup paths from /proc/self/cgroup: "" for v2, "memory" for v1's memory."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as f:
        for line in f:
            parts = line.rstrip("\n").split(":", 2)
            if len(parts) == 3 and parts[0] == "0" and parts[1] == "":
                found[""] = parts[2]
            elif len(parts) == 3 and "memory" in parts[1].split(","):
                found["memory"] = parts[2]
    return found


def _directory(mount: tuple[str, str, str, str], path: str) -> str:
    point, root = mount[0], mount[1]
    if root != "/" and (path == root or path.startswith(root + "/")):
        path = path[len(root):]
    return os.path.join(point, path.lstrip("/"))


def bases(chosen: str | None = None) -> list[tuple[str, int]]:
    """Where a cgroup for a child may be made, in the order tried: (directory, version); ``chosen``
    (the operator's ``KERNELOPT_CGROUP``) first."""
    found: list[tuple[str, int]] = []
    mounts, own = _mounts(), _own_cgroups()
    if chosen:
        kind = next((m[2] for m in mounts if chosen == m[0] or chosen.startswith(m[0].rstrip("/") + "/")), "cgroup2")
        found.append((chosen, 2 if kind == "cgroup2" else 1))
    if "" in own:
        found += [(_directory(m, own[""]), 2) for m in mounts if m[2] == "cgroup2"][:1]
    if "memory" in own:
        found += [(_directory(m, own["memory"]), 1) for m in mounts
                  if m[2] == "cgroup" and "memory" in m[3].split(",")][:1]
    return found


def _memory_for_children(base: str) -> str | None:
    """Give v2's memory controller to ``base``'s children; why not."""
    try:
        available = _read(os.path.join(base, "cgroup.controllers")).split()
        given = _read(os.path.join(base, "cgroup.subtree_control")).split()
    except OSError as exc:
        return f"{base}: {exc.strerror}"
    if "memory" not in available:
        return f"{base}: no memory controller"
    if "memory" not in given:
        try:
            _write(os.path.join(base, "cgroup.subtree_control"), "+memory")
        except OSError as exc:  # EBUSY: the cgroup holds processes and is not the root
            return f"{base}: cannot give its children the memory controller ({exc.strerror})"
    return None


def _sweep(base: str) -> None:
    """Remove the empty cgroups of supervisors that no longer exist (one killed outright)."""
    with contextlib.suppress(OSError):
        for entry in os.listdir(base):
            owner = entry[len(PREFIX):].split("-", 1)[0]
            if entry.startswith(PREFIX) and owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(base, entry))


def _made(base: str, version: int, memory_mb: int) -> TreeCgroup:
    path = os.path.join(base, f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}")
    os.mkdir(path, 0o755)
    group = TreeCgroup(path, version, memory_mb)
    try:
        limit = str(memory_mb << 20)
        if version == 2:
            _write(os.path.join(path, "memory.max"), limit)
            with contextlib.suppress(OSError):  # no swap past the bound (absent without swap accounting)
                _write(os.path.join(path, "memory.swap.max"), "0")
        else:
            _write(os.path.join(path, "memory.limit_in_bytes"), limit)
            with contextlib.suppress(OSError):
                _write(os.path.join(path, "memory.memsw.limit_in_bytes"), limit)
    except OSError:
        group.remove()
        raise
    return group


def make(memory_mb: int, chosen: str | None = None) -> TreeCgroup | str:
    """A new cgroup whose processes together hold at most ``memory_mb`` MiB (their tasks are
    bounded by ``sandbox.limit_tasks``), or why none could be made (each place tried; ``chosen``
    first: :func:`bases`)."""
    why = []
    for base, version in bases(chosen):
        if version == 2:
            reason = _memory_for_children(base)
            if reason is not None:
                why.append(reason)
                continue
        _sweep(base)
        try:
            return _made(base, version, memory_mb)
        except OSError as exc:
            why.append(f"{base}: {exc.strerror}")
    return "; ".join(why) or "no cgroup file system"
