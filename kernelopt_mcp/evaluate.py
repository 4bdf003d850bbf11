"""Evaluating a candidate kernel: compile, validate every case, benchmark, score.

An :class:`Evaluator` is a session over one workload: it draws the inputs once (from a seed
the model never sees), computes the expected outputs once (NumPy oracle, or the CUDA
reference after it has matched the oracle), times the CUDA reference, and then evaluates
any number of candidates against the same data. Outcomes are data: a
:class:`EvaluationResult` with a :class:`Status` per case and overall.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from . import expr
from .compare import OutputComparison, compare, geometric_mean
from .compiler import CompileCache, CompileResult, compile_kernel
from .dtypes import scalar_raw
from .errors import HarnessError, LaunchConfigError, WorkloadError
from .gpu import DeviceInfo
from .harness import ExitCode, HarnessProcess, raise_for_request_error
from .inputs import CaseInputs, fresh_seed, materialize, write_atomic
from .launch import DeviceLimits, LaunchSpec, ResolvedLaunch, resolve
from .oracle import run_oracle
from .workload import BufferParam, Case, Workload

NOISY_IQR_FRACTION = 0.1


class Status(StrEnum):
    ok = "ok"
    compile_error = "compile_error"
    invalid_launch = "invalid_launch"
    runtime_error = "runtime_error"
    timeout = "timeout"
    mismatch = "mismatch"
    out_of_bounds_write = "out_of_bounds_write"
    input_modified = "input_modified"
    skipped = "skipped"


# When several cases fail differently, the overall status is the most serious one.
_SEVERITY = [
    Status.compile_error, Status.runtime_error, Status.timeout, Status.out_of_bounds_write,
    Status.input_modified, Status.invalid_launch, Status.mismatch, Status.skipped, Status.ok,
]


@dataclass
class Candidate:
    """A kernel to evaluate: source, per-case launch configurations, compile options.

    ``params`` (tunable parameters, see :mod:`kernelopt_mcp.tune`) reach the kernel as
    ``-DNAME=VALUE`` after ``compile_options`` and the launch expressions as names beside the
    case's scalars.
    """

    source: str
    launch: LaunchSpec
    compile_options: list[str] = field(default_factory=list)
    name: str = "candidate"
    params: dict[str, int | float | str] = field(default_factory=dict)

    @property
    def all_compile_options(self) -> list[str]:
        return [*self.compile_options, *(f"-D{k}={v}" for k, v in self.params.items())]


@dataclass
class EvaluateOptions:
    warmup: int = 10
    iterations: int = 100
    flush_l2: bool = True
    timeout_s: float = 60.0
    guard_bytes: int = 65536


class TimingStats(BaseModel):
    warmup: int
    iterations: int
    flush_l2: bool
    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    stdev_ms: float
    iqr_ms: float = Field(description="interquartile range of the per-launch times")
    cv: float = Field(description="coefficient of variation (stdev / mean)")
    noisy: bool = Field(description=f"IQR above {NOISY_IQR_FRACTION:.0%} of the median")

    @classmethod
    def from_times(cls, times_ms: list[float], warmup: int, flush_l2: bool) -> TimingStats:
        q = statistics.quantiles(times_ms, n=4, method="inclusive") if len(times_ms) > 1 else [times_ms[0]] * 3
        median = statistics.median(times_ms)
        mean = statistics.fmean(times_ms)
        stdev = statistics.stdev(times_ms) if len(times_ms) > 1 else 0.0
        iqr = q[2] - q[0]
        return cls(
            warmup=warmup, iterations=len(times_ms), flush_l2=flush_l2, median_ms=median,
            mean_ms=mean, min_ms=min(times_ms), max_ms=max(times_ms), stdev_ms=stdev, iqr_ms=iqr,
            cv=stdev / mean if mean > 0 else 0.0, noisy=median > 0 and iqr > NOISY_IQR_FRACTION * median,
        )


class CudaErrorInfo(BaseModel):
    call: str | None = None
    cuda_error: str | None = None
    code: int | None = None
    message: str | None = None


class CaseResult(BaseModel):
    name: str
    kind: str
    status: Status
    message: str = ""
    launch: dict[str, Any] | None = None
    outputs: list[OutputComparison] = Field(default_factory=list)
    error: CudaErrorInfo | None = None
    guard_violations: list[dict[str, Any]] = Field(default_factory=list)
    modified_inputs: list[dict[str, Any]] = Field(default_factory=list)
    occupancy_blocks_per_sm: int | None = None
    timing: TimingStats | None = None
    reference_median_ms: float | None = None
    speedup: float | None = Field(None, description="reference median / this median")
    flops_per_s: float | None = None
    bytes_per_s: float | None = None


class EvaluationResult(BaseModel):
    status: Status
    message: str
    workload: str
    candidate: str
    source_hash: str | None = None
    seed: int
    device: str | None = None
    arch: str
    compile: CompileResult | None = None
    cases: list[CaseResult] = Field(default_factory=list)
    score_ms: float | None = Field(None, description="geometric mean of performance-case median latencies")
    reference_score_ms: float | None = None
    speedup: float | None = Field(None, description="reference score / this score")
    expected_from: str = ""
    notes: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status is Status.ok


ProgressFn = Callable[[str, int, int], None]


class Evaluator:
    """Evaluates candidates of one workload on one device, with one set of inputs."""

    def __init__(
        self,
        workload: Workload,
        harness: HarnessProcess,
        device: DeviceInfo | None,
        *,
        workdir: Path | None = None,
        seed: int | None = None,
        options: EvaluateOptions | None = None,
        arch: str | None = None,
        compile_cache: CompileCache | None = None,
        progress: ProgressFn | None = None,
    ) -> None:
        self.workload = workload
        self.harness = harness
        self.device = device
        self.options = options or EvaluateOptions()
        self.arch = arch or (device.arch if device else "sm_90")
        self.limits = device.limits if device else DeviceLimits()
        self.seed = fresh_seed() if seed is None else seed
        self._tmp = tempfile.TemporaryDirectory(prefix="kernelopt-") if workdir is None else None
        self.workdir = Path(self._tmp.name) if self._tmp else workdir  # type: ignore[assignment]
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.compile_cache = compile_cache
        self.progress = progress or (lambda message, done, total: None)
        self.inputs: dict[str, CaseInputs] = {}
        self.expected: dict[str, dict[str, np.ndarray]] = {}
        self.expected_from = ""
        self.reference_medians: dict[str, float] = {}
        self.reference_result: EvaluationResult | None = None
        self._reference_outputs: dict[str, dict[str, np.ndarray]] = {}
        self._counter = 0
        self._prepared = False

    # --- preparation -----------------------------------------------------------------

    def prepare(self, *, time_reference: bool = True, oracle_on_all_cases: bool = False) -> None:
        """Draw inputs, compute expected outputs and (optionally) time the CUDA reference.

        Raises:
            WorkloadError: the oracle fails, or the CUDA reference disagrees with it.
        """
        if self._prepared:
            return
        wl = self.workload
        self.progress("generating inputs", 0, 1)
        self.inputs = materialize(wl, self.seed, self.workdir / "inputs")
        has_oracle = wl.oracle_path is not None
        oracle_cases = [
            c for c in wl.spec.cases
            if has_oracle and (oracle_on_all_cases or not wl.reference_cu or c.kind == "correctness")
        ]
        oracle_out = {}
        for i, case in enumerate(oracle_cases):
            self.progress(f"NumPy oracle on {case.name}", i, len(oracle_cases))
            ci = self.inputs[case.name]
            oracle_out[case.name] = run_oracle(wl, case.name, ci.arrays, ci.shapes)
        if wl.reference_cu:
            assert wl.spec.reference.launch is not None
            ref = Candidate(
                wl.reference_cu, wl.spec.reference.launch, wl.spec.reference.compile_options, "reference"
            )
            self.expected = dict(oracle_out)  # the reference is checked against these
            result = self._run(ref, benchmark=time_reference, keep_outputs=True, check=bool(oracle_out))
            if not result.ok:
                failing = [c for c in result.cases if c.status is not Status.ok]
                detail = "; ".join(f"{c.name}: {c.status}: {c.message}" for c in failing[:3])
                raise WorkloadError(
                    f"workload {wl.name!r}: the CUDA reference fails ({result.status}): "
                    f"{detail or result.message}. Fix reference.cu or its launch configuration."
                )
            self.reference_result = result
            self.reference_medians = {
                c.name: c.timing.median_ms for c in result.cases if c.timing is not None
            }
            self.expected = {**self._reference_outputs, **oracle_out}
            self.expected_from = (
                f"NumPy oracle on {len(oracle_out)} case(s); CUDA reference (matched the oracle "
                "on those) elsewhere" if oracle_out else
                "CUDA reference only (no NumPy oracle: not independently checked)"
            )
        else:
            self.expected = oracle_out
            self.expected_from = "NumPy oracle on every case"
        self._prepared = True

    # --- evaluation ------------------------------------------------------------------

    def evaluate(self, candidate: Candidate, *, benchmark: bool = True) -> EvaluationResult:
        """Compile, validate every case and, if all pass and ``benchmark``, time the
        performance cases. Never raises for a bad kernel: the result says what went wrong."""
        self.prepare()
        result = self._run(candidate, benchmark=benchmark, keep_outputs=False, check=True)
        if result.score_ms and self.reference_result and self.reference_result.score_ms:
            result.reference_score_ms = self.reference_result.score_ms
            result.speedup = self.reference_result.score_ms / result.score_ms
        return result

    def _run(
        self, candidate: Candidate, *, benchmark: bool, keep_outputs: bool, check: bool
    ) -> EvaluationResult:
        wl = self.workload
        self._counter += 1
        tag = f"{self._counter:04d}-{candidate.name}"
        base = dict(
            workload=wl.name, candidate=candidate.name, seed=self.seed, arch=self.arch,
            device=self.device.name if self.device else None, expected_from=self.expected_from,
            notes=list(wl.notes),
        )
        compiled, module, problem = self._compile(candidate)
        if module is None:
            return EvaluationResult(
                status=Status.compile_error, message=problem or compiled.summary(), compile=compiled,
                source_hash=compiled.source_hash, **base,
            )
        cases: list[CaseResult] = []
        resolved: dict[str, ResolvedLaunch] = {}
        for case in wl.spec.cases:
            try:
                resolved[case.name] = self._resolve(candidate, compiled, case)
            except LaunchConfigError as exc:
                cases.append(CaseResult(name=case.name, kind=case.kind, status=Status.invalid_launch, message=str(exc)))

        # Phase 1: validate every case, one request each, so a hang or fault is attributable.
        stop: CaseResult | None = None
        runnable = [c for c in wl.spec.cases if c.name in resolved]
        for i, case in enumerate(runnable):
            if stop is not None:
                cases.append(CaseResult(
                    name=case.name, kind=case.kind, status=Status.skipped,
                    message=f"not run: case {stop.name!r} ended the process ({stop.status})",
                    launch=resolved[case.name].as_json(),
                ))
                continue
            self.progress(f"{candidate.name}: validating {case.name}", i, len(runnable))
            cr = self._run_case(module, case, resolved[case.name], tag, timing=False, check=check, keep=keep_outputs)
            cases.append(cr)
            if cr.status in (Status.runtime_error, Status.timeout):
                stop = cr

        order = {c.name: i for i, c in enumerate(wl.spec.cases)}
        cases.sort(key=lambda c: order[c.name])
        status = min((c.status for c in cases), key=_SEVERITY.index, default=Status.ok)
        result = EvaluationResult(
            status=status, message="", compile=compiled, source_hash=compiled.source_hash,
            cases=cases, **base,
        )
        if status is not Status.ok:
            bad = [c for c in cases if c.status is not Status.ok and c.status is not Status.skipped]
            result.message = f"{len(bad)} of {len(cases)} case(s) failed: " + "; ".join(
                f"{c.name}: {c.status.value}" + (f" ({c.message})" if c.message else "") for c in bad[:3]
            )
            return result
        if not benchmark:
            result.message = f"all {len(cases)} cases pass"
            return result

        # Phase 2: time the performance cases (each request validates again before timing).
        perf = [c for c in wl.spec.cases if c.kind == "performance"]
        by_name = {c.name: c for c in cases}
        for i, case in enumerate(perf):
            self.progress(f"{candidate.name}: timing {case.name}", i, len(perf))
            timed = self._run_case(module, case, resolved[case.name], tag, timing=True, check=check, keep=False)
            if timed.status is not Status.ok:
                timed.message = f"failed when re-run for timing: {timed.message}"
                by_name[case.name] = timed
                result.cases = [by_name[c.name] for c in wl.spec.cases]
                result.status = timed.status
                result.message = f"{case.name}: {timed.status.value} ({timed.message})"
                return result
            self._add_rates(timed, case)
            by_name[case.name] = timed
        result.cases = [by_name[c.name] for c in wl.spec.cases]
        medians = [by_name[c.name].timing.median_ms for c in perf if by_name[c.name].timing]  # type: ignore[union-attr]
        if medians:
            result.score_ms = geometric_mean(medians)
        noisy = [c.name for c in result.cases if c.timing and c.timing.noisy]
        result.message = f"all {len(cases)} cases pass" + (
            f"; score {result.score_ms:.4g} ms (geometric mean over {len(medians)} performance cases)"
            if result.score_ms else "; no performance cases to time"
        ) + (f"; noisy timing on {', '.join(noisy)}" if noisy else "")
        return result

    # --- one case --------------------------------------------------------------------

    def _compile(self, candidate: Candidate) -> tuple[CompileResult, Path | None, str | None]:
        """Compile and check the entry point; the module path is None when it cannot run."""
        compiled = compile_kernel(
            candidate.source, self.arch, candidate.all_compile_options, cache=self.compile_cache
        )
        if not compiled.ok:
            return compiled, None, compiled.summary()
        problem = self._check_entry(compiled)
        if problem:
            return compiled, None, problem
        key = hashlib.sha256(json.dumps([compiled.source_hash, compiled.options, compiled.arch]).encode())
        module = self.workdir / "modules" / f"{key.hexdigest()[:24]}.cubin"
        if not module.exists():
            write_atomic(module, compiled.cubin or b"", durable=False)
        return compiled, module, None

    def _resolve(self, candidate: Candidate, compiled: CompileResult, case: Case) -> ResolvedLaunch:
        scalars = {**case.scalars, **{k: v for k, v in candidate.params.items() if not isinstance(v, str)}}
        launch = resolve(candidate.launch.for_case(case.name), scalars, self.limits, case.name)
        static_shared = sum((r.shared_bytes or 0) for r in compiled.resources.values())
        if launch.shared_bytes + static_shared > self.limits.max_shared_bytes_per_block_optin:
            raise LaunchConfigError(
                f"case {case.name!r}: {launch.shared_bytes} B dynamic + {static_shared} B "
                f"static shared memory exceeds the device's "
                f"{self.limits.max_shared_bytes_per_block_optin} B per block"
            )
        return launch

    def request_for(
        self, candidate: Candidate, case_name: str, out_dir: Path, *, timing: bool = False
    ) -> tuple[dict[str, Any] | None, CompileResult, str | None]:
        """The harness request that runs one case of ``candidate`` (for profiling or replay).

        Returns ``(request, compiled, None)``, or ``(None, compiled, problem)`` when the
        candidate does not compile or its launch is invalid for the case.
        """
        self.prepare(time_reference=False)
        compiled, module, problem = self._compile(candidate)
        if module is None:
            return None, compiled, problem
        case = self.workload.spec.case(case_name)
        try:
            launch = self._resolve(candidate, compiled, case)
        except LaunchConfigError as exc:
            return None, compiled, str(exc)
        out_dir.mkdir(parents=True, exist_ok=True)
        return self._request(module, case, launch, out_dir, timing), compiled, None

    def _run_case(
        self, module: Path, case: Case, launch: ResolvedLaunch, tag: str, *, timing: bool, check: bool, keep: bool
    ) -> CaseResult:
        out_dir = self.workdir / "outputs" / tag / case.name
        out_dir.mkdir(parents=True, exist_ok=True)
        request = self._request(module, case, launch, out_dir, timing)
        # Kept so a case can be replayed with the harness alone: kernelopt-harness run FILE
        write_atomic(
            self.workdir / "requests" / tag / f"{case.name}{'.timing' if timing else ''}.json",
            json.dumps(request, indent=1).encode(), durable=False,
        )
        timeout = self._timeout(case, timing)
        reply = self.harness.request(request, timeout)
        cr = CaseResult(name=case.name, kind=case.kind, status=Status.ok, launch=launch.as_json())
        if reply.timed_out:
            cr.status = Status.timeout
            cr.message = (
                f"no answer within {timeout:.0f} s; the harness was killed (an infinite loop, a "
                "deadlock at a barrier, or a kernel far slower than the reference)"
            )
            return cr
        answer = reply.answer
        raise_for_request_error(answer, reply.exit_code)
        if answer is None:
            raise HarnessError(
                f"the harness exited with code {reply.exit_code} without answering; "
                f"stderr: {reply.stderr[-800:]}"
            )
        if answer.get("status") == "error":
            err = answer.get("error") or {}
            cr.status = Status.compile_error
            cr.message = f"{err.get('kind')}: {err.get('message')}" + (
                f"\n{err['log'][:2000]}" if err.get("log") else ""
            )
            return cr
        case_answers = answer.get("cases") or []
        if not case_answers:
            raise HarnessError(f"the harness answered with no case result: {answer}")
        ca = case_answers[0]
        cr.occupancy_blocks_per_sm = ca.get("occupancy_blocks_per_sm")
        if ca.get("error"):
            cr.error = CudaErrorInfo.model_validate(
                {k: ca["error"].get(k) for k in ("call", "cuda_error", "code", "message")}
            )
        cr.guard_violations = ca.get("guard_violations") or []
        cr.modified_inputs = ca.get("modified_inputs") or []
        status = ca.get("status")
        if status == "invalid_launch":
            cr.status = Status.invalid_launch
            cr.message = f"the launch was refused: {_describe(cr.error)}"
            return cr
        if status == "runtime_error":
            cr.status = Status.runtime_error
            cr.message = f"the kernel faulted: {_describe(cr.error)}" + (
                f" (kernel output: {reply.stderr.strip()[-300:]})" if reply.stderr.strip() else ""
            )
            return cr
        if status == "out_of_bounds_write":
            cr.status = Status.out_of_bounds_write
            v = cr.guard_violations[0] if cr.guard_violations else {}
            cr.message = (
                f"wrote outside buffer {v.get('buffer')!r} ({v.get('side')} it, "
                f"{v.get('bytes_changed')} guard bytes changed)"
            )
            return cr
        if status == "input_modified":
            cr.status = Status.input_modified
            m = cr.modified_inputs[0] if cr.modified_inputs else {}
            cr.message = (
                f"modified input buffer {m.get('buffer')!r} ({m.get('bytes_changed')} bytes changed, "
                f"first at byte {m.get('first_offset')})"
            )
            return cr
        if status != "ok":
            raise HarnessError(f"unknown case status {status!r} from the harness")
        if reply.exit_code not in (None, ExitCode.OK):
            raise HarnessError(f"the harness reported ok but exited with code {reply.exit_code}")

        outputs = self._read_outputs(case, out_dir)
        if keep:
            self._reference_outputs[case.name] = outputs
        if check and case.name in self.expected:
            for param in self.workload.signature.outputs:
                cmp = compare(
                    param.name, self.expected[case.name][param.name], outputs[param.name],
                    self.workload.spec.tolerance_for(param.name),
                )
                cr.outputs.append(cmp)
            failed = [o for o in cr.outputs if not o.passed]
            if failed:
                cr.status = Status.mismatch
                cr.message = "; ".join(o.summary() for o in failed)
        if not keep:
            for path in out_dir.glob("*.bin"):
                path.unlink()
        if timing and ca.get("timing"):
            t = ca["timing"]
            cr.timing = TimingStats.from_times(t["times_ms"], t.get("warmup", 0), t.get("flush_l2", True))
            ref = self.reference_medians.get(case.name)
            if ref:
                cr.reference_median_ms = ref
                cr.speedup = ref / cr.timing.median_ms if cr.timing.median_ms > 0 else None
        return cr

    def _request(
        self, module: Path, case: Case, launch: ResolvedLaunch, out_dir: Path, timing: bool
    ) -> dict[str, Any]:
        ci = self.inputs[case.name]
        args: list[dict[str, Any]] = []
        for p in self.workload.signature.params:
            if isinstance(p, BufferParam):
                nbytes = int(np.prod(ci.shapes[p.name], dtype=np.int64)) * p.dtype.itemsize
                arg: dict[str, Any] = {"kind": "buffer", "name": p.name, "role": p.role, "bytes": nbytes}
                if p.is_input:
                    arg["input"] = str(ci.files[p.name].resolve())
                if p.is_output:
                    arg["output"] = str((out_dir / f"{p.name}.bin").resolve())
                if p.role == "out":
                    arg["init"] = p.init
                    arg["poison_byte"] = 0xFF if p.dtype.is_float else 0xA5
                args.append(arg)
            else:
                value = case.scalars[p.name]
                args.append({
                    "kind": "scalar", "name": p.name, "dtype": p.dtype.value,
                    # informational; `raw` is what is passed (JSON has no NaN/Inf)
                    "value": value if math.isfinite(value) else str(value),
                    "raw": scalar_raw(p.dtype, value).hex(),
                })
        request: dict[str, Any] = {
            "protocol": 1,
            "device": self.harness.device,
            "module": str(module.resolve()),
            "entry": self.workload.signature.entry,
            "guard_bytes": self.options.guard_bytes,
            "flush_l2": self.options.flush_l2,
            "cases": [{"name": case.name, "args": args, "launch": launch.as_json()}],
        }
        if timing:
            request["cases"][0]["timing"] = {
                "warmup": self.options.warmup, "iterations": self.options.iterations,
            }
        return request

    def _timeout(self, case: Case, timing: bool) -> float:
        base = self.options.timeout_s
        if not timing:
            return base
        # Allow the launches a generous multiple of the reference's time (or 1 s each).
        per_launch_s = max(self.reference_medians.get(case.name, 0.0) * 1e-3 * 20, 1.0)
        launches = self.options.warmup + self.options.iterations + 1
        return base + min(per_launch_s * launches, 600.0)

    def _read_outputs(self, case: Case, out_dir: Path) -> dict[str, np.ndarray]:
        ci = self.inputs[case.name]
        outputs = {}
        for p in self.workload.signature.outputs:
            path = out_dir / f"{p.name}.bin"
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise HarnessError(f"the harness wrote no output {path}: {exc}") from None
            dtype = p.dtype.numpy.newbyteorder("<")
            outputs[p.name] = np.frombuffer(data, dtype=dtype).astype(p.dtype.numpy, copy=False).reshape(ci.shapes[p.name])
        return outputs

    def _add_rates(self, cr: CaseResult, case: Case) -> None:
        if cr.timing is None or cr.timing.median_ms <= 0:
            return
        seconds = cr.timing.median_ms * 1e-3
        cost = self.workload.spec.cost
        if cost.flops:
            cr.flops_per_s = float(expr.evaluate(cost.flops, case.scalars)) / seconds
        if cost.bytes:
            cr.bytes_per_s = float(expr.evaluate(cost.bytes, case.scalars)) / seconds

    def _check_entry(self, compiled: CompileResult) -> str | None:
        sig = self.workload.signature
        if sig.entry not in compiled.entries:
            found = ", ".join(compiled.entries) or "none"
            return (
                f"no kernel named {sig.entry!r} in the module (kernels found: {found}); declare it "
                f"as {sig.c_prototype()}"
            )
        params = compiled.entries[sig.entry]
        if len(params) != len(sig.params):
            return (
                f"kernel {sig.entry!r} takes {len(params)} parameters but the signature has "
                f"{len(sig.params)}: {sig.c_prototype()}"
            )
        for ptx, p in zip(params, sig.params, strict=True):
            want = 8 if isinstance(p, BufferParam) else p.dtype.itemsize
            if ptx.size_bytes and ptx.size_bytes != want:
                return (
                    f"parameter {p.name!r} is {ptx.size_bytes} bytes in the kernel but {want} in the "
                    f"signature: {sig.c_prototype()}"
                )
        return None

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _describe(error: CudaErrorInfo | None) -> str:
    if error is None:
        return "no details"
    return f"{error.cuda_error or error.code} in {error.call}: {error.message}"


def initial_candidate(workload: Workload) -> Candidate:
    if workload.initial_cu is None or workload.spec.initial is None:
        raise WorkloadError(f"workload {workload.name!r} has no initial kernel; pass a KERNEL.cu")
    return Candidate(
        workload.initial_cu, workload.spec.initial.launch, workload.spec.initial.compile_options, "initial"
    )
