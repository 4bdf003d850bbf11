"""The MCP server's answers to why a kernel is slow and how to make it faster: a profile under
Nsight Compute, a tuning run over a kernel's parameters, CUDA optimization guidance."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread

from . import app
from .client_files import ClientFiles
from .device_pool import DevicePool, without_seed
from .docs import DocsSearchResult
from .evaluation.candidate import Candidate, stop_rule
from .evaluation.device import DeviceInfo
from .gpu_queue import DeviceSlot, Notify, ProgressFn
from .launch import LaunchSpec
from .ncu_report import ProfileSummary
from .profiler import ProfileOptions
from .server_config import GPU_CALL_MAX_FLAG, TUNE_SHARE_OF_CAP
from .server_state import ServerState
from .tune.output import AutotuneOutput
from .workload import Workload
from .workload_catalogue import WorkloadCatalogue
from .workspace import RequestError


@dataclass(eq=False)  # a service part: identity, not value
class KernelAnalysis:
    """The ncu_profile, autotune and docs_search tools' work."""

    state: ServerState
    files: ClientFiles
    catalogue: WorkloadCatalogue
    gpus: DevicePool

    async def profile(
        self,
        workload: str,
        source: str | None,
        path: str | None,
        launch: LaunchSpec | None,
        compile_options: list[str] | None,
        case: str | None,
        *,
        clock_control: str = "none",
        section_set: str = "curated",
        notify: Notify,
    ) -> ProfileSummary:
        """Profile one case under Nsight Compute (see the ncu_profile tool): the kernel given, else
        the workload's starting kernel; a bad option or a missing ncu is said before queueing."""
        wl = await anyio.to_thread.run_sync(self.catalogue.load, workload)
        if source is None and path is None:
            if wl.initial_cu is None or wl.spec.initial is None:
                raise RequestError(f"workload {wl.name!r} has no starting kernel; pass `source` or `path` and `launch`")
            candidate = app.candidate(wl, None, launch, compile_options)
        else:
            text, _ = await self.files.source_text(source, path)
            if launch is None:
                raise RequestError("`launch` is required with `source` or `path` (the same launch spec validate takes)")
            candidate = app.candidate(wl, text, launch, compile_options)
        names = [c.name for c in wl.spec.cases]
        case = case or app.default_profile_case(wl)
        if case not in names:
            raise RequestError(f"workload {wl.name!r} has no case {case!r}; cases: {', '.join(names)}")
        options = await self.state.run_long("probe", partial(
            app.profile_options, self.state.settings, clock_control=clock_control, section_set=section_set,
        ))
        info = await self.gpus.device_info()
        arch = self.state.settings.arch or info.arch
        compiled, output = await self.state.compile_text(
            candidate.source, arch, arch_from="server", options=candidate.compile_options
        )
        if not compiled.ok:
            raise RequestError(f"the kernel does not compile for {arch}:\n{output.text()}")
        out_dir = app.profile_dir(self.state.config.runs_dir / "profiles", wl, candidate, case)
        job = partial(self._profile_job, wl, info, candidate, case, options, out_dir)
        return await self.gpus.run(job, notify)

    def _profile_job(
        self, wl: Workload, info: DeviceInfo, candidate: Candidate, case: str, options: ProfileOptions,
        out_dir: Path, dev: DeviceSlot, progress: ProgressFn,
    ) -> ProfileSummary:
        if dev.remote is not None:
            raise RequestError("ncu_profile needs a local GPU: this server runs its GPU jobs on a Ray cluster (--ray)")
        session, harness = self.gpus.session(wl, dev.info or info, dev, progress), dev.harness
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
        stop: str | None = None,
        notify: Notify,
    ) -> AutotuneOutput:
        """Tune a tunable kernel's parameters on a workload (see the autotune tool). ``stop`` None:
        "precision", or "count" where a launch count was given."""
        from .tune.output import autotune_output
        from .tune.report import save_tuning

        wl = await anyio.to_thread.run_sync(self.catalogue.load, workload)
        tuned = await anyio.to_thread.run_sync(partial(self.files.tunable, wl, tunable, source, tunable_path))
        info = await self.gpus.device_info()
        config, settings = self.state.config, self.state.settings
        notes, cap = [], config.gpu_call_max_s
        if cap > 0 and budget_s > cap * TUNE_SHARE_OF_CAP:
            notes.append(
                f"budget_s capped to {cap * TUNE_SHARE_OF_CAP:g} s (asked {budget_s:g} s): this server stops a GPU "
                f"call after {cap:g} s ({GPU_CALL_MAX_FLAG}); preparing the workload and the last configuration need "
                "the rest. Measured configurations stay in the tune cache: a repeated call measures only new ones"
            )
            budget_s = cap * TUNE_SHARE_OF_CAP
        timing = app.evaluate_options(
            settings, warmup=warmup, iterations=iterations, stop=stop_rule(stop, warmup=warmup, iterations=iterations),
        )

        def job(dev: DeviceSlot, progress: ProgressFn) -> Any:
            if dev.remote is not None:  # measured on the actor its job was handed
                key, seed = self.gpus.seed(wl)
                args = {"strategy": strategy, "budget_evals": budget_evals, "budget_s": budget_s}
                return dev.remote.call("tune", wl, key, seed, tuned, timing, args)
            cache = app.tune_cache(settings)  # reads tune.jsonl: here, in the worker thread
            session = self.gpus.session(wl, dev.info or info, dev, progress)
            return app.tune_kernel(
                session, tuned, options=timing, strategy=strategy, budget_evals=budget_evals, budget_s=budget_s,
                cache=cache, progress=progress,
            )

        result = await self.gpus.run(job, notify)
        # tune.json lands under the workspace (a root, and kernelopt://runs/): no private seed in it
        result = result.model_copy(update={
            "best": without_seed(result.best) if result.best else None,
            "untuned": without_seed(result.untuned) if result.untuned else None,
        })

        def save() -> str:
            runs = config.runs_dir / "tune"
            runs.mkdir(parents=True, exist_ok=True)
            out_dir = Path(tempfile.mkdtemp(prefix=f"{time.strftime('%Y%m%d-%H%M%S')}-{wl.name}-", dir=runs))
            save_tuning(result, tuned, out_dir)
            return str(out_dir)

        out = autotune_output(result, tuned, top, await anyio.to_thread.run_sync(save))
        return out.model_copy(update={"notes": notes}) if notes else out

    async def docs_search(
        self, query: str, arch: str | None, limit: int, offline: bool | None, *, notify: Notify
    ) -> DocsSearchResult:
        """Ranked guidance passages (see the docs_search tool); network trouble is reported, not raised."""
        target = arch or (await self.gpus.target_arch(None))[0]

        def progress(message: str) -> None:
            try:
                anyio.from_thread.run(notify, message)  # type: ignore[arg-type]  # every Notify is an async def
            except (RuntimeError, anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass

        return await self.state.run_long("docs", partial(
            app.search_guidance, self.state.settings, query, arch=target, limit=limit, offline=offline,
            progress=progress,
        ))
