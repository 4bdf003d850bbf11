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

import math
import re
import shutil
import tempfile
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from .evaluation.calibrate import peaks_for
from .compile_pool import set_default_limits
from .compiler import MAX_SOURCE_BYTES, CompileCache, compile_kernel
from .config import Settings, bundled_workloads_dir, list_workloads
from .docs import DocsSearchResult, search_docs
from .errors import HarnessCancelled, KerneloptError, TunableError
from .evaluation.evaluate import Candidate, EvaluateOptions, EvaluationResult, Evaluator
from .freeze import frozen_workloads
from .gpu import DeviceInfo, device_info
from .evaluation.harness import HarnessProcess, find_harness
from .evaluation.inputs import fresh_seed
from .launch import LaunchSpec
from .ncu_report import ProfileSummary
from .profiler import ProfileOptions, find_ncu, profile_case
from .results import (
    CompileOutput,
    CreatedWorkload,
    EvaluationOutput,
    compile_error_output,
    compile_output,
    evaluation_output,
)
from .sanitizer import SanitizerReport, find_sanitizer, sanitize_candidate
from .tune import Tunable, load_tunable, parse_tunable, workload_tunable_path
from .tune.output import AutotuneOutput
from .workload import (
    Workload,
    load_workload,
    read_json,
    read_regular_bytes,
)
from .workspace import RequestError, create_workload

T = TypeVar("T")
Notify = Callable[[str], Awaitable[None]]

MAX_WARMUP = 100
MAX_ITERATIONS = 1000
MAX_TUNE_EVALS = 1000
MAX_TUNE_SECONDS = 4 * 3600.0
DEFAULT_PREPARED_WORKLOADS = 3
DEFAULT_SESSION_IDLE_TIMEOUT_S = 30 * 60.0  # an HTTP session with no request in flight this long is closed
DEFAULT_MAX_SESSIONS = 1000  # open HTTP sessions (the SDK's 10 000 would hold ~370 MiB)
HEARTBEAT_S = 10.0  # progress at least this often while a job waits or runs
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SOURCE_SUFFIXES = (".cu", ".cuh")  # what a `path` argument may name


@dataclass(frozen=True)
class ServerConfig:
    """Everything the server needs, built once at the entry point (flags > environment > defaults)."""

    settings: Settings = field(default_factory=Settings)
    workspace: Path = field(default_factory=lambda: Path.home() / ".kernelopt")
    extra_roots: tuple[Path, ...] = ()
    max_prepared: int = DEFAULT_PREPARED_WORKLOADS
    session_idle_timeout_s: float = DEFAULT_SESSION_IDLE_TIMEOUT_S  # streamable HTTP only
    max_sessions: int = DEFAULT_MAX_SESSIONS  # streamable HTTP only

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
    harness: HarnessProcess | None = None
    evaluators: OrderedDict[str, Evaluator] = field(default_factory=OrderedDict)
    prepared: set[str] = field(default_factory=set)


# Directories the connected MCP client shares (its roots), for the request being served: server.py
# sets them per tool call; confine() accepts paths under them as under --root directories.
CLIENT_ROOTS: ContextVar[tuple[Path, ...]] = ContextVar("kernelopt_client_roots", default=())


class KerneloptService:
    """The tools' implementations, independent of MCP."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.settings = config.settings
        set_default_limits(config.settings.compile_limits())  # compiles here and in the evaluators
        # the one cache location (Settings.from_env: KERNELOPT_CACHE, else the XDG cache directory);
        # settings built without it (a library caller, tests) keep a cache in the workspace
        cache_dir = config.settings.cache_dir or config.workspace / "cache"
        self.compile_cache = CompileCache(cache_dir / "compile", max_bytes=config.settings.compile_cache_bytes())
        self.docs_settings = replace(config.settings, cache_dir=cache_dir)
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
        try:
            real = path.resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop, a name too long
            raise RequestError(f"{raw}: cannot resolve the path ({exc})") from None
        if real.is_relative_to(self._private):
            raise RequestError(f"{raw}: inside the evaluations' private directory (their inputs are hidden)")
        roots = list(dict.fromkeys([*self.config.roots(), *CLIENT_ROOTS.get()]))
        if any(real.is_relative_to(root) for root in roots):
            return real
        raise RequestError(
            f"{raw}: outside the directories this server may read ({', '.join(map(str, roots))}; "
            "symlinks are resolved). Pass the kernel inline as `source`, put the file under the "
            f"workspace {self.config.workspace}, or start the server with --root DIR"
        )

    async def source_text(self, source: str | None, path: str | None) -> tuple[str, str]:
        """:meth:`read_source` off the event loop (a file read must never stall other calls)."""
        if path is None:
            return self.read_source(source, path)
        return await anyio.to_thread.run_sync(self.read_source, source, path)

    def read_source(self, source: str | None, path: str | None) -> tuple[str, str]:
        """The kernel text and a file name for diagnostics, from exactly one of the two.

        A ``path`` must name a regular ``.cu``/``.cuh`` file under a root, of at most
        MAX_SOURCE_BYTES: never a FIFO or device (opened non-blocking, checked on the open
        descriptor) and never another kind of file (the workspace also holds caches and run
        records, whose text a compile log would quote). Blocking: call it in a worker thread.
        """
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
        if real.suffix not in SOURCE_SUFFIXES:
            raise RequestError(
                f"{path}: not a kernel source (resolved to {real}); `path` names a .cu or .cuh file"
            )
        try:
            data = read_regular_bytes(real, MAX_SOURCE_BYTES)
        except FileNotFoundError:
            raise RequestError(f"{path}: no such file (resolved to {real})") from None
        except OSError as exc:  # not a regular file, too large, unreadable, gone since it was resolved
            raise RequestError(
                f"{path}: cannot read ({exc.strerror or exc}); pass a regular .cu file of at most "
                f"{MAX_SOURCE_BYTES} bytes"
            ) from None
        try:
            return data.decode("utf-8"), real.name
        except UnicodeDecodeError:
            raise RequestError(f"{path}: not UTF-8 text; pass CUDA C++ source") from None

    # --- workloads ----------------------------------------------------------------------

    def workloads(self) -> dict[str, Path]:
        """Every workload by name; those frozen through the server (freeze_workload) win."""
        return {**list_workloads(self.config.workload_settings), **frozen_workloads()}

    def origin(self, directory: Path) -> str:
        if directory.resolve() in {p.resolve() for p in frozen_workloads().values()}:
            return "frozen"
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
        created = create_workload(self, spec, reference_cu, initial_cu, overwrite, arch)
        self._forget(created.name)
        return created

    def create_torch_workload(
        self, name: str | None, problem: str, initial_cu: str | None, initial_launch: dict[str, Any] | None, overwrite: bool
    ) -> CreatedWorkload:
        """Import a PyTorch problem into the workspace, where the operator allowed it (see torch_workspace)."""
        from .torch_workspace import create_torch_workload

        created = create_torch_workload(self, name, problem, initial_cu=initial_cu, initial_launch=initial_launch,
                                        overwrite=overwrite, allowed=self.settings.allow_torch_problems)
        self._forget(created.name)
        return created

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
        text, filename = await self.source_text(source, path)
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
        timing_mode: str = "events",
        adaptive_rse: float | None = None,
        sanitize: bool = False,
        notify: Notify,
    ) -> EvaluationOutput:
        """Validate (and, if ``benchmark``, time) a candidate; see the validate/benchmark tools.

        With ``sanitize``, a candidate that passes is then run under compute-sanitizer (memcheck,
        racecheck, initcheck) on the correctness cases; an error makes it ``sanitizer_error``.
        """
        text, _ = await self.source_text(source, path)
        sanitizer = await anyio.to_thread.run_sync(find_sanitizer, self.settings.sanitizer) if sanitize else None
        wl = await anyio.to_thread.run_sync(self.load, workload)
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
            timing_mode=timing_mode, adaptive_rse=adaptive_rse,
        )
        job = partial(self._evaluate_job, wl, info, candidate, benchmark, timing, sanitizer)
        result, reports = await self.gpu_job(job, notify)
        return evaluation_output(_private(result), mode, sanitizer=reports)

    def _evaluate_job(
        self, wl: Workload, info: DeviceInfo, candidate: Candidate, benchmark: bool,
        timing: EvaluateOptions, sanitizer: Path | None, dev: _Device, progress: Callable[[str, int, int], None],
    ) -> tuple[EvaluationResult, list[SanitizerReport] | None]:
        ev = self._evaluator(wl, info, dev, progress)
        ev.options = timing
        result = ev.evaluate(candidate, benchmark=benchmark)
        if sanitizer is None or not result.ok:
            return result, None
        assert dev.harness is not None
        progress("running compute-sanitizer memcheck, racecheck, initcheck on the correctness cases", 0, 1)
        workdir = Path(tempfile.mkdtemp(prefix="sanitizer-", dir=ev.workdir))
        try:
            harness = dev.harness
            reports = sanitize_candidate(ev, candidate, sanitizer, harness.binary, workdir,
                                         cancelled=lambda: harness.cancelled)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return result, reports

    def _evaluator(
        self, wl: Workload, info: DeviceInfo, dev: _Device, progress: Callable[[str, int, int], None]
    ) -> Evaluator:
        """The workload's prepared evaluator on this device (inputs, expected outputs, reference timed)."""
        ev = dev.evaluators.get(wl.name)
        if ev is not None and ev.workload != wl:
            # its files changed since it was prepared (e.g. kernelopt optimize regenerated a failing reference
            # in the run's configured copy): expected outputs from the old files would judge every candidate
            dev.evaluators.pop(wl.name, None)
            dev.prepared.discard(wl.name)
            _discard(ev)
            ev = None
        if ev is None:
            assert dev.harness is not None
            ev = Evaluator(
                wl, dev.harness, info, seed=self._seeds.setdefault(wl.name, fresh_seed()),
                workdir=Path(tempfile.mkdtemp(prefix=f"{wl.name}-", dir=self._private)),
                arch=self.settings.arch, compile_cache=self.compile_cache,
                peaks=peaks_for(info, self.settings.cache_root()),
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
        return ev

    async def profile(
        self,
        workload: str,
        source: str | None,
        path: str | None,
        launch: LaunchSpec | None,
        compile_options: list[str] | None,
        case: str | None,
        options: ProfileOptions,
        *,
        notify: Notify,
    ) -> ProfileSummary:
        """Profile one case under Nsight Compute (see the ncu_profile tool)."""
        wl = await anyio.to_thread.run_sync(self.load, workload)
        if source is None and path is None:
            if wl.initial_cu is None or wl.spec.initial is None:
                raise RequestError(f"workload {wl.name!r} has no starting kernel; pass `source` or `path` and `launch`")
            candidate = Candidate(wl.initial_cu, launch or wl.spec.initial.launch, list(compile_options or wl.spec.initial.compile_options), "initial")
        else:
            text, _ = await self.source_text(source, path)
            if launch is None:
                raise RequestError("`launch` is required with `source` or `path` (the same launch spec validate takes)")
            candidate = Candidate(text, launch, list(compile_options or []), "candidate")
        names = [c.name for c in wl.spec.cases]
        case = case or (wl.spec.performance_cases[0].name if wl.spec.performance_cases else names[-1])
        if case not in names:
            raise RequestError(f"workload {wl.name!r} has no case {case!r}; cases: {', '.join(names)}")
        options.ncu = options.ncu or self.settings.ncu
        options.check()
        await anyio.to_thread.run_sync(find_ncu, options.ncu)  # fail before queueing when ncu is missing
        info = await self.device_info()
        arch = self.settings.arch or info.arch
        compiled = await anyio.to_thread.run_sync(
            partial(compile_kernel, candidate.source, arch, candidate.compile_options, cache=self.compile_cache)
        )
        if not compiled.ok:
            raise RequestError(f"the kernel does not compile for {arch}:\n{compile_output(compiled, 'server').text()}")
        out_dir = self.config.runs_dir / "profiles" / f"{time.strftime('%Y%m%d-%H%M%S')}-{wl.name}-{candidate.name}-{case}"
        job = partial(self._profile_job, wl, info, candidate, case, options, out_dir)
        return await self.gpu_job(job, notify)

    def _profile_job(
        self, wl: Workload, info: DeviceInfo, candidate: Candidate, case: str, options: ProfileOptions,
        out_dir: Path, dev: _Device, progress: Callable[[str, int, int], None],
    ) -> ProfileSummary:
        ev = self._evaluator(wl, info, dev, progress)
        harness = dev.harness
        assert harness is not None
        return profile_case(
            ev, candidate, case, out_dir, options, harness=harness.binary,
            progress=lambda message: progress(message, 0, 1), cancelled=lambda: harness.cancelled,
        )

    async def autotune(
        self,
        workload: str,
        tunable: dict[str, Any] | None,
        source: str | None,
        tunable_path: str | None,
        strategy: str,
        budget_evals: int,
        budget_s: float,
        top: int,
        *,
        warmup: int | None = None,
        iterations: int | None = None,
        notify: Notify,
    ) -> AutotuneOutput:
        """Tune a tunable kernel's parameters on a workload (see the autotune tool)."""
        from .tune import TuneCache, tune
        from .tune.output import autotune_output
        from .tune.report import save_tuning

        wl = await anyio.to_thread.run_sync(self.load, workload)
        tuned = await anyio.to_thread.run_sync(partial(self._tunable, wl, tunable, source, tunable_path))
        info = await self.device_info()
        cache_dir = (self.settings.cache_dir or self.config.workspace / "cache") / "tune"
        timing = EvaluateOptions(
            warmup=self.settings.warmup if warmup is None else warmup,
            iterations=self.settings.iterations if iterations is None else iterations,
            flush_l2=self.settings.flush_l2, timeout_s=self.settings.timeout_s,
        )

        def job(dev: _Device, progress: Callable[[str, int, int], None]) -> Any:
            cache = TuneCache(cache_dir, max_bytes=self.settings.tune_cache_bytes())  # reads tune.jsonl: here, in the worker thread
            ev = self._evaluator(wl, info, dev, progress)
            ev.options = timing
            return tune(ev, tuned, strategy=strategy, budget_evals=budget_evals, budget_s=budget_s, cache=cache,
                        progress=progress)

        result = await self.gpu_job(job, notify)
        # tune.json lands under the workspace (a root, and kernelopt://runs/): no private seed in it
        result = result.model_copy(update={
            "best": _private(result.best) if result.best else None,
            "untuned": _private(result.untuned) if result.untuned else None,
        })

        def save() -> str:
            out_dir = Path(tempfile.mkdtemp(
                prefix=f"{time.strftime('%Y%m%d-%H%M%S')}-{wl.name}-", dir=_mkdir(self.config.runs_dir / "tune")
            ))
            save_tuning(result, tuned, out_dir)
            return str(out_dir)

        return autotune_output(result, tuned, top, await anyio.to_thread.run_sync(save))

    def _tunable(
        self, wl: Workload, tunable: dict[str, Any] | None, source: str | None, tunable_path: str | None
    ) -> Tunable:
        """The tunable to search: inline, from a tunable.json under a root, or the workload's own.
        Blocking (reads files): call it in a worker thread."""
        try:
            if tunable is not None:
                if tunable_path is not None:
                    raise RequestError("give `tunable` (inline, with `source`) or `tunable_path`, not both")
                if source is None:
                    raise RequestError("an inline `tunable` needs `source`: the CUDA text whose macros are the params")
                text, _ = self.read_source(source, None)
                spec = {k: v for k, v in tunable.items() if k != "source"}
                return parse_tunable(spec, text, "tunable", wl)
            if tunable_path is not None:
                real = self.confine(tunable_path)
                if real.suffix != ".json":
                    raise RequestError(f"{tunable_path}: not a tunable spec (resolved to {real}); name a .json file")
                data = read_json(real, RequestError)  # regular file, size cap: a FIFO or /dev/zero fails at once
                name = data.get("source", "tunable.cu") if isinstance(data, dict) else "tunable.cu"
                # before reading it: the source must lie inside a root too, and be a kernel source
                source_path = self.confine(str(real.parent / str(name)))
                if source_path.suffix not in SOURCE_SUFFIXES:
                    raise RequestError(f"{tunable_path}: its source {name!r} is not a .cu or .cuh file")
                return load_tunable(real, wl)
            return load_tunable(workload_tunable_path(wl), wl)
        except TunableError as exc:
            raise RequestError(str(exc)) from None

    async def docs_search(
        self, query: str, arch: str | None, limit: int, offline: bool | None, *, notify: Notify
    ) -> DocsSearchResult:
        """Ranked guidance passages (see the docs_search tool); network trouble is reported, not raised."""
        target = arch or (await self.target_arch(None))[0]

        def progress(message: str) -> None:
            try:
                anyio.from_thread.run(notify, message)
            except (RuntimeError, anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass

        return await anyio.to_thread.run_sync(
            partial(search_docs, query, arch=target, limit=limit, settings=self.docs_settings, offline=offline, progress=progress)
        )

    async def gpu_job(self, fn: Callable[[_Device, Callable[[str, int, int], None]], T], notify: Notify) -> T:
        """Run ``fn(device, progress)`` in a worker thread, alone on the device.

        Progress from the thread becomes ``notify`` calls. If the caller is cancelled, the
        harness is killed at once and kept from restarting, the thread unwinds, and only then
        is the device free for the next job.
        """
        dev = self._device()
        async with dev.queue.turn(notify):
            if dev.harness is None:
                dev.harness = HarnessProcess(find_harness(self.settings.harness), dev.ordinal)
            harness = dev.harness
            harness.rearm()
            send, receive = anyio.create_memory_object_stream[str](math.inf)
            finished = False

            def progress(message: str, done: int, total: int) -> None:
                if harness.cancelled:
                    raise HarnessCancelled("the call was cancelled")
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


def _private(result: EvaluationResult) -> EvaluationResult:
    """``result`` without its input seed: the server's seed is never shown to a client (tool
    results, resources, files under the roots), so the model cannot choose or predict inputs."""
    return result.model_copy(update={"seed": None})


def _discard(ev: Evaluator) -> None:
    ev.close()
    shutil.rmtree(ev.workdir, ignore_errors=True)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
