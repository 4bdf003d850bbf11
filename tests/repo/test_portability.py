"""Windows: what of the Python side is POSIX-only (docs/windows.md).

kernelopt runs on Windows inside WSL2, where it is the Linux build. A native Windows build waits
for a Windows machine to test it on; until then these tests keep docs/windows.md's picture of it true:
the library's public API and the run report import without the POSIX-only modules, and the
places that call POSIX-only functions are exactly the ones that page lists (a new one fails
here, so it is either made portable or added to the list).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
POSIX_MODULES = {"fcntl", "resource", "termios", "pwd", "grp", "pty", "tty"}
POSIX_OS = {"killpg", "fchmod", "fchown", "chown", "getuid", "geteuid", "getgid", "getegid", "setsid", "getpgid",
            "setpgrp", "fork", "sysconf", "mkfifo", "O_NONBLOCK", "O_CLOEXEC", "O_NOFOLLOW", "O_PATH", "O_NOCTTY",
            "WNOHANG", "statvfs"}
POSIX_SIGNALS = {"SIGKILL", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGCHLD", "SIGPIPE", "SIGQUIT",
                 "SIGSTOP", "SIGCONT"}

# file -> its POSIX-only uses; each file is named in docs/windows.md's list
KNOWN = {
    "kernelopt_mcp/_compile_worker.py": ["resource"],  # rlimits of the compile worker
    # the torch child's supervisor, and the process per job it forks (run_confined_job)
    "kernelopt_mcp/_confined_child.py": ["/proc", "os.WNOHANG", "os.fork", "os.getuid", "os.statvfs", "resource",
                                         "signal.SIGKILL"],
    # the cgroup that holds a confined child's tree: Linux only by design
    "kernelopt_mcp/cgroups.py": ["/proc", "signal.SIGKILL"],
    "kernelopt_mcp/compile_options.py": ["os.sysconf"],  # guarded: physical memory 0 where unknown
    # what a confined child wrote read as a plain file only (read_child_file)
    "kernelopt_mcp/confined_python.py": ["os.O_CLOEXEC", "os.O_NOFOLLOW", "os.O_NONBLOCK", "os.getuid"],
    "kernelopt_mcp/_oracle_worker.py": ["resource"],  # rlimits of the oracle worker
    # openat2 beneath a data root
    "kernelopt_mcp/data_files.py": ["os.O_CLOEXEC", "os.O_NOCTTY", "os.O_NOFOLLOW", "os.O_NONBLOCK"],
    # pipe size (imported lazily), exit names
    "kernelopt_mcp/evaluation/oracle_sandbox.py": ["fcntl", "signal.SIGKILL"],
    "kernelopt_mcp/executables.py": ["os.killpg", "signal.SIGKILL"],  # kill a process group
    "kernelopt_mcp/files.py": ["/proc", "os.fchmod"],  # /proc guarded; os.fchmod: Python >= 3.13 on Windows
    "kernelopt_mcp/server/http_guard.py": ["resource"],  # the open-file limit raised for --http
    # Landlock, the workers' VmSize: Linux only by design
    "kernelopt_mcp/sandbox.py": ["/proc", "os.O_CLOEXEC", "os.O_PATH", "os.chown", "os.getuid", "resource"],
    "kernelopt_mcp/workspace.py": ["fcntl", "os.O_CLOEXEC"],  # flock per workload name
}


def posix_uses(path: Path) -> list[str]:
    """POSIX-only modules imported, ``os``/``signal`` names used and ``/proc`` paths named in a module."""
    uses: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            uses |= {a.name for a in node.names if a.name.split(".")[0] in POSIX_MODULES}
        elif (isinstance(node, ast.ImportFrom) and node.level == 0
              and (node.module or "").split(".")[0] in POSIX_MODULES):
            uses.add(str(node.module))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "os" and node.attr in POSIX_OS:
                uses.add(f"os.{node.attr}")
            elif node.value.id == "signal" and node.attr in POSIX_SIGNALS:
                uses.add(f"signal.{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("/proc/"):
            uses.add("/proc")
    return sorted(uses)


def test_posix_only_calls_are_the_known_ones() -> None:
    found = {}
    for package in (REPO / "kernelopt_mcp", REPO / "clients" / "kernelopt_agent"):
        for path in sorted(package.rglob("*.py")):
            if uses := posix_uses(path):
                found[path.relative_to(REPO).as_posix()] = uses
    assert found == KNOWN


def test_the_windows_page_lists_them() -> None:
    page = (REPO / "docs" / "windows.md").read_text(encoding="utf-8")
    section = page.split("POSIX-only today", 1)[1]
    for path in KNOWN:
        assert f"`{path.split('/')[-1]}`" in section, path


def test_the_library_and_the_report_import_without_posix_only_modules() -> None:
    """As on Windows: fcntl, resource, termios, pwd, grp missing. The public API (kernelopt_mcp),
    the run report and `runs` load; what still needs them is docs/windows.md's list."""
    code = ("import sys\n"
            f"for name in {sorted(POSIX_MODULES)!r}: sys.modules[name] = None\n"
            "import kernelopt_mcp, kernelopt_agent.report, kernelopt_agent.runs\n"
            "print(len(kernelopt_mcp.__all__))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "clients")])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) > 0


def test_a_hardened_read_on_a_system_without_posix_open_flags(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """files.read_regular_bytes builds its flags with getattr: where O_NONBLOCK / O_CLOEXEC / O_NOCTTY do
    not exist (Windows) the read still works."""
    from kernelopt_mcp import files

    path = tmp_path / "k.cu"
    path.write_bytes(b"__global__ void k() {}\r\n")
    for flag in ("O_NONBLOCK", "O_CLOEXEC", "O_NOCTTY"):
        monkeypatch.delattr(os, flag)
    assert files.read_regular_bytes(path, 1024) == b"__global__ void k() {}\r\n"


def test_runs_never_probe_a_process_with_os_kill_on_windows(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """On Windows os.kill(pid, 0) ends the process (TerminateProcess): `kernelopt runs show` must not
    call it to ask whether a run is still going."""
    from types import SimpleNamespace

    from kernelopt_agent import rundir

    def kill(pid: int, sig: int) -> None:
        raise AssertionError(f"os.kill({pid}, {sig}) called on Windows")

    monkeypatch.setattr(rundir, "os", SimpleNamespace(name="nt", kill=kill))
    assert rundir.pid_alive(12345) is True and rundir.pid_alive(None) is False
