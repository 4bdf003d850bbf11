"""One case of one candidate through the harness: the request, and what its answer means.

The runner (:mod:`kernelopt_mcp.evaluation.runner`) decides which cases run and when; this module
builds each harness request (inputs, poisoned outputs, the device-side comparison, the
determinism re-run, the check launch on hidden inputs after timing) and turns the answer into
a :class:`CaseResult`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from ..dtypes import scalar_raw
from ..errors import HarnessError
from ..launch import ResolvedLaunch
from ..status import Status
from ..workload import BufferParam, Case, Workload
from .compare import compare, from_device
from .dataset import DataSet, ExpectedRef
from .fresh_inputs import consistency_problem, split_problem
from .harness import ExitCode, HarnessReply, raise_for_request_error
from .inputs import CaseInputs
from .oracle import OracleLimits, run_oracle
from .outcomes import CaseResult, CudaErrorInfo
from .protocol import (
    AnswerEnvelope,
    BufferArg,
    CaseRequest,
    CheckedExpected,
    CompareEntry,
    CompareThresholds,
    DeterminismEntry,
    FreshSpec,
    HarnessAnswer,
    LaunchRequest,
    RequestError,
    RunRequest,
    ScalarArg,
    TimedCheck,
    TimedDump,
    TimingRequest,
)
from .stats import from_answer
from .tensor_maps import store_tail_hint, tensor_map_requests

Compares = dict[tuple[str, str], CompareEntry]  # (buffer, launch) -> the device's comparison

# What a timed launch's wrong outputs mean: a kernel that caches results or skips work while timed fails there, and
# so does one whose error exceeds the tolerance on some inputs it was not validated on (a few elements just
# outside it, where the validation passed, point to the arithmetic, not to a cache).
TIMED_WRONG = ("results must be computed from the inputs on every launch, never cached or skipped, and be within the "
               "tolerance on any inputs the workload draws, not only the validation's")


@dataclass
class CaseJob:
    """One harness request: a case, its launch, which data, and which checks."""

    case: Case
    launch: ResolvedLaunch
    data: DataSet
    out_dir: Path
    timing: TimingRequest | None = None
    timed: DataSet | None = None  # inputs for the check launch after the measured ones
    repeat: bool = False  # determinism re-run
    device_compare: bool = False
    keep_outputs: bool = False
    check: bool = True  # compare with the expected outputs (False: a reference that defines them)
    # Fresh inputs and checked launches (fresh_inputs.py; timing requests only):
    fresh: dict[str, FreshSpec] = field(default_factory=dict)  # buffer -> how the harness redraws it
    # the seed of the request's device draws (its fresh_seed): hidden, new for every request, or a
    # TorchCheckPlan's planned_seed, whose draws PyTorch computed expected outputs for
    draw_seed: int | None = None
    fresh_timed: bool = True  # redraw before every timed launch (False: only the confirm launch)
    fresh_launches: list[int] | None = None  # redraw before these measured samples only (hidden)
    poison_subset: bool = False  # with fresh_launches: outputs poisoned before those and the checked ones only
    split: bool = False  # judge the launches on new inputs against those on inputs seen before
    checked: list[int] = field(default_factory=list)  # measured samples the CUDA reference checks
    check_launch: LaunchRequest | None = None  # the reference's launch for this case
    confirm: bool = False  # one more fresh launch after timing (timing consistency)
    dump_dir: Path | None = None  # no CUDA reference: the checked launches' files, checked with the oracle
    # PyTorch as the reference (feature checked_expected): the checked launches' expected outputs, computed
    # before the request on the draws those launches get (TorchChecks in evaluate.py)
    checked_expected: list[CheckedExpected] = field(default_factory=list)
    oracle_limits: OracleLimits | None = None  # how that oracle runs (the session's confinement setting)
    consistency: bool = False  # judge check_launch_ms / confirm_launch_ms against the median
    # the CUDA reference defining expected values: output -> the key the harness keeps them under
    keep_on_device: dict[str, str] = field(default_factory=dict)


def build_request(
    job: CaseJob, workload: Workload, *, device: int, module: Path, guard_bytes: int, flush_l2: bool,
    support: Path | None = None, input_cache: bool = False, check_module: Path | None = None,
) -> RunRequest:
    """The harness request for ``job`` (see native_harness/PROTOCOL.md)."""
    case, ci = job.case, job.data.inputs[job.case.name]
    refs = job.data.refs.get(case.name, {})
    if not job.device_compare:  # values kept on the device are compared there, or not at all
        refs = {name: r for name, r in refs.items() if r.kept} if job.check else {}
    timed_ci = job.timed.inputs.get(case.name) if job.timed else None
    timed_refs = job.timed.refs.get(case.name, {}) if job.timed and timed_ci else {}
    args: list[BufferArg | ScalarArg] = []
    for p in workload.signature.params:
        if isinstance(p, BufferParam):
            args.append(_buffer_arg(job, workload, p, ci, timed_ci, refs.get(p.name), timed_refs.get(p.name)))
        else:
            value = case.scalars[p.name]
            args.append(ScalarArg(
                name=p.name, dtype=p.dtype.value,
                # informational; `raw` is what is passed (JSON has no NaN/Inf)
                value=value if math.isfinite(value) else str(value),
                raw=scalar_raw(p.dtype, value).hex(),
            ))
    entry = CaseRequest(name=case.name, args=args, launch=LaunchRequest.model_validate(job.launch.dims_json()))
    if job.launch.tensor_maps:
        entry.tensor_maps = tensor_map_requests(job.launch, workload)
    if job.repeat:
        entry.repeat_validation = True
    if job.timing:
        entry.timing = job.timing
        if job.fresh:
            entry.fresh_seed = job.draw_seed
            entry.fresh_timed = job.fresh_timed
            if job.fresh_launches is not None and job.fresh_timed:
                entry.fresh_launches = job.fresh_launches
                entry.poison_subset = job.poison_subset or None
        if job.checked:
            entry.checked_launches = job.checked
        if job.check_launch and (job.checked or job.confirm):
            entry.check_launch = job.check_launch
        if job.confirm:
            entry.confirm_launch = True
        if job.checked_expected:
            entry.checked_expected = job.checked_expected
        if job.checked and job.dump_dir is not None:
            job.dump_dir.mkdir(parents=True, exist_ok=True)
            entry.checked_dump = _abs(job.dump_dir)
    request = RunRequest(
        device=device, module=_abs(module), entry=workload.signature.entry, guard_bytes=guard_bytes,
        flush_l2=flush_l2, cases=[entry],
    )
    if support is not None:
        request.support_module = _abs(support)
    if input_cache:
        request.input_cache = True
    if check_module is not None and entry.check_launch is not None:
        request.check_module = _abs(check_module)
        request.check_entry = workload.signature.entry
    return request


def _buffer_arg(
    job: CaseJob, workload: Workload, p: BufferParam, ci: CaseInputs, timed_ci: CaseInputs | None,
    ref: ExpectedRef | None, timed_ref: ExpectedRef | None,
) -> BufferArg:
    nbytes = ci.elements(p.name) * p.dtype.itemsize
    arg = BufferArg(name=p.name, role=p.role, bytes=nbytes)
    if p.is_input:
        if p.name in ci.draws:
            arg.dtype = p.dtype.value
            arg.input_draw = ci.draws[p.name]
        else:
            arg.input = _abs(ci.files[p.name])
        if timed_ci is not None and p.name in timed_ci.draws:
            arg.dtype = p.dtype.value
            arg.timed_input_draw = timed_ci.draws[p.name]
        elif timed_ci is not None:
            arg.timed_input = _abs(timed_ci.files[p.name])
        if p.name in job.fresh and job.timing:
            arg.dtype = p.dtype.value
            arg.fresh = job.fresh[p.name]
    if p.is_output:
        arg.output = _abs(job.out_dir / f"{p.name}.bin")
        basis = ref or timed_ref
        if basis is not None:
            arg.dtype = p.dtype.value
            arg.compare = _thresholds(basis, workload.spec.tolerance_for(p.name).rtol)
        if ref:
            arg.expected = ref.location
            if job.keep_outputs:
                arg.write_output = True
        if (ref or timed_ref) and basis is not None and basis.dtype != "float64":
            arg.expected_dtype = basis.dtype  # one field for both files: prepare stores them alike
        if timed_ref:
            arg.timed_expected = timed_ref.location
        if p.name in job.keep_on_device and ref is None:
            arg.dtype = p.dtype.value
            arg.keep_expected = job.keep_on_device[p.name]
        if job.checked and (job.check_launch or job.checked_expected) and arg.compare is None:
            # the checked launches compare with the reference's outputs on the tolerances
            # of the validation's expected values (the same distribution of inputs)
            tolerances = job.data.refs.get(job.case.name, {}).get(p.name)
            if tolerances is None:
                raise HarnessError(f"case {job.case.name!r}: no expected values of {p.name!r} to take tolerances from")
            arg.dtype = p.dtype.value
            arg.compare = _thresholds(tolerances, workload.spec.tolerance_for(p.name).rtol)
        if (job.checked_expected and p.dtype.value != "float64"
                and any(e.buffer == p.name for e in job.checked_expected)):
            arg.expected_dtype = p.dtype.value  # PyTorch wrote them in the output's own dtype
    if p.role == "out":
        arg.init = p.init
        arg.poison_byte = 0xFF if p.dtype.is_float else 0xA5
    return arg


def _abs(path: Path) -> str:
    """``path`` made absolute for the harness, by its text alone (no symlink walk: every path
    here is the session's own, and resolving them cost more than the rest of a request)."""
    return os.path.abspath(path)


def _thresholds(ref: ExpectedRef, rtol: float) -> CompareThresholds:
    return CompareThresholds.model_validate(ref.thresholds.harness_compare(rtol))


def interpret(
    job: CaseJob, reply: HarnessReply, workload: Workload, timeout_s: float
) -> tuple[CaseResult, dict[str, np.ndarray] | None]:
    """What the harness's answer to ``job`` means: the case result, and the outputs when
    they were written (``keep_outputs``, or a mismatch to report in detail)."""
    case = job.case
    cr = CaseResult(name=case.name, kind=case.kind, status=Status.ok, launch=job.launch.as_json())
    if reply.timed_out:
        cr.status = Status.timeout
        cr.message = (
            f"no answer within {timeout_s:.0f} s; the harness was killed (an infinite loop, a "
            "deadlock at a barrier, or a kernel far slower than the reference)"
        )
        kept, printed = reply.printed
        if kept.strip():
            last = kept.strip().splitlines()[-1][-200:]
            cr.message += (
                f"; it printed {_size(printed)} before the deadline (device printf from many threads can "
                f"dominate the run: print from one thread, or drop it), last line: {last!r}"
            )
        return cr, None
    envelope = reply.parsed(AnswerEnvelope)
    refused = envelope.error if envelope is not None and envelope.error is not None else RequestError()
    if refused.kind == "bad_request" and "tensor_maps" in (refused.message or ""):
        # a map the checks here let through but the harness (or the driver's encoder) refuses: the
        # candidate's launch, not the tool, is at fault
        cr.status = Status.invalid_launch
        cr.message = f"the harness refused a tensor map: {refused.message}"
        return cr, None
    raise_for_request_error(envelope, reply.exit_code)
    answer = reply.parsed(HarnessAnswer)
    if answer is None:
        raise HarnessError(
            f"the harness exited with code {reply.exit_code} without answering; stderr: {reply.stderr[-800:]}"
        )
    if answer.status == "error":
        err = answer.error or RequestError()
        cr.status = Status.compile_error
        cr.message = f"{err.kind}: {err.message}" + (f"\n{err.log[:2000]}" if err.log else "")
        return cr, None
    if not answer.cases:
        raise HarnessError(f"the harness answered with no case result: {reply.answer}")
    ca = answer.cases[0]
    cr.occupancy_blocks_per_sm = ca.occupancy_blocks_per_sm
    if ca.error:
        cr.error = CudaErrorInfo.model_validate(ca.error.model_dump(include={"call", "cuda_error", "code", "message"}))
    cr.guard_violations = [_raw(v) for v in ca.guard_violations]
    cr.modified_inputs = [_raw(m) for m in ca.modified_inputs]
    if _harness_status(cr, ca.status, reply):
        if cr.status is Status.out_of_bounds_write and cr.guard_violations:
            cr.message = ((cr.message or "")
                          + store_tail_hint(job.launch, workload, cr.guard_violations[0].get("buffer", "")))
        return cr, None
    if reply.exit_code not in (None, ExitCode.OK):
        raise HarnessError(f"the harness reported ok but exited with code {reply.exit_code}")

    device = {(c.buffer, c.launch): c for c in ca.compares}
    outputs = _read_outputs(job, workload, required=job.keep_outputs or not device)
    _check_outputs(cr, job, workload, device, outputs)
    if cr.status is Status.ok and job.repeat:
        _check_repeat(cr, workload, device, ca.determinism)
    t = ca.timing
    if cr.status is Status.ok and job.timing and t is not None:
        cr.timing = from_answer(t)
        cr.fresh_inputs = list(t.fresh_buffers)
        cr.confirm_launch_ms = t.confirm_launch_ms
        _check_reference(cr, ca.timed_checks, len(t.times_ms),
                         "PyTorch" if job.checked_expected else "the CUDA reference")
        if cr.status is Status.ok and ca.timed_dumps:
            _check_dumps(cr, job, workload, ca.timed_dumps, len(t.times_ms))
        if cr.status is Status.ok and job.timed is not None:
            _check_timed(cr, job, workload, device)
        if cr.status is Status.ok and job.split and job.fresh_launches is not None:
            problem = split_problem(list(t.times_ms), job.fresh_launches)
            if problem:
                cr.status, cr.message = Status.inconsistent_timing, problem
        if cr.status is Status.ok and job.consistency:
            problem = consistency_problem(cr.timing, cr.timing.check_launch_ms, cr.confirm_launch_ms)
            if problem:
                cr.status, cr.message = Status.inconsistent_timing, problem
    if ca.kept and cr.status is Status.ok:  # the reference's outputs, now this case's expected values
        job.data.keep_on_device(workload, case.name, ca.kept)
    return cr, outputs if job.keep_outputs else None


def _raw(part: BaseModel) -> dict[str, Any]:
    """An answer part as the harness sent it (for results that keep the harness's words)."""
    return part.model_dump(mode="json", exclude_unset=True)


def _harness_status(cr: CaseResult, status: str | None, reply: HarnessReply) -> bool:
    """Fill in a failure the harness itself reported; True when the case failed."""
    if status == "invalid_launch":
        cr.status = Status.invalid_launch
        cr.message = f"the launch was refused: {describe(cr.error)}"
    elif status == "runtime_error":
        cr.status = Status.runtime_error
        cr.message = f"the kernel faulted: {describe(cr.error)}" + (
            f" (kernel output: {reply.stderr.strip()[-300:]})" if reply.stderr.strip() else ""
        )
    elif status == "out_of_bounds_write":
        cr.status = Status.out_of_bounds_write
        v = cr.guard_violations[0] if cr.guard_violations else {}
        cr.message = (
            f"wrote outside buffer {v.get('buffer')!r} ({v.get('side')} it, {v.get('bytes_changed')} "
            "guard bytes changed)"
        )
    elif status == "input_modified":
        cr.status = Status.input_modified
        m = cr.modified_inputs[0] if cr.modified_inputs else {}
        cr.message = (
            f"modified input buffer {m.get('buffer')!r} ({m.get('bytes_changed')} bytes changed, "
            f"first at byte {m.get('first_offset')})"
        )
    elif status != "ok":
        raise HarnessError(f"unknown case status {status!r} from the harness")
    return cr.status is not Status.ok


def _read_outputs(job: CaseJob, workload: Workload, *, required: bool) -> dict[str, np.ndarray]:
    """The output files the harness wrote (and removes them); with ``required``, all of them."""
    shapes = job.data.inputs[job.case.name].shapes
    outputs = {}
    for p in workload.signature.outputs:
        path = job.out_dir / f"{p.name}.bin"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            if not required or p.name in job.keep_on_device:
                continue
            raise HarnessError(f"the harness wrote no output {path}") from None
        except OSError as exc:
            raise HarnessError(f"cannot read the harness's output {path}: {exc}") from None
        array = np.frombuffer(data, dtype=p.dtype.numpy.newbyteorder("<")).astype(p.dtype.numpy, copy=False)
        outputs[p.name] = array.reshape(shapes[p.name])
        path.unlink()
    return outputs


def _check_outputs(
    cr: CaseResult, job: CaseJob, workload: Workload,
    device: Compares, outputs: dict[str, np.ndarray],
) -> None:
    """Compare the validation launch's outputs (on the device's figures when it compared)."""
    expected = job.data.expected.get(job.case.name, {})
    refs = job.data.refs.get(job.case.name, {})
    if not (expected or refs) or not job.check:
        return
    for p in workload.signature.outputs:
        tol = workload.spec.tolerance_for(p.name)
        stats, ref = device.get((p.name, "validation")), refs.get(p.name)
        if stats is not None and ref is not None and (stats.mismatches == 0 or p.name not in expected):
            # the device's figures; for values kept on the device (no host copy) a mismatch lists
            # the first mismatching element only, as the harness read it
            cr.outputs.append(from_device(p.name, stats, scale=ref.scale, norm=ref.norm, tol=tol,
                                          shape=job.data.inputs[job.case.name].shapes.get(p.name)))
        elif p.name in outputs and p.name in expected:
            cr.outputs.append(compare(p.name, expected[p.name], outputs[p.name], tol))
        else:
            raise HarnessError(f"case {job.case.name!r}: output {p.name!r} was neither compared nor written")
    failed = [o for o in cr.outputs if not o.passed]
    if failed:
        cr.status = Status.mismatch
        cr.message = "; ".join(o.summary() for o in failed)


def _check_repeat(
    cr: CaseResult, workload: Workload, device: Compares, determinism: list[DeterminismEntry]
) -> None:
    """The determinism re-run: within tolerance always; bit for bit for integer outputs, and for
    float ones where the workload says so (elsewhere a float atomic's reordered sum is legal)."""
    cr.determinism = [_raw(d) for d in determinism]
    for p in workload.signature.outputs:
        stats = device.get((p.name, "repeat"))
        if stats is not None and stats.mismatches:
            cr.status = Status.nondeterministic
            cr.message = (
                f"{p.name}: a second launch on the same inputs gave {stats.mismatches} elements outside "
                "the tolerance (the first launch passed): a race or uninitialised read?"
            )
            return
    bitwise = workload.spec.bitwise_outputs()
    differ = [d for d in determinism if d.bytes_differ and d.buffer in bitwise]
    if differ:
        d = differ[0]
        why = (
            "this workload must be bitwise reproducible (no races, no order-dependent atomics)"
            if workload.spec.deterministic else
            "an integer output must be bitwise reproducible (integer sums do not depend on order: a race?)"
        )
        cr.status = Status.nondeterministic
        cr.message = (
            f"{d.buffer}: a second launch on the same inputs changed {d.bytes_differ} bytes (first at "
            f"byte {d.first_offset}); {why}"
        )


def _check_timed(
    cr: CaseResult, job: CaseJob, workload: Workload, device: Compares
) -> None:
    """The check launch after timing ran on inputs from a hidden seed: its outputs must match."""
    if job.timed is None:
        return
    refs = job.timed.refs.get(job.case.name, {})
    bad = []
    for p in workload.signature.outputs:
        stats, ref = device.get((p.name, "timed")), refs.get(p.name)
        if stats is None or ref is None:
            continue
        cmp = from_device(p.name, stats, scale=ref.scale, norm=ref.norm, tol=workload.spec.tolerance_for(p.name),
                          shape=job.timed.inputs[job.case.name].shapes.get(p.name))
        cr.timed_check.append(cmp)
        if not cmp.passed:
            bad.append(cmp)
    if bad:
        expected = job.timed.expected.get(job.case.name, {})
        detail = bad[0].summary()
        written = _read_outputs(job, workload, required=False)
        if bad[0].name in written and bad[0].name in expected:
            detail = compare(bad[0].name, expected[bad[0].name], written[bad[0].name],
                             workload.spec.tolerance_for(bad[0].name)).summary()
        cr.status = Status.timed_mismatch
        cr.message = ("the outputs of the timed launches are wrong on inputs the kernel had not seen before "
                      f"({detail}); {TIMED_WRONG}")


def _check_reference(cr: CaseResult, checks: list[TimedCheck], samples: int, reference: str) -> None:
    """The checked launches: each measured launch's outputs against ``reference`` (the CUDA reference
    run on the same freshly drawn inputs, or PyTorch's outputs for them), and the confirm launch."""
    cr.reference_checks = [_raw(c) for c in checks]
    cr.checked_launches = len({(c.launch, c.sample) for c in checks})
    bad = [c for c in checks if c.mismatches > 0]
    if not bad:
        return
    c = bad[0]
    where = (
        f"timed launch {c.sample} of {samples} measured" if c.launch == "measured"
        else "the launch after timing"
    )
    inputs = "fresh inputs drawn on the device" if c.draw is not None else "its inputs"
    cr.status = Status.timed_mismatch
    cr.message = (
        f"the outputs of {where}, on {inputs}, were wrong: {c.buffer}: {c.mismatches} of "
        f"{c.elements} elements differ from {reference} run on the same inputs (first at flat index "
        f"{c.first_mismatch}, max abs error {c.max_abs_error}, {c.nonfinite} non-finite); {TIMED_WRONG}"
    )


def _check_dumps(
    cr: CaseResult, job: CaseJob, workload: Workload, dumps: list[TimedDump], samples: int
) -> None:
    """Workloads without a CUDA reference: each checked launch's inputs (redrawn ones from the
    harness's files, the others the case's own) through the NumPy oracle, against its outputs."""
    case, ci = job.case, job.data.inputs[job.case.name]
    for dump in dumps:
        files = dump.files
        try:
            arrays = {
                p.name: _read_array(files["inputs"][p.name], p, ci.shapes[p.name])
                if p.name in files.get("inputs", {}) else ci.arrays[p.name]
                for p in workload.signature.inputs
            }
            actual = {p.name: _read_array(files["outputs"][p.name], p, ci.shapes[p.name])
                      for p in workload.signature.outputs}
        finally:
            for group in files.values():
                for path in group.values():
                    Path(path).unlink(missing_ok=True)
        expected = run_oracle(workload, case.name, arrays, ci.shapes, limits=job.oracle_limits)
        cr.checked_launches += 1
        for p in workload.signature.outputs:
            cmp = compare(p.name, expected[p.name], actual[p.name], workload.spec.tolerance_for(p.name))
            cr.reference_checks.append({
                "launch": "measured", "sample": dump.sample, "draw": dump.draw,
                "time_ms": dump.time_ms, "buffer": p.name, "elements": cmp.elements, "mismatches": cmp.mismatches,
                "max_abs_error": cmp.max_abs_error, "checked_by": "NumPy oracle",
            })
            if not cmp.passed and cr.status is Status.ok:
                inputs = "fresh inputs drawn on the device" if dump.draw is not None else "its inputs"
                cr.status = Status.timed_mismatch
                cr.message = (
                    f"the outputs of timed launch {dump.sample} of {samples} measured, on {inputs}, were wrong "
                    f"against the NumPy oracle on the same inputs: {cmp.summary()}; {TIMED_WRONG}"
                )


def _read_array(path: str, param: BufferParam, shape: tuple[int, ...]) -> np.ndarray:
    data = Path(path).read_bytes()
    return np.frombuffer(data, dtype=param.dtype.numpy.newbyteorder("<")).astype(param.dtype.numpy).reshape(shape)


def describe(error: CudaErrorInfo | None) -> str:
    """A CUDA error as one phrase: ``cuLaunchKernel: CUDA_ERROR_... (message)``."""
    if error is None:
        return "no details"
    return f"{error.call}: {error.cuda_error} ({error.message})"


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB" if n >= 2**10 else f"{n} bytes"
