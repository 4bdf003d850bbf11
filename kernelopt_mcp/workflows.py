"""The command line's work, whole: a command's arguments as given (a workload's name or path,
kernel and launch files) in, one result out, over the application layer (:mod:`kernelopt_mcp.app`).

The command line parses and renders only: what its arguments mean (a launch spec beside a kernel,
the starting kernel when none is named, where runs are written), the checks before any GPU work
and the order they run in are here, where a Python caller gets them too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import app
from .errors import KerneloptError, format_validation_error
from .evaluation.candidate import Candidate, stop_rule
from .files import read_json, read_text
from .launch import LaunchSpec

if TYPE_CHECKING:
    from .config import Settings
    from .evaluation.candidate import EvaluateOptions, ProgressFn
    from .evaluation.device import DeviceInfo
    from .evaluation.outcomes import EvaluationResult
    from .ncu_report import ProfileSummary
    from .results import CheckedEvaluation, TorchComparison
    from .tune.spec import Tunable
    from .tune.tuner import TuneResult
    from .workload import Workload

__all__ = [
    "Evaluations", "Tuning", "candidate_from_files", "compare_with_pytorch", "evaluate_files", "profile_files",
    "tune_files", "workload_table",
]


def candidate_from_files(
    workload: Workload, kernel: str | Path | None, launch: str | Path | None, options: Sequence[str] | None = None,
) -> Candidate:
    """The kernel in ``kernel`` with the launch spec in ``launch``, else ``<name>.launch.json``
    beside it (a launch spec, or {"launch": ..., "compile_options": [...]}), else the starting
    kernel's launch; without ``kernel``, the workload's starting kernel (``launch`` in place of
    its own where given). ``options`` are compile options for ``kernel``.

    Raises:
        KerneloptError: a file that cannot be read, a launch spec that does not validate (one
            line per field, naming the file), no launch to use.
        WorkloadError: no ``kernel`` and the workload has no starting kernel.
    """
    if not kernel:
        start = app.candidate(workload, None, None)  # a workload without one says so before the launch file is read
        if launch:
            start.launch = _launch_file(launch)
        return start
    path = Path(kernel)
    source = read_text(path, "kernel source", KerneloptError)
    beside = path.with_name(path.stem + ".launch.json")
    compile_options = list(options or [])
    if launch:
        given = _launch_file(launch)
    elif beside.is_file():
        data = read_json(beside, KerneloptError)
        if isinstance(data, dict) and "launch" in data:
            given = _launch(beside, data["launch"])
            compile_options += list(data.get("compile_options") or [])
        else:
            given = _launch(beside, data)
    elif workload.spec.initial is not None:
        given = workload.spec.initial.launch
    else:
        raise KerneloptError("no launch configuration: pass --launch LAUNCH.json")
    return app.candidate(workload, source, given, compile_options, name=path.stem)


def _launch_file(path: str | Path) -> LaunchSpec:
    return _launch(Path(path), read_json(Path(path), KerneloptError))


def _launch(path: Path, data: object) -> LaunchSpec:
    """A launch spec read from ``path``; an error names the file and the field, one line each."""
    from pydantic import ValidationError

    try:
        return LaunchSpec.model_validate(data)
    except ValidationError as exc:
        raise KerneloptError(format_validation_error(exc, str(path))) from None


def workload_table(settings: Settings) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """(a row per workload that loads: name, path, description, case counts, C prototype; a row
    per workload that does not: name, path, error)."""
    from .config import list_workloads

    rows: list[dict[str, Any]] = []
    broken: list[dict[str, str]] = []
    for name, path in list_workloads(settings).items():
        try:
            wl = app.resolve_workload(settings, path)
        except (KerneloptError, ValueError) as exc:
            broken.append({"name": name, "path": str(path), "error": str(exc)})
            continue
        kinds = [c.kind for c in wl.spec.cases]
        rows.append({
            "name": name, "path": str(path), "description": wl.spec.description,
            "correctness_cases": kinds.count("correctness"), "performance_cases": kinds.count("performance"),
            "signature": wl.signature.c_prototype(),
        })
    return rows, broken


@dataclass(frozen=True)
class Evaluations:
    """Kernels evaluated in one session (the same inputs, expected outputs and reference timing)."""

    workload: Workload
    device: DeviceInfo
    options: EvaluateOptions
    checked: list[CheckedEvaluation]
    reference: EvaluationResult | None
    preparation_ms: dict[str, float]
    benchmarked: bool

    @property
    def ok(self) -> bool:
        """Every kernel passed."""
        return all(checked.ok for checked in self.checked)


def evaluate_files(
    settings: Settings, workload: Workload, kernels: Sequence[str | Path], *, launch: str | Path | None = None,
    options: Sequence[str] | None = None, warmup: int | None = None, iterations: int | None = None,
    flush_l2: bool | None = None, timeout_s: float | None = None, timing_mode: str = "events", blocking: bool = True,
    adaptive_rse: float | None = None, stop: str = "count", seed: int | None = None, workdir: str | Path | None = None,
    benchmark: bool = True, sanitize: bool = False, progress: ProgressFn | None = None,
    on_result: Callable[[int, Candidate, CheckedEvaluation], None] | None = None,
) -> Evaluations:
    """Validate (and, with ``benchmark``, time) each kernel file (:func:`candidate_from_files`;
    none: the starting kernel) in one session; with ``sanitize``, one that passes also runs
    under compute-sanitizer. ``on_result(done, candidate, checked)`` after each kernel.

    Everything that can fail without the GPU (the files, the device, the options, the
    sanitizer) is checked before the harness starts.
    """
    candidates = [candidate_from_files(workload, k, launch, options) for k in kernels] or [
        candidate_from_files(workload, None, launch, options)
    ]
    device = app.gpu_info(settings)
    timing = app.evaluate_options(
        settings, warmup=warmup, iterations=iterations, flush_l2=flush_l2, timeout_s=timeout_s,
        timing_mode=timing_mode, blocking=blocking, adaptive_rse=adaptive_rse, stop=stop,
    )
    sanitizer = app.sanitizer_binary(settings) if sanitize else None
    from .evaluation.evaluate import prepare

    done: list[CheckedEvaluation] = []
    with app.open_harness(settings) as proc, app.open_session(
        settings, workload, proc, device, options=timing, seed=seed, workdir=Path(workdir) if workdir else None,
        progress=progress,
    ) as session:
        prepare(session, time_reference=benchmark)
        for candidate in candidates:
            done.append(app.evaluate_kernel(
                session, candidate, benchmark=benchmark, sanitizer=sanitizer,
                sanitizer_dir=session.workdir / "sanitizer" / candidate.name,
            ))
            if on_result is not None:
                on_result(len(done), candidate, done[-1])
        reference = session.reference_result
        prepared = dict(session.prepare_ms)
    return Evaluations(workload, device, timing, done, reference, prepared, benchmark)


def compare_with_pytorch(
    settings: Settings, evaluations: Evaluations, progress: ProgressFn | None = None,
) -> list[TorchComparison] | None:
    """For an imported PyTorch problem that was benchmarked: PyTorch eager and ``torch.compile``
    timed on its GPU (:func:`kernelopt_mcp.app.torch_baselines`) beside each kernel; else None."""
    if not evaluations.benchmarked:
        return None
    baselines = app.torch_baselines(settings, evaluations.workload, evaluations.device, evaluations.options, progress)
    if baselines is None:
        return None
    from .torch_baseline import compare

    return [compare(checked.result, baselines) for checked in evaluations.checked]


def profile_files(
    settings: Settings, workload: str | Path, *, kernel: str | Path | None = None, launch: str | Path | None = None,
    options: Sequence[str] | None = None, case: str | None = None, output: str | Path | None = None,
    clock_control: str = "none", section_set: str = "curated", timeout_s: float | None = None, seed: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> ProfileSummary:
    """One case (default: :func:`~kernelopt_mcp.app.default_profile_case`) of a kernel file (none:
    the starting kernel) under Nsight Compute, its report under ``output`` (default: a new
    directory under ./kernelopt-profiles). A bad option or a missing ncu is said before any GPU work."""
    wl = app.resolve_workload(settings, workload)
    candidate = candidate_from_files(wl, kernel, launch, options)
    profiling = app.profile_options(settings, clock_control=clock_control, section_set=section_set, timeout_s=timeout_s)
    device = app.gpu_info(settings)
    case = case or app.default_profile_case(wl)
    out_dir = Path(output) if output else app.profile_dir(Path("kernelopt-profiles"), wl, candidate, case)

    def steps(message: str, *_: int) -> None:
        if progress is not None:
            progress(message)

    with app.open_harness(settings) as proc, app.open_session(
        settings, wl, proc, device, seed=seed, progress=steps,
    ) as session:
        return app.profile_kernel(session, candidate, case, out_dir, profiling, progress=progress)


@dataclass(frozen=True)
class Tuning:
    """A finished tuning run and where it was saved."""

    result: TuneResult
    tunable: Tunable
    directory: Path
    written: list[str]


def tune_files(
    settings: Settings, workload: Workload, *, tunable: str | None = None, output: str | Path | None = None,
    devices: str | None = None, one_device: bool = False, ray: str | None = None, warmup: int | None = None,
    iterations: int | None = None, flush_l2: bool | None = None, timeout_s: float | None = None,
    stop: str | None = None, seed: int | None = None, cache: bool = True, strategy: str = "auto",
    budget_evals: int | None = None, budget_s: float | None = None, tune_seed: int = 0, early_stop: bool = True,
    progress: ProgressFn | None = None, steps: ProgressFn | None = None,
) -> Tuning:
    """Tune the workload's tunable spec (``tunable``: a path, or a spec beside the workload; default
    its tunable.json) on ``devices`` (or one Ray actor per GPU of the cluster at ``ray``), all
    from one input seed, and save the result under ``output`` (default: a new directory under
    ./kernelopt-tune). ``stop`` None: "precision", or "count" where a launch count was given.
    ``progress`` per configuration; ``steps`` per evaluation step."""
    from .evaluation.inputs import new_input_seed
    from .tune.report import save_tuning
    from .tune.spec import load_tunable, workload_tunable_path

    spec = load_tunable(workload_tunable_path(workload, tunable), workload)
    run_dir = Path(output) if output else Path("kernelopt-tune") / f"{time.strftime('%Y%m%d-%H%M%S')}-{workload.name}"
    timing = app.evaluate_options(
        settings, warmup=warmup, iterations=iterations, flush_l2=flush_l2, timeout_s=timeout_s,
        stop=stop_rule(stop, warmup=warmup, iterations=iterations),
    )
    seed = new_input_seed() if seed is None else seed  # one seed: every device sees the same inputs
    measured = app.tune_cache(settings, enabled=cache)
    with app.tune_pool(
        settings, workload, devices=devices, one=one_device, ray=ray, seed=seed, options=timing, progress=steps,
    ) as (session, workers):
        result = app.tune_kernel(
            session, spec, strategy=strategy, budget_evals=budget_evals, budget_s=budget_s, seed=tune_seed,
            cache=measured, progress=progress, early_stop=early_stop, workers=workers,
        )
    return Tuning(result, spec, run_dir, save_tuning(result, spec, run_dir))
