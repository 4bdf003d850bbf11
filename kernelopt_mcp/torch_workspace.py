"""The create_workload tool's ``torch_problem`` option: a PyTorch problem becomes a created workload.

The problem is the client's Python, and the server promises to run no model-written host code
(SECURITY.md). So the option is refused unless the server's operator allowed it
(``Settings.allow_torch_problems``, ``KERNELOPT_ALLOW_TORCH_PROBLEMS=1``: for trusted clients
only); then ``kernelopt import-torch`` runs in a child process of its own session with a deadline
(a problem that loops or crashes costs the child, not the server), writing into a staging
directory of the workspace, which is renamed onto the workload's name under the same name lock
as every created workload. The child is not confined: it runs as the server's user.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .results import CreatedWorkload
from .workload import IDENTIFIER, load_workload
from .workspace import RequestError, Workspace, _name_lock, check_spec_size, within_quota

TORCH_PROBLEM_TIMEOUT_S = 600.0
REFUSED = (
    "torch_problem: this server does not run PyTorch problems: that would run the client's Python in the "
    "server. Its operator can allow it for trusted clients (KERNELOPT_ALLOW_TORCH_PROBLEMS=1); or import the "
    "problem where it is trusted (`kernelopt import-torch problem.py -o DIR`) and add DIR's parent to the "
    "server's KERNELOPT_WORKLOADS"
)


def create_torch_workload(
    service: Workspace, name: str | None, problem: str, *, initial_cu: str | None = None,
    initial_launch: dict[str, Any] | None = None, overwrite: bool = False, allowed: bool = False,
    timeout_s: float = TORCH_PROBLEM_TIMEOUT_S, python: str = sys.executable,
) -> CreatedWorkload:
    """Import ``problem`` (a KernelBench-style file's source) into the workspace as ``name``.

    Raises:
        RequestError: not allowed, a bad name, the name taken, the problem not convertible (the
            importer's reason), too large, or the import did not finish within ``timeout_s``.
    """
    if not allowed:
        raise RequestError(REFUSED)
    if not isinstance(name, str) or not re.match(IDENTIFIER, name) or len(name) > 64:
        raise RequestError('spec.name: give the workload a name of letters, digits and _, e.g. {"name": "my_matmul"}')
    if initial_cu is not None and initial_launch is None:
        raise RequestError('initial_cu needs spec.initial.launch, e.g. {"initial": {"launch": {"grid": [...], "block": [...]}}}')
    target = service.config.created_dir / name
    known = service.workloads()
    if name in known and service.origin(known[name]) != "created":
        raise RequestError(f"{name!r} is a {service.origin(known[name])} workload; choose another name")
    if (target / "workload.json").is_file() and not overwrite:
        raise _exists(name)
    created_dir = service.config.created_dir
    created_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-torch-", dir=created_dir))
    try:
        answer = _run_import(staging, name, problem, initial_cu, initial_launch, timeout_s, python, target)
        wl = load_workload(staging / "workload")
        total = check_spec_size(wl.spec, "an imported PyTorch problem", service.config.workload_max_bytes)
        # the staging directory lies in the workspace: its files (the stored outputs) already count
        with _name_lock(created_dir, name), within_quota(service.quota.reserve(0, f"importing {name!r}")):
            exists = (target / "workload.json").is_file()
            if exists and not overwrite:
                raise _exists(name)
            old = None
            if target.exists() or target.is_symlink():
                old = Path(tempfile.mkdtemp(prefix=f".{name}-old-", dir=created_dir))
                os.rename(target, old / name)
            os.rename(staging / "workload", target)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    wl = load_workload(target)
    return CreatedWorkload(
        name=name, path=str(target), replaced=exists, uri=f"kernelopt://workloads/{name}/workload.json",
        c_prototype=wl.signature.c_prototype(),
        correctness_cases=sum(c.kind == "correctness" for c in wl.spec.cases),
        performance_cases=len(wl.spec.performance_cases), total_buffer_bytes=total,
        notes=[*answer.get("notes", []), f"imported with torch {answer.get('torch')} in a child process of the server"],
    )


def _exists(name: str) -> RequestError:
    return RequestError(f"workload {name!r} already exists in the workspace; pass overwrite=true to replace it, or choose another name")


def _run_import(
    staging: Path, name: str, problem: str, initial_cu: str | None, initial_launch: dict[str, Any] | None,
    timeout_s: float, python: str, target: Path,
) -> dict[str, Any]:
    """``kernelopt import-torch`` in a child process (its own session, killed whole at the deadline)."""
    source = staging / f"{name}.py"
    source.write_text(problem)
    # the same kernelopt_mcp as this process (an installed copy may be another version)
    root = str(Path(__file__).resolve().parent.parent)
    boot = f"import sys; sys.path.insert(0, {root!r}); from kernelopt_mcp.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = [python, "-c", boot, "import-torch", str(source), "-o", str(staging / "workload"), "--name", name, "--json",
            "--home", str(target)]
    if initial_cu is not None:
        (staging / "initial.cu").write_text(initial_cu)
        (staging / "initial.launch.json").write_text(json.dumps(initial_launch))
        argv += ["--initial", str(staging / "initial.cu")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=staging, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise RequestError(
            f"torch_problem: importing did not finish within {timeout_s:.0f} s (the problem's get_inputs, Model or "
            "forward ran that long on the CPU): make its sizes smaller"
        ) from None
    try:
        answer = json.loads(out)
    except json.JSONDecodeError:
        tail = err.decode(errors="replace").strip().splitlines()[-5:]
        raise RequestError(f"torch_problem: the import failed (exit {proc.returncode}): {' '.join(tail) or 'no output'}") from None
    if proc.returncode != 0 or answer.get("status") != "ok":
        raise RequestError(f"torch_problem: {answer.get('message') or answer}")
    return answer
