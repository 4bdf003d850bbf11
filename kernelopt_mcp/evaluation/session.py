"""A prepared evaluation session: one workload on one device, with one set of inputs.

A :class:`Session` holds what every candidate of a workload is checked against, prepared once
(by :func:`kernelopt_mcp.evaluation.evaluate.prepare`): the inputs drawn from a seed the
model never sees, the expected outputs (NumPy oracle, or the CUDA reference after it matched
the oracle), the reference's timings, the harness process and the support module. It also
knows how to compile a candidate for the device, resolve its launches and build the harness
request of one case. Running candidates is :mod:`kernelopt_mcp.evaluation.runner`'s job.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..compile_log import plain_name
from ..compile_options import CompileLimits
from ..compiler import CompileCache, CompileResult, arch_problem, compile_kernel
from ..errors import HarnessError, KerneloptError, LaunchConfigError
from ..files import write_atomic
from ..launch import DeviceLimits, ResolvedLaunch, resolve
from ..workload import BufferParam, Case, Workload
from .calibrate import device_peaks
from .candidate import Candidate, EvaluateOptions, ProgressFn
from .dataset import DataSet
from .device import DeviceInfo
from .fresh_inputs import SPLIT_MIN_SAMPLES, STRUCTURED_DRAW, fresh_checks
from .harness import RequestSender, harness_features
from .harness_case import CaseJob, build_request
from .inputs import CaseInputs, estimate_gaps, hidden_seed_checks, new_input_seed
from .outcomes import EvaluationResult
from .protocol import LaunchRequest, RunRequest
from .roofline import Peaks
from .tensor_maps import FEATURE as TENSOR_MAPS
from .tensor_maps import TENSOR_MAP_BYTES, check_tensor_maps

__all__ = ["Session"]


def _no_progress(message: str, done: int, total: int) -> None:
    return None


log = logging.getLogger("kernelopt.evaluation")
_estimate_gaps_warned: set[tuple[str, str]] = set()


def _warn_of_estimate_gaps(workload: Workload) -> None:
    """Tell the workload's author (stderr, the server's log), once per process, where its
    performance inputs let an estimate pass. Not in results: the model reads those, and the line
    would be a recipe. Advice only: a workload it cannot reason about is left to the checks."""
    try:
        gaps = estimate_gaps(workload, {c.name for c in workload.spec.performance_cases})
    except Exception:  # noqa: BLE001 - a shape that does not evaluate fails later, with its own message
        return
    for gap in gaps:
        if (workload.name, gap) not in _estimate_gaps_warned:
            _estimate_gaps_warned.add((workload.name, gap))
            log.warning("workload %s: %s", workload.name, gap)


class Session:
    """Evaluates candidates of one workload on one device, with one set of inputs.

    Args:
        workload: what candidates compute.
        harness: the device's harness process (the session does not own it).
        device: the device's properties (None: compile for ``arch`` only, default limits).
        workdir: where inputs, expected outputs, modules and requests go (default: a temporary
            directory removed by :meth:`close`).
        seed: the input seed (default: fresh and private).
        options: the checks and timing (defaults: :class:`EvaluateOptions`).
        arch: the compile target (default: the device's, else sm_90).
        compile_cache: reuse CUBINs by source hash.
        compile_limits: the caps on NVRTC compiles (Settings.compile_limits()).
        progress: told what a long step is doing.
        peaks: roofline peaks (default: the device's theoretical figures).
    """

    def __init__(
        self,
        workload: Workload,
        harness: RequestSender,
        device: DeviceInfo | None,
        *,
        workdir: Path | None = None,
        seed: int | None = None,
        options: EvaluateOptions | None = None,
        arch: str | None = None,
        compile_cache: CompileCache | None = None,
        compile_limits: CompileLimits | None = None,
        progress: ProgressFn | None = None,
        peaks: Peaks | None = None,
    ) -> None:
        self.workload = workload
        self.harness = harness
        self.device = device
        self.options = options or EvaluateOptions()
        self.arch = arch or (device.arch if device else "sm_90")
        wrong_arch = arch_problem(self.arch, device.arch) if device else None  # sm_90a on a GPU other than sm_90
        if wrong_arch:
            raise KerneloptError(wrong_arch)
        self.limits = device.limits if device else DeviceLimits()
        self.seed = new_input_seed() if seed is None else seed
        self._tmp = tempfile.TemporaryDirectory(prefix="kernelopt-") if workdir is None else None
        self.workdir: Path = Path(self._tmp.name) if self._tmp is not None else workdir  # type: ignore[assignment]
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.compile_cache = compile_cache
        self.compile_limits = compile_limits
        # roofline figures and the impossible-time check (theoretical peaks unless calibrated ones are given)
        self.peaks = peaks or (device_peaks(device, None) if device else None)
        self.progress: ProgressFn = progress or _no_progress
        _warn_of_estimate_gaps(workload)
        self.features: frozenset[str] = harness_features(Path(harness.binary)) if harness.binary else frozenset()
        self.data = DataSet("validation", self.seed, {})
        # performance cases whose inputs the harness draws on the device (evaluate.prepare)
        self.device_cases: frozenset[str] = frozenset()
        # ... and whose expected values are stored in the output's dtype, as the reference wrote them
        self.native_expected: frozenset[str] = frozenset()
        # ... and whose expected values the harness keeps on the device (feature device_expected)
        self.device_kept: frozenset[str] = frozenset()
        self.timed: DataSet | None = None  # from a second seed that is never reported
        self.expected_from = ""
        self.inputs_from = ""  # what a result says of where its inputs were made (evaluate.prepare)
        self.reference_medians: dict[str, float] = {}
        self.reference_result: EvaluationResult | None = None
        self.reference: Candidate | None = None  # the CUDA reference, once it has run
        self.support: Path | None = None
        # the validated CUDA reference that checks candidates' timed launches, and its launches
        self.check_module: Path | None = None
        # PyTorch as the reference: per performance case, its timed launches checked against PyTorch
        # (torch_reference.TorchCheckPlan, made by evaluate.prepare)
        self.torch_checks: dict[str, Any] = {}
        self.check_launches: dict[str, LaunchRequest] = {}
        self.counter = 0
        self.prepared = False
        # host wall ms of each preparation step (evaluate.prepare): where "once per run" goes
        self.prepare_ms: dict[str, float] = {}

    @property
    def inputs(self) -> dict[str, CaseInputs]:
        """The validation inputs of every case."""
        return self.data.inputs

    @property
    def expected(self) -> dict[str, dict[str, np.ndarray]]:
        """The expected outputs held on the host (validation inputs): every case with one, less
        those the harness keeps on the device (:attr:`device_kept`)."""
        return self.data.expected

    # --- which checks run ----------------------------------------------------------------

    def uses(self, feature: str, options: EvaluateOptions | None = None) -> bool:
        """Whether the harness has ``feature`` and ``options`` (default: the session's) want it."""
        o = options or self.options
        wanted = {
            "device_compare": o.device_compare,
            "determinism": o.check_determinism,
            "timed_inputs": o.check_timed_outputs,
            "fresh_inputs": o.fresh_inputs,
            "fresh_launches": o.fresh_inputs and o.fresh_launches is not None,
            "timed_check": o.checked_launches > 0,
            "confirm_launch": o.check_consistency,
            "checked_dump": o.oracle_checked_launches > 0,
            "input_draw": o.device_inputs,
            "expected_dtype": o.device_inputs,
            "progress": o.batch_validation,
            "device_expected": (
                o.device_inputs and o.device_expected and "input_cache" in self.features
                and "device_compare" in self.features  # kept values can be compared nowhere else
            ),
        }.get(feature, True)
        return wanted and feature in self.features

    def needs_support(self) -> bool:
        """Whether any check or timing mode in use runs one of the support module's kernels."""
        blocking = self.options.blocking and "blocking" in self.features
        return blocking or bool(self.device_cases) or any(
            self.uses(f) for f in ("device_compare", "determinism", "timed_inputs", "fresh_inputs", "timed_check")
        )

    def checks_timed_launches(self, options: EvaluateOptions | None = None) -> bool:
        """Whether candidates' timed launches are checked against the CUDA reference (or PyTorch)."""
        return self.uses("timed_check", options) and (self.workload.reference_cu is not None or bool(self.torch_checks))

    def oracle_checks_timed_launches(self, options: EvaluateOptions | None = None) -> bool:
        """Without a CUDA reference: whether checked launches' files go through the NumPy oracle."""
        return (
            self.workload.reference_cu is None and self.workload.oracle_path is not None
            and self.uses("checked_dump", options) and self.uses("timed_check", options)
        )

    def validation_checks(self, options: EvaluateOptions | None = None) -> list[str]:
        checks = ["fresh inputs per session", "poisoned outputs", "guard bytes", "inputs unchanged"]
        if self.uses("determinism", options):
            spec = self.workload.spec
            bitwise = spec.bitwise_outputs()
            mode = ("bitwise" if spec.deterministic else "tolerance" if not bitwise
                    else "bitwise for integer outputs, tolerance for float")
            checks.append(f"repeat launch ({mode})")
        return checks

    def checks_in_force(self, options: EvaluateOptions | None = None) -> list[str]:
        """The integrity checks in force; each result lists those that ran for it."""
        o = options or self.options
        checks = self.validation_checks(o)
        if self.uses("timed_inputs", o):
            checks += hidden_seed_checks(self.workload, {c.name for c in self.workload.spec.performance_cases})
        if any(self.uses(f, o) for f in ("fresh_inputs", "timed_check", "confirm_launch")):
            checks += fresh_checks(
                self.workload, list(self.workload.spec.performance_cases), redraw=self.uses("fresh_inputs", o),
                reference=self.checks_timed_launches(o), reference_name="PyTorch" if self.torch_checks else "the CUDA reference",
                checked=o.checked_launches if self.uses("timed_check", o) else 0,
                consistency=self.uses("confirm_launch", o) and self.uses("timed_inputs", o) and o.timing_mode == "events",
                oracle_checked=o.oracle_checked_launches if self.oracle_checks_timed_launches(o) else 0,
                graph=o.timing_mode == "graph" and "graph" in self.features,
                subset=self.fresh_subset(o) if o.timing_mode == "events" else None,
                later_rounds=len(o.rounds(self.features)) > 1, structured=self.uses(STRUCTURED_DRAW, o),
            )
        return checks

    def fresh_subset(self, options: EvaluateOptions | None = None) -> tuple[int, int] | None:
        """With ``fresh_launches`` in use: (how many measured launches are redrawn before, of how
        many); None: a redraw before every launch."""
        o = options or self.options
        if not self.uses("fresh_launches", o):
            return None
        return max(SPLIT_MIN_SAMPLES, o.fresh_launches or 0), o.first_round

    @property
    def checks(self) -> list[str]:
        """The integrity checks in force with the session's options."""
        return self.checks_in_force()

    # --- compiling and launching -----------------------------------------------------------

    def compile(self, candidate: Candidate) -> tuple[CompileResult, Path | None, str | None]:
        """Compile ``candidate`` for the session's arch and check its entry point.

        Returns ``(compiled, module, None)``, or ``(compiled, None, problem)`` when it cannot run.
        """
        compiled = compile_kernel(
            candidate.source, self.arch, candidate.all_compile_options, cache=self.compile_cache,
            limits=self.compile_limits,
        )
        if not compiled.ok:
            return compiled, None, compiled.summary()
        configs = [c for c in (candidate.launch.default, *candidate.launch.cases.values()) if c is not None]
        maps = frozenset(len(c.tensor_maps) for c in configs) or frozenset({0})
        problem = (arch_problem(compiled.arch, self.device.arch) if self.device else None) or self.check_entry(compiled, maps)
        if problem:
            return compiled, None, problem
        key = hashlib.sha256(json.dumps([compiled.source_hash, compiled.options, compiled.arch]).encode())
        module = self.workdir / "modules" / f"{key.hexdigest()[:24]}.cubin"
        if not module.exists():
            write_atomic(module, compiled.cubin or b"", durable=False)
        return compiled, module, None

    def check_entry(self, compiled: CompileResult, maps: frozenset[int] = frozenset({0})) -> str | None:
        """Why the module's entry point does not match the workload's signature followed by one
        CUtensorMap per tensor map of the launch (``maps``: how many the launch's configurations
        pass) (None: it does)."""
        sig = self.workload.signature
        if sig.entry not in compiled.entries:
            mangled = [e for e in compiled.entries if plain_name(e) == sig.entry]
            if mangled:
                return (
                    f"kernel {sig.entry!r} is in the module only under its C++ mangled name {mangled[0]!r}, so "
                    f"it is not found by its name; declare it as {sig.c_prototype()}"
                )
            found = ", ".join(compiled.entries) or "none"
            return (
                f"no kernel named {sig.entry!r} in the module (kernels found: {found}); declare it "
                f"as {sig.c_prototype()}"
            )
        params = compiled.entries[sig.entry]
        if len(params) - len(sig.params) not in maps:
            passed = " or ".join(str(n) for n in sorted(maps))
            return (
                f"kernel {sig.entry!r} takes {len(params)} parameters but the signature has "
                f"{len(sig.params)}: {sig.c_prototype()}" + (
                    f", then the launch passes {passed} tensor map(s), each a `const __grid_constant__ "
                    "CUtensorMap` parameter" if maps != {0} else ""
                )
            )
        for ptx, p in zip(params, sig.params, strict=False):
            want = 8 if isinstance(p, BufferParam) else p.dtype.itemsize
            if ptx.size_bytes and ptx.size_bytes != want:
                return (
                    f"parameter {p.name!r} is {ptx.size_bytes} bytes in the kernel but {want} in the "
                    f"signature: {sig.c_prototype()}"
                )
        for j, ptx in enumerate(params[len(sig.params):]):
            if ptx.size_bytes and ptx.size_bytes != TENSOR_MAP_BYTES:
                return (
                    f"parameter {len(sig.params) + j} (tensor map {j}) is {ptx.size_bytes} bytes in the kernel; "
                    f"a tensor map is a {TENSOR_MAP_BYTES}-byte `const __grid_constant__ CUtensorMap` passed by value"
                )
        return None

    def resolve(self, candidate: Candidate, compiled: CompileResult, case: Case) -> ResolvedLaunch:
        """The candidate's launch for ``case`` on this device.

        Raises:
            LaunchConfigError: the launch is invalid (shape, limits, shared memory).
        """
        scalars = {**case.scalars, **{k: v for k, v in candidate.params.items() if not isinstance(v, str)}}
        launch = resolve(candidate.launch.for_case(case.name), scalars, self.limits, case.name)
        if launch.tensor_maps:
            self._check_maps(launch, compiled, case)
        static_shared = sum((r.shared_bytes or 0) for r in compiled.resources.values())
        if launch.shared_bytes + static_shared > self.limits.max_shared_bytes_per_block_optin:
            raise LaunchConfigError(
                f"case {case.name!r}: {launch.shared_bytes} B dynamic + {static_shared} B "
                f"static shared memory exceeds the device's "
                f"{self.limits.max_shared_bytes_per_block_optin} B per block"
            )
        return launch

    def _check_maps(self, launch: ResolvedLaunch, compiled: CompileResult, case: Case) -> None:
        """The launch's tensor maps: a harness that encodes them, one kernel parameter each, and
        each within its buffer (:func:`~.tensor_maps.check_tensor_maps`)."""
        if self.harness.binary is not None and TENSOR_MAPS not in self.features:
            raise LaunchConfigError(
                f"case {case.name!r}: the launch has tensor maps, but this kernelopt-harness is too old to "
                f"encode them (its features lack {TENSOR_MAPS!r}): rebuild it with `pip install .`"
            )
        params = compiled.entries.get(self.workload.signature.entry)
        want = len(self.workload.signature.params) + len(launch.tensor_maps)
        if params is not None and len(params) != want:
            raise LaunchConfigError(
                f"case {case.name!r}: the launch passes {len(launch.tensor_maps)} tensor map(s), so the kernel "
                f"takes {want} parameters, but it has {len(params)}: one `const __grid_constant__ CUtensorMap` "
                "per map after the signature's parameters"
            )
        check_tensor_maps(launch, self.workload, case)

    def request(self, job: CaseJob, module: Path, options: EvaluateOptions | None = None) -> RunRequest:
        """The harness request of ``job`` with the session's data, support and check modules."""
        o = options or self.options
        return build_request(
            job, self.workload, device=self.harness.device, module=module,
            guard_bytes=o.guard_bytes, flush_l2=o.flush_l2,
            # every request names it once loaded: the harness keeps one module per path, and a request
            # without it would unload it (and blocking timing cannot run without its ko_spin)
            support=self.support,
            input_cache="input_cache" in self.features,
            check_module=self.check_module,
        )

    def harness_binary(self) -> Path:
        """The harness executable (for the sanitizer and the profiler, which start their own)."""
        if self.harness.binary is None:
            raise HarnessError("this session only writes harness requests (a frozen workload's builder): nothing to run")
        return Path(self.harness.binary)

    def kept_keys(self, data: DataSet, case: Case) -> dict[str, str]:
        """For the CUDA reference's run on ``case`` of ``data``: output -> the key under which the
        harness keeps it on the device as the expected values (empty: written to files)."""
        if case.name not in self.device_kept:
            return {}
        return {p.name: data.kept_key(self.workload, case.name, p.name) for p in self.workload.signature.outputs}

    def timeout_s(self, case: Case, timing: bool, options: EvaluateOptions | None = None) -> float:
        """The deadline of one request: the base timeout, plus the timed launches' share."""
        o = options or self.options
        if not timing:
            return o.timeout_s
        # Allow the launches a generous multiple of the reference's time (or 1 s each).
        per_launch_s = max(self.reference_medians.get(case.name, 0.0) * 1e-3 * 20, 1.0)
        # + the check and confirm launches, and the reference on each checked launch
        launches = o.warmup + o.iterations + 3 + o.checked_launches
        adaptive_s = o.adaptive_max_ms * 1e-3 * 2 if o.adaptive_rse else 0.0
        return o.timeout_s + adaptive_s + min(per_launch_s * launches, 600.0)

    def out_dir(self, tag: str, case: Case) -> Path:
        out_dir = self.workdir / "outputs" / tag / case.name
        out_dir.mkdir(parents=True, exist_ok=True)
        return out_dir

    # --- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        """Remove the temporary working directory (a given ``workdir`` is kept)."""
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

