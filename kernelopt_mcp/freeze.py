"""Freezing a workload for a run: inputs drawn once and written as files, expected outputs from
the NumPy oracle, and a workload directory whose inputs are those very files, so that what the
server checks and times is what the run records and what its replay requests feed the harness.

This is what ``kernelopt optimize`` records under ``results/run-NNN/`` (through the MCP tools
``freeze_workload`` and ``replay_requests``; the orchestrator never imports it):

    workload/<name>/         workload.json (inputs = the files below), reference.cu, initial.cu
    inputs/<case>/<buf>.bin  the drawn inputs; input_cases.json lists them with their sha256
    expected/<case>/<out>.bin   float64 expected outputs (+ expected/manifest.json), with an oracle
    <into>/<case>.json       harness requests: ``kernelopt-harness run FILE`` replays one case

Each frozen file records the generator it was drawn from (``drawn_from``, written by
:func:`~kernelopt_mcp.evaluation.inputs.materialize`): a file ignores the seed, so without it the
evaluator's hidden data sets would be these very bytes; with it, they (and the harness's fresh
inputs for timed launches) are drawn again from the generator with the server's hidden seed.

Replay requests are built by a :class:`~kernelopt_mcp.evaluation.session.Session` over the
frozen workload without its references (``case_request``): building one compiles (NVRTC, no GPU)
and writes files; nothing is launched here.

Frozen workloads belong to the server process that froze them: :data:`FROZEN_WORKLOADS` holds
them while a tool call is served (the server sets it per call), and the service's workload
lookup sees them first, so a run's frozen ``sgemm`` is what its benchmarks measure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from .compiler import compile_kernel, nvrtc_version
from .errors import HarnessError, KerneloptError
from .evaluation.candidate import Candidate
from .evaluation.evaluate import case_request, prepare
from .evaluation.inputs import new_input_seed
from .evaluation.oracle import OracleLimits, run_oracle
from .evaluation.protocol import request_json
from .evaluation.session import Session
from .files import write_atomic
from .launch import LaunchSpec
from .workload import Workload, load_workload, parse_spec

MAX_ORACLE_OUTPUT_BYTES = 2**30  # expected outputs of larger cases are left to the CUDA reference
MAX_FROZEN = 16  # the oldest is forgotten beyond this (each keeps its inputs' file map)
INTO_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*){0,3}$")
RESERVED_INTO = {"workload", "inputs", "expected", "input_cases.json", "data", "modules"}
MAX_REPLAY_MODULE_BYTES = 16 * 2**20  # a replay request's CUBIN (each call may write a new one)

# Holds ``nbytes`` of the workspace quota for ``what`` while the block writes them (QuotaError if they do not fit).
Reserve = Callable[[int, str], contextlib.AbstractContextManager[None]]


class FreezeError(KerneloptError, ValueError):
    """The freeze request cannot be served as asked; the message says what to change."""


class RequestsOnly:
    """Stands in for the harness where requests are only written (replay files), never sent."""

    binary: Path | None = None  # nothing to run

    def __init__(self, device: int) -> None:
        self.device = device

    def request(self, *args: Any, **kwargs: Any) -> Any:
        raise HarnessError("internal error: a frozen workload's builder writes harness requests but never runs them")


@dataclass
class FrozenWorkload:
    """A frozen workload: its files under ``directory`` and the builder of its replay requests."""

    name: str
    directory: Path
    workload: Workload
    builder: Session
    seed: int
    expected_from: str
    expected_cases: list[str]

    @property
    def workload_dir(self) -> Path:
        return self.directory / "workload" / self.name

    def close(self) -> None:
        self.builder.close()


# The workloads frozen through the server being served (name -> frozen); None outside a tool call.
FROZEN_WORKLOADS: ContextVar[dict[str, FrozenWorkload] | None] = ContextVar("kernelopt_frozen", default=None)


def frozen_workloads() -> dict[str, Path]:
    """The frozen workloads the calling server knows (name -> workload directory)."""
    frozen = FROZEN_WORKLOADS.get()
    return {name: f.workload_dir for name, f in frozen.items()} if frozen else {}


def remember(frozen: FrozenWorkload) -> None:
    """Make ``frozen`` the workload of its name (the oldest beyond MAX_FROZEN is forgotten)."""
    registry = FROZEN_WORKLOADS.get()
    if registry is None:
        raise FreezeError("internal error: no server to keep the frozen workload in")
    old = registry.pop(frozen.name, None)
    if old is not None and old is not frozen:
        old.close()
    registry[frozen.name] = frozen
    while len(registry) > MAX_FROZEN:
        registry.pop(next(iter(registry))).close()


def frozen_named(name: str) -> FrozenWorkload:
    frozen = FROZEN_WORKLOADS.get() or {}
    if name not in frozen:
        known = ", ".join(sorted(frozen)) or "none"
        raise FreezeError(f"no workload {name!r} was frozen through this server (frozen: {known}); call "
                          "freeze_workload first")
    return frozen[name]


# --- where things may be -------------------------------------------------------------------


def inside(path: Path, roots: list[Path]) -> bool:
    return any(path.is_relative_to(root) for root in roots)


def output_directory(real: Path, *, writable: list[Path], refused: list[Path]) -> Path:
    """Check a resolved output directory: under a writable root, not inside a refused one."""
    if inside(real, refused):
        raise FreezeError(
            f"{real}: inside a workload directory, the cache or the evaluations' private directory; "
            "freeze into a run directory under the workspace's runs/ (or omit `directory`)"
        )
    if not inside(real, writable):
        raise FreezeError(
            f"{real}: outside the directories this server may write a frozen workload to "
            f"({', '.join(map(str, writable))}: the workspace's runs/ and the operator's --output-root directories; "
            "a --root or a root the client shares is read-only); omit `directory` to freeze under the workspace"
        )
    if real.exists() and not real.is_dir():
        raise FreezeError(f"{real}: not a directory")
    return real


def check_oracle(real: Path, trusted: list[Path]) -> Path:
    """A NumPy oracle is Python the server runs (confined, in a worker process): only a .py file
    under a directory the server's operator named (a workload directory or --root), never one a
    client could have written."""
    if real.suffix != ".py" or not real.is_file():
        raise FreezeError(f"{real}: the oracle must be an existing .py file (a reference.py with a "
                          "reference() function)")
    if not inside(real, trusted):
        raise FreezeError(
            f"{real}: a NumPy oracle is Python the server runs (confined), so it must lie under a workload directory "
            f"or a --root directory of the server ({', '.join(map(str, trusted)) or 'none configured'}); start the "
            "server with --root DIR, or freeze without an oracle (the CUDA reference then defines correct)"
        )
    return real


def _data_files(spec: dict[str, Any]) -> list[dict[str, Any]]:
    gens = list((spec.get("inputs") or {}).values())
    gens += [g for case in spec.get("cases") or [] if isinstance(case, dict)
             for g in (case.get("inputs") or {}).values()]
    return [g for g in gens if isinstance(g, dict) and g.get("generator") == "file"]


# --- freezing --------------------------------------------------------------------------------


def freeze_workload(
    spec: dict[str, Any],
    reference_cu: str,
    initial_cu: str | None,
    directory: Path,
    *,
    oracle: Path | None,
    data_path: Callable[[str], Path],
    seed: int | None,
    open_builder: Callable[[Workload, int], Session],
) -> FrozenWorkload:
    """Write the frozen workload under ``directory``: draw the inputs, compute expected outputs.

    ``spec`` is a workload.json object; its reference and initial sources are ``reference_cu``
    and ``initial_cu`` (stored beside workload.json), its oracle ``oracle`` (checked by the
    caller). ``data_path`` resolves (and confines) each data file the spec names.
    ``open_builder(workload, seed)`` makes the session that draws the inputs and builds replay
    requests, around a :class:`RequestsOnly` harness, in ``directory``
    (:func:`kernelopt_mcp.app.freeze_workload` makes it from the settings, as for evaluations).

    Raises:
        WorkloadError, InputError, FreezeError: the spec is invalid, a data file is missing or
            changed, the oracle fails.
    """
    data = json.loads(json.dumps(spec))  # a deep copy of plain JSON
    ref = data.get("reference")
    if not isinstance(ref, dict):
        raise FreezeError('spec.reference must be an object with the reference\'s "launch"')
    ref["cuda"] = "reference.cu"
    ref["python"] = str(oracle) if oracle is not None else None
    ref["torch"] = None  # by construction: never a file of the request's run as a PyTorch problem
    if isinstance(data.get("initial"), dict):
        if initial_cu is None:
            raise FreezeError("spec.initial is set but initial_cu is missing; pass the starting kernel")
        data["initial"]["source"] = "initial.cu"
    elif initial_cu is not None:
        raise FreezeError('initial_cu was given but spec.initial is missing; add "initial": {"launch": {...}}')
    for gen in _data_files(data):
        for key in ("path", "hidden_path"):
            if gen.get(key):
                gen[key] = str(data_path(str(gen[key])))
    name = parse_spec(data, "spec").name
    seed = new_input_seed() if seed is None else seed

    wl_dir = directory / "workload" / name
    write_atomic(wl_dir / "reference.cu", reference_cu.encode())
    if initial_cu is not None:
        write_atomic(wl_dir / "initial.cu", initial_cu.encode())
    _write_json(wl_dir / "workload.json", data)
    drawn = load_workload(wl_dir)
    builder = open_builder(dataclasses.replace(drawn, reference_cu=None, oracle_path=None), seed)
    prepare(builder, time_reference=False)  # materializes inputs/<case>/<buffer>.bin and a manifest

    manifest_path = directory / "inputs" / "input_cases.json"
    manifest = json.loads(manifest_path.read_text())
    frozen_cases = []
    for case in manifest["cases"]:
        inputs = {k: {**gen, "path": str(directory / "inputs" / gen["path"])} for k, gen in case["inputs"].items()}
        frozen_cases.append({**case, "inputs": inputs})
        for gen in case["inputs"].values():
            gen["path"] = f"inputs/{gen['path']}"
    _write_json(directory / "input_cases.json", manifest)
    manifest_path.unlink()
    _write_json(wl_dir / "workload.json", {**data, "inputs": {}, "cases": frozen_cases})
    frozen_wl = load_workload(wl_dir)

    expected_cases = _expected_outputs(frozen_wl, builder, directory)
    for ci in builder.data.inputs.values():
        ci.arrays.clear()  # requests name the files; the arrays would only hold memory
    expected_from = (
        f"NumPy oracle (reference.py) on {len(expected_cases)} of {len(frozen_wl.spec.cases)} cases, in expected/"
        if frozen_wl.oracle_path is not None else
        "no NumPy oracle: expected outputs come from the CUDA reference inside kernelopt-mcp "
        "(replay/reference/<case>.json writes them with the harness alone)"
    )
    return FrozenWorkload(name, directory, frozen_wl, builder, seed, expected_from, expected_cases)


def _expected_outputs(wl: Workload, builder: Session, directory: Path) -> list[str]:
    """Raw little-endian float64 expected outputs from the oracle (readable without numpy's .npy parser)."""
    if wl.oracle_path is None:
        return []
    done: list[str] = []
    manifest: dict[str, dict[str, Any]] = {}
    for case in wl.spec.cases:
        ci = builder.inputs[case.name]
        out_bytes = sum(ci.elements(p.name) * 8 for p in wl.signature.outputs)
        if out_bytes > MAX_ORACLE_OUTPUT_BYTES:
            continue
        limits = OracleLimits.following(builder.compile_limits)
        for out, array in run_oracle(wl, case.name, ci.arrays, ci.shapes, limits=limits).items():
            values = np.ascontiguousarray(array, dtype="<f8")
            relative = Path("expected") / case.name / f"{out}.bin"
            write_atomic(directory / relative, values.tobytes())
            manifest.setdefault(case.name, {})[out] = {"path": str(relative), "dtype": "float64",
                                                       "shape": list(values.shape)}
        done.append(case.name)
    _write_json(directory / "expected" / "manifest.json", manifest)
    return done


def write_replay(
    frozen: FrozenWorkload, source: str, launch: LaunchSpec, options: list[str], into: str,
    *, reserve: Reserve | None = None,
) -> tuple[dict[str, str], str | None]:
    """Harness requests for every case under ``frozen.directory / into`` (outputs to ``into/outputs/<case>/``).

    Nothing is written before ``reserve(nbytes, what)`` (the workspace quota) has held what will be:
    the compiled module (at most MAX_REPLAY_MODULE_BYTES; a kernel's initialized ``__device__`` data
    lands in it), then the request files.

    Returns ({case: request path relative to the frozen directory}, None), or ({}, problem)
    when the candidate does not compile, its module is too large or its launch is invalid for a case.

    Raises:
        QuotaError: the writes do not fit the quota.
    """
    check_into(into)
    candidate = Candidate(source, launch, list(options), Path(into).name)
    builder = frozen.builder
    # compiled before anything is written, to know the module's size (session.build then hits the cache)
    compiled = compile_kernel(candidate.source, builder.arch, candidate.all_compile_options,
                              cache=builder.compile_cache, limits=builder.compile_limits)
    if not compiled.ok:
        return {}, compiled.summary()
    module_bytes = len(compiled.cubin or b"")
    if module_bytes > MAX_REPLAY_MODULE_BYTES:
        return {}, (
            f"the compiled module is {module_bytes / 2**20:.1f} MiB; replay requests keep modules of at most "
            f"{MAX_REPLAY_MODULE_BYTES // 2**20} MiB. Large initialized __device__ or __constant__ arrays are "
            "stored in the module: compute such tables in the kernel or take them from an input buffer"
        )
    hold = reserve or _no_quota
    requests: dict[str, bytes] = {}
    with hold(module_bytes, f"replay_requests' module for {frozen.name!r}"):
        for case in frozen.workload.spec.cases:
            out_dir = frozen.directory / into / "outputs" / case.name
            built = case_request(builder, candidate, case.name, out_dir, timing=case.kind == "performance")
            if built.request is None:
                return {}, built.problem or "the candidate cannot be built"
            requests[str(Path(into) / f"{case.name}.json")] = (
                json.dumps(request_json(built.request), indent=2) + "\n").encode()
        with hold(sum(map(len, requests.values())), f"replay_requests' files for {frozen.name!r}"):
            for relative, data in requests.items():
                write_atomic(frozen.directory / relative, data)
    return {case.name: rel for case, rel in zip(frozen.workload.spec.cases, requests, strict=True)}, None


@contextlib.contextmanager
def _no_quota(nbytes: int, what: str) -> Iterator[None]:
    yield


def check_into(into: str) -> None:
    if not INTO_RE.match(into) or ".." in into.split("/") or into.split("/")[0] in RESERVED_INTO:
        raise FreezeError(
            f"into {into!r}: a relative directory of plain names (e.g. replay or replay/reference), at most 4 "
            f"deep, not starting with {', '.join(sorted(RESERVED_INTO))}"
        )


def _write_json(path: Path, data: Any) -> None:
    write_atomic(path, (json.dumps(data, indent=2) + "\n").encode())


# --- tool results ----------------------------------------------------------------------------


class FrozenOutput(BaseModel):
    """What freeze_workload wrote, and the name to evaluate it under."""

    name: str = Field(description="the workload name validate, benchmark, ncu_profile and autotune "
                      "take (on this server)")
    directory: str = Field(description="where the files are (absolute)")
    workload_dir: str = Field(description="the frozen workload directory, relative to `directory`")
    input_cases: str = Field(description="the inputs' manifest (paths, sha256, drawn_from), relative to `directory`")
    seed: int = Field(description="the seed the recorded inputs were drawn from (evaluations redraw hidden "
                      "sets with their own)")
    cases: list[str]
    performance_cases: list[str]
    expected_from: str
    expected_cases: list[str] = Field(description="cases whose expected outputs are in expected/ (from the oracle)")
    nvrtc_version: str | None = Field(description="the NVRTC that compiles this server's kernels and replay requests")

    def text(self) -> str:
        return (
            f"froze {self.name!r} into {self.directory}: {len(self.cases)} cases ({len(self.performance_cases)} "
            f"timed), inputs drawn from seed {self.seed} ({self.input_cases}); expected outputs: {self.expected_from}. "
            f"validate/benchmark it as workload {self.name!r} on this server."
        )


def frozen_output(frozen: FrozenWorkload) -> FrozenOutput:
    spec = frozen.workload.spec
    try:
        nvrtc: str | None = nvrtc_version()
    except Exception:  # NVRTC missing: compile says so; the record keeps a null
        nvrtc = None
    return FrozenOutput(
        name=frozen.name, directory=str(frozen.directory), workload_dir=f"workload/{frozen.name}",
        input_cases="input_cases.json", seed=frozen.seed, cases=[c.name for c in spec.cases],
        performance_cases=[c.name for c in spec.performance_cases], expected_from=frozen.expected_from,
        expected_cases=frozen.expected_cases, nvrtc_version=nvrtc,
    )


class ReplayOutput(BaseModel):
    """The harness requests replay_requests wrote (or why it could not)."""

    status: Literal["ok", "error"]
    workload: str
    directory: str = Field(description="the frozen workload's directory (absolute); request paths are relative to it")
    requests: dict[str, str] = Field(default_factory=dict, description="case -> request file")
    message: str = ""

    def text(self) -> str:
        if self.status != "ok":
            return f"no replay requests for {self.workload!r}: {self.message}"
        return (
            f"{len(self.requests)} replay request(s) under {self.directory}: "
            + ", ".join(f"{case}: {path}" for case, path in self.requests.items())
            + " (run one with `kernelopt-harness run FILE`)"
        )


__all__ = [
    "FROZEN_WORKLOADS",
    "FreezeError",
    "FrozenOutput",
    "FrozenWorkload",
    "ReplayOutput",
    "freeze_workload",
    "frozen_named",
    "frozen_output",
    "frozen_workloads",
    "remember",
    "write_replay",
]
