"""External tools the server runs (the harness, ncu, compute-sanitizer): finding them, the
environment they get, and running one so that a timeout or a cancelled call kills it and
everything it started."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO

from .errors import HarnessCancelled, ToolchainNotFound

POLL_S = 0.2  # how often a running tool is checked for a cancelled call

# What a child that runs GPU code or NVIDIA's tools gets of the server's environment: the loader's
# and the driver's variables and kernelopt's own harness switches, nothing else. The server's
# environment holds its bearer token and API keys; the harness runs clients' kernels, and ncu and
# compute-sanitizer write what they see into reports that reach clients.
CHILD_ENV_NAMES = frozenset({
    "PATH", "LD_LIBRARY_PATH", "HOME", "TMPDIR", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES",
    "LC_NUMERIC", "TZ",
    # read by the driver or the harness (native_harness/src: driver.cpp, staging.cpp, case_runner.cpp, baseline.cpp)
    "NVIDIA_TF32_OVERRIDE", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
    "KERNELOPT_LIBCUDA", "KERNELOPT_HARNESS_READONLY_STAGING", "KERNELOPT_HARNESS_HIDE_EXPECTED",
    "KERNELOPT_HARNESS_REPORT_STAGED",
})
# CUDA_VISIBLE_DEVICES, CUDA_HOME, CUDA_CACHE_PATH, CUDA_MODULE_LOADING ...; a name of these that
# looks like a credential is still dropped (an operator can pass one on by name, below)
CHILD_ENV_PREFIXES = ("CUDA_",)
_CREDENTIAL_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
# the operator's additions: names (or NAME_* prefixes) separated by commas
CHILD_ENV_VARIABLE = "KERNELOPT_CHILD_ENV"


def child_env(extra: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child that runs GPU code or an NVIDIA tool: of ``environ`` (default:
    this process's) only the allowlisted variables (CHILD_ENV_NAMES, CUDA_*) and those the
    operator names in KERNELOPT_CHILD_ENV (``NAME`` or ``PREFIX_*``, comma-separated); then
    ``extra``. Everything else (tokens, API keys, any other variable) is dropped.

    The source is the process environment itself (it is what is being filtered), so this reads
    ``os.environ`` where the settings object cannot stand in for it.
    """
    source = os.environ if environ is None else environ
    named = [n.strip() for n in source.get(CHILD_ENV_VARIABLE, "").split(",") if n.strip()]
    exact = CHILD_ENV_NAMES | {n for n in named if not n.endswith("*")}
    prefixes = tuple(n[:-1] for n in named if n.endswith("*") and len(n) > 1)

    def kept(name: str) -> bool:
        if name in exact or (prefixes and name.startswith(prefixes)):
            return True
        return name.startswith(CHILD_ENV_PREFIXES) and not any(w in name.upper() for w in _CREDENTIAL_WORDS)

    env = {k: v for k, v in source.items() if kept(k)}
    env.update(extra or {})
    return env


def is_executable(path: str | Path | None) -> bool:
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)  # type: ignore[arg-type]


def find_executable(
    explicit: str | Path | None, candidates: Iterable[str | Path | None], *, bad_explicit: str, missing: str
) -> Path:
    """``explicit`` when given (it must be an executable file: no silent fallback past a setting
    that names something else), else the first executable of ``candidates`` (None entries skipped).

    Raises:
        ToolchainNotFound: ``bad_explicit`` or ``missing``, which should say what to do next.
    """
    if explicit:
        if is_executable(explicit):
            return Path(explicit)
        raise ToolchainNotFound(bad_explicit)
    for c in candidates:
        if is_executable(c):
            return Path(c)  # type: ignore[arg-type]
    raise ToolchainNotFound(missing)


def exit_code_and_tail(proc: subprocess.Popen[bytes], stderr: IO[bytes],
                       kill: Callable[[], None]) -> tuple[int | None, str]:
    """How a worker process ended (its exit code; negative: the signal, after ``kill`` if it did
    not end within 5 s) and the last 600 bytes of the file its stderr went to."""
    try:
        code = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        kill()
        code = proc.returncode
    stderr.seek(0, os.SEEK_END)
    stderr.seek(max(0, stderr.tell() - 600))
    return code, stderr.read().decode(errors="replace").strip()


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc``'s process group (it was started with ``start_new_session``) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def close_worker(proc: subprocess.Popen[bytes], kill: Callable[[], None]) -> None:
    """End a worker that exits at EOF on stdin: close its stdin and give it 2 s, else ``kill()``;
    then close the pipes this side holds."""
    if proc.poll() is None:
        try:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            kill()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass


def run_killable(
    cmd: list[str], *, stdout: IO[bytes], stderr: IO[bytes] | int, timeout_s: float,
    cancelled: Callable[[], bool] | None = None, what: str = "the tool", env: Mapping[str, str] | None = None,
) -> int | None:
    """Run ``cmd`` in its own process group, output to the given files, in ``env`` (default:
    :func:`child_env`); its exit code, or None when it outlasted ``timeout_s`` (it is killed with
    every child first).

    Files, not pipes: polling for ``cancelled`` must never leave a full pipe blocking the child.

    Raises:
        HarnessCancelled: ``cancelled()`` became true; the process group was killed.
    """
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, start_new_session=True,
                            env=child_env() if env is None else dict(env))
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return proc.wait(timeout=min(POLL_S, max(0.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            pass
        if cancelled is not None and cancelled():
            kill_group(proc)
            raise HarnessCancelled(f"the call was cancelled; {what} was stopped")
        if time.monotonic() >= deadline:
            kill_group(proc)
            return None
