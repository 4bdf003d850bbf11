"""The create_workload tool's ``torch_problem`` option: a PyTorch problem becomes a created workload.

The problem is the client's Python, and the server promises to run no model-written host code
(SECURITY.md). So the option is refused unless the server's operator allowed it
(``Settings.allow_torch_problems``, ``KERNELOPT_ALLOW_TORCH_PROBLEMS=1``: for trusted clients
only); then ``kernelopt import-torch`` runs in a confined child (:mod:`.confined_python`: an
allowlisted environment, ``python -I``, Landlock and seccomp, rlimits, a deadline, its whole process
tree reaped), writing only into a staging directory of the workspace, which is renamed onto the
workload's name under the same name lock as every created workload. The problem is saved there as
``problem.py``, on no import path: ``import torch`` finds the installed torch or nothing (the child
is refused at once where torch is missing).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .compile_options import CompileLimits
from .confined_python import (
    ChildLimits,
    check_plain_tree,
    run_torch_child,
)
from .results import CreatedWorkload
from .torch_import import TOLERANCE_MODES
from .workload import IDENTIFIER, load_workload
from .workspace import RequestError, Workspace, _name_lock, check_spec_size, within_quota

TORCH_PROBLEM_TIMEOUT_S = 600.0
#: what an imported problem's buffers cost the server (KernelBench's largest level-1 problems: 8-13 GiB)
DRAWN = ("drawn on the GPU for every evaluation, expected outputs written to disk; KernelBench's largest problems "
         "need 8-13 GiB")
REFUSED = (
    "torch_problem: this server does not run PyTorch problems: that would run the client's Python in the "
    "server. Its operator can allow it for trusted clients (KERNELOPT_ALLOW_TORCH_PROBLEMS=1); or import the "
    "problem where it is trusted (`kernelopt import-torch problem.py -o DIR`) and add DIR's parent to the "
    "server's KERNELOPT_WORKLOADS"
)
STDERR_LINE_CHARS = 300


def create_torch_workload(
    service: Workspace, name: str | None, problem: str, *, initial_cu: str | None = None,
    initial_launch: dict[str, Any] | None = None, overwrite: bool = False, allowed: bool = False,
    timeout_s: float = TORCH_PROBLEM_TIMEOUT_S, python: str = sys.executable, python_path: Sequence[str] = (),
    compile_limits: CompileLimits | None = None, tolerance: Any = "strict",
) -> CreatedWorkload:
    """Import ``problem`` (a KernelBench-style file's source) into the workspace as ``name``.

    Args:
        python: the interpreter the importer runs in (it needs torch).
        python_path: directories the importer may import from besides ``python``'s installation
            (where torch lies outside it).
        compile_limits: the operator's confinement choice (Landlock off, unconfined accepted).
        tolerance: "strict" (by the output's dtype) or "kernelbench" (atol = rtol = 1e-2), as
            ``kernelopt import-torch --tolerance`` takes it.

    Raises:
        RequestError: not allowed, a bad name, the name taken, torch missing, the problem not
            convertible (the importer's reason), too large, or the import did not finish within
            ``timeout_s``.
    """
    if not allowed:
        raise RequestError(REFUSED)
    if not isinstance(name, str) or not re.match(IDENTIFIER, name) or len(name) > 64:
        raise RequestError('spec.name: give the workload a name of letters, digits and _, e.g. {"name": "my_matmul"}')
    if tolerance not in TOLERANCE_MODES:
        raise RequestError(
            f"spec.tolerance: with torch_problem it is one of {', '.join(map(repr, TOLERANCE_MODES))} (strict: by the "
            'output\'s dtype; kernelbench: atol = rtol = 1e-2), e.g. {"name": "my_op", "tolerance": "kernelbench"}'
        )
    if initial_cu is not None and initial_launch is None:
        raise RequestError('initial_cu needs spec.initial.launch, e.g. {"initial": {"launch": {"grid": '
                           '[...], "block": [...]}}}')
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
        # threads only: importing runs torch on the CPU and starts no program, so the problem's
        # memory is its one process's, capped, whether or not a cgroup bounds the tree
        limits = ChildLimits.following(compile_limits, timeout_s, service.config.workload_max_bytes // 2**20 + 16,
                                       processes=False)
        answer = _run_import(staging, name, problem, initial_cu, initial_launch, limits, python, python_path, target,
                             tolerance)
        try:  # the problem's code ran in the child that wrote it: plain files only, never a link
            check_plain_tree(staging / "workload")
        except OSError as exc:
            raise RequestError(f"torch_problem: the import left {exc}") from None
        wl = load_workload(staging / "workload")
        total = check_spec_size(wl.spec, "an imported PyTorch problem", service.config.workload_max_bytes, DRAWN)
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
    return RequestError(f"workload {name!r} already exists in the workspace; pass overwrite=true to replace it, or "
                        "choose another name")


def _run_import(
    staging: Path, name: str, problem: str, initial_cu: str | None, initial_launch: dict[str, Any] | None,
    limits: ChildLimits, python: str, python_path: Sequence[str], target: Path, tolerance: str,
) -> dict[str, Any]:
    """``kernelopt import-torch`` in a confined child; its JSON answer."""
    source = staging / "problem.py"
    source.write_text(problem)
    args = ["import-torch", str(source), "-o", str(staging / "workload"), "--name", name, "--json", "--home",
            str(target), "--tolerance", tolerance, "--in-process"]  # confined already: this child is the importer
    if initial_cu is not None:
        (staging / "initial.cu").write_text(initial_cu)
        (staging / "initial.launch.json").write_text(json.dumps(initial_launch))
        args += ["--initial", str(staging / "initial.cu")]
    # the same kernelopt_mcp as this process (an installed copy may be another version), torch's
    # distributions where they are installed (run_torch_child), on the CPU
    result = run_torch_child("kernelopt_mcp", args, staging=staging, python=python, python_path=python_path,
                             limits=limits, gpu=False)
    if result.refused is not None:
        if result.missing == "torch":
            raise RequestError(
                f"torch_problem: this server's Python ({python}) has no torch, so it cannot import PyTorch problems: "
                "its operator can install it (pip install torch); or import the problem where torch is installed "
                "(`kernelopt import-torch problem.py -o DIR`) and add DIR's parent to the server's KERNELOPT_WORKLOADS"
            )
        raise RequestError(f"torch_problem: the importer was not run: {result.refused}")
    if result.timed_out:
        raise RequestError(
            f"torch_problem: importing did not finish within {limits.timeout_s:.0f} s (the problem's get_inputs, Model "
            "or forward ran that long on the CPU): make its sizes smaller"
        )
    try:
        answer = json.loads(result.stdout)
    except ValueError:
        raise RequestError(f"torch_problem: the import failed (exit {result.returncode}): "
                           f"{result.last_line(most=STDERR_LINE_CHARS)}") from None
    if not isinstance(answer, dict):
        raise RequestError(f"torch_problem: the import failed (exit {result.returncode}): "
                           f"{result.last_line(most=STDERR_LINE_CHARS)}")
    if result.returncode != 0 or answer.get("status") != "ok":
        raise RequestError(f"torch_problem: {str(answer.get('message') or 'the import failed')[:2000]}")
    return answer
