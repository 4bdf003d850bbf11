"""The MCP server's compile, validate and benchmark: a client's kernel read within the roots,
compiled before it queues for a GPU (an error comes back at once), then checked and timed on a
device's prepared session."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import anyio.to_thread

from . import app
from .client_files import ClientFiles
from .device_pool import DevicePool, without_seed
from .gpu_queue import DeviceSlot, Notify, ProgressFn
from .launch import LaunchSpec
from .results import (
    CheckedEvaluation,
    CompileOutput,
    EvaluationOutput,
    TorchComparison,
    compile_error_output,
    evaluation_output,
)
from .server_state import ServerState
from .workload_catalogue import WorkloadCatalogue
from .workspace import RequestError


@dataclass(eq=False)  # a service part: identity, not value
class KernelChecks:
    """The compile, validate and benchmark tools' work."""

    state: ServerState
    files: ClientFiles
    catalogue: WorkloadCatalogue
    gpus: DevicePool

    async def compile(
        self, source: str | None, path: str | None, arch: str | None, options: list[str] | None
    ) -> CompileOutput:
        """Compile a kernel for ``arch`` (default: the server's GPU, else sm_90); see the compile tool."""
        text, filename = await self.files.source_text(source, path)
        target, where = await self.gpus.target_arch(arch)
        _, output = await self.state.compile_text(text, target, arch_from=where, options=options or [],
                                                  filename=filename)
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
        settings = self.state.settings
        text, _ = await self.files.source_text(source, path)
        sanitizer = await anyio.to_thread.run_sync(app.sanitizer_binary, settings) if sanitize else None
        wl = await anyio.to_thread.run_sync(self.catalogue.load, workload)
        info = await self.gpus.device_info()
        mode = "benchmark" if benchmark else "validate"
        options = list(compile_options or [])
        # Compile before queueing: an error comes back at once, and the job finds it cached.
        compiled, _ = await self.state.compile_text(text, settings.arch or info.arch, options=options)
        if not compiled.ok:
            return compile_error_output(compiled, wl.name, mode, info.name)
        candidate = app.candidate(wl, text, launch, options)
        timing = app.evaluate_options(
            settings, warmup=warmup, iterations=iterations, timing_mode=timing_mode,
            adaptive_rse=adaptive_rse, stop=stop,
        )

        def job(dev: DeviceSlot, progress: ProgressFn) -> tuple[CheckedEvaluation, TorchComparison | None]:
            if dev.remote is not None:
                if sanitizer is not None:
                    raise RequestError("sanitize needs a local GPU: this server runs its GPU jobs on "
                                       "a Ray cluster (--ray)")
                key, seed = self.gpus.seed(wl)
                checked = dev.remote.call("evaluate", wl, key, seed, candidate, timing, benchmark)
                timed = checked.ok and checked.result.score_ms is not None  # else nothing to put PyTorch beside
                return checked, dev.remote.call("beside_pytorch", wl, timing, checked) if timed else None
            session, harness = self.gpus.session(wl, dev.info or info, dev, progress), dev.harness
            checked = app.evaluate_kernel(
                session, candidate, timing, benchmark=benchmark, sanitizer=sanitizer,
                cancelled=lambda: harness is not None and harness.cancelled,
            )
            # PyTorch's times for an imported problem, on the GPU that timed the candidate
            return checked, app.beside_pytorch(settings, wl, dev.info or info, timing, checked, progress)

        checked, beside = await self.gpus.run(job, notify)
        return evaluation_output(checked.model_copy(update={"result": without_seed(checked.result)}), mode, beside)
