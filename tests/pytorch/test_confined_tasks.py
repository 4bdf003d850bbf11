"""A confined child's tasks are bounded, root too (sandbox.limit_tasks, _confined_child.confine).

RLIMIT_NPROC is the kernel's bound on a user's tasks (processes and threads), and the kernel never
enforces it for root: a problem file that forks without end in a child of a server run as root
would fill the machine's process table before any deadline. A root child therefore moves to a uid
of its own that keeps root's file access alone (Landlock decides what it opens) and cannot become
root again; its tree then ends at its bound with EAGAIN, and everything is reaped as before.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from test_torch_child import DAEMON, needs_landlock, probe_package, run_jobs_probe

from kernelopt_mcp.confined_python import ChildLimits, run_confined_python
from kernelopt_mcp.sandbox import CONFINED_UID_BASE

ROOT = os.getuid() == 0

FORKS = """
import json, os, sys, threading, time

def forks():
    kids = []
    while len(kids) < 10000:
        try:
            pid = os.fork()
        except OSError as exc:
            return kids, exc.strerror
        if pid == 0:
            time.sleep(2)
            os._exit(0)
        kids.append(pid)
    return kids, "never refused"

kids, why = forks()
try:
    threading.Thread(target=time.sleep, args=(0.1,)).start()
    thread = "started"
except RuntimeError as exc:
    thread = str(exc)
try:
    os.setresuid(0, 0, 0)
    root = "became root"
except OSError as exc:
    root = exc.strerror
secret = sys.argv[1]
open("written.txt", "w").write(str(os.getuid()))  # in its staging directory, given to its uid
try:
    read = open(secret).read()
except OSError as exc:
    read = exc.strerror
print(json.dumps({"forks": len(kids), "why": why, "thread": thread, "uid": os.getuid(), "root": root,
                  "read": read}))
"""


@needs_landlock
def test_a_child_that_forks_without_end_stops_at_its_bound_and_cannot_become_root(tmp_path: Path) -> None:
    package = probe_package(tmp_path, "forks_probe", FORKS)
    readable = tmp_path / "readable"
    readable.mkdir()
    secret = readable / "only-root-may-read.txt"
    secret.write_text("the file the child was given")
    secret.chmod(0o600)
    staging = tmp_path / "staging"
    staging.mkdir()
    began = time.monotonic()
    result = run_confined_python("forks_probe", [str(secret)], staging=staging, python_path=[str(package.parent)],
                                 read=[str(package), str(readable)], limits=ChildLimits(timeout_s=60, tasks=40))
    assert result.returncode == 0, result.stderr_tail
    out = json.loads(result.stdout)
    # 40 tasks more than the child had (for another user: more than the user had, give or take
    # what the user's other processes started or ended meanwhile)
    assert out["why"] == "Resource temporarily unavailable", out
    assert out["forks"] == 40 if ROOT else 20 <= out["forks"] <= 60, out
    assert out["thread"] == "can't start new thread", out
    assert out["read"] == "the file the child was given"  # what Landlock lets it read, it reads
    if ROOT:
        assert out["uid"] >= CONFINED_UID_BASE and out["root"] == "Operation not permitted", out
    assert time.monotonic() - began < 30
    left = [p for p in os.listdir("/proc") if p.isdigit() and _uid(p) == out["uid"]] if ROOT else []
    assert left == []  # the tree was reaped with the child
    written = staging / "written.txt"
    assert written.read_text() == str(out["uid"]) and written.stat().st_uid == os.getuid()  # root's again


BOMB = """
import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.05)
"""


@needs_landlock
def test_a_fork_bomb_holds_at_most_its_bound_and_is_reaped_at_the_deadline(tmp_path: Path) -> None:
    """The run's tasks (its supervisor's, its child's and the forks': their command line names the
    staging directory), sampled while the bomb runs: at most the bound, and the bomb did reach it;
    none left after the deadline."""
    import threading

    package = probe_package(tmp_path, "bomb_probe", BOMB)
    staging = tmp_path / "staging"
    staging.mkdir()
    results = []
    runner = threading.Thread(target=lambda: results.append(run_confined_python(
        "bomb_probe", [], staging=staging, python_path=[str(package.parent)], read=[str(package)],
        limits=ChildLimits(timeout_s=4, tasks=64))))
    runner.start()
    peak, began = 0, time.monotonic()
    # up to the deadline: as the reaper kills, freed slots are forked into again while a /proc scan
    # (not atomic) still counts the dying ones
    while runner.is_alive() and time.monotonic() - began < 3.0:
        peak = max(peak, _tasks_naming(str(staging)))
        time.sleep(0.05)
    runner.join()
    assert results[0].timed_out
    assert 40 <= peak <= 64 + 8, peak  # grew to its bound, never past it (an unbounded one: thousands)
    assert _tasks_naming(str(staging)) == 0


JOBS = """
import json, os, time
from pathlib import Path
from kernelopt_mcp._confined_child import run_confined_jobs

staging = Path.cwd()

def job(name):
    def work():
        n = 0
        try:
            while True:
                if os.fork() == 0:
                    time.sleep(3)
                    os._exit(0)
                n += 1
        except OSError:
            pass
        (staging / name / "out.json").write_text(json.dumps({"forks": n, "uid": os.getuid()}))
    return work

for name in ("a", "b"):
    (staging / name).mkdir()
statuses = run_confined_jobs([(str(staging / n), job(n)) for n in ("a", "b")], 30.0, parallel=2)
print(json.dumps({"statuses": statuses,
                  "jobs": {n: json.loads((staging / n / "out.json").read_text()) for n in ("a", "b")}}))
"""


@needs_landlock
def test_each_job_has_a_bound_of_its_own(tmp_path: Path) -> None:
    """The timing child's jobs run side by side: each counts its own tasks (its own uid, for root),
    so one problem's threads never starve another's."""
    out = run_jobs_probe(tmp_path, "tasks_jobs_probe", JOBS, ChildLimits(timeout_s=60, tasks=30))
    a, b = out["jobs"]["a"], out["jobs"]["b"]
    assert out["statuses"] == [0, 0], out
    if not ROOT:
        pytest.skip("for another user, the jobs share the user's count")
    assert a["forks"] == b["forks"] == 30, out  # each its 30, side by side
    assert a["uid"] != b["uid"] and min(a["uid"], b["uid"]) >= CONFINED_UID_BASE, out


def _uid(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
    except (OSError, StopIteration):
        return None


def _tasks_naming(marker: str) -> int:
    """Tasks (threads) of every process whose command line holds ``marker``, from /proc (other tests'
    long-lived children of this worker are not counted)."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    count += len(os.listdir(f"/proc/{entry}/task"))
            except OSError:
                pass
    return count


FAKE_DRIVER = """
#include <unistd.h>
/* a CUDA driver that starts only for root (CUDA_ERROR_OPERATING_SYSTEM, 304, for any other uid) or for anyone */
int cuInit(unsigned flags) { (void)flags; return ROOT_ONLY && getuid() != 0 ? 304 : 0; }
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
"""


@needs_landlock
@pytest.mark.skipif(not ROOT, reason="only a process run as root moves its children to a uid of their own")
@pytest.mark.parametrize("root_only", [True, False, None])
def test_gpu_children_stay_root_only_where_cuda_does_not_start_under_their_own_uid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, root_only: bool | None) -> None:
    """gpu_child_own_uid starts the CUDA driver (here a stand-in libcuda.so.1 on LD_LIBRARY_PATH)
    in a confined GPU child under its own uid; only where that fails and the same child as root
    succeeds do GPU children stay root. No driver at all: they move (nothing to keep)."""
    import shutil
    import subprocess

    from kernelopt_mcp.confined_python import gpu_child_own_uid

    if root_only is None:  # no driver library at all (this machine's case without the stand-in)
        monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
        assert gpu_child_own_uid.__wrapped__() is True
        return
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler here for the stand-in driver")
    lib = tmp_path / "lib"
    lib.mkdir()
    (tmp_path / "driver.c").write_text(FAKE_DRIVER)
    subprocess.run([compiler, "-shared", "-fPIC", f"-DROOT_ONLY={int(root_only)}", "-o", str(lib / "libcuda.so.1"),
                    str(tmp_path / "driver.c")], check=True)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(lib))
    assert gpu_child_own_uid.__wrapped__() is not root_only


THREADS_ONLY = """
import json, os, subprocess, sys, threading

def tried(start):
    try:
        start()
        return "started"
    except OSError as exc:
        return exc.strerror

def fork():
    if os.fork() == 0:
        os._exit(0)

results = []
threads = [threading.Thread(target=lambda i=i: results.append(i * i)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"threads": sorted(results), "fork": tried(fork),
                  "subprocess": tried(lambda: subprocess.run([sys.executable, "-c", "pass"])),
                  "spawn": tried(lambda: os.posix_spawn(sys.executable, [sys.executable, "-c", "pass"], {})),
                  "confined_as": os.environ["KERNELOPT_CONFINED_AS"]}))
"""


@needs_landlock
def test_a_child_held_to_threads_starts_threads_and_no_process(tmp_path: Path) -> None:
    """``processes=False`` (the MCP import child): threads run, and fork, subprocess and posix_spawn
    are refused, so the tree is one process whose rlimits bound all it holds."""
    package = probe_package(tmp_path, "threads_probe", THREADS_ONLY)
    staging = tmp_path / "staging"
    staging.mkdir()
    result = run_confined_python("threads_probe", [], staging=staging, python_path=[str(package.parent)],
                                 read=[str(package)], limits=ChildLimits(timeout_s=60, processes=False))
    assert result.returncode == 0, result.stderr_tail
    out = json.loads(result.stdout)
    assert out["threads"] == [i * i for i in range(8)], out
    assert out["fork"] == out["subprocess"] == out["spawn"] == "Operation not permitted", out
    assert "threads only (no new process)" in out["confined_as"], out


@needs_landlock
def test_a_daemon_a_child_leaves_is_killed_and_holds_nothing_up(tmp_path: Path) -> None:
    """A child that may start processes (the timing child: torch.compile's workers) and leaves a
    double-forked daemon holding its stdout: the call ends with the child, the daemon is killed."""
    package = probe_package(tmp_path, "daemon_probe", DAEMON + "print(daemon())\n")
    staging = tmp_path / "staging"
    staging.mkdir()
    start = time.monotonic()
    result = run_confined_python("daemon_probe", [], staging=staging, python_path=[str(package.parent)],
                                 read=[str(package)], limits=ChildLimits(timeout_s=120))
    assert result.returncode == 0, result.stderr_tail
    assert time.monotonic() - start < 60, "the caller waited for the daemon"
    with pytest.raises(ProcessLookupError):
        os.kill(int(result.stdout), 0)
