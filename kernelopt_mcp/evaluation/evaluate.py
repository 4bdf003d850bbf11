"""Evaluating a candidate kernel: prepare a session once, then validate, benchmark and score.

:func:`prepare` draws a :class:`~kernelopt_mcp.evaluation.session.Session`'s inputs once (from
a seed the model never sees), computes the expected outputs once (NumPy oracle, or the CUDA
reference after it has matched the oracle) and times the CUDA reference; :func:`evaluate`
then checks any number of candidates against the same data. Outcomes are data: an
:class:`EvaluationResult` with a :class:`Status` per case and overall.

With a harness of protocol 2 the data stays on the GPU between candidates (the harness's
input cache), outputs are compared on the device, every validation launch is repeated to
catch races, and after timing one more launch runs on inputs drawn from a second, hidden
seed, whose outputs must match too (a kernel that caches results across launches fails).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..compiler import CompileResult, compile_kernel
from ..errors import LaunchConfigError, WorkloadError
from ..status import Status
from ..workload import BufferParam, Case, Tolerance, Workload, case_shape
from .candidate import Candidate, EvaluateOptions
from .compare import thresholds_from
from .dataset import DataSet, ExpectedRef
from .fresh_inputs import case_fresh, pick_checked_launches, request_seed
from .harness_case import CaseJob, build_request
from .inputs import CaseInputs, materialize, new_input_seed
from .oracle import OracleLimits, run_oracle
from .outcomes import EvaluationResult
from .prepared import Prepared
from .protocol import CaseRequest, CheckedExpected, LaunchRequest, RunRequest, TimingRequest
from .runner import run_candidate
from .session import Session
from .support_module import support_module

if TYPE_CHECKING:
    from ..torch_reference import JobOutput, TorchCheckPlan, TorchJob

__all__ = ["ReplayRequest", "case_request", "evaluate", "preparation_text", "prepare"]


def preparation_text(prepare_ms: Mapping[str, float]) -> str:
    """One line of :attr:`Prepared.prepare_ms`: the total and each step (empty before preparing)."""
    if not prepare_ms:
        return ""
    steps = ", ".join(f"{k.replace('_', ' ')} {v:.0f} ms" for k, v in prepare_ms.items() if k != "total")
    return f"prepared once in {prepare_ms.get('total', 0.0) / 1e3:.3g} s: {steps}"


def prepare(session: Session, *, time_reference: bool = True, oracle_on_all_cases: bool = False) -> Prepared:
    """Draw the session's inputs, compute expected outputs and (optionally) time the CUDA
    reference, and hand the record of it all to the session; a session already prepared is
    left as it is.

    Returns:
        The session's record.

    Raises:
        WorkloadError: the oracle fails, or the CUDA reference disagrees with it.
    """
    return session.prepared or session.adopt(_prepare(session, time_reference, oracle_on_all_cases))


def evaluate(
    session: Session, candidate: Candidate, options: EvaluateOptions | None = None, *, benchmark: bool = True,
    beat_ms: float | None = None,
) -> EvaluationResult:
    """Compile, validate every case and, if all pass and ``benchmark``, time the performance
    cases (preparing the session first if needed). ``options`` (default: the session's) may
    change the timing and checks of this evaluation; the session's data stays as prepared.
    With ``beat_ms`` (a search's best score so far), timing stops as soon as the candidate
    provably cannot score below it (``stopped_early``; :func:`.runner.score_bound_ms`).
    Never raises for a bad kernel: the result says what went wrong."""
    prepare(session)
    result = run_candidate(session, candidate, options or session.options, benchmark=benchmark, keep=None, check=True,
                           beat_ms=beat_ms)
    ref = session.reference_result
    if result.score_ms and ref is not None and ref.score_ms:
        result.reference_score_ms = ref.score_ms
        result.speedup = ref.score_ms / result.score_ms
    return result


@dataclass
class ReplayRequest:
    """A self-contained harness request for one case of a candidate (or why there is none)."""

    request: RunRequest | None
    compiled: CompileResult
    problem: str | None = None


def case_request(
    session: Session, candidate: Candidate, case_name: str, out_dir: Path, *, timing: bool = False
) -> ReplayRequest:
    """A harness request that runs one case of ``candidate`` on the session's inputs, for
    profiling, sanitizing or replay with ``kernelopt-harness run``: outputs always written and
    compared with nothing (the caller checks them, if at all), no support module unless the
    case's inputs are drawn on the device (its ``ko_fill`` kernels then run before the
    candidate's launch). Prepares the session's inputs first (without timing the reference).

    Returns the request, or none and the problem when the candidate does not compile or its
    launch is invalid for the case.
    """
    prepare(session, time_reference=False)
    built = session.build(candidate, [c for c in session.workload.spec.cases if c.name == case_name])
    if built.module is None:
        return ReplayRequest(None, built.compiled, built.problem)
    case = session.workload.spec.case(case_name)  # (an unknown name raises here, once compiled)
    if case_name in built.invalid:
        return ReplayRequest(None, built.compiled, built.invalid[case_name])
    launch = built.launches[case_name]
    out_dir.mkdir(parents=True, exist_ok=True)
    o = session.options
    job = CaseJob(
        case, launch, session.data, out_dir,
        timing=TimingRequest(warmup=o.warmup, iterations=o.iterations) if timing else None,
        # no expected values: the request runs in another process (ncu, compute-sanitizer,
        # `kernelopt-harness run`), where values kept on the device by this one do not exist
        check=False,
    )
    request = build_request(
        job, session.workload, device=session.harness.device, module=built.module,
        guard_bytes=o.guard_bytes, flush_l2=o.flush_l2,
        # inputs drawn on the device need the support module's ko_fill (the request's only use of it)
        support=session.record.support if session.data.inputs[case_name].draws else None,
    )
    return ReplayRequest(request, built.compiled)


# --- preparation ----------------------------------------------------------------------------


class _Stopwatch:
    """Host wall ms of each preparation step, in the order the steps end: where "once per
    session" goes (:attr:`Prepared.prepare_ms`)."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self._start = self._mark = time.perf_counter()

    def step(self, name: str, less: float = 0.0) -> None:
        """Add the time since the previous step to ``name``, less the ``less`` ms recorded under
        other names meanwhile."""
        now = time.perf_counter()
        self.ms[name] = self.ms.get(name, 0.0) + (now - self._mark) * 1e3 - less
        self._mark = now

    def total(self) -> dict[str, float]:
        """Every step and the ``total`` since the start."""
        self.ms["total"] = (time.perf_counter() - self._start) * 1e3
        return self.ms


def _prepare(s: Session, time_reference: bool, oracle_on_all_cases: bool) -> Prepared:
    """:func:`prepare`'s record: the data sets and the support module first, then their expected
    values (PyTorch's, or the NumPy oracle's and the CUDA reference's) and the reference's timing."""
    wl = s.workload
    watch = _Stopwatch()
    perf = [c for c in wl.spec.cases if c.kind == "performance"]
    has_oracle = wl.oracle_path is not None
    oracle_cases = [
        c for c in wl.spec.cases
        if has_oracle and (oracle_on_all_cases or not wl.reference_cu or c.kind == "correctness")
    ]
    # the cases whose expected outputs only the CUDA reference makes: their inputs need no host
    # copy, and their expected values are stored as the reference wrote them (no float64 copy)
    reference_only = (frozenset(c.name for c in perf) - {c.name for c in oracle_cases} if wl.reference_cu
                      else frozenset())
    device_cases: frozenset[str] = frozenset()
    if s.uses("input_draw"):
        # PyTorch as the reference draws every input again in its own process: all on the device
        device_cases = frozenset(c.name for c in wl.spec.cases) if wl.torch_problem else reference_only
    native_expected = reference_only if s.uses("expected_dtype") else frozenset()
    s.progress("generating inputs", 0, 1)
    draw_features = s.draw_features()  # structured inputs and choices drawn on the device where the harness can
    data = DataSet("validation", s.seed, materialize(wl, s.seed, s.workdir / "inputs", on_device=device_cases,
                                                     draw_features=draw_features))
    inputs_from = _inputs_from(data, len(wl.spec.cases))
    device_kept: frozenset[str] = frozenset()
    if s.uses("device_expected"):
        # the reference's outputs stay on the device as those cases' expected values: never
        # written, read or stored again on the host (the harness reports what the tolerances need)
        device_kept = frozenset(c for c in native_expected if _fits_the_cache(s, data.inputs[c]))
    watch.step("inputs")
    timed = None
    if s.uses("timed_inputs") and perf:
        seed = new_input_seed()
        s.progress("generating hidden inputs for the timed check", 0, 1)
        timed = DataSet("timed", seed, materialize(
            wl, seed, s.workdir / "inputs-timed", cases={c.name for c in perf}, redraw=True, on_device=device_cases,
            draw_features=draw_features,
        ))
        watch.step("hidden_inputs")
    support = None
    if s.needs_support(device_cases):
        support = support_module(s.arch, s.workdir / "support", limits=s.compile_limits, cache=s.compile_cache)
        watch.step("support_module")
    so_far = Prepared(data, timed, device_cases, native_expected, device_kept, inputs_from=inputs_from, support=support)
    if wl.torch_problem is not None:
        record = _torch_reference(s, so_far, perf)
        watch.step("torch_reference")
    else:
        record = _oracle_and_reference(s, so_far, watch, perf, oracle_cases, time_reference)
    return replace(record, prepare_ms=watch.total())


def _oracle_and_reference(
    s: Session, so_far: Prepared, watch: _Stopwatch, perf: list[Case], oracle_cases: list[Case], time_reference: bool,
) -> Prepared:
    """The expected outputs from the NumPy oracle on ``oracle_cases`` and from the CUDA reference
    (checked against the oracle where both ran) elsewhere, the reference's timing and its module
    for the checked timed launches."""
    wl = s.workload
    data, timed = so_far.data, so_far.timed
    # While the oracle runs: the CUDA reference compiles (NVRTC, in a compile worker; its run
    # below finds the CUBIN in the compile cache), and the harness starts, creating its CUDA
    # context and loading the support module (the harness is not used here until the reference).
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="prepare-ahead") as ahead:
        reference = _reference_candidate(wl) if wl.reference_cu else None
        early: list[Future[object]] = [ahead.submit(
            compile_kernel, reference.source, s.arch, reference.all_compile_options, cache=s.compile_cache,
            limits=s.compile_limits,
        )] if reference is not None else []
        if reference is not None and so_far.support is not None and s.harness.binary is not None:
            early.append(ahead.submit(_warm_harness, s, so_far.support))
        data.expected = _oracle(s, data, oracle_cases)
        data.store_expected(wl, s.workdir / "expected")
        watch.step("oracle")
        for work in early:
            work.exception()  # finished (errors are the reference run's to report, when they recur)
    if reference is not None:
        before = sum(watch.ms.get(k, 0.0) for k in REFERENCE_PARTS)
        record = _run_reference(s, so_far, reference, watch.ms, time_reference, checked=bool(data.expected))
        watch.step("reference", less=sum(watch.ms.get(k, 0.0) for k in REFERENCE_PARTS) - before)
    else:
        record = replace(so_far, expected_from="NumPy oracle on every case")
        if timed is not None:
            timed.expected = _oracle(s, timed, perf)
            watch.step("oracle")
    if timed is not None:
        timed.store_expected(wl, s.workdir / "expected", native=so_far.native_expected)
        watch.step("store_expected")
    return record


def _torch_reference(s: Session, so_far: Prepared, perf: list[Case]) -> Prepared:
    """The expected outputs of a problem written in PyTorch (``reference.torch``): the module run by
    torch on the inputs of every case and of the hidden timed set (:mod:`..torch_reference`), kept
    as files in the output's dtype (float64 for a harness without ``expected_dtype``) and memory-mapped
    for a host comparison; and the plans of the timed launches checked against PyTorch."""
    from ..confined_python import ChildLimits
    from ..torch_reference import REFERENCE_TIMEOUT_S, compute_expected, jobs_for

    wl = s.workload
    imported = wl.spec.imported
    assert imported is not None and imported.outputs
    directory = s.workdir / "expected"
    data, timed = so_far.data, so_far.timed
    sets = {data.name: data}
    jobs = jobs_for(wl, data.name, list(wl.spec.cases), data.inputs, directory)
    for j in jobs:  # the module's own float error on each case, at its real size (one data set is enough)
        j.request["own_error"] = True
    if timed is not None:
        sets[timed.name] = timed
        jobs += jobs_for(wl, timed.name, perf, timed.inputs, directory)
    plans = _torch_check_plans(s, data, perf, directory)
    for jobs_of_plan in plans.values():
        jobs += jobs_of_plan[1]
    s.progress("expected outputs from PyTorch", 0, 1)
    figures, expected_from = compute_expected(
        wl, jobs, device=s.harness.device, support=so_far.support, workdir=s.workdir,
        limits=ChildLimits.following(s.compile_limits, REFERENCE_TIMEOUT_S),
    )
    notes, tolerances = [expected_from], {}
    for name in imported.outputs:  # each output's tolerance, sized by its own error, and its files
        tol = wl.spec.tolerance_for(name)
        wider, own = _real_size_tolerance(
            name, tol, [(j.case.name, figures[(j.set_name, j.case.name)]["outputs"][name]) for j in jobs
                        if j.set_name == data.name], several=len(imported.outputs) > 1)
        if wider is not None:
            tol = tolerances[name] = wider
        notes += [own] if own else []
        for j in jobs:
            if j.set_name not in sets:  # a checked launch's: the harness reads the file, nothing more
                continue
            (o,) = [o for o in j.outputs if o.name == name]
            _keep_expected(s, sets[j.set_name], j.case.name, o, figures[(j.set_name, j.case.name)]["outputs"][name],
                           tol)
    return replace(so_far, expected_from="; ".join(notes),
                   torch_checks={case: plan for case, (plan, _) in plans.items()}, tolerances=tolerances)


def _keep_expected(s: Session, of_set: DataSet, case: str, o: JobOutput, f: Mapping[str, Any],
                   tol: Tolerance) -> None:
    """One output's expected values from PyTorch as the data set keeps them: the file (widened to float64
    for a harness without ``expected_dtype``), its thresholds and a memory map for a host comparison."""
    dtype = s.workload.signature.param(o.name).dtype
    path, kind = o.path, dtype.value
    if kind != "float64" and not s.uses("expected_dtype"):  # an older harness compares float64 values only
        wide = np.fromfile(o.path, dtype=dtype.numpy.newbyteorder("<")).astype("<f8")
        path, kind = o.path.with_suffix(".f64"), "float64"
        wide.tofile(path)
        o.path.unlink()
    of_set.refs.setdefault(case, {})[o.name] = ExpectedRef(
        path.resolve(), thresholds_from(float(f["sum_sq"]), int(f["finite"]), tol), kind,
    )
    on_disk = np.dtype(dtype.numpy if kind != "float64" else np.float64).newbyteorder("<")
    of_set.expected.setdefault(case, {})[o.name] = np.memmap(path, dtype=on_disk, mode="r", shape=o.shape)


def _real_size_tolerance(name: str, tol: Tolerance, measured: list[tuple[str, Mapping[str, Any]]], *,
                         several: bool = False) -> tuple[Tolerance | None, str]:
    """``tol`` widened where the module's own float error at the cases' real sizes (``measured``: per
    case, the reference child's figures) needs more (:func:`~..torch_store.widened`; never a
    tolerance written by hand, source ``workload``), else None; and what a result says of that error
    (or why it was not measured). The import sized ``tol`` on scaled-down cases, whose reductions
    are shorter and round less."""
    from ..torch_store import widened

    errors = [(float(f["own_error"]), case) for case, f in measured if f.get("own_error") is not None]
    skipped = [(case, f["own_error_skipped"]) for case, f in measured if f.get("own_error_skipped")]
    parts, wider = [], None
    if errors:
        needed, case = max(errors)
        parts.append(f"the module's own {f'{name} ' if several else ''}result differs from its float64 result by up "
                     f"to {needed:.2g} of the output's scale (case {case!r})")
        wider = widened(tol, needed) if tol.source != "workload" else None
        if wider is not None:
            parts.append(f"{name}'s tolerance widened to {wider.rtol:.3g} (was {tol.rtol:g}, {tol.source})")
    if skipped:
        cases = ", ".join(f"case {c!r} ({why})" for c, why in skipped)
        parts.append(f"{f'{name}: ' if several else ''}its own error not measured on {cases}")
    return wider, "; ".join(parts)


def _torch_check_plans(
    s: Session, data: DataSet, perf: list[Case], directory: Path,
) -> dict[str, tuple[TorchCheckPlan, list[TorchJob]]]:
    """Per performance case, the plan of its timed launches checked against PyTorch and the child's
    jobs for them (:class:`~..torch_reference.TorchCheckPlan`, on the inputs of ``data``); none
    where the harness cannot take expected values for checked launches, inputs are not redrawn
    before every timed launch, or the timing is not in events mode. The record's ``torch_checks``
    once the child has run."""
    from ..torch_reference import TorchCheckPlan, jobs_for

    o = s.options
    timing = o.timing_request(s.features)
    if ("checked_expected" not in s.features or not s.uses("expected_dtype") or not s.uses("fresh_inputs")
            or not s.uses("timed_check") or s.fresh_subset(o) is not None or (timing.mode or "events") != "events"):
        return {}
    wl = s.workload
    imported = wl.spec.imported
    assert imported is not None and imported.outputs
    outs = [out for name in imported.outputs if isinstance(out := wl.signature.param(name), BufferParam)]
    position = {p.name: i for i, p in enumerate(wl.signature.params)}
    plans: dict[str, tuple[TorchCheckPlan, list[TorchJob]]] = {}
    for case in perf:
        specs = case_fresh(wl, case, draw_features=s.draw_features()).specs
        if not specs:
            continue
        seed = request_seed()
        output_bytes = sum(int(np.prod(case_shape(out, case.scalars), dtype=np.int64)) * out.dtype.itemsize
                           for out in outs)
        samples = pick_checked_launches(timing.iterations, _checked_count(s, o.checked_launches, output_bytes,
                                                                          timing.adaptive is None))
        draws: list[tuple[int | None, int]] = [(sample, o.warmup + sample) for sample in samples]
        if timing.adaptive is None:
            draws.append((None, o.warmup + timing.iterations))  # the confirm launch: the draw after the last
        jobs: list[TorchJob] = []
        entries: list[CheckedExpected] = []
        confirm: list[CheckedExpected] = []
        for sample, draw in draws:
            (job,) = jobs_for(wl, f"checked-{draw}", [case], data.inputs, directory)
            for name, spec in specs.items():
                job.request["buffers"][name]["draw"] = {
                    "seed": seed, "draw": draw, "argument": position[name], "spec": spec.model_dump(exclude_none=True),
                }
                job.request["buffers"][name].pop("file", None)
            jobs.append(job)
            (confirm if sample is None else entries).extend(  # every output of the launch is checked
                CheckedExpected(sample=sample, launch="confirm" if sample is None else None, draw=draw,
                                buffer=out.name, expected=str(out.path.resolve()))
                for out in job.outputs)
        plans[case.name] = (TorchCheckPlan(seed, o.warmup, timing.iterations, samples, entries, confirm), jobs)
    return plans


#: The expected outputs of a case's checked launches (one copy of the output each, written to the
#: working directory, then staged on the device together for the timing) take at most this share of
#: the device's memory and of the directory's free disk; past it fewer launches are checked, never
#: none. A 6 GiB output checked 3 times and by the confirm launch wrote 24 GiB and held it on the GPU.
CHECKED_SHARE = 0.15


def _checked_count(s: Session, count: int, output_bytes: int, confirm: bool) -> int:
    """How many measured launches to check against PyTorch: ``count`` where their expected outputs
    (``output_bytes`` each, one more for the ``confirm`` launch) fit CHECKED_SHARE, else as many as
    fit, at least one."""
    room = CHECKED_SHARE * shutil.disk_usage(s.workdir).free
    if s.device is not None:
        room = min(room, CHECKED_SHARE * s.device.total_memory_bytes)
    fit = int(room // max(1, output_bytes)) - int(confirm)
    return max(1, min(count, fit))


def _warm_harness(s: Session, support: Path) -> None:
    """One launch of the support module's empty kernel: the harness process starts, creates its
    CUDA context (hundreds of ms on a large GPU) and loads the support module, so the
    reference's first request does not wait for them. The answer is not needed; a harness that
    fails here fails the same way on that request, which reports it."""
    whole = str(support.resolve())
    s.harness.request(RunRequest(
        device=s.harness.device, module=whole, entry="ko_empty", guard_bytes=s.options.guard_bytes, flush_l2=False,
        support_module=whole,
        cases=[CaseRequest(name="warm-up", args=[], launch=LaunchRequest(grid=[1, 1, 1], block=[1, 1, 1]))],
    ), s.options.timeout_s)


def _oracle(s: Session, data: DataSet, cases: list[Case]) -> dict[str, dict[str, np.ndarray]]:
    out = {}
    for i, case in enumerate(cases):
        s.progress(f"NumPy oracle on {case.name}", i, len(cases))
        ci = data.inputs[case.name]
        out[case.name] = run_oracle(s.workload, case.name, ci.arrays, ci.shapes,
                                    limits=OracleLimits.following(s.compile_limits))
    return out


# The most a case's outputs may take of the device's memory to be kept there (per data set): the
# validation and hidden sets' copies and a request's inputs then fit the harness's input cache (30%
# of the memory by default) together, so a copy is never dropped as soon as it is kept (a larger
# case's expected values go through files).
KEPT_SHARE = 0.05


def _fits_the_cache(s: Session, ci: CaseInputs) -> bool:
    if s.device is None:
        return False
    outputs = sum(ci.elements(p.name) * p.dtype.itemsize for p in s.workload.signature.outputs)
    return outputs <= KEPT_SHARE * s.device.total_memory_bytes


def _inputs_from(data: DataSet, cases: int) -> str:
    drawn = [name for name, ci in data.inputs.items() if ci.draws]
    if not drawn:
        return "NumPy on the host, every case"
    buffers = sorted({b for name in drawn for b in data.inputs[name].draws})
    return (
        f"drawn on the device (Philox, from the seed) in {len(drawn)} performance case(s) ({', '.join(buffers)}); "
        f"NumPy on the host in the other {cases - len(drawn)}"
    )


# The parts of the reference's run in Prepared.prepare_ms ("reference" is the rest: its checked
# launches' module, the expected values stored): compiling it, validating every case (keeping the
# performance outputs), timing, and the run on the hidden set's inputs.
REFERENCE_PARTS = ("reference_compile", "reference_validation", "reference_timing", "reference_hidden_set")


def _reference_candidate(wl: Workload) -> Candidate:
    launch, source = wl.spec.reference.launch, wl.reference_cu
    if launch is None or source is None:
        raise WorkloadError(f"workload {wl.name!r}: reference.cu needs a reference launch in workload.json")
    return Candidate(source, launch, wl.spec.reference.compile_options, "reference")


def _run_reference(
    s: Session, so_far: Prepared, ref: Candidate, ms: dict[str, float], time_reference: bool, checked: bool,
) -> Prepared:
    """Run the CUDA reference on what is prepared ``so_far`` (validated against the oracle's
    values where ``checked``, timed with ``time_reference``, then on the hidden set's inputs),
    keeping its outputs as the expected values the oracle did not give; its parts' times go to
    ``ms``. Returns the record with the reference in it."""
    wl = s.workload
    data, timed = so_far.data, so_far.timed
    running = s.preparing(replace(so_far, reference=ref))  # a kept value lost meanwhile is remade by ref
    kept: dict[str, dict[str, np.ndarray]] = {}
    result = run_candidate(running, ref, s.options, benchmark=time_reference, keep=kept, check=checked)
    if result.phases is not None:
        ms["reference_compile"] = result.phases.compile_ms
        ms["reference_validation"] = result.phases.validate_ms
        ms["reference_timing"] = result.phases.timing_ms
    if result.ok and timed is not None:
        timed_kept: dict[str, dict[str, np.ndarray]] = {}
        cases = [c for c in wl.spec.cases if c.name in timed.inputs]
        again = run_candidate(running, ref, s.options, benchmark=False, keep=timed_kept, check=False,
                              data=timed, cases=cases)
        if again.phases is not None:
            ms["reference_hidden_set"] = again.phases.total_ms
        if not again.ok:
            result = again
        timed.expected = timed_kept
    if not result.ok:
        failing = [c for c in result.cases if c.status is not Status.ok]
        detail = "; ".join(f"{c.name}: {c.status}: {c.message}" for c in failing[:3])
        raise WorkloadError(
            f"workload {wl.name!r}: the CUDA reference fails ({result.status}): "
            f"{detail or result.message}. Fix reference.cu or its launch configuration."
        )
    check_module, check_launches = _reference_checks(s, ref) if s.checks_timed_launches() else (None, {})
    missing = {name: outs for name, outs in kept.items() if name not in data.expected}
    data.expected.update(missing)
    data.store_expected(wl, s.workdir / "expected", native=so_far.native_expected)
    return replace(
        so_far, reference=ref, reference_result=result, check_module=check_module, check_launches=check_launches,
        reference_medians={c.name: c.timing.median_ms for c in result.cases if c.timing is not None},
        expected_from=(
            f"NumPy oracle on {len(data.expected) - len(missing)} case(s); CUDA reference (matched the "
            "oracle on those) elsewhere" if checked else
            "CUDA reference only (no NumPy oracle: not independently checked)"
        ),
    )


def _reference_checks(s: Session, ref: Candidate) -> tuple[Path, dict[str, LaunchRequest]]:
    """The reference's module and per-case launches, for the checked timed launches (a case
    whose launch has tensor maps has none: a check launch is grid, block and shared memory)."""
    perf = s.workload.spec.performance_cases
    built = s.build(ref, perf)
    if built.module is None:
        raise WorkloadError(f"workload {s.workload.name!r}: the CUDA reference no longer compiles: {built.problem}")
    launches = {}
    for case in perf:
        if case.name in built.invalid:
            raise LaunchConfigError(built.invalid[case.name])
        launch = built.launches[case.name]
        if not launch.tensor_maps:
            launches[case.name] = LaunchRequest.model_validate(launch.dims_json())
    return built.module, launches
