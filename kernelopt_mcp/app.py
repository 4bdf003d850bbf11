"""The application layer: what kernelopt can do, as plain functions over one :class:`Settings`.

The command line (:mod:`kernelopt_mcp.cli`, through :mod:`kernelopt_mcp.workflows`) and the MCP
server's engine (:mod:`kernelopt_mcp.service`) both call these, so the caches, the evaluation
options, a candidate, the checks before any GPU work (the profiler and the sanitizer found, the
profile options checked) and the prepared :class:`~kernelopt_mcp.evaluation.session.Session`
are built in one place, from the settings the entry point made (flags > environment >
defaults). The CLI adds argument parsing and rendering; the service adds the GPU queue,
cancellation and path confinement.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .caches import cache_info, clear_cache
from .compile_pool import default_pool, warn_if_unconfined
from .compile_report import CompileOutput, compile_output
from .compiler import CompileCache, CompileResult, cached_compile, compile_kernel
from .config import Settings, find_workload, parse_devices
from .errors import DeviceUnavailable, KerneloptError
from .files import read_text

# The evaluation, tuning, profiling and freezing stacks are imported by the functions that use
# them: `kernelopt compile` and `kernelopt --help` start without them (tests/cli/test_startup.py).
if TYPE_CHECKING:
    from .docs import DocsSearchResult
    from .evaluation.calibrate import Calibration
    from .evaluation.candidate import Candidate, EvaluateOptions, ProgressFn
    from .evaluation.device import DeviceInfo
    from .evaluation.harness import HarnessProcess
    from .evaluation.session import Session
    from .freeze import FrozenWorkload, RequestsOnly
    from .launch import LaunchSpec
    from .ncu_report import ProfileSummary
    from .profiler import ProfileOptions
    from .results import CheckedEvaluation
    from .torch_baseline import BaselineReport
    from .torch_comparison import TorchComparison
    from .tune.cache import TuneCache
    from .tune.spec import Tunable
    from .tune.tuner import TuneResult
    from .tune.workers import LocalWorker, Worker
    from .workload import Workload

__all__ = [
    "beside_pytorch", "cache_info", "calibrate_gpu", "candidate", "clear_cache", "compile_cache", "compile_file",
    "compile_source", "default_profile_case", "evaluate_kernel", "evaluate_options", "freeze_workload", "gpu_info",
    "harness_binary", "open_harness", "open_session", "profile_dir", "profile_kernel", "profile_options",
    "resolve_workload", "sanitizer_binary", "search_guidance", "settings_from_env", "target_arch", "torch_baselines",
    "tune_cache", "tune_kernel", "warn_if_unconfined_compiles",
]

#: ``arch`` when neither the caller, the settings nor a GPU names one
DEFAULT_ARCH = "sm_90"


# --- what a request starts from: settings, a workload, a candidate, the tools it needs ----------


def settings_from_env(**overrides: Any) -> Settings:
    """An entry point's settings: the environment's (``KERNELOPT_*``), ``overrides`` (its flags,
    where not None) first; says at once when compiles under them will run unconfined."""
    settings = Settings.from_env(**overrides)
    warn_if_unconfined_compiles(settings)
    return settings


def warn_if_unconfined_compiles(settings: Settings) -> None:
    """Where compiles under ``settings`` will run unconfined because the user accepted it, say so
    now (once, on stderr): at the entry point's start-up, not at the first compile."""
    warn_if_unconfined(settings.compile_limits())


def resolve_workload(settings: Settings, name_or_path: str | Path) -> Workload:
    """A workload by bundled or configured name, or from a directory or workload.json path
    (raises WorkloadError naming the known ones)."""
    return find_workload(name_or_path, settings)


def candidate(
    workload: Workload, source: str | None, launch: LaunchSpec | None, compile_options: Sequence[str] | None = None,
    *, name: str = "candidate",
) -> Candidate:
    """``source`` with ``launch`` and ``compile_options``; without ``source``, the workload's
    starting kernel with ``launch`` and ``compile_options`` in place of its own where given.

    Raises:
        WorkloadError: no ``source`` and the workload has no starting kernel.
        ValueError: ``source`` without ``launch``.
    """
    from .evaluation.candidate import Candidate, initial_candidate

    if source is None:
        start = initial_candidate(workload)
        return replace(start, launch=launch or start.launch,
                       compile_options=list(compile_options or start.compile_options))
    if launch is None:
        raise ValueError(f"{name}: a kernel source needs its launch spec")
    return Candidate(source, launch, list(compile_options or []), name)


def profile_options(
    settings: Settings, *, clock_control: str = "none", section_set: str = "curated", timeout_s: float | None = None,
) -> ProfileOptions:
    """How to profile, checked, with the settings' ``ncu`` found: call it before any GPU work, so
    a bad option or a missing Nsight Compute is said at once. Blocking (looks for ncu).

    Raises:
        ValueError: an unknown clock control or section set.
        ToolchainNotFound: ncu is not installed (says how to install it or point at it).
    """
    from .profiler import ProfileOptions, find_ncu

    options = ProfileOptions(
        ncu=settings.ncu, clock_control=clock_control, section_set=section_set,
        timeout_s=timeout_s or settings.profile_timeout_s,
    )
    options.check()
    options.ncu = find_ncu(settings.ncu)
    return options


def sanitizer_binary(settings: Settings) -> Path:
    """compute-sanitizer, found as the settings say: call it before any GPU work, so a missing one
    is said at once (raises ToolchainNotFound). Blocking (looks for the binary)."""
    from .sanitizer import find_sanitizer

    return find_sanitizer(settings.sanitizer, cuda_home=settings.cuda_home)


def profile_dir(root: Path, workload: Workload, candidate: Candidate, case: str) -> Path:
    """Where a profile of ``candidate`` on ``case`` goes under ``root``: a directory named by the
    time, the workload, the kernel and the case."""
    return root / f"{time.strftime('%Y%m%d-%H%M%S')}-{workload.name}-{candidate.name}-{case}"


def search_guidance(
    settings: Settings, query: str, *, arch: str | None = None, limit: int = 8, offline: bool | None = None,
    progress: Callable[[str], None] | None = None,
) -> DocsSearchResult:
    """Ranked CUDA optimization guidance for ``query``; passages for ``arch`` first (default: the
    settings' arch, else this GPU's unless the search is offline, else none). Network trouble
    is the result's message, never an exception."""
    from .docs import search_docs as search

    arch = arch or settings.arch
    if arch is None and not offline and not settings.docs_offline:
        try:
            arch = gpu_info(settings).arch
        except KerneloptError:
            arch = None
    return search(query, arch=arch, limit=limit, settings=settings, offline=offline, progress=progress)


# --- the machine: harness, GPU, caches -------------------------------------------------------


def harness_binary(settings: Settings) -> Path:
    """The kernelopt-harness executable (raises ToolchainNotFound with how to build it)."""
    from .evaluation.harness import find_harness

    return find_harness(settings.harness)


def open_harness(settings: Settings) -> HarnessProcess:
    """A harness process for the configured device (started on its first request)."""
    from .evaluation.harness import HarnessProcess

    return HarnessProcess(harness_binary(settings), settings.device)


def gpu_info(settings: Settings) -> DeviceInfo:
    """The configured device's properties (raises DeviceUnavailable, ToolchainNotFound)."""
    from .evaluation.device import device_info

    return device_info(harness_binary(settings), settings.device)


def gpu_infos(settings: Settings) -> list[DeviceInfo]:
    """The properties of every device GPU jobs spread over: ``settings.devices``, else every device
    the driver shows (the harness's ``device_count``). Raises DeviceUnavailable (a named ordinal
    that does not exist among them), ToolchainNotFound."""
    from .evaluation.device import device_info

    binary = harness_binary(settings)
    first = device_info(binary, settings.devices[0] if settings.devices else 0)
    ordinals = settings.devices or tuple(range(first.device_count))
    for ordinal in ordinals:
        if ordinal >= first.device_count:
            raise DeviceUnavailable(
                f"device {ordinal} does not exist: this machine shows {first.device_count} CUDA device(s), "
                f"ordinals 0-{first.device_count - 1} (check --devices / KERNELOPT_DEVICES, and CUDA_VISIBLE_DEVICES)"
            )
    return [first if ordinal == first.ordinal else device_info(binary, ordinal) for ordinal in ordinals]


def calibrate_gpu(
    settings: Settings, *, force: bool = False, progress: Callable[[str], None] | None = None
) -> tuple[DeviceInfo, Calibration]:
    """The device's measured copy bandwidth and FP32 rate (cached per device and driver)."""
    from .evaluation.calibrate import calibrate

    info = gpu_info(settings)
    with open_harness(settings) as proc:
        cal = calibrate(
            proc, info, settings.cache_root(), force=force, compile_cache=compile_cache(settings),
            compile_limits=settings.compile_limits(), progress=progress,
        )
    return info, cal


def compile_cache(settings: Settings) -> CompileCache:
    """The disk cache of compiles (``<cache>/compile``, bounded by ``compile_cache_mb``)."""
    return CompileCache(settings.cache_root() / "compile", max_bytes=settings.compile_cache_bytes())


def tune_cache(settings: Settings, *, enabled: bool = True) -> TuneCache:
    """The cache of measured configurations (``<cache>/tune``; memory only when not ``enabled``)."""
    from .tune.cache import TuneCache

    return TuneCache(settings.cache_root() / "tune" if enabled else None, max_bytes=settings.tune_cache_bytes())


# --- compiling ---------------------------------------------------------------------------------


def target_arch(settings: Settings, arch: str | None) -> tuple[str, str]:
    """(arch, where it came from): the argument, the settings, the GPU, else sm_90."""
    if arch:
        return arch, "argument"
    if settings.arch:
        return settings.arch, "setting (KERNELOPT_ARCH)"
    try:
        info = gpu_info(settings)
    except KerneloptError:
        return DEFAULT_ARCH, "default, no GPU found; pass arch to target another GPU"
    return info.arch, f"this GPU ({info.name})"


def compile_file(
    settings: Settings, path: Path, arch: str | None, *, options: Sequence[str] = (),
) -> tuple[CompileResult, CompileOutput]:
    """Compile the kernel in ``path`` for ``arch`` (default: :func:`target_arch`'s) through the
    compile cache; the output has the MCP compile tool's shape."""
    source = read_text(path, "kernel source", KerneloptError)
    target, arch_from = target_arch(settings, arch)
    return compile_source(
        settings, source, target, arch_from=arch_from, options=options, filename=path.name,
        cache=compile_cache(settings),
    )


def compile_source(
    settings: Settings, source: str, arch: str, *, arch_from: str = "argument", options: Sequence[str] = (),
    filename: str = "kernel.cu", cache: CompileCache | None = None,
) -> tuple[CompileResult, CompileOutput]:
    """Compile ``source`` for ``arch`` with NVRTC (no GPU), confined as the settings say.

    Returns the library's result (CUBIN and PTX bytes) and its JSON-safe report.
    """
    result = compile_kernel(
        source, arch, list(options), filename=filename, cache=cache, limits=settings.compile_limits()
    )
    return result, compile_output(result, arch_from)


def cached_compile_source(
    settings: Settings, source: str, arch: str, *, arch_from: str = "argument", options: Sequence[str] = (),
    filename: str = "kernel.cu", cache: CompileCache | None = None,
) -> tuple[CompileResult, CompileOutput] | None:
    """:func:`compile_source`'s answer when the compile cache has it, else None (nothing compiled)."""
    result = cached_compile(
        source, arch, list(options), filename=filename, cache=cache, limits=settings.compile_limits()
    )
    return None if result is None else (result, compile_output(result, arch_from))


def compile_concurrency(settings: Settings) -> int:
    """Compiles that run at once under the settings' limits (the rest wait for the pool's budget)."""
    return default_pool().concurrency(settings.compile_limits())


# --- evaluating ---------------------------------------------------------------------------------


def evaluate_options(
    settings: Settings, *, warmup: int | None = None, iterations: int | None = None, flush_l2: bool | None = None,
    timeout_s: float | None = None, timing_mode: str = "events", blocking: bool = True,
    adaptive_rse: float | None = None, stop: str = "count",
) -> EvaluateOptions:
    """How candidates are checked and timed: the arguments given, else the settings (with
    ``stop="precision"``, ``iterations`` is the most measured launches: see STOP_RULES)."""
    from .evaluation.candidate import EvaluateOptions

    return EvaluateOptions(
        warmup=settings.warmup if warmup is None else warmup,
        iterations=settings.iterations if iterations is None else iterations,
        flush_l2=settings.flush_l2 if flush_l2 is None else flush_l2,
        timeout_s=timeout_s or settings.timeout_s,
        timing_mode=timing_mode, blocking=blocking, adaptive_rse=adaptive_rse, stop=stop,
        fresh_launches=settings.fresh_launches or None, device_inputs=settings.device_inputs,
        device_expected=settings.device_expected, poison_subset=settings.poison_subset,
    )


def open_session(
    settings: Settings, workload: Workload, harness: HarnessProcess | RequestsOnly, device: DeviceInfo | None, *,
    options: EvaluateOptions | None = None, seed: int | None = None, workdir: Path | None = None,
    cache: CompileCache | None = None, progress: ProgressFn | None = None, arch: str | None = None,
) -> Session:
    """An evaluation session of ``workload`` on ``device`` (not prepared yet: inputs, expected
    outputs and the reference's timing come with the first evaluation, or ``prepare``).

    ``device`` None (no GPU here) and a :class:`~kernelopt_mcp.freeze.RequestsOnly` harness make a
    session that only builds requests (replay files); ``arch`` overrides the settings' target.
    """
    from .evaluation.calibrate import peaks_for
    from .evaluation.session import Session

    return Session(
        workload, harness, device, workdir=workdir, seed=seed,
        options=options or evaluate_options(settings), arch=arch or settings.arch, compile_cache=cache,
        compile_limits=settings.compile_limits(), progress=progress,
        peaks=peaks_for(device, settings.cache_root()) if device is not None else None,
    )


def tune_devices(settings: Settings, devices: str | None, *, one: bool) -> list[DeviceInfo]:
    """The devices a tuning run measures on: ``devices`` ("0,1"), else ``settings.devices``, else
    every visible one; ``one`` (a --device given): ``settings.device`` alone."""
    if one:
        return [gpu_info(settings)]
    return gpu_infos(replace(settings, devices=parse_devices(devices)) if devices else settings)


def device_workers(
    settings: Settings, workload: Workload, devices: Sequence[DeviceInfo], *, seed: int, options: EvaluateOptions,
    cache: CompileCache | None,
) -> list[LocalWorker]:
    """A worker per device, each with its own harness process and a session drawn from the same
    ``seed`` (so every device sees the same inputs), prepared on first use. The caller closes them."""
    from .evaluation.harness import HarnessProcess
    from .tune.workers import LocalWorker

    return [
        LocalWorker(open_session(
            settings, workload, HarnessProcess(harness_binary(settings), info.ordinal), info, seed=seed,
            options=options,
            cache=cache,
        ), owned=True)
        for info in devices
    ]


def actor_worker(settings: Settings, workload: Workload, seed: int, options: EvaluateOptions) -> LocalWorker:
    """Inside a Ray actor: a worker on the one GPU Ray gave it (ordinal 0 under its
    CUDA_VISIBLE_DEVICES), with its own harness and a compile cache in a temporary directory of its node."""
    from .tune.workers import LocalWorker

    scratch = Path(tempfile.mkdtemp(prefix="kernelopt-ray-"))
    local = replace(settings, device=0, devices=None, cache_dir=scratch / "cache")
    info = gpu_info(local)
    return LocalWorker(open_session(
        local, workload, open_harness(local), info, seed=seed, options=options, cache=compile_cache(local),
        workdir=scratch / "session",
    ), owned=True)


def ray_tune_workers(
    settings: Settings, workload: Workload, address: str, *, seed: int, options: EvaluateOptions,
) -> tuple[Session, list[Worker]]:
    """One Ray actor per GPU of the cluster at ``address``, and the driver's session: it measures
    nothing (its harness only writes requests), it keys the tune cache by the actors' device."""
    from .freeze import RequestsOnly
    from .tune.ray_workers import connect, ray_workers

    gpus = connect(address)
    workers = ray_workers(partial(actor_worker, settings, workload, seed, options), gpus)
    driver = open_session(settings, workload, RequestsOnly(0), workers[0].device, seed=seed, options=options)
    return driver, list(workers)


@contextmanager
def tune_pool(
    settings: Settings, workload: Workload, *, devices: str | None, one: bool, ray: str | None, seed: int,
    options: EvaluateOptions, progress: ProgressFn | None = None,
) -> Iterator[tuple[Session, list[Worker]]]:
    """The session a tuning run is keyed by and the workers it measures on: one Ray actor per GPU
    of the cluster at ``ray``, else one per local device (:func:`tune_devices`); closed after."""
    from .tune.workers import LocalWorker

    if ray:
        session, workers = ray_tune_workers(settings, workload, ray, seed=seed, options=options)
        try:
            yield session, workers
        finally:
            session.close()
            for worker in workers:
                worker.close()
        return
    infos = tune_devices(settings, devices, one=one)
    cache = compile_cache(settings)
    with open_harness(replace(settings, device=infos[0].ordinal)) as proc, open_session(
        settings, workload, proc, infos[0], seed=seed, options=options, cache=cache, progress=progress,
    ) as session:
        others = device_workers(settings, workload, infos[1:], seed=seed, options=options, cache=cache)
        try:
            yield session, [LocalWorker(session), *others]
        finally:
            for other in others:
                other.close()


def freeze_workload(
    settings: Settings, spec: dict[str, Any], reference_cu: str, initial_cu: str | None, directory: Path, *,
    oracle: Path | None, data_path: Callable[[str], Path], seed: int | None, device: DeviceInfo | None, arch: str,
    cache: CompileCache | None = None, warmup: int | None = None, iterations: int | None = None,
) -> FrozenWorkload:
    """Freeze ``spec`` for a recorded run under ``directory`` (:func:`kernelopt_mcp.freeze.freeze_workload`):
    its replay requests are built by a session opened here like every other, with the settings'
    evaluation options (``warmup`` and ``iterations`` where given)."""
    from . import freeze
    from .freeze import RequestsOnly

    options = evaluate_options(settings, warmup=warmup, iterations=iterations)

    def open_builder(workload: Workload, drawn_seed: int) -> Session:
        return open_session(
            settings, workload, RequestsOnly(settings.device), device, options=options, seed=drawn_seed,
            workdir=directory, cache=cache, arch=arch,
        )

    return freeze.freeze_workload(
        spec, reference_cu, initial_cu, directory, oracle=oracle, data_path=data_path, seed=seed,
        open_builder=open_builder,
    )


def evaluate_kernel(
    session: Session, candidate: Candidate, options: EvaluateOptions | None = None, *, benchmark: bool = True,
    sanitizer: Path | None = None, sanitizer_dir: Path | None = None, cancelled: Callable[[], bool] | None = None,
) -> CheckedEvaluation:
    """Validate (and, with ``benchmark``, time) ``candidate``; with ``sanitizer`` (the
    compute-sanitizer binary), a candidate that passes also runs memcheck, racecheck and
    initcheck on the correctness cases (files under ``sanitizer_dir``, else a temporary
    directory in the session's). Never raises for a bad kernel."""
    from .evaluation.evaluate import evaluate
    from .results import CheckedEvaluation
    from .sanitizer import sanitize_candidate

    result = evaluate(session, candidate, options, benchmark=benchmark)
    if sanitizer is None or not result.ok:
        return CheckedEvaluation(result=result)
    session.progress("running compute-sanitizer memcheck, racecheck, initcheck on the correctness cases", 0, 1)
    binary = session.harness_binary()
    workdir = sanitizer_dir or Path(tempfile.mkdtemp(prefix="sanitizer-", dir=session.workdir))
    try:
        reports = sanitize_candidate(session, candidate, sanitizer, binary, workdir, cancelled=cancelled)
    finally:
        if sanitizer_dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return CheckedEvaluation(result=result, sanitizer=reports)


def torch_baselines(
    settings: Settings, workload: Workload, device: DeviceInfo, options: EvaluateOptions,
    progress: ProgressFn | None = None,
) -> BaselineReport | None:
    """PyTorch eager and ``torch.compile`` on an imported problem's performance cases, timed by
    ``options``' rules on ``device`` in a confined child and cached under the settings' cache root
    (:func:`~kernelopt_mcp.torch_baseline.settings_baselines`); None for any other workload. What
    could not be timed is the report's note, never an exception: an evaluation does not fail for
    want of a baseline."""
    from .torch_baseline import BaselineReport, imported_problem, settings_baselines

    if imported_problem(workload) is None:
        return None
    if progress is not None:
        progress("timing PyTorch eager and torch.compile on the performance cases (a child process; cached after)",
                 0, 1)
    try:
        return settings_baselines(settings, workload, device, options)
    except (KerneloptError, OSError) as exc:
        return BaselineReport.unmeasured(f"PyTorch eager and torch.compile not timed: {exc}")


def beside_pytorch(
    settings: Settings, workload: Workload, device: DeviceInfo, options: EvaluateOptions, checked: CheckedEvaluation,
    progress: ProgressFn | None = None,
) -> TorchComparison | None:
    """PyTorch eager and ``torch.compile`` beside a benchmark of an imported problem that passed
    (:func:`torch_baselines`, compared with its times); None for a result without a score or a
    workload that is not an imported problem."""
    from .torch_baseline import compare

    if not checked.ok or checked.result.score_ms is None:
        return None
    report = torch_baselines(settings, workload, device, options, progress)
    return compare(checked.result, report) if report is not None else None


# --- profiling and tuning ----------------------------------------------------------------------


def default_profile_case(workload: Workload) -> str:
    """The case profiled when none is named: the first performance case, else the last case."""
    perf = workload.spec.performance_cases
    return perf[0].name if perf else workload.spec.cases[-1].name


def profile_kernel(
    session: Session, candidate: Candidate, case: str, out_dir: Path, options: ProfileOptions, *,
    progress: Callable[[str], None] | None = None, cancelled: Callable[[], bool] | None = None,
) -> ProfileSummary:
    """One case of ``candidate`` under Nsight Compute, on the session's inputs."""
    from .profiler import profile_case

    return profile_case(
        session, candidate, case, out_dir, options, harness=session.harness_binary(), progress=progress,
        cancelled=cancelled,
    )


def tune_kernel(
    session: Session, tunable: Tunable, *, options: EvaluateOptions | None = None, strategy: str = "auto",
    budget_evals: int | None = None, budget_s: float | None = None, seed: int = 0, cache: TuneCache | None = None,
    progress: ProgressFn | None = None, early_stop: bool = True, workers: list[Worker] | None = None,
) -> TuneResult:
    """Search ``tunable``'s parameter space on the session's workload and device (``early_stop``:
    stop timing a configuration that provably cannot beat the best so far)."""
    from .tune.tuner import tune

    return tune(
        session, tunable, options=options, strategy=strategy, budget_evals=budget_evals, budget_s=budget_s,
        seed=seed, cache=cache, progress=progress, early_stop=early_stop, workers=workers,
    )
