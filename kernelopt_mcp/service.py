"""The MCP server's engine room, with no MCP in it: configuration, path confinement, the GPU
queue, prepared sessions, created workloads, and the compact results the tools return.

The server package maps this onto MCP tools; tests can drive it directly. The work itself is the
application layer's (:mod:`kernelopt_mcp.app`, shared with the CLI), synchronous; here it runs
in worker threads (:func:`anyio.to_thread.run_sync`) so the event loop keeps answering while a
kernel runs:

- One GPU job at a time per device, clients taking turns; a job learns its queue position
  (:mod:`kernelopt_mcp.gpu_queue`), and on a shared server runs at most ``gpu_call_max_s``.
- Every other long job (compiles, workload builds, documentation fetches, device probes) waits
  for a turn of its own kind in the event loop and then runs on threads of its own
  (:mod:`kernelopt_mcp.admission`), so anyio's shared worker threads stay free for cheap calls.
  Each queue is bounded per client and in all; past a bound a call is refused with "busy, retry".
- One persistent harness process per device. Cancelling a call kills it (and keeps it from
  restarting until the job has unwound), so nothing is left running on the GPU.
- One prepared :class:`~kernelopt_mcp.evaluation.session.Session` per workload (a small LRU),
  drawn from a seed fixed for the server's lifetime and never returned to the model, which
  therefore cannot choose inputs.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from . import app
from .admission import server_rooms
from .compile_pool import warn_if_unconfined
from .compiler import MAX_SOURCE_BYTES, CompileResult
from .config import bundled_workloads_dir, list_workloads
from .docs import DocsSearchResult, search_docs
from .errors import KerneloptError, TunableError, did_you_mean
from .evaluation.candidate import Candidate
from .evaluation.device import DeviceInfo
from .evaluation.evaluate import prepare
from .evaluation.inputs import new_input_seed
from .evaluation.outcomes import EvaluationResult
from .evaluation.session import Session
from .files import read_json, read_regular_bytes
from .freeze import frozen_workloads
from .gpu_queue import DeviceSlot, GpuQueue, Notify, ProgressFn, pick_device, run_on_device
from .launch import LaunchSpec
from .ncu_report import ProfileSummary
from .profiler import ProfileOptions, find_ncu
from .quota import WorkspaceQuota
from .results import (
    CheckedEvaluation,
    CompileOutput,
    CreatedWorkload,
    EvaluationOutput,
    TorchComparison,
    compile_error_output,
    evaluation_output,
)
from .sanitizer import find_sanitizer
from .server_config import (
    CLIENT_ID,
    CLIENT_ROOTS,
    GPU_CALL_MAX_FLAG,
    NAME_RE,
    SOURCE_SUFFIXES,
    TUNE_SHARE_OF_CAP,
    ServerConfig,
)
from .tune.output import AutotuneOutput
from .tune.spec import Tunable, load_tunable, parse_tunable, workload_tunable_path
from .tune.workers import WorkerLost
from .workload import Workload, load_workload
from .workspace import RequestError, create_workload

T = TypeVar("T")

class KerneloptService:
    """The tools' implementations, independent of MCP."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        # the one cache location (Settings.from_env: KERNELOPT_CACHE, else the XDG cache directory);
        # settings built without it (a library caller, tests) keep a cache in the workspace
        self.settings = replace(config.settings, cache_dir=config.settings.cache_dir or config.workspace / "cache")
        warn_if_unconfined(self.settings.compile_limits())  # say it at start-up, not at the first compile
        self.compile_cache = app.compile_cache(self.settings)
        self._devices: dict[int, DeviceSlot] = {}
        self._seeds: dict[str, int] = {}
        self._arch_probe: tuple[str, str] | None = None
        self._infos: list[DeviceInfo] | None = None  # every device GPU jobs spread over, the first one primary
        self._probing = anyio.Lock()  # one device probe at a time: those waiting take its answer
        self.rooms = server_rooms(app.compile_concurrency(self.settings), config.queue_bounds)
        self.quota = WorkspaceQuota(config.workspace, config.workspace_quota_bytes)
        # Sessions keep inputs (and the seed) here: outside every root, and refused by confine().
        self._private = Path(tempfile.mkdtemp(prefix="kernelopt-mcp-")).resolve()

    @property
    def private_dir(self) -> Path:
        """Where sessions keep inputs (and the seed): outside every root, never written into for a client."""
        return self._private

    # --- paths and sources --------------------------------------------------------------

    def confine(self, raw: str) -> Path:
        """Resolve ``raw`` (absolute, or relative to the calling client's home: the workspace over
        stdio) inside a configured root, and never inside another client's home."""
        if "\0" in raw or not raw.strip():
            raise RequestError("path is empty or contains a NUL byte")
        path = Path(raw).expanduser()
        home = self.config.client_home()
        if not path.is_absolute():
            path = home / path
        try:
            real = path.resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop, a name too long
            raise RequestError(f"{raw}: cannot resolve the path ({exc})") from None
        if real.is_relative_to(self._private):
            raise RequestError(f"{raw}: inside the evaluations' private directory (their inputs are hidden)")
        clients, own = self.config.clients_dir.resolve(), home.resolve()
        if real.is_relative_to(clients) and not (own.is_relative_to(clients) and real.is_relative_to(own)):
            raise RequestError(f"{raw}: another client's files; name files under {home} (your own) or a --root directory")
        roots = list(dict.fromkeys([*self.config.roots(), *CLIENT_ROOTS.get()]))
        if any(real.is_relative_to(root) for root in roots):
            return real
        raise RequestError(
            f"{raw}: outside the directories this server may read ({', '.join(map(str, roots))}; "
            "symlinks are resolved). Pass the kernel inline as `source`, put the file under the "
            f"workspace {home}, or start the server with --root DIR"
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
                f"no workload {name!r}{did_you_mean(name, known)} (known: {', '.join(sorted(known)) or 'none'}; "
                "list_workloads describes them; create_workload adds one)"
            )
        return load_workload(known[name])

    def create_workload(
        self, spec: dict[str, Any], reference_cu: str | None, initial_cu: str | None, overwrite: bool, arch: str
    ) -> CreatedWorkload:
        """Validate and store a workload in the workspace (see the create_workload tool)."""
        created = create_workload(self, spec, reference_cu, initial_cu, overwrite, arch)
        self._forget(Path(created.path))
        return created

    def create_torch_workload(
        self, name: str | None, problem: str, initial_cu: str | None, initial_launch: dict[str, Any] | None, overwrite: bool,
        tolerance: Any = "strict",
    ) -> CreatedWorkload:
        """Import a PyTorch problem into the workspace, where the operator allowed it (see torch_workspace)."""
        from .torch_workspace import create_torch_workload

        created = create_torch_workload(self, name, problem, initial_cu=initial_cu, initial_launch=initial_launch,
                                        overwrite=overwrite, allowed=self.settings.allow_torch_problems,
                                        compile_limits=self.settings.compile_limits(), tolerance=tolerance)
        self._forget(Path(created.path))
        return created

    # --- long jobs ------------------------------------------------------------------------

    async def run_long(self, kind: str, fn: Callable[[], T]) -> T:
        """``fn()`` as a long job of ``kind`` (admission.ROOMS): it waits for a turn in the event loop
        (cancellable), then runs on that kind's threads, never anyio's shared ones. Raises ServerBusy
        when the kind's queue is full for the calling client or in all."""
        return await self.rooms[kind].run(fn, CLIENT_ID.get())

    async def compile_text(
        self, text: str, arch: str, *, arch_from: str = "argument", options: list[str] | None = None,
        filename: str = "kernel.cu",
    ) -> tuple[CompileResult, CompileOutput]:
        """A compile: from the cache at once (a cheap lookup), else in its turn in the compile queue."""
        args: dict[str, Any] = {"arch_from": arch_from, "options": options or [], "filename": filename, "cache": self.compile_cache}
        hit = await anyio.to_thread.run_sync(partial(app.cached_compile_source, self.settings, text, arch, **args))
        return hit if hit is not None else await self.run_long("compile", partial(app.compile_source, self.settings, text, arch, **args))

    # --- devices ------------------------------------------------------------------------

    async def devices(self) -> list[DeviceInfo]:
        """Every device this server spreads GPU jobs over (``--devices``, default every visible one),
        one harness and queue each; probed until they answer once (devices do not change while the
        server runs). Raises DeviceUnavailable, ToolchainNotFound."""
        async with self._probing:
            if self._infos is None and self.config.ray_address:
                from .ray_devices import ray_devices

                remote = await self.run_long("probe", partial(ray_devices, self.settings, self.config.ray_address))
                for i, device in enumerate(remote):
                    self._devices[i] = DeviceSlot(i, GpuQueue(self.config.queue_bounds), info=device.info, remote=device)
                self._infos = [device.info for device in remote]
            if self._infos is None:
                infos = await self.run_long("probe", partial(app.gpu_infos, self.settings))
                for info in infos:
                    self._devices[info.ordinal] = DeviceSlot(info.ordinal, GpuQueue(self.config.queue_bounds), info=info)
                self._infos = infos
        return self._infos

    async def device_info(self) -> DeviceInfo:
        """The first device's properties (the compile target and what gpu_info reports first)."""
        return (await self.devices())[0]

    async def target_arch(self, arch: str | None) -> tuple[str, str]:
        """(arch, where it came from): the argument, the server setting, the GPU, or sm_90."""
        if arch or self.settings.arch:
            return app.target_arch(self.settings, arch)
        async with self._probing:  # asked once: the GPU does not change while the server runs
            if self._arch_probe is None:
                self._arch_probe = await self.run_long("probe", partial(app.target_arch, self.settings, None))
        return self._arch_probe

    # --- tools ----------------------------------------------------------------------------

    async def compile(
        self, source: str | None, path: str | None, arch: str | None, options: list[str] | None
    ) -> CompileOutput:
        text, filename = await self.source_text(source, path)
        target, where = await self.target_arch(arch)
        _, output = await self.compile_text(text, target, arch_from=where, options=options or [], filename=filename)
        return output

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
        stop: str = "count",
        sanitize: bool = False,
        notify: Notify,
    ) -> EvaluationOutput:
        """Validate (and, if ``benchmark``, time) a candidate; see the validate/benchmark tools.

        With ``sanitize``, a candidate that passes is then run under compute-sanitizer (memcheck,
        racecheck, initcheck) on the correctness cases; an error makes it ``sanitizer_error``.
        """
        text, _ = await self.source_text(source, path)
        sanitizer = await anyio.to_thread.run_sync(
            partial(find_sanitizer, self.settings.sanitizer, cuda_home=self.settings.cuda_home)
        ) if sanitize else None
        wl = await anyio.to_thread.run_sync(self.load, workload)
        info = await self.device_info()
        mode = "benchmark" if benchmark else "validate"
        options = list(compile_options or [])
        # Compile before queueing: an error comes back at once, and the job finds it cached.
        compiled, _ = await self.compile_text(text, self.settings.arch or info.arch, options=options)
        if not compiled.ok:
            return compile_error_output(compiled, wl.name, mode, info.name)
        candidate = Candidate(text, launch, options, "candidate")
        timing = app.evaluate_options(
            self.settings, warmup=warmup, iterations=iterations, timing_mode=timing_mode, adaptive_rse=adaptive_rse,
            stop=stop,
        )

        def job(dev: DeviceSlot, progress: ProgressFn) -> tuple[CheckedEvaluation, TorchComparison | None]:
            if dev.remote is not None:
                if sanitizer is not None:
                    raise RequestError("sanitize needs a local GPU: this server runs its GPU jobs on a Ray cluster (--ray)")
                key = _workload_key(wl)
                checked = dev.remote.call("evaluate", wl, key, self._seeds.setdefault(key, new_input_seed()), candidate, timing, benchmark)
                timed = checked.ok and checked.result.score_ms is not None  # else nothing to put PyTorch beside
                return checked, dev.remote.call("beside_pytorch", wl, timing, checked) if timed else None
            session, harness = self._session(wl, dev.info or info, dev, progress), dev.harness
            checked = app.evaluate_kernel(
                session, candidate, timing, benchmark=benchmark, sanitizer=sanitizer,
                cancelled=lambda: harness is not None and harness.cancelled,
            )
            # PyTorch's times for an imported problem, on the GPU that timed the candidate
            return checked, app.beside_pytorch(self.settings, wl, dev.info or info, timing, checked, progress)

        checked, beside = await self.gpu_job(job, notify)
        return evaluation_output(checked.model_copy(update={"result": _private(checked.result)}), mode, beside)

    def _session(self, wl: Workload, info: DeviceInfo, dev: DeviceSlot, progress: ProgressFn) -> Session:
        """The workload's prepared session on this device (inputs, expected outputs, reference timed).

        Sessions and seeds are keyed by the workload's directory, not its name: two clients' workloads
        of one name (or a frozen one and the configured one it shadows) never share either."""
        key = _workload_key(wl)
        session = dev.sessions.get(key)
        if session is not None and session.workload != wl:
            # its files changed since it was prepared (e.g. kernelopt optimize regenerated a failing reference
            # in the run's configured copy): expected outputs from the old files would judge every candidate
            dev.sessions.pop(key, None)
            _discard(session)
            session = None
        if session is None:
            if dev.harness is None:
                raise KerneloptError("internal error: a GPU job runs without its device's harness")
            session = app.open_session(
                self.settings, wl, dev.harness, info, seed=self._seeds.setdefault(key, new_input_seed()),
                workdir=Path(tempfile.mkdtemp(prefix=f"{wl.name}-", dir=self._private)), cache=self.compile_cache,
            )
            dev.sessions[key] = session
            while len(dev.sessions) > self.config.max_prepared:
                _, evicted = dev.sessions.popitem(last=False)
                _discard(evicted)
        dev.sessions.move_to_end(key)
        session.report_to(progress)
        if not session.prepared:  # say why the first call on a workload takes longer
            progress(f"preparing {wl.name}: inputs, expected outputs, timing the CUDA reference (once per server session)", 0, 1)
            try:
                prepare(session)
            except BaseException:
                dev.sessions.pop(key, None)
                _discard(session)
                raise
        return session

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
        case = case or app.default_profile_case(wl)
        if case not in names:
            raise RequestError(f"workload {wl.name!r} has no case {case!r}; cases: {', '.join(names)}")
        options.ncu = options.ncu or self.settings.ncu
        options.check()
        await self.run_long("probe", partial(find_ncu, options.ncu))  # fail before queueing when ncu is missing
        info = await self.device_info()
        arch = self.settings.arch or info.arch
        compiled, output = await self.compile_text(
            candidate.source, arch, arch_from="server", options=candidate.compile_options
        )
        if not compiled.ok:
            raise RequestError(f"the kernel does not compile for {arch}:\n{output.text()}")
        out_dir = self.config.runs_dir / "profiles" / f"{time.strftime('%Y%m%d-%H%M%S')}-{wl.name}-{candidate.name}-{case}"
        job = partial(self._profile_job, wl, info, candidate, case, options, out_dir)
        return await self.gpu_job(job, notify)

    def _profile_job(
        self, wl: Workload, info: DeviceInfo, candidate: Candidate, case: str, options: ProfileOptions,
        out_dir: Path, dev: DeviceSlot, progress: ProgressFn,
    ) -> ProfileSummary:
        if dev.remote is not None:
            raise RequestError("ncu_profile needs a local GPU: this server runs its GPU jobs on a Ray cluster (--ray)")
        session, harness = self._session(wl, dev.info or info, dev, progress), dev.harness
        return app.profile_kernel(
            session, candidate, case, out_dir, options, progress=lambda message: progress(message, 0, 1),
            cancelled=lambda: harness is not None and harness.cancelled,
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
        stop: str = "count",
        notify: Notify,
    ) -> AutotuneOutput:
        """Tune a tunable kernel's parameters on a workload (see the autotune tool)."""
        from .tune.output import autotune_output
        from .tune.report import save_tuning

        wl = await anyio.to_thread.run_sync(self.load, workload)
        tuned = await anyio.to_thread.run_sync(partial(self._tunable, wl, tunable, source, tunable_path))
        info = await self.device_info()
        notes, cap = [], self.config.gpu_call_max_s
        if cap > 0 and budget_s > cap * TUNE_SHARE_OF_CAP:
            notes.append(
                f"budget_s capped to {cap * TUNE_SHARE_OF_CAP:g} s (asked {budget_s:g} s): this server stops a GPU call "
                f"after {cap:g} s ({GPU_CALL_MAX_FLAG}); preparing the workload and the last configuration need the "
                "rest. Measured configurations stay in the tune cache: a repeated call measures only new ones"
            )
            budget_s = cap * TUNE_SHARE_OF_CAP
        timing = app.evaluate_options(self.settings, warmup=warmup, iterations=iterations, stop=stop)

        def job(dev: DeviceSlot, progress: ProgressFn) -> Any:
            if dev.remote is not None:  # measured on the actor its job was handed
                key, args = _workload_key(wl), {"strategy": strategy, "budget_evals": budget_evals, "budget_s": budget_s}
                return dev.remote.call("tune", wl, key, self._seeds.setdefault(key, new_input_seed()), tuned, timing, args)
            cache = app.tune_cache(self.settings)  # reads tune.jsonl: here, in the worker thread
            session = self._session(wl, dev.info or info, dev, progress)
            return app.tune_kernel(
                session, tuned, options=timing, strategy=strategy, budget_evals=budget_evals, budget_s=budget_s,
                cache=cache, progress=progress,
            )

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

        out = autotune_output(result, tuned, top, await anyio.to_thread.run_sync(save))
        return out.model_copy(update={"notes": notes}) if notes else out

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
                anyio.from_thread.run(notify, message)  # type: ignore[arg-type]  # every Notify is an async def
            except (RuntimeError, anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass

        return await self.run_long(
            "docs",
            partial(search_docs, query, arch=target, limit=limit, settings=self.settings, offline=offline, progress=progress),
        )

    async def gpu_job(self, fn: Callable[[DeviceSlot, ProgressFn], T], notify: Notify) -> T:
        """Run ``fn(device, progress)`` in a worker thread, alone on a device (the free one, else the
        least queued: :func:`kernelopt_mcp.gpu_queue.pick_device`; see
        :func:`kernelopt_mcp.gpu_queue.run_on_device`: queued in the calling client's turn,
        cancellable, with progress, stopped past the server's per-call cap)."""
        await self.devices()
        while True:
            dev = pick_device(list(self._devices.values()))
            try:
                return await run_on_device(
                    dev, partial(app.open_harness, replace(self.settings, device=dev.ordinal)), fn, notify,
                    client=CLIENT_ID.get(), max_s=self.config.gpu_call_max_s, cap_name=GPU_CALL_MAX_FLAG,
                )
            except WorkerLost as exc:  # a Ray actor died: forget it, run the job on another (none: the error)
                if len(self._devices) == 1:
                    raise KerneloptError(f"every Ray actor of this server was lost; the last: {exc}") from None
                self._devices.pop(dev.ordinal, None)
                await notify(f"{exc}; the job runs again on another GPU")

    def _forget(self, directory: Path) -> None:
        """Drop the prepared session and seed of the workload in ``directory`` (replaced on disk)."""
        key = str(directory.resolve())
        for dev in self._devices.values():
            session = dev.sessions.pop(key, None)
            if session is not None:
                _discard(session)
        self._seeds.pop(key, None)

    def close(self) -> None:
        """Stop every harness and remove the sessions' temporary files."""
        for dev in self._devices.values():
            for session in dev.sessions.values():
                session.close()
            dev.sessions.clear()
            if dev.harness is not None:
                dev.harness.close()
            if dev.remote is not None:
                dev.remote.close()
        shutil.rmtree(self._private, ignore_errors=True)


def _private(result: EvaluationResult) -> EvaluationResult:
    """``result`` without its input seed: the server's seed is never shown to a client (tool
    results, resources, files under the roots), so the model cannot choose or predict inputs."""
    return result.model_copy(update={"seed": None})


def _workload_key(wl: Workload) -> str:
    """What prepared sessions and seeds are keyed by: the workload's directory (resolved)."""
    return str(wl.root.resolve()) if wl.root is not None else f"<inline>/{wl.name}"


def _discard(session: Session) -> None:
    session.close()
    shutil.rmtree(session.workdir, ignore_errors=True)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
