"""Running one candidate through every case of a prepared :class:`Session`.

Phase 1 validates every case: in one harness request where the harness reports progress (each
case held to its own deadline, a hang or fault named by case), else one request each. Phase 2
times the performance cases, each request validating again before timing, with fresh inputs,
checked launches and the check on hidden-seed inputs where the session has them. The CUDA
reference runs through the same path while the session is prepared.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import numpy as np

from ..errors import HarnessError
from ..files import write_atomic
from ..launch import ResolvedLaunch
from ..status import Status
from ..workload import Case
from .candidate import Candidate, EvaluateOptions
from .clocks import probe_device_clocks
from .compare import geometric_mean
from .dataset import DataSet
from .fresh_inputs import (
    case_fresh,
    fresh_checks,
    later_round_checks,
    pick_checked_launches,
    pick_fresh_launches,
    request_seed,
)
from .harness import ExpectedMissing, HarnessReply
from .harness_case import CaseJob, interpret
from .inputs import hidden_seed_checks
from .oracle import OracleLimits
from .outcomes import CaseResult, EvaluationResult, PhaseTimes, worst
from .protocol import RunRequest, TimingRequest, request_json
from .roofline import IMPOSSIBLE_MARGIN, case_cost, case_roofline, flops_bound, roofline_floor_ms, tensor_operands
from .session import Session

__all__ = ["run_candidate"]

Outputs = dict[str, dict[str, np.ndarray]]


def run_candidate(
    session: Session, candidate: Candidate, options: EvaluateOptions, *, benchmark: bool,
    keep: Outputs | None, check: bool, data: DataSet | None = None, cases: list[Case] | None = None,
    beat_ms: float | None = None,
) -> EvaluationResult:
    """Validate ``candidate`` on every case (or ``cases``) and, with ``benchmark``, time it.

    ``keep`` collects the outputs of passing cases (the CUDA reference defining expected
    outputs); ``check`` False runs without comparing (nothing to compare with yet); with
    ``beat_ms``, timing stops once :func:`score_bound_ms` reaches it.
    """
    phases = PhaseTimes()
    start = time.perf_counter()
    result = _run_cases(session, candidate, options, benchmark=benchmark, keep=keep, check=check, data=data,
                        cases=cases, phases=phases, beat_ms=beat_ms)
    result.checks = _checks_that_ran(session, result, options)
    phases.total_ms = (time.perf_counter() - start) * 1e3
    result.phases = phases
    return result


def _since(start: float) -> float:
    return (time.perf_counter() - start) * 1e3


def score_bound_ms(s: Session, timed_ms: list[float], untimed: list[Case], flush_l2: bool) -> float | None:
    """The least score (geometric mean over the performance cases) a candidate can still reach
    with the medians ``timed_ms`` measured and the ``untimed`` cases to go, or None when there
    is no bound. Sound: an untimed case is bounded by its roofline floor over the margin below
    which its time would be rejected as ``impossible_time``, so every score the candidate could
    be ranked with is at least this. Without a floor for every untimed case (no peaks, no cost
    model, L2 not flushed) there is none until all are timed."""
    lows = []
    for case in untimed:
        bytes_, flops = case_cost(s.workload, case)
        floor_flops = flops if flops_bound(s.workload) else None
        floor = roofline_floor_ms(bytes_, floor_flops, s.peaks, tensor_operands(s.workload))[0] if s.peaks else None
        if floor is None or not flush_l2:
            return None
        lows.append(floor / IMPOSSIBLE_MARGIN)
    values = [*timed_ms, *lows]
    return geometric_mean(values) if values and all(v > 0 for v in values) else None


def _run_cases(
    s: Session, candidate: Candidate, options: EvaluateOptions, *, benchmark: bool, keep: Outputs | None,
    check: bool, data: DataSet | None, cases: list[Case] | None, phases: PhaseTimes, beat_ms: float | None,
) -> EvaluationResult:
    wl = s.workload
    data = data or s.data
    all_cases = cases if cases is not None else list(wl.spec.cases)
    tag = s.run_tag(candidate.name)
    base = {
        "workload": wl.name, "candidate": candidate.name, "seed": s.seed, "arch": s.arch,
        "device": s.device.name if s.device else None, "device_ordinal": s.harness.device,
        "device_uuid": s.device.uuid if s.device else None, "expected_from": s.record.expected_from,
        "inputs_from": s.record.inputs_from, "notes": list(wl.notes), "checks": s.checks_in_force(options),
        "tolerances": {p.name: wl.spec.tolerance_for(p.name) for p in wl.spec.signature.outputs},
    }
    start = time.perf_counter()
    built = s.build(candidate, all_cases)
    phases.compile_ms = _since(start)
    compiled, module, resolved = built.compiled, built.module, built.launches
    if module is None:
        return EvaluationResult.model_validate({
            **base, "status": Status.compile_error, "message": built.problem or compiled.summary(), "compile": compiled,
            "source_hash": compiled.source_hash,
        })
    results = [
        CaseResult(name=case.name, kind=case.kind, status=Status.invalid_launch, message=built.invalid[case.name])
        for case in all_cases if case.name in built.invalid
    ]

    # Phase 1: validate every case, in one request where the harness says which case is running
    # (each held to its own deadline), else one request each, so a hang or fault is attributable.
    stop: CaseResult | None = None
    start = time.perf_counter()
    runnable = [c for c in all_cases if c.name in resolved]
    jobs = [
        CaseJob(
            case, resolved[case.name], data, s.out_dir(tag, case),
            repeat=keep is None and s.uses("determinism", options),
            device_compare=check and s.uses("device_compare", options), keep_outputs=keep is not None, check=check,
            keep_on_device=s.kept_keys(data, case) if keep is not None else {},
        )
        for case in runnable
    ]
    answered: list[Answered | None] | None = None
    if len(jobs) > 1 and s.uses("progress", options):
        s.progress(f"{candidate.name}: validating {len(jobs)} cases", 0, len(jobs))
        answered = _submit_batch(s, jobs, module, tag, options, phases)
    for i, job in enumerate(jobs):
        case = job.case
        if stop is not None:
            results.append(CaseResult(
                name=case.name, kind=case.kind, status=Status.skipped,
                message=f"not run: case {stop.name!r} ended the process ({stop.status})",
                launch=resolved[case.name].as_json(),
            ))
            continue
        if answered is None:
            s.progress(f"{candidate.name}: validating {case.name}", i, len(runnable))
            cr, outputs = _submit(s, job, module, tag, options, phases)
        elif (got := answered[i]) is not None:
            cr, outputs = got
        else:
            raise HarnessError(f"the harness answered nothing for case {case.name!r} and no earlier "
                               "case ended the process")
        if keep is not None and outputs and cr.status is Status.ok:
            keep[case.name] = outputs
        results.append(cr)
        if cr.status in (Status.runtime_error, Status.timeout):
            stop = cr

    phases.validate_ms = _since(start)
    order = {c.name: i for i, c in enumerate(all_cases)}
    results.sort(key=lambda c: order[c.name])
    status = worst([c.status for c in results])
    result = EvaluationResult.model_validate({
        **base, "status": status, "message": "", "compile": compiled, "source_hash": compiled.source_hash,
        "cases": results,
    })
    if status is not Status.ok:
        result.message = _failure_message(results)
        return result
    if not benchmark:
        result.message = f"all {len(results)} cases pass"
        return result

    # Phase 2: time the performance cases (each request validates again before timing).
    perf = [c for c in all_cases if c.kind == "performance"]
    by_name = {c.name: c for c in results}
    timing = options.timing_request(s.features)
    start = time.perf_counter()
    timed_ms: list[float] = []
    for i, case in enumerate(perf):
        bound = score_bound_ms(s, timed_ms, perf[i:], options.flush_l2) if beat_ms is not None else None
        if beat_ms is not None and bound is not None and bound >= beat_ms:
            result.cases = [by_name[c.name] for c in all_cases]
            result.stopped_early = (
                f"timing stopped after {i} of {len(perf)} performance cases: with the medians measured and the "
                f"roofline floors of the rest, the score is at least {bound:.4g} ms, not below the "
                f"{beat_ms:.4g} ms to beat"
            )
            result.score_bound_ms = bound
            result.message = f"all {len(results)} cases pass; {result.stopped_early}"
            return result
        s.progress(f"{candidate.name}: timing {case.name}", i, len(perf))
        job = _timing_job(
            s, case, resolved[case.name], data, s.out_dir(tag, case), timing, options,
            candidate=data is s.data and keep is None, check=check,
        )
        timed, _ = _submit(s, job, module, tag, options, phases)
        phases.timing_ms = _since(start)
        timed.wall_ms = (by_name[case.name].wall_ms or 0.0) + (timed.wall_ms or 0.0)
        if timed.status is not Status.ok:
            if timed.status not in (Status.timed_mismatch, Status.inconsistent_timing):
                timed.message = f"failed when re-run for timing: {timed.message}"
            by_name[case.name] = timed
            result.cases = [by_name[c.name] for c in all_cases]
            result.status = timed.status
            result.message = f"{case.name}: {timed.status.value} ({timed.message})"
            return result
        impossible = _add_rates(s, timed, case)
        by_name[case.name] = timed
        if timed.timing is not None:
            timed_ms.append(timed.timing.median_ms)
        if impossible:
            result.cases = [by_name[c.name] for c in all_cases]
            result.status, result.message = timed.status, f"{case.name}: {timed.message}"
            return result
    result.cases = [by_name[c.name] for c in all_cases]
    if s.device is not None and perf:
        result.clocks, result.clocks_note = probe_device_clocks(s.device)
    medians = [t.median_ms for c in perf if (t := by_name[c.name].timing) is not None]
    if medians:
        result.score_ms = geometric_mean(medians)
    noisy = [c.name for c in result.cases if c.timing and c.timing.noisy]
    result.message = f"all {len(results)} cases pass" + (
        f"; score {result.score_ms:.4g} ms (geometric mean over {len(medians)} performance cases)"
        if result.score_ms else "; no performance cases to time"
    ) + (f"; noisy timing on {', '.join(noisy)}" if noisy else "")
    return result


def _timing_job(
    s: Session, case: Case, launch: ResolvedLaunch, data: DataSet, out_dir: Path, timing: TimingRequest,
    options: EvaluateOptions, *, candidate: bool, check: bool,
) -> CaseJob:
    """The timing request of one performance case: fresh inputs for the timed launches, before
    every one or a hidden subset (the reference is timed on them too, so speedups compare like
    with like); for a candidate also the hidden checked launches, the check launch after timing
    and the confirm launch."""
    job = CaseJob(
        case, launch, data, out_dir, timing=timing,
        timed=s.timed if candidate and s.uses("timed_inputs", options) else None,
        device_compare=check and s.uses("device_compare", options), check=check,
    )
    wants_fresh = s.uses("fresh_inputs", options) or s.uses("confirm_launch", options)
    specs = case_fresh(s.workload, case, draw_features=s.draw_features()).specs if wants_fresh else {}
    if specs:
        job.fresh, job.draw_seed, job.fresh_timed = specs, request_seed(), s.uses("fresh_inputs", options)
        subset = s.fresh_subset(options)
        if job.fresh_timed and subset is not None and (timing.mode or "events") == "events":
            # the reference is timed the same way, so speedups compare like with like
            job.fresh_launches = _in_rounds(options.rounds(s.features), pick_fresh_launches, subset[0], subset[0])
            job.poison_subset = s.uses("poison_subset", options)
    if not candidate:
        return job
    job.split = job.fresh_launches is not None
    plan = None
    prepared = s.record
    if prepared.check_module is not None and case.name in prepared.check_launches:
        job.checked = _in_rounds(options.rounds(s.features), pick_checked_launches, options.checked_launches,
                                 later_round_checks(options.checked_launches))
        job.check_launch = prepared.check_launches[case.name]
    elif (plan := prepared.torch_checks.get(case.name)) is not None and s.uses("timed_check", options) and plan.fits(
            timing.warmup, timing.iterations, timing.mode, job.fresh_timed and job.fresh_launches is None):
        job.draw_seed, job.checked, job.checked_expected = plan.planned_seed, list(plan.samples), list(plan.entries)
    elif s.oracle_checks_timed_launches(options):
        job.checked = _in_rounds(options.rounds(s.features), pick_checked_launches, options.oracle_checked_launches,
                                 later_round_checks(options.oracle_checked_launches))
        job.dump_dir, job.oracle_limits = out_dir / "checked", OracleLimits.following(s.compile_limits)
    if specs and s.uses("confirm_launch", options):
        job.confirm = True
        job.consistency = job.timed is not None and (timing.mode or "events") == "events"
        if job.checked_expected and plan is not None and plan.confirm and timing.adaptive is None:
            job.checked_expected += plan.confirm  # PyTorch's outputs for the confirm launch's draw
    return job


def _in_rounds(rounds: list[tuple[int, int]], pick: Callable[[int, int], list[int]], first: int,
               later: int) -> list[int]:
    """``pick(size, count)`` hidden indices in each measuring round, as indices of the whole
    sequence: ``first`` in the first round, ``later`` in each one after it."""
    out: list[int] = []
    for k, (lo, hi) in enumerate(rounds):
        out += [lo + i for i in pick(hi - lo, first if k == 0 else later)]
    return sorted(out)


def _submit(
    s: Session, job: CaseJob, module: Path, tag: str, options: EvaluateOptions, phases: PhaseTimes,
) -> tuple[CaseResult, dict[str, np.ndarray] | None]:
    begin = time.perf_counter()
    request = s.request(job, module, options)
    _keep_request(s, tag, f"{job.case.name}{'.timing' if job.timing else ''}", request)
    timeout = s.timeout_s(job.case, job.timing is not None, options)
    (cr, outputs), _, start = _exchange(
        s, [job], request, lambda: s.request(job, module, options), lambda r: s.harness.request(r, timeout),
        lambda reply: interpret(job, reply, s.workload, timeout), phases, begin,
    )
    cr.wall_ms = _since(start)
    return cr, outputs


Answered = tuple[CaseResult, dict[str, np.ndarray] | None]
Read = TypeVar("Read")


def _exchange(
    s: Session, jobs: list[CaseJob], request: RunRequest, rebuild: Callable[[], RunRequest],
    send: Callable[[RunRequest], HarnessReply], read: Callable[[HarnessReply], Read], phases: PhaseTimes, begin: float,
) -> tuple[Read, HarnessReply, float]:
    """Send ``request`` and ``read`` the reply. When the harness no longer holds expected values
    the jobs compare with (a new process after a fault, or an eviction), the CUDA reference keeps
    them again and ``rebuild()`` is sent once more. Counts one request in ``phases`` (Python's
    share from ``begin``, the reference's own requests left out). Returns what ``read`` made, the
    last reply and when the first send began."""
    start = time.perf_counter()
    reply = send(request)
    round_trip = _since(start)
    try:
        got = read(reply)
    except ExpectedMissing as missing:
        again = time.perf_counter()
        for job in jobs:
            _keep_again(s, job, set(missing.keys))
        begin += time.perf_counter() - again
        again = time.perf_counter()
        reply = send(rebuild())
        round_trip += _since(again)
        got = read(reply)
    phases.add_request(round_trip, _since(begin) - round_trip, reply.answer)
    return got, reply, start


def _submit_batch(
    s: Session, jobs: list[CaseJob], module: Path, tag: str, options: EvaluateOptions, phases: PhaseTimes,
) -> list[Answered | None]:
    """Validate ``jobs`` in one request with ``progress`` (PROTOCOL.md): each case gets its own
    deadline from the harness's line before it. Per job its result, or None where the harness
    did not reach it (an earlier case faulted or hung: the caller skips those). The cases before
    one that hung lost their answers with the killed process, and are run again."""
    begin = time.perf_counter()
    timeouts = [s.timeout_s(job.case, False, options) for job in jobs]
    request = _batch_request(s, jobs, module, options)
    _keep_request(s, tag, "validation", request)
    out, reply, _ = _exchange(
        s, jobs, request, lambda: _batch_request(s, jobs, module, options),
        lambda r: s.harness.request(r, timeouts[0], timeouts), lambda reply: _interpret_batch(s, jobs, reply, timeouts),
        phases, begin,
    )
    hung = next((i for i, got in enumerate(out) if got is not None and got[0].status is Status.timeout), None)
    if reply.timed_out and hung:
        before = jobs[:hung]
        out[:hung] = (_submit_batch(s, before, module, tag, options, phases) if len(before) > 1
                      else [_submit(s, before[0], module, tag, options, phases)])
    return out


def _keep_request(s: Session, tag: str, name: str, request: RunRequest) -> None:
    """Keep a request as ``requests/<tag>/<name>.json``, so it can be replayed with the harness
    alone (kernelopt-harness run FILE; values kept on the device, "kept:KEY", exist only in the
    serve process that kept them). One line of JSON: the indented form costs Python's slow
    encoder a fraction of a millisecond per request."""
    write_atomic(s.workdir / "requests" / tag / f"{name}.json",
                 json.dumps(request_json(request), separators=(",", ":")).encode(), durable=False)


def _batch_request(s: Session, jobs: list[CaseJob], module: Path, options: EvaluateOptions) -> RunRequest:
    """One request running every job's case in order, with progress lines."""
    single = [s.request(job, module, options) for job in jobs]
    common = single[0].model_dump(exclude={"cases"})
    if any(r.model_dump(exclude={"cases"}) != common for r in single[1:]):
        raise HarnessError("internal error: the cases of one validation request need different modules or settings")
    return single[0].model_copy(update={"cases": [r.cases[0] for r in single], "progress": True})


def _interpret_batch(s: Session, jobs: list[CaseJob], reply: HarnessReply,
                     timeouts: list[float]) -> list[Answered | None]:
    """Each job's result from one batch reply (:func:`interpret` on the job's part of it)."""
    out: list[Answered | None] = [None] * len(jobs)
    if reply.timed_out:
        running = min(max(len(reply.started) - 1, 0), len(jobs) - 1)  # the case its progress line named last
        out[running] = interpret(jobs[running], reply, s.workload, timeouts[running])
        return out
    answer = reply.answer
    cases = answer.get("cases") if isinstance(answer, dict) else None
    if not isinstance(answer, dict) or answer.get("status") == "error" or not isinstance(cases, list) or not cases:
        # no case ran (a module that does not load: each case says so), or no answer at all
        return [interpret(job, reply, s.workload, t) for job, t in zip(jobs, timeouts, strict=True)]
    if len(cases) > len(jobs):
        raise HarnessError(f"the harness answered {len(cases)} cases to a request of {len(jobs)}")
    for i, case_answer in enumerate(cases):
        last = i == len(cases) - 1
        name = case_answer.get("name") if isinstance(case_answer, dict) else None
        if name != jobs[i].case.name:
            raise HarnessError(f"the harness answered case {name!r} where {jobs[i].case.name!r} was asked")
        # the process's exit and what kernels printed belong to the last case it ran
        part = replace(reply, answer={**answer, "cases": [case_answer]}, exit_code=reply.exit_code if last else None,
                       stderr=reply.stderr if last else "", stderr_truncated=reply.stderr_truncated if last else 0)
        cr, outputs = interpret(jobs[i], part, s.workload, timeouts[i])
        steps = case_answer.get("steps_ms")
        cr.wall_ms = (sum(v for v in steps.values() if isinstance(v, int | float)) if isinstance(steps, dict)
                      else reply.elapsed_s * 1e3 / len(cases))
        out[i] = (cr, outputs)
    return out


def _keep_again(s: Session, job: CaseJob, missing: set[str]) -> None:
    """Run the CUDA reference on ``job``'s case again, keeping its outputs on the device as the
    expected values of the data sets (validation, hidden) whose keys are ``missing`` (all that
    the job compares against when the harness named none)."""
    reference = s.record.reference
    if reference is None:
        raise HarnessError("internal error: expected values kept on the device, but no CUDA reference to remake them")
    for data in (job.data, job.timed):
        keys = {r.kept for r in data.refs.get(job.case.name, {}).values() if r.kept} if data else set()
        if data is None or not keys or (missing and not keys & missing):
            continue
        again = run_candidate(s, reference, s.options, benchmark=False, keep={}, check=False, data=data,
                              cases=[job.case])
        if not again.ok:
            raise HarnessError(
                f"the CUDA reference failed when run again to remake the expected values of {job.case.name!r} "
                f"({again.status}: {again.message})"
            )


def _checks_that_ran(s: Session, result: EvaluationResult, options: EvaluateOptions) -> list[str]:
    """The result's ``checks``: those in force, less the checks of timed launches that did not
    run for this result (no case timed, or the CUDA reference's own runs, which are not checked
    against themselves)."""
    validation = s.validation_checks(options)
    timed = [(c, c.timing) for c in result.cases if c.timing is not None]
    if not timed:
        return [c for c in s.checks_in_force(options) if c in validation]
    checks = list(validation)
    if any(t.check_launch_ms is not None for _, t in timed):
        checks += hidden_seed_checks(s.workload, {c.name for c, _ in timed})
    names = {c.name for c, _ in timed}
    perf = [c for c in s.workload.spec.performance_cases if c.name in names]
    by_oracle = any(r.get("checked_by") == "NumPy oracle" for c, _ in timed for r in c.reference_checks)
    checked = any(c.checked_launches for c, _ in timed) and not by_oracle
    consistency = any(
        c.confirm_launch_ms is not None and t.check_launch_ms is not None and t.mode == "events" for c, t in timed
    ) and s.uses("confirm_launch", options)
    if s.uses("fresh_inputs", options) or checked or by_oracle or consistency:
        checks += fresh_checks(
            s.workload, perf, redraw=s.uses("fresh_inputs", options),
            reference=checked, checked=_checked_per_case(s, options) if checked else 0, consistency=consistency,
            reference_name="PyTorch" if s.record.torch_checks else "the CUDA reference",
            oracle_checked=options.oracle_checked_launches if by_oracle else 0,
            graph=any(t.mode == "graph" for _, t in timed),
            subset=s.fresh_subset(options) if all(t.mode == "events" for _, t in timed) else None,
            later_rounds=len(options.rounds(s.features)) > 1, draw_features=s.draw_features(),
            poison_subset=s.uses("poison_subset", options),
        )
    return checks


def _checked_per_case(s: Session, options: EvaluateOptions) -> int:
    """The timed launches checked per case, as the checks list says it: PyTorch's plans check fewer
    of a case whose expected outputs would not fit (:func:`.evaluate._checked_count`)."""
    plans = s.record.torch_checks.values()
    return min((len(p.samples) for p in plans), default=options.checked_launches)


def _add_rates(s: Session, cr: CaseResult, case: Case) -> bool:
    """Achieved rates, roofline figures, speedup; ``impossible_time`` below the floor (True then)."""
    if cr.timing is None or cr.timing.median_ms <= 0:
        return False
    seconds = cr.timing.median_ms * 1e-3
    bytes_, flops = case_cost(s.workload, case)
    cr.flops_per_s = flops / seconds if flops else None
    cr.bytes_per_s = bytes_ / seconds if bytes_ else None
    if s.peaks is not None:
        cr.roofline = case_roofline(
            case.name, cr.timing.median_ms, bytes_=bytes_, flops=flops, peaks=s.peaks,
            flush_l2=cr.timing.flush_l2, operands=tensor_operands(s.workload), flops_bound=flops_bound(s.workload),
        )
        if cr.roofline.impossible:
            cr.status, cr.message = Status.impossible_time, cr.roofline.note or "faster than the roofline allows"
    ref = s.record.reference_medians.get(case.name)
    if ref:
        cr.reference_median_ms = ref
        cr.speedup = ref / cr.timing.median_ms
    return cr.status is Status.impossible_time


def _failure_message(cases: list[CaseResult]) -> str:
    bad = [c for c in cases if c.status is not Status.ok and c.status is not Status.skipped]
    return f"{len(bad)} of {len(cases)} case(s) failed: " + "; ".join(
        f"{c.name}: {c.status.value}" + (f" ({c.message})" if c.message else "") for c in bad[:3]
    )
