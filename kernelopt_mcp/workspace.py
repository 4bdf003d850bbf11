"""The MCP server's workspace: workloads created through it, and requests it refuses.

A created workload is validated (no data files, no oracle: that would be model-written host
code; sizes within limits; both kernels compile with the signature's entry point) and written
to the workspace through a staging directory and a rename, so a reader never sees half of one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from .compile_options import CompileLimits
from .compile_report import compile_output
from .compiler import CompileCache, compile_kernel
from .config import Settings
from .errors import WorkloadError
from .evaluation.inputs import MAX_BUFFER_BYTES
from .files import read_text
from .quota import STORED, QuotaError, WorkspaceQuota, check_workload_bytes
from .results import CreatedWorkload
from .workload import DataFile, WorkloadSpec, load_workload, parse_spec


class RequestError(ValueError):
    """The request cannot be served as asked; the message says what to change."""


class _WorkspaceConfig(Protocol):
    @property
    def created_dir(self) -> Path: ...

    @property
    def workload_max_bytes(self) -> int: ...


class Workspace(Protocol):
    """What creating a workload needs of the server: a :class:`~kernelopt_mcp.workload_catalogue.WorkloadCatalogue`."""

    @property
    def config(self) -> _WorkspaceConfig: ...

    @property
    def compile_cache(self) -> CompileCache: ...

    @property
    def settings(self) -> Settings: ...

    def workloads(self) -> dict[str, Path]: ...

    def origin(self, directory: Path) -> str: ...

    @property
    def quota(self) -> WorkspaceQuota: ...


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def create_workload(
    service: Workspace, spec: dict[str, Any], reference_cu: str | None, initial_cu: str | None,
    overwrite: bool, arch: str,
) -> CreatedWorkload:
    """Validate ``spec`` and the kernels, then store the workload in the workspace atomically
    (see the create_workload tool). The caller forgets any prepared evaluator of that name.

    Raises:
        RequestError: what to change in the request.
    """
    data = json.loads(json.dumps(spec))  # a deep copy of plain JSON
    ref = data.setdefault("reference", {})
    if not isinstance(ref, dict):
        raise RequestError("spec.reference must be an object")
    if ref.get("python"):
        raise RequestError(
            "spec.reference.python: a NumPy oracle cannot be created through this server (it "
            "would be model-written host code); remove it (or set it to null) and pass "
            "reference_cu: outputs are then checked against the CUDA reference, which is "
            "marked as not independently checked"
        )
    if ref.get("torch"):
        raise RequestError(
            "spec.reference.torch: a PyTorch reference is made from a problem's source (create_workload's "
            "torch_problem, where the server's operator allowed it), never named in a spec; remove it"
        )
    # by construction: the sources this call writes are the only ones a created workload names
    ref["python"], ref["torch"] = None, None
    ref["cuda"] = "reference.cu"
    if isinstance(data.get("initial"), dict):
        data["initial"]["source"] = "initial.cu"
    parsed = parse_spec(data, "spec")
    name = parsed.name
    target = service.config.created_dir / name
    known = service.workloads()
    if name in known and service.origin(known[name]) != "created":
        raise RequestError(f"{name!r} is a {service.origin(known[name])} workload; choose another name")
    exists = (target / "workload.json").is_file()
    if exists and not overwrite:
        raise _exists_error(name)
    if reference_cu is None and exists:
        reference_cu = _read_optional(target / "reference.cu")
    if initial_cu is None and exists and parsed.initial is not None:
        initial_cu = _read_optional(target / "initial.cu")
    if reference_cu is None:
        raise RequestError(
            "reference_cu is required: the CUDA reference kernel (same signature) whose outputs "
            "define correct answers"
        )
    if parsed.initial is None and initial_cu is not None:
        raise RequestError(
            'initial_cu was given but spec.initial is missing; add "initial": {"launch": '
            '{"grid": [...], "block": [...]}}'
        )
    if parsed.initial is not None and initial_cu is None:
        raise RequestError("spec.initial is set but initial_cu is missing; pass the starting kernel")
    total = check_created_spec(parsed, service.config.workload_max_bytes)
    for label, text in (("reference_cu", reference_cu), ("initial_cu", initial_cu)):
        if text is not None:
            _check_compiles(service.compile_cache, service.settings.compile_limits(), label, text, parsed, arch)

    created_dir = _mkdir(service.config.created_dir)
    stored = len(json.dumps(spec)) + len(reference_cu.encode()) + len((initial_cu or "").encode())
    with _name_lock(created_dir, name), within_quota(service.quota.reserve(stored, f"creating {name!r}")):
        # Decided again under the lock: a concurrent call may have created it meanwhile.
        exists = (target / "workload.json").is_file()
        if exists and not overwrite:
            raise _exists_error(name)
        _store(parsed, reference_cu, initial_cu, created_dir, target)
        wl = load_workload(target)
    return CreatedWorkload(
        name=name, path=str(target), replaced=exists, uri=f"kernelopt://workloads/{name}/workload.json",
        c_prototype=wl.signature.c_prototype(),
        correctness_cases=sum(c.kind == "correctness" for c in parsed.cases),
        performance_cases=len(parsed.performance_cases), total_buffer_bytes=total,
        notes=[
            "expected outputs come from reference_cu, which is not independently checked: a bug "
            "in it becomes the definition of correct"
        ],
    )

def _exists_error(name: str) -> RequestError:
    return RequestError(
        f"workload {name!r} already exists in the workspace (perhaps created by another call just now); "
        "pass overwrite=true to replace it, or choose another name"
    )


@contextlib.contextmanager
def _name_lock(created_dir: Path, name: str) -> Iterator[None]:
    """Hold an exclusive lock on one workload name, across threads and processes (``flock`` on a
    lock file: each ``open`` is its own lock holder). Deciding whether the name is free and
    storing the workload happen under it, so concurrent calls never both create one name.

    The lock files (``.<name>.lock``) stay: removing one while another call waits on it would
    let a third call lock a new file of the same name.
    """
    fd = os.open(created_dir / f".{name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _store(
    parsed: WorkloadSpec, reference_cu: str, initial_cu: str | None, created_dir: Path, target: Path
) -> None:
    """Write the workload to a staging directory, check it loads, then move it into place (the
    caller holds the name's lock). An existing directory is moved aside first and removed after."""
    name = parsed.name
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=created_dir))
    old: Path | None = None
    try:
        (staging / "workload.json").write_text(json.dumps(parsed.model_dump(mode="json"), indent=2) + "\n")
        (staging / "reference.cu").write_text(reference_cu)
        if initial_cu is not None:
            (staging / "initial.cu").write_text(initial_cu)
        load_workload(staging)
        if target.exists() or target.is_symlink():
            old = Path(tempfile.mkdtemp(prefix=f".{name}-old-", dir=created_dir))
            os.rename(target, old / name)
        os.rename(staging, target)  # onto a name that is free: never merges into another directory
    except OSError as exc:
        raise WorkloadError(
            f"could not store workload {name!r} in {created_dir} ({exc.strerror or exc}); check the "
            "workspace's permissions and free space"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _check_compiles(
    cache: CompileCache, limits: CompileLimits, label: str, source: str, spec: WorkloadSpec, arch: str
) -> None:
    result = compile_kernel(source, arch, [], cache=cache, limits=limits)
    if not result.ok:
        out = compile_output(result, "create_workload")
        raise RequestError(f"{label} does not compile for {arch}:\n{out.text()}")
    entry = spec.signature.entry
    if entry not in result.entries:
        raise RequestError(
            f"{label} defines no kernel {entry!r} (found: {', '.join(result.entries) or 'none'}); "
            f"declare it as {spec.signature.c_prototype()}"
        )
    if len(result.entries[entry]) != len(spec.signature.params):
        raise RequestError(
            f"{label}: {entry!r} takes {len(result.entries[entry])} parameters; the signature has "
            f"{len(spec.signature.params)}: {spec.signature.c_prototype()}"
        )


def _read_optional(path: Path) -> str | None:
    """A stored kernel kept by overwrite (regular files only, capped like any source)."""
    if not path.is_file():
        return None
    return read_text(path, f"the stored {path.name}", RequestError)


def check_created_spec(spec: WorkloadSpec, limit: int) -> int:
    """Refuse data files and workloads over ``limit`` bytes; return the bytes of all buffers of all cases."""
    gens = [("inputs." + k, g) for k, g in spec.inputs.items()]
    gens += [(f"cases.{c.name}.inputs.{k}", g) for c in spec.cases for k, g in c.inputs.items()]
    for where, gen in gens:
        if isinstance(gen, DataFile):
            raise RequestError(
                f"spec.{where}: data files cannot be named through this server (paths would reach "
                "outside the workspace); use a generator: uniform, normal, randint, choice, arange or constant"
            )
    return check_spec_size(spec, "a created workload", limit)


def check_spec_size(spec: WorkloadSpec, what: str, limit: int, cost: str = STORED) -> int:
    """Refuse a workload whose buffers would exceed MAX_BUFFER_BYTES each or ``limit`` bytes over all
    cases (a client's request makes the server draw and keep them: ``cost`` says how); return the total."""
    with within_quota(None):
        return check_workload_bytes(spec, what, limit, MAX_BUFFER_BYTES, cost)


@contextlib.contextmanager
def within_quota(reservation: contextlib.AbstractContextManager[None] | None) -> Iterator[None]:
    """``reservation`` (if any) held for the block, a QuotaError raised as a RequestError."""
    try:
        with reservation or contextlib.nullcontext():
            yield
    except QuotaError as exc:
        raise RequestError(str(exc)) from None
