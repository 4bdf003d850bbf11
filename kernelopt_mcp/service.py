"""The MCP server's engine room, with no MCP in it: configuration, path confinement, the GPU
queue, prepared evaluators, created workloads, and the compact results the tools return.

``server.py`` maps this onto MCP tools; tests can drive it directly. The library underneath is
synchronous; here it runs in worker threads (:func:`anyio.to_thread.run_sync`) so the event
loop keeps answering while a kernel runs:

- One GPU job at a time per device, first come first served; a job learns its queue position.
  Compiles do not queue: they need no GPU and run concurrently.
- One persistent harness process per device. Cancelling a call kills it (and keeps it from
  restarting until the job has unwound), so nothing is left running on the GPU.
- One prepared :class:`Evaluator` per workload (a small LRU), drawn from a seed fixed for the
  server's lifetime and never returned to the model, which therefore cannot choose inputs.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import numpy as np
from pydantic import BaseModel, Field

from .compiler import MAX_SOURCE_BYTES, CompileCache, CompileResult, Diagnostic, Resources, compile_kernel
from .config import Settings, bundled_workloads_dir, list_workloads
from .errors import KerneloptError
from .evaluate import Candidate, EvaluateOptions, EvaluationResult, Evaluator
from .gpu import DeviceInfo, device_info
from .harness import HarnessProcess, find_harness
from .inputs import MAX_BUFFER_BYTES, fresh_seed
from .launch import LaunchSpec
from .workload import DataFile, Workload, WorkloadSpec, case_shape, load_workload, parse_spec

T = TypeVar("T")
Notify = Callable[[str], Awaitable[None]]

MAX_WARMUP = 100
MAX_ITERATIONS = 1000
MAX_CREATED_WORKLOAD_BYTES = 4 * 2**30
DEFAULT_PREPARED_WORKLOADS = 3
HEARTBEAT_S = 10.0  # progress at least this often while a job waits or runs
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class RequestError(ValueError):
    """The request cannot be served as asked; the message says what to change."""


class JobCancelled(KerneloptError):
    """The tool call was cancelled while its GPU job ran."""


# --- what the tools return: compact, JSON-safe (no NaN/Inf), each with a text rendering -------

MAX_DIAGNOSTICS = 20
MAX_MESSAGE_CHARS = 600
Num = float | str  # a number, or "nan" / "inf" / "-inf" (JSON has no non-finite numbers)


def _num(x: float | None) -> Num | None:
    if x is None or math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


def _g(x: Num | None, unit: str = "") -> str:
    return f"{x:.4g}{unit}" if isinstance(x, float | int) else str(x)


class KernelResources(BaseModel):
    registers: int | None = None
    static_shared_bytes: int | None = None
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    stack_frame_bytes: int | None = None
    param_bytes: list[int] = Field(default_factory=list, description="size of each parameter")


class CompileOutput(BaseModel):
    status: str = Field(description="ok | error")
    arch: str
    arch_from: str = Field(description="why this arch: argument, server setting, this GPU, default")
    nvrtc_version: str
    duration_ms: float
    cache_hit: bool
    source_hash: str = Field(description="first 16 hex digits of the source's SHA-256")
    options: list[str]
    kernels: dict[str, KernelResources] = Field(default_factory=dict, description="per __global__ function")
    diagnostics: list[Diagnostic] = Field(default_factory=list, description="errors and warnings, with 1-based lines")
    diagnostics_omitted: int = 0
    log: str = Field("", description="the compiler log, on errors only (truncated)")
    log_lines_omitted: int = 0

    def text(self) -> str:
        head = f"compile {self.status} for {self.arch} ({self.arch_from}; NVRTC {self.nvrtc_version}, {self.duration_ms:.0f} ms{', cached' if self.cache_hit else ''})"
        lines = [head]
        for d in self.diagnostics:
            lines.append(f"  {'line ' + str(d.line) if d.line else '-'}: {d.severity}: {d.message}")
        if self.diagnostics_omitted:
            lines.append(f"  ... {self.diagnostics_omitted} more diagnostics not shown")
        for name, r in self.kernels.items():
            lines.append(
                f"  kernel {name}: {r.registers} registers, {r.static_shared_bytes} B static shared, "
                f"{r.spill_store_bytes} B spill stores, {r.spill_load_bytes} B spill loads, {r.stack_frame_bytes} B stack"
            )
        if self.status != "ok" and not self.diagnostics and self.log:
            lines.append(_clip(self.log, 1500))
        return "\n".join(lines)


def compile_output(result: CompileResult, arch_from: str) -> CompileOutput:
    kernels = {
        name: KernelResources(
            **{k: getattr(r, k) for k in ("registers", "spill_store_bytes", "spill_load_bytes", "stack_frame_bytes")},
            static_shared_bytes=r.shared_bytes, param_bytes=[p.size_bytes for p in params],
        )
        for name, params in result.entries.items()
        for r in [result.resources.get(name) or Resources()]
    }
    return CompileOutput(
        status=result.status.value, arch=result.arch, arch_from=arch_from, nvrtc_version=result.nvrtc_version,
        duration_ms=result.duration_ms, cache_hit=result.cache_hit, source_hash=result.source_hash[:16],
        options=result.options, kernels=kernels, diagnostics=result.diagnostics[:MAX_DIAGNOSTICS],
        diagnostics_omitted=max(0, len(result.diagnostics) - MAX_DIAGNOSTICS),
        log="" if result.ok else result.log, log_lines_omitted=0 if result.ok else result.log_lines_omitted,
    )


class Mismatch(BaseModel):
    index: list[int]
    expected: Num
    actual: Num


class OutputCheck(BaseModel):
    name: str
    passed: bool
    elements: int
    mismatches: int = Field(description="elements outside tolerance, NaN/Inf included")
    nonfinite: int = Field(description="NaN/Inf elements (outputs are NaN-poisoned: NaN often means unwritten)")
    max_abs_error: Num
    max_rel_error: Num
    rel_l2_error: Num
    rtol: float
    atol: float = Field(description="relative to the RMS of the expected output")
    first_mismatches: list[Mismatch] = Field(default_factory=list)
    mismatches_not_listed: int = 0


class Timing(BaseModel):
    median_ms: float
    iqr_ms: float
    min_ms: float
    max_ms: float
    cv: float = Field(description="stdev / mean")
    noisy: bool = Field(description="IQR above 10% of the median")
    warmup: int
    iterations: int


class CaseOutput(BaseModel):
    name: str
    kind: str
    status: str
    message: str = ""
    launch: dict[str, Any] | None = Field(None, description="the resolved grid, block and dynamic shared bytes")
    outputs: list[OutputCheck] = Field(default_factory=list)
    cuda_error: str | None = None
    occupancy_blocks_per_sm: int | None = None
    timing: Timing | None = None
    reference_median_ms: float | None = None
    speedup: float | None = Field(None, description="reference median / this median")
    flops_per_s: float | None = None
    bytes_per_s: float | None = None


class EvaluationOutput(BaseModel):
    status: str = Field(
        description="ok | compile_error | invalid_launch | runtime_error | timeout | mismatch | "
        "out_of_bounds_write | input_modified (the most serious over the cases)"
    )
    message: str
    mode: str = Field(description="validate | benchmark")
    workload: str
    device: str | None = None
    arch: str
    source_hash: str | None = None
    cases_passed: int = 0
    cases_total: int = 0
    score_ms: float | None = Field(None, description="geometric mean of the performance cases' median latencies")
    reference_score_ms: float | None = None
    speedup: float | None = Field(None, description="reference score / this score (>1 is faster)")
    cases: list[CaseOutput] = Field(default_factory=list)
    compile: CompileOutput | None = None
    expected_from: str = ""
    notes: list[str] = Field(default_factory=list)

    def text(self) -> str:
        head = f"{self.mode} {self.workload} on {self.device or '?'} ({self.arch}): {self.status}"
        if self.cases:
            head += f", {self.cases_passed}/{self.cases_total} cases pass"
        if not self.cases or (self.status == "ok" and not self.speedup):
            head += f": {_clip(self.message, 300)}"
        lines = [head]
        if self.speedup:
            lines.append(f"score {self.score_ms:.4g} ms; CUDA reference {self.reference_score_ms:.4g} ms; speedup {self.speedup:.3g}x")
        for c in self.cases:
            lines.append(f"  {c.name} [{c.kind}] {c.status}{_case_detail(c)}")
        if self.compile is not None:
            lines.extend(line for line in self.compile.text().splitlines()[1:])
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


def _case_detail(c: CaseOutput) -> str:
    if c.status not in ("ok", "mismatch"):
        return f": {_clip(c.message, 300)}" if c.message else ""
    parts = []
    for o in c.outputs:
        if o.passed:
            parts.append(f"{o.name} max rel err {_g(o.max_rel_error)}")
            continue
        text = f"{o.name}: {o.mismatches}/{o.elements} elements off"
        if o.nonfinite:
            text += f" ({o.nonfinite} NaN/Inf: NaN is what unwritten elements hold)"
        if o.first_mismatches:
            m = o.first_mismatches[0]
            text += f", first at {m.index}: expected {_g(m.expected)}, got {_g(m.actual)}"
        parts.append(text)
    if c.timing:
        t = c.timing
        parts.append(f"median {t.median_ms:.4g} ms (IQR {t.iqr_ms:.2g}{', noisy' if t.noisy else ''})")
        if c.speedup:
            parts.append(f"ref {c.reference_median_ms:.4g} ms, {c.speedup:.3g}x")
        if c.bytes_per_s:
            parts.append(f"{c.bytes_per_s / 1e9:.0f} GB/s")
        if c.flops_per_s:
            parts.append(f"{c.flops_per_s / 1e12:.2f} TFLOP/s")
    return (": " + "; ".join(parts)) if parts else ""


def evaluation_output(result: EvaluationResult, mode: str) -> EvaluationOutput:
    cases = []
    for c in result.cases:
        checks = [
            OutputCheck(
                name=o.name, passed=o.passed, elements=o.elements, mismatches=o.mismatches, nonfinite=o.nonfinite,
                max_abs_error=_num(o.max_abs_error), max_rel_error=_num(o.max_rel_error),
                rel_l2_error=_num(o.rel_l2_error), rtol=o.rtol, atol=o.atol,
                first_mismatches=[
                    Mismatch(index=m.index, expected=_num(m.expected), actual=_num(m.actual))
                    for m in o.first_mismatches
                ],
                mismatches_not_listed=o.mismatches - len(o.first_mismatches),
            )
            for o in c.outputs
        ]
        t = c.timing
        cases.append(CaseOutput(
            name=c.name, kind=c.kind, status=c.status.value, message=_clip(c.message), launch=c.launch,
            outputs=checks, cuda_error=(c.error.cuda_error or c.error.message) if c.error else None,
            occupancy_blocks_per_sm=c.occupancy_blocks_per_sm,
            timing=Timing(
                median_ms=t.median_ms, iqr_ms=t.iqr_ms, min_ms=t.min_ms, max_ms=t.max_ms, cv=t.cv,
                noisy=t.noisy, warmup=t.warmup, iterations=t.iterations,
            ) if t else None,
            reference_median_ms=c.reference_median_ms, speedup=c.speedup,
            flops_per_s=c.flops_per_s, bytes_per_s=c.bytes_per_s,
        ))
    return EvaluationOutput(
        status=result.status.value, message=_clip(result.message), mode=mode, workload=result.workload,
        device=result.device, arch=result.arch, source_hash=(result.source_hash or "")[:16] or None,
        cases_passed=sum(c.status == "ok" for c in cases), cases_total=len(cases),
        score_ms=result.score_ms, reference_score_ms=result.reference_score_ms, speedup=result.speedup,
        cases=cases, compile=compile_output(result.compile, "the device") if result.compile else None,
        expected_from=result.expected_from, notes=result.notes,
    )


def compile_error_output(compiled: CompileResult, workload: str, mode: str, device: str) -> EvaluationOutput:
    return EvaluationOutput(
        status="compile_error", message=compiled.summary(), mode=mode, workload=workload, device=device,
        arch=compiled.arch, source_hash=compiled.source_hash[:16], compile=compile_output(compiled, "the device"),
    )


class CreatedWorkload(BaseModel):
    name: str
    path: str
    uri: str = Field(description="read it back as an MCP resource")
    replaced: bool
    c_prototype: str
    correctness_cases: int
    performance_cases: int
    total_buffer_bytes: int = Field(description="all buffers of all cases")
    notes: list[str] = Field(default_factory=list)

    def text(self) -> str:
        return (
            f"{'replaced' if self.replaced else 'created'} workload {self.name} ({self.correctness_cases} correctness + "
            f"{self.performance_cases} performance cases, {self.total_buffer_bytes / 2**20:.1f} MiB of buffers) at "
            f"{self.path}\nkernel prototype: {self.c_prototype}\n" + "\n".join(f"note: {n}" for n in self.notes)
        )


@dataclass(frozen=True)
class ServerConfig:
    """Everything the server needs, built once at the entry point (flags > environment > defaults)."""

    settings: Settings = field(default_factory=Settings)
    workspace: Path = field(default_factory=lambda: Path.home() / ".kernelopt")
    extra_roots: tuple[Path, ...] = ()
    max_prepared: int = DEFAULT_PREPARED_WORKLOADS

    @property
    def created_dir(self) -> Path:
        return self.workspace / "workloads"

    @property
    def runs_dir(self) -> Path:
        return self.workspace / "runs"

    @property
    def workload_settings(self) -> Settings:
        """The library's settings with the created workloads searched last (never shadowing)."""
        return replace(self.settings, workload_dirs=(*self.settings.workload_dirs, self.created_dir))

    def roots(self) -> list[Path]:
        """Directories that ``path`` arguments may name files under (symlinks resolved)."""
        roots = [self.workspace, *self.settings.workload_dirs, *self.extra_roots]
        return list(dict.fromkeys(r.expanduser().resolve() for r in roots))


class _CancellableHarness(HarnessProcess):
    """A harness process that a cancelled call can kill and keep from restarting.

    Works around a missing library hook (see the server's report): ``HarnessProcess``
    restarts itself on the next request, so an abandoned job could start a fresh process
    after the kill. ``_start`` is guarded by a flag that :meth:`cancel` sets under a lock.
    """

    def __init__(self, binary: Path, device: int) -> None:
        super().__init__(binary, device)
        self._guard = threading.Lock()
        self.cancelled = threading.Event()

    def _start(self) -> Any:
        with self._guard:
            if self.cancelled.is_set():
                raise JobCancelled("the call was cancelled; the harness was stopped")
            return super()._start()

    def cancel(self) -> None:
        with self._guard:
            self.cancelled.set()
        self.kill()

    def rearm(self) -> None:
        self.cancelled.clear()


class GpuQueue:
    """One job at a time, first come first served; a waiting job hears how many are ahead."""

    def __init__(self) -> None:
        self._lock = anyio.Lock()
        self._queue: list[object] = []

    @asynccontextmanager
    async def turn(self, notify: Notify) -> AsyncIterator[None]:
        ticket = object()
        self._queue.append(ticket)
        acquired = False

        async def report() -> None:
            while True:
                ahead = self._queue.index(ticket) + 1  # the running job, then those queued earlier
                await notify(f"queued for the GPU: {ahead} job(s) ahead (one GPU job runs at a time)")
                await anyio.sleep(HEARTBEAT_S)

        try:
            async with anyio.create_task_group() as tg:
                if self._lock.locked():
                    tg.start_soon(report)
                await self._lock.acquire()
                acquired = True
                tg.cancel_scope.cancel()
        except BaseException:
            if acquired:  # cancelled (or the report failed) right after the lock was taken
                self._lock.release()
            raise
        finally:
            self._queue.remove(ticket)
        try:
            yield
        finally:
            self._lock.release()


@dataclass
class _Device:
    """A device's queue, harness and prepared evaluators (touched only while holding the queue)."""

    ordinal: int
    queue: GpuQueue = field(default_factory=GpuQueue)
    harness: _CancellableHarness | None = None
    evaluators: OrderedDict[str, Evaluator] = field(default_factory=OrderedDict)
    prepared: set[str] = field(default_factory=set)


class KerneloptService:
    """The tools' implementations, independent of MCP."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.settings = config.settings
        cache_dir = config.settings.cache_dir or config.workspace / "cache"
        self.compile_cache = CompileCache(cache_dir / "compile")
        self._devices: dict[int, _Device] = {}
        self._seeds: dict[str, int] = {}
        self._arch_probe: tuple[str, str] | None = None
        # Evaluators keep inputs (and the seed) here: outside every root, and refused by confine().
        self._private = Path(tempfile.mkdtemp(prefix="kernelopt-mcp-")).resolve()

    # --- paths and sources --------------------------------------------------------------

    def confine(self, raw: str) -> Path:
        """Resolve ``raw`` (absolute, or relative to the workspace) inside a configured root."""
        if "\0" in raw or not raw.strip():
            raise RequestError("path is empty or contains a NUL byte")
        path = Path(raw).expanduser()
        if not path.is_absolute():
            path = self.config.workspace / path
        real = path.resolve()
        if real.is_relative_to(self._private):
            raise RequestError(f"{raw}: inside the evaluations' private directory (their inputs are hidden)")
        roots = self.config.roots()
        if any(real.is_relative_to(root) for root in roots):
            return real
        raise RequestError(
            f"{raw}: outside the directories this server may read ({', '.join(map(str, roots))}; "
            "symlinks are resolved). Pass the kernel inline as `source`, put the file under the "
            f"workspace {self.config.workspace}, or start the server with --root DIR"
        )

    def read_source(self, source: str | None, path: str | None) -> tuple[str, str]:
        """The kernel text and a file name for diagnostics, from exactly one of the two."""
        if (source is None) == (path is None):
            raise RequestError(
                "give exactly one of `source` (the CUDA C++ text) or `path` (a .cu file under the "
                "workspace or a workload directory)"
            )
        if source is not None:
            if len(source.encode()) > MAX_SOURCE_BYTES:
                raise RequestError(f"source is {len(source.encode())} bytes; the limit is {MAX_SOURCE_BYTES}")
            return source, "kernel.cu"
        assert path is not None
        real = self.confine(path)
        if not real.is_file():
            raise RequestError(f"{path}: no such file (resolved to {real})")
        size = real.stat().st_size
        if size > MAX_SOURCE_BYTES:
            raise RequestError(f"{path}: {size} bytes; the source limit is {MAX_SOURCE_BYTES}")
        try:
            return real.read_text(encoding="utf-8"), real.name
        except UnicodeDecodeError:
            raise RequestError(f"{path}: not UTF-8 text; pass CUDA C++ source") from None

    # --- workloads ----------------------------------------------------------------------

    def workloads(self) -> dict[str, Path]:
        return list_workloads(self.config.workload_settings)

    def origin(self, directory: Path) -> str:
        parent = directory.resolve().parent
        if parent == self.config.created_dir.resolve():
            return "created"
        if parent == bundled_workloads_dir().resolve():
            return "bundled"
        return "configured"

    def load(self, name: str) -> Workload:
        """A workload by name (never by path: names are identifiers)."""
        known = self.workloads()
        if not NAME_RE.match(name) or name not in known:
            raise RequestError(
                f"no workload {name!r}; known: {', '.join(sorted(known)) or 'none'} "
                "(list_workloads describes them; create_workload adds one)"
            )
        return load_workload(known[name])

    def create_workload(
        self, spec: dict[str, Any], reference_cu: str | None, initial_cu: str | None, overwrite: bool, arch: str
    ) -> CreatedWorkload:
        """Validate and store a workload in the workspace (see the create_workload tool)."""
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
        ref["python"] = None
        ref["cuda"] = "reference.cu"
        if isinstance(data.get("initial"), dict):
            data["initial"]["source"] = "initial.cu"
        parsed = parse_spec(data, "spec")
        name = parsed.name
        target = self.config.created_dir / name
        known = self.workloads()
        if name in known and self.origin(known[name]) != "created":
            raise RequestError(f"{name!r} is a {self.origin(known[name])} workload; choose another name")
        exists = (target / "workload.json").is_file()
        if exists and not overwrite:
            raise RequestError(f"workload {name!r} already exists in the workspace; pass overwrite=true to replace it")
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
        total = _check_created_spec(parsed)
        for label, text in (("reference_cu", reference_cu), ("initial_cu", initial_cu)):
            if text is not None:
                self._check_compiles(label, text, parsed, arch)

        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=_mkdir(self.config.created_dir)))
        try:
            (staging / "workload.json").write_text(json.dumps(parsed.model_dump(mode="json"), indent=2) + "\n")
            (staging / "reference.cu").write_text(reference_cu)
            if initial_cu is not None:
                (staging / "initial.cu").write_text(initial_cu)
            load_workload(staging)
            if target.exists():
                old = target.with_name(f".{name}-old-{os.getpid()}")
                os.replace(target, old)
                shutil.rmtree(old, ignore_errors=True)
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self._forget(name)
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

    def _check_compiles(self, label: str, source: str, spec: WorkloadSpec, arch: str) -> None:
        result = compile_kernel(source, arch, [], cache=self.compile_cache)
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

    # --- devices ------------------------------------------------------------------------

    def _device(self) -> _Device:
        ordinal = self.settings.device
        if ordinal not in self._devices:
            self._devices[ordinal] = _Device(ordinal)
        return self._devices[ordinal]

    async def device_info(self) -> DeviceInfo:
        """The configured device's properties (raises DeviceUnavailable, ToolchainNotFound)."""

        def probe() -> DeviceInfo:
            return device_info(find_harness(self.settings.harness), self.settings.device)

        return await anyio.to_thread.run_sync(probe)

    async def target_arch(self, arch: str | None) -> tuple[str, str]:
        """(arch, where it came from): the argument, the server setting, the GPU, or sm_90."""
        if arch:
            return arch, "argument"
        if self.settings.arch:
            return self.settings.arch, "server setting"
        if self._arch_probe is None:
            try:
                info = await self.device_info()
                self._arch_probe = (info.arch, f"this server's GPU ({info.name})")
            except KerneloptError:
                self._arch_probe = ("sm_90", "default, no GPU found; pass arch to target another GPU")
        return self._arch_probe

    # --- tools ----------------------------------------------------------------------------

    async def compile(
        self, source: str | None, path: str | None, arch: str | None, options: list[str] | None
    ) -> CompileOutput:
        text, filename = self.read_source(source, path)
        target, where = await self.target_arch(arch)
        result = await anyio.to_thread.run_sync(
            partial(compile_kernel, text, target, options or [], filename=filename, cache=self.compile_cache)
        )
        return compile_output(result, where)

    async def evaluate(
        self,
        workload: str,
        source: str | None,
        path: str | None,
        launch: LaunchSpec,
        compile_options: list[str] | None,
        *,
        benchmark: bool,
        warmup: int | None = None,
        iterations: int | None = None,
        notify: Notify,
    ) -> EvaluationOutput:
        """Validate (and, if ``benchmark``, time) a candidate; see the validate/benchmark tools."""
        text, _ = self.read_source(source, path)
        wl = self.load(workload)
        info = await self.device_info()
        arch = self.settings.arch or info.arch
        mode = "benchmark" if benchmark else "validate"
        options = list(compile_options or [])
        # Compile before queueing: an error comes back at once, and the job finds it cached.
        compiled = await anyio.to_thread.run_sync(
            partial(compile_kernel, text, arch, options, cache=self.compile_cache)
        )
        if not compiled.ok:
            return compile_error_output(compiled, wl.name, mode, info.name)
        candidate = Candidate(text, launch, options, "candidate")
        timing = EvaluateOptions(
            warmup=self.settings.warmup if warmup is None else warmup,
            iterations=self.settings.iterations if iterations is None else iterations,
            flush_l2=self.settings.flush_l2, timeout_s=self.settings.timeout_s,
        )
        job = partial(self._evaluate_job, wl, info, candidate, benchmark, timing)
        result = await self.gpu_job(job, notify)
        return evaluation_output(result, mode)

    def _evaluate_job(
        self, wl: Workload, info: DeviceInfo, candidate: Candidate, benchmark: bool,
        timing: EvaluateOptions, dev: _Device, progress: Callable[[str, int, int], None],
    ) -> EvaluationResult:
        ev = dev.evaluators.get(wl.name)
        if ev is None:
            assert dev.harness is not None
            ev = Evaluator(
                wl, dev.harness, info, seed=self._seeds.setdefault(wl.name, fresh_seed()),
                workdir=Path(tempfile.mkdtemp(prefix=f"{wl.name}-", dir=self._private)),
                arch=self.settings.arch, compile_cache=self.compile_cache,
                options=EvaluateOptions(
                    warmup=self.settings.warmup, iterations=self.settings.iterations,
                    flush_l2=self.settings.flush_l2, timeout_s=self.settings.timeout_s,
                ),
            )
            dev.evaluators[wl.name] = ev
            while len(dev.evaluators) > self.config.max_prepared:
                name, evicted = dev.evaluators.popitem(last=False)
                dev.prepared.discard(name)
                _discard(evicted)
        dev.evaluators.move_to_end(wl.name)
        ev.progress = progress
        if wl.name not in dev.prepared:  # say why the first call on a workload takes longer
            progress(f"preparing {wl.name}: inputs, expected outputs, timing the CUDA reference (once per server session)", 0, 1)
            try:
                ev.prepare()
            except BaseException:
                dev.evaluators.pop(wl.name, None)
                _discard(ev)
                raise
            dev.prepared.add(wl.name)
        ev.options = timing
        return ev.evaluate(candidate, benchmark=benchmark)

    async def gpu_job(self, fn: Callable[[_Device, Callable[[str, int, int], None]], T], notify: Notify) -> T:
        """Run ``fn(device, progress)`` in a worker thread, alone on the device.

        Progress from the thread becomes ``notify`` calls. If the caller is cancelled, the
        harness is killed at once and kept from restarting, the thread unwinds, and only then
        is the device free for the next job.
        """
        dev = self._device()
        async with dev.queue.turn(notify):
            if dev.harness is None:
                dev.harness = _CancellableHarness(find_harness(self.settings.harness), dev.ordinal)
            harness = dev.harness
            harness.rearm()
            send, receive = anyio.create_memory_object_stream[str](math.inf)
            finished = False

            def progress(message: str, done: int, total: int) -> None:
                if harness.cancelled.is_set():
                    raise JobCancelled("the call was cancelled")
                try:
                    anyio.from_thread.run_sync(send.send_nowait, message)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError, RuntimeError):
                    pass

            last = ["running on the GPU"]

            async def forward() -> None:
                async with receive:
                    async for message in receive:
                        last[0] = message
                        await notify(message)

            async def heartbeat() -> None:  # a long launch sends no progress; clients may time out
                start = anyio.current_time()
                while True:
                    await anyio.sleep(HEARTBEAT_S)
                    await notify(f"{last[0]} (still running, {anyio.current_time() - start:.0f} s)")

            async def kill_on_cancel() -> None:
                try:
                    await anyio.sleep_forever()
                finally:
                    if not finished:
                        harness.cancel()

            outcome: tuple[bool, Any] = (False, None)
            async with anyio.create_task_group() as tg:
                tg.start_soon(forward)
                tg.start_soon(kill_on_cancel)
                tg.start_soon(heartbeat)
                await notify(last[0])
                try:
                    outcome = (True, await anyio.to_thread.run_sync(partial(fn, dev, progress)))
                except Exception as exc:  # re-raised below, outside the task group
                    outcome = (False, exc)
                finally:
                    finished = True
                    send.close()
                    tg.cancel_scope.cancel()
            await anyio.lowlevel.checkpoint_if_cancelled()
            ok, value = outcome
            if not ok:
                raise value
            return value

    def _forget(self, name: str) -> None:
        for dev in self._devices.values():
            dev.prepared.discard(name)
            ev = dev.evaluators.pop(name, None)
            if ev is not None:
                _discard(ev)
        self._seeds.pop(name, None)

    def close(self) -> None:
        """Stop every harness and remove the evaluators' temporary files."""
        for dev in self._devices.values():
            for ev in dev.evaluators.values():
                ev.close()
            dev.evaluators.clear()
            dev.prepared.clear()
            if dev.harness is not None:
                dev.harness.close()
        shutil.rmtree(self._private, ignore_errors=True)


def _discard(ev: Evaluator) -> None:
    ev.close()
    shutil.rmtree(ev.workdir, ignore_errors=True)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _read_optional(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


def _check_created_spec(spec: WorkloadSpec) -> int:
    """Refuse data files and oversized workloads; return the bytes of all buffers of all cases."""
    gens = [("inputs." + k, g) for k, g in spec.inputs.items()]
    gens += [(f"cases.{c.name}.inputs.{k}", g) for c in spec.cases for k, g in c.inputs.items()]
    for where, gen in gens:
        if isinstance(gen, DataFile):
            raise RequestError(
                f"spec.{where}: data files cannot be named through this server (paths would reach "
                "outside the workspace); use a generator: uniform, normal, randint, arange or constant"
            )
    total = 0
    for case in spec.cases:
        for p in spec.signature.buffers:
            size = int(np.prod(case_shape(p, case.scalars), dtype=np.int64)) * p.dtype.itemsize
            if size > MAX_BUFFER_BYTES:
                raise RequestError(
                    f"case {case.name!r}: buffer {p.name!r} would be {size} bytes; the limit is {MAX_BUFFER_BYTES}"
                )
            total += size
    if total > MAX_CREATED_WORKLOAD_BYTES:
        raise RequestError(
            f"the cases' buffers add up to {total / 2**30:.2f} GiB; a created workload may use at most "
            f"{MAX_CREATED_WORKLOAD_BYTES / 2**30:.0f} GiB over all cases (inputs are kept on disk and "
            "expected outputs in memory); use fewer or smaller performance cases"
        )
    return total
