"""Evaluating a candidate kernel: compile, validate every case, benchmark, score.

An :class:`Evaluator` is a session over one workload: it draws the inputs once (from a seed
the model never sees), computes the expected outputs once (NumPy oracle, or the CUDA
reference after it has matched the oracle), times the CUDA reference, and then evaluates
any number of candidates against the same data. Outcomes are data: a
:class:`EvaluationResult` with a :class:`Status` per case and overall.

With a harness of protocol 2 the data stays on the GPU between candidates (the harness's
input cache), outputs are compared on the device, every validation launch is repeated to
catch races, and after timing one more launch runs on inputs drawn from a second, hidden
seed, whose outputs must match too (a kernel that caches results across launches fails).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .calibrate import device_peaks
from .clocks import probe_device_clocks
from .compare import geometric_mean
from ..compiler import CompileCache, CompileResult, compile_kernel
from ..errors import LaunchConfigError, WorkloadError
from ..gpu import DeviceInfo
from .harness import HarnessProcess, harness_features
from .fresh_inputs import case_fresh, fresh_checks, pick_checked_launches, request_seed
from .harness_case import CaseJob, DataSet, build_request, interpret
from .inputs import CaseInputs, fresh_seed, hidden_seed_checks, materialize
from ..files import write_atomic
from ..launch import DeviceLimits, LaunchSpec, ResolvedLaunch, resolve
from .oracle import run_oracle
from .outcomes import CaseResult, EvaluationResult, Status, TimingStats, worst
from .roofline import Peaks, case_cost, case_roofline
from .support_module import support_module
from ..workload import BufferParam, Case, Workload

__all__ = [
    "Candidate", "CaseResult", "EvaluateOptions", "EvaluationResult", "Evaluator", "Status",
    "TimingStats", "initial_candidate",
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
    """How candidates are checked and timed (defaults: 10 warm-up, 100 measured launches)."""

    warmup: int = 10
    iterations: int = 100
    flush_l2: bool = True
    timeout_s: float = 60.0
    guard_bytes: int = 65536
    timing_mode: str = "events"  # "events": one event pair per launch; "graph": CUDA graph batches
    blocking: bool = True  # hold the stream while launches are queued (no host enqueue gaps)
    adaptive_rse: float | None = None  # repeat until the median's relative standard error is below
    adaptive_max_ms: float = 2000.0
    check_determinism: bool = True  # repeat each validation launch and compare the two
    check_timed_outputs: bool = True  # validate one launch after timing on hidden-seed inputs
    device_compare: bool = True  # compare outputs on the GPU when the harness can
    fresh_inputs: bool = True  # redraw inputs on the device before every timed launch
    checked_launches: int = 3  # hidden measured launches whose outputs the CUDA reference checks
    check_consistency: bool = True  # flag launches on unseen inputs much slower than the median
    oracle_checked_launches: int = 1  # without a CUDA reference: hidden launches checked by the NumPy oracle

    def timing_request(self, features: frozenset[str]) -> dict[str, Any]:
        """The harness's ``timing`` object, using only what this harness supports."""
        timing: dict[str, Any] = {"warmup": self.warmup, "iterations": self.iterations}
        if self.timing_mode == "graph" and "graph" in features:
            timing["mode"] = "graph"
        if "blocking" in features:
            timing["blocking"] = self.blocking
        if self.adaptive_rse is not None and "adaptive" in features:
            timing["adaptive"] = {"target_rse": self.adaptive_rse, "max_ms": self.adaptive_max_ms}
        return timing


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
        peaks: Peaks | None = None,
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
        # roofline figures and the impossible-time check (theoretical peaks unless calibrated ones are given)
        self.peaks = peaks or (device_peaks(device, None) if device else None)
        self.progress = progress or (lambda message, done, total: None)
        binary = getattr(harness, "binary", None)
        self.features: frozenset[str] = harness_features(Path(binary)) if binary else frozenset()
        self.data = DataSet("validation", self.seed, {})
        self.timed: DataSet | None = None  # from a second seed that is never reported
        self.expected_from = ""
        self.reference_medians: dict[str, float] = {}
        self.reference_result: EvaluationResult | None = None
        self._support: Path | None = None
        # the validated CUDA reference that checks candidates' timed launches, and its launches
        self._check_module: Path | None = None
        self._check_launches: dict[str, dict[str, Any]] = {}
        self._counter = 0
        self._prepared = False

    @property
    def inputs(self) -> dict[str, CaseInputs]:
        """The validation inputs of every case."""
        return self.data.inputs

    @property
    def expected(self) -> dict[str, dict[str, np.ndarray]]:
        """The expected outputs of every case with one (validation inputs)."""
        return self.data.expected

    def _uses(self, feature: str) -> bool:
        wanted = {
            "device_compare": self.options.device_compare,
            "determinism": self.options.check_determinism,
            "timed_inputs": self.options.check_timed_outputs,
            "fresh_inputs": self.options.fresh_inputs,
            "timed_check": self.options.checked_launches > 0,
            "confirm_launch": self.options.check_consistency,
            "checked_dump": self.options.oracle_checked_launches > 0,
        }.get(feature, True)
        return wanted and feature in self.features

    def _needs_support(self) -> bool:
        """Whether any check or timing mode in use runs one of the support module's kernels."""
        blocking = self.options.blocking and "blocking" in self.features
        return blocking or any(
            self._uses(f) for f in ("device_compare", "determinism", "timed_inputs", "fresh_inputs", "timed_check")
        )

    def _checks_timed_launches(self) -> bool:
        """Whether candidates' timed launches are checked against the CUDA reference."""
        return self._uses("timed_check") and self.workload.reference_cu is not None

    def _oracle_checks_timed_launches(self) -> bool:
        """Without a CUDA reference: whether checked launches' files go through the NumPy oracle."""
        return (
            self.workload.reference_cu is None and self.workload.oracle_path is not None
            and self._uses("checked_dump") and self._uses("timed_check")
        )

    @property
    def checks(self) -> list[str]:
        """The integrity checks in force; each result lists those that ran for it."""
        checks = self._validation_checks()
        if self._uses("timed_inputs"):
            checks += hidden_seed_checks(self.workload, {c.name for c in self.workload.spec.performance_cases})
        if any(self._uses(f) for f in ("fresh_inputs", "timed_check", "confirm_launch")):
            checks += fresh_checks(
                self.workload, list(self.workload.spec.performance_cases), redraw=self._uses("fresh_inputs"),
                reference=self._checks_timed_launches(),
                checked=self.options.checked_launches if self._uses("timed_check") else 0,
                consistency=self._uses("confirm_launch") and self._uses("timed_inputs") and self.options.timing_mode == "events",
                oracle_checked=self.options.oracle_checked_launches if self._oracle_checks_timed_launches() else 0,
                graph=self.options.timing_mode == "graph" and "graph" in self.features,
            )
        return checks

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
        self.data = DataSet("validation", self.seed, materialize(wl, self.seed, self.workdir / "inputs"))
        perf = [c for c in wl.spec.cases if c.kind == "performance"]
        if self._uses("timed_inputs") and perf:
            seed = fresh_seed()
            self.progress("generating hidden inputs for the timed check", 0, 1)
            names = {c.name for c in perf}
            self.timed = DataSet("timed", seed, materialize(wl, seed, self.workdir / "inputs-timed", cases=names, redraw=True))
        if self._needs_support():
            self._support = support_module(self.arch, self.workdir / "support")

        has_oracle = wl.oracle_path is not None
        oracle_cases = [
            c for c in wl.spec.cases
            if has_oracle and (oracle_on_all_cases or not wl.reference_cu or c.kind == "correctness")
        ]
        self.data.expected = self._oracle(self.data, oracle_cases)
        self.data.store_expected(wl, self.workdir / "expected")
        if wl.reference_cu:
            self._run_reference(time_reference, checked=bool(self.data.expected))
        else:
            self.expected_from = "NumPy oracle on every case"
            if self.timed is not None:
                self.timed.expected = self._oracle(self.timed, perf)
        if self.timed is not None:
            self.timed.store_expected(wl, self.workdir / "expected")
        self._prepared = True

    def _oracle(self, data: DataSet, cases: list[Case]) -> dict[str, dict[str, np.ndarray]]:
        out = {}
        for i, case in enumerate(cases):
            self.progress(f"NumPy oracle on {case.name}", i, len(cases))
            ci = data.inputs[case.name]
            out[case.name] = run_oracle(self.workload, case.name, ci.arrays, ci.shapes)
        return out

    def _run_reference(self, time_reference: bool, checked: bool) -> None:
        wl = self.workload
        assert wl.spec.reference.launch is not None and wl.reference_cu is not None
        ref = Candidate(wl.reference_cu, wl.spec.reference.launch, wl.spec.reference.compile_options, "reference")
        kept: dict[str, dict[str, np.ndarray]] = {}
        result = self._run(ref, benchmark=time_reference, keep=kept, check=checked)
        if result.ok and self.timed is not None:
            timed_kept: dict[str, dict[str, np.ndarray]] = {}
            cases = [c for c in wl.spec.cases if c.name in self.timed.inputs]
            again = self._run(ref, benchmark=False, keep=timed_kept, check=False, data=self.timed, cases=cases)
            if not again.ok:
                result = again
            self.timed.expected = timed_kept
        if not result.ok:
            failing = [c for c in result.cases if c.status is not Status.ok]
            detail = "; ".join(f"{c.name}: {c.status}: {c.message}" for c in failing[:3])
            raise WorkloadError(
                f"workload {wl.name!r}: the CUDA reference fails ({result.status}): "
                f"{detail or result.message}. Fix reference.cu or its launch configuration."
            )
        self.reference_result = result
        if self._checks_timed_launches():
            self._prepare_reference_checks(ref)
        self.reference_medians = {c.name: c.timing.median_ms for c in result.cases if c.timing is not None}
        missing = {name: outs for name, outs in kept.items() if name not in self.data.expected}
        self.data.expected.update(missing)
        self.data.store_expected(wl, self.workdir / "expected")
        self.expected_from = (
            f"NumPy oracle on {len(self.data.expected) - len(missing)} case(s); CUDA reference (matched the "
            "oracle on those) elsewhere" if checked else
            "CUDA reference only (no NumPy oracle: not independently checked)"
        )

    def _prepare_reference_checks(self, ref: Candidate) -> None:
        """The reference's module and per-case launches, for the checked timed launches."""
        compiled, module, problem = self._compile(ref)
        if module is None:
            raise WorkloadError(f"workload {self.workload.name!r}: the CUDA reference no longer compiles: {problem}")
        self._check_module = module
        for case in self.workload.spec.performance_cases:
            self._check_launches[case.name] = self._resolve(ref, compiled, case).as_json()

    def _timing_job(
        self, case: Case, launch: ResolvedLaunch, data: DataSet, out_dir: Path, timing: dict[str, Any], *,
        candidate: bool, check: bool,
    ) -> CaseJob:
        """The timing request of one performance case: fresh inputs for every timed launch (the
        reference is timed on them too, so speedups compare like with like); for a candidate also
        the hidden checked launches, the check launch after timing and the confirm launch."""
        job = CaseJob(
            case, launch, data, out_dir, timing=timing,
            timed=self.timed if candidate and self._uses("timed_inputs") else None,
            device_compare=check and self._uses("device_compare"), check=check,
        )
        specs = case_fresh(self.workload, case).specs if self._uses("fresh_inputs") or self._uses("confirm_launch") else {}
        if specs:
            job.fresh, job.fresh_seed, job.fresh_timed = specs, request_seed(), self._uses("fresh_inputs")
        if not candidate:
            return job
        if self._check_module is not None and case.name in self._check_launches:
            job.checked = pick_checked_launches(self.options.iterations, self.options.checked_launches)
            job.check_launch = self._check_launches[case.name]
        elif self._oracle_checks_timed_launches():
            job.checked = pick_checked_launches(self.options.iterations, self.options.oracle_checked_launches)
            job.dump_dir = out_dir / "checked"
        if specs and self._uses("confirm_launch"):
            job.confirm = True
            job.consistency = job.timed is not None and timing.get("mode", "events") == "events"
        return job

    # --- evaluation ------------------------------------------------------------------

    def evaluate(self, candidate: Candidate, *, benchmark: bool = True) -> EvaluationResult:
        """Compile, validate every case and, if all pass and ``benchmark``, time the
        performance cases. Never raises for a bad kernel: the result says what went wrong."""
        self.prepare()
        result = self._run(candidate, benchmark=benchmark, keep=None, check=True)
        if result.score_ms and self.reference_result and self.reference_result.score_ms:
            result.reference_score_ms = self.reference_result.score_ms
            result.speedup = self.reference_result.score_ms / result.score_ms
        return result

    def _run(
        self, candidate: Candidate, *, benchmark: bool, keep: dict[str, dict[str, np.ndarray]] | None,
        check: bool, data: DataSet | None = None, cases: list[Case] | None = None,
    ) -> EvaluationResult:
        result = self._run_cases(candidate, benchmark=benchmark, keep=keep, check=check, data=data, cases=cases)
        result.checks = self._checks_that_ran(result)
        return result

    def _checks_that_ran(self, result: EvaluationResult) -> list[str]:
        """The result's ``checks``: those in force (:attr:`checks`), less the checks of timed
        launches that did not run for this result (no case timed, or the CUDA reference's own
        runs, which are not checked against themselves)."""
        timed = [c for c in result.cases if c.timing is not None]
        if not timed:
            return [c for c in self.checks if c in self._validation_checks()]
        checks = list(self._validation_checks())
        if any(c.timing.check_launch_ms is not None for c in timed):  # type: ignore[union-attr]
            checks += hidden_seed_checks(self.workload, {c.name for c in timed})
        perf = [c for c in self.workload.spec.performance_cases if c.name in {t.name for t in timed}]
        by_oracle = any(r.get("checked_by") == "NumPy oracle" for c in timed for r in c.reference_checks)
        checked = any(c.checked_launches for c in timed) and not by_oracle
        consistency = any(
            c.confirm_launch_ms is not None and c.timing.check_launch_ms is not None and c.timing.mode == "events"  # type: ignore[union-attr]
            for c in timed
        ) and self._uses("confirm_launch")
        if self._uses("fresh_inputs") or checked or by_oracle or consistency:
            checks += fresh_checks(
                self.workload, perf, redraw=self._uses("fresh_inputs"),
                reference=checked, checked=self.options.checked_launches if checked else 0, consistency=consistency,
                oracle_checked=self.options.oracle_checked_launches if by_oracle else 0,
                graph=any(c.timing.mode == "graph" for c in timed),  # type: ignore[union-attr]
            )
        return checks

    def _validation_checks(self) -> list[str]:
        checks = ["fresh inputs per session", "poisoned outputs", "guard bytes", "inputs unchanged"]
        if self._uses("determinism"):
            checks.append("repeat launch" + (" (bitwise)" if self.workload.spec.deterministic else " (tolerance)"))
        return checks

    def _run_cases(
        self, candidate: Candidate, *, benchmark: bool, keep: dict[str, dict[str, np.ndarray]] | None,
        check: bool, data: DataSet | None = None, cases: list[Case] | None = None,
    ) -> EvaluationResult:
        wl = self.workload
        data = data or self.data
        all_cases = cases if cases is not None else list(wl.spec.cases)
        self._counter += 1
        tag = f"{self._counter:04d}-{candidate.name}"
        base: dict[str, Any] = {
            "workload": wl.name, "candidate": candidate.name, "seed": self.seed, "arch": self.arch,
            "device": self.device.name if self.device else None, "expected_from": self.expected_from,
            "notes": list(wl.notes), "checks": self.checks,
        }
        compiled, module, problem = self._compile(candidate)
        if module is None:
            return EvaluationResult(
                status=Status.compile_error, message=problem or compiled.summary(), compile=compiled,
                source_hash=compiled.source_hash, **base,
            )
        results: list[CaseResult] = []
        resolved: dict[str, ResolvedLaunch] = {}
        for case in all_cases:
            try:
                resolved[case.name] = self._resolve(candidate, compiled, case)
            except LaunchConfigError as exc:
                results.append(CaseResult(name=case.name, kind=case.kind, status=Status.invalid_launch, message=str(exc)))

        # Phase 1: validate every case, one request each, so a hang or fault is attributable.
        stop: CaseResult | None = None
        runnable = [c for c in all_cases if c.name in resolved]
        for i, case in enumerate(runnable):
            if stop is not None:
                results.append(CaseResult(
                    name=case.name, kind=case.kind, status=Status.skipped,
                    message=f"not run: case {stop.name!r} ended the process ({stop.status})",
                    launch=resolved[case.name].as_json(),
                ))
                continue
            self.progress(f"{candidate.name}: validating {case.name}", i, len(runnable))
            job = CaseJob(
                case, resolved[case.name], data, self._out_dir(tag, case), repeat=keep is None and self._uses("determinism"),
                device_compare=check and self._uses("device_compare"), keep_outputs=keep is not None, check=check,
            )
            cr, outputs = self._submit(job, module, tag)
            if keep is not None and outputs is not None and cr.status is Status.ok:
                keep[case.name] = outputs
            results.append(cr)
            if cr.status in (Status.runtime_error, Status.timeout):
                stop = cr

        order = {c.name: i for i, c in enumerate(all_cases)}
        results.sort(key=lambda c: order[c.name])
        status = worst([c.status for c in results])
        result = EvaluationResult(
            status=status, message="", compile=compiled, source_hash=compiled.source_hash, cases=results, **base,
        )
        if status is not Status.ok:
            result.message = _failure_message(results)
            return result
        if not benchmark:
            result.message = f"all {len(results)} cases pass"
            return result

        # Phase 2: time the performance cases (each request validates again before timing).
        perf = [c for c in all_cases if c.kind == "performance"]
        by_name = {c.name: c for c in results}
        timing = self.options.timing_request(self.features)
        for i, case in enumerate(perf):
            self.progress(f"{candidate.name}: timing {case.name}", i, len(perf))
            job = self._timing_job(
                case, resolved[case.name], data, self._out_dir(tag, case), timing,
                candidate=data is self.data and keep is None, check=check,
            )
            timed, _ = self._submit(job, module, tag)
            if timed.status is not Status.ok:
                if timed.status not in (Status.timed_mismatch, Status.inconsistent_timing):
                    timed.message = f"failed when re-run for timing: {timed.message}"
                by_name[case.name] = timed
                result.cases = [by_name[c.name] for c in all_cases]
                result.status = timed.status
                result.message = f"{case.name}: {timed.status.value} ({timed.message})"
                return result
            self._add_rates(timed, case)
            by_name[case.name] = timed
            if timed.status is Status.impossible_time:
                result.cases = [by_name[c.name] for c in all_cases]
                result.status, result.message = timed.status, f"{case.name}: {timed.message}"
                return result
        result.cases = [by_name[c.name] for c in all_cases]
        if self.device is not None and perf:
            result.clocks, result.clocks_note = probe_device_clocks(self.device)
        medians = [by_name[c.name].timing.median_ms for c in perf if by_name[c.name].timing]  # type: ignore[union-attr]
        if medians:
            result.score_ms = geometric_mean(medians)
        noisy = [c.name for c in result.cases if c.timing and c.timing.noisy]
        result.message = f"all {len(results)} cases pass" + (
            f"; score {result.score_ms:.4g} ms (geometric mean over {len(medians)} performance cases)"
            if result.score_ms else "; no performance cases to time"
        ) + (f"; noisy timing on {', '.join(noisy)}" if noisy else "")
        return result

    # --- one case --------------------------------------------------------------------

    def _out_dir(self, tag: str, case: Case) -> Path:
        out_dir = self.workdir / "outputs" / tag / case.name
        out_dir.mkdir(parents=True, exist_ok=True)
        return out_dir

    def _submit(self, job: CaseJob, module: Path, tag: str) -> tuple[CaseResult, dict[str, np.ndarray] | None]:
        request = self._build(job, module)
        # Kept so a case can be replayed with the harness alone: kernelopt-harness run FILE
        write_atomic(
            self.workdir / "requests" / tag / f"{job.case.name}{'.timing' if job.timing else ''}.json",
            json.dumps(request, indent=1).encode(), durable=False,
        )
        timeout = self._timeout(job.case, job.timing is not None)
        reply = self.harness.request(request, timeout)
        return interpret(job, reply, self.workload, timeout)

    def _build(self, job: CaseJob, module: Path) -> dict[str, Any]:
        return build_request(
            job, self.workload, device=self.harness.device, module=module,
            guard_bytes=self.options.guard_bytes, flush_l2=self.options.flush_l2,
            # every request names it once loaded: the harness keeps one module per path, and a request
            # without it would unload it (and blocking timing cannot run without its ko_spin)
            support=self._support,
            input_cache="input_cache" in self.features,
            check_module=self._check_module,
        )

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
        """A self-contained harness request that runs one case of ``candidate`` (for
        profiling, sanitizing or replay with ``kernelopt-harness run``): files only, no
        support module, outputs always written.

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
        job = CaseJob(
            case, launch, self.data, out_dir,
            timing={"warmup": self.options.warmup, "iterations": self.options.iterations} if timing else None,
        )
        request = build_request(
            job, self.workload, device=self.harness.device, module=module,
            guard_bytes=self.options.guard_bytes, flush_l2=self.options.flush_l2,
        )
        return request, compiled, None

    def _timeout(self, case: Case, timing: bool) -> float:
        base = self.options.timeout_s
        if not timing:
            return base
        # Allow the launches a generous multiple of the reference's time (or 1 s each).
        per_launch_s = max(self.reference_medians.get(case.name, 0.0) * 1e-3 * 20, 1.0)
        # + the check and confirm launches, and the reference on each checked launch
        launches = self.options.warmup + self.options.iterations + 3 + self.options.checked_launches
        adaptive_s = self.options.adaptive_max_ms * 1e-3 * 2 if self.options.adaptive_rse else 0.0
        return base + adaptive_s + min(per_launch_s * launches, 600.0)

    def _add_rates(self, cr: CaseResult, case: Case) -> None:
        """Achieved rates, roofline figures, speedup; ``impossible_time`` below the floor."""
        if cr.timing is None or cr.timing.median_ms <= 0:
            return
        seconds = cr.timing.median_ms * 1e-3
        bytes_, flops = case_cost(self.workload, case)
        cr.flops_per_s = flops / seconds if flops else None
        cr.bytes_per_s = bytes_ / seconds if bytes_ else None
        if self.peaks is not None:
            cr.roofline = case_roofline(
                case.name, cr.timing.median_ms, bytes_=bytes_, flops=flops, peaks=self.peaks,
                flush_l2=cr.timing.flush_l2,
            )
            if cr.roofline.impossible:
                cr.status, cr.message = Status.impossible_time, cr.roofline.note or "faster than the roofline allows"
        ref = self.reference_medians.get(case.name)
        if ref:
            cr.reference_median_ms = ref
            cr.speedup = ref / cr.timing.median_ms

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


def _failure_message(cases: list[CaseResult]) -> str:
    bad = [c for c in cases if c.status is not Status.ok and c.status is not Status.skipped]
    return f"{len(bad)} of {len(cases)} case(s) failed: " + "; ".join(
        f"{c.name}: {c.status.value}" + (f" ({c.message})" if c.message else "") for c in bad[:3]
    )


def initial_candidate(workload: Workload) -> Candidate:
    if workload.initial_cu is None or workload.spec.initial is None:
        raise WorkloadError(f"workload {workload.name!r} has no initial kernel; pass a KERNEL.cu")
    return Candidate(
        workload.initial_cu, workload.spec.initial.launch, workload.spec.initial.compile_options, "initial"
    )
