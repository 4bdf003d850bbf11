"""A prepared evaluation session: one workload on one device, with one set of inputs.

A :class:`Session` holds what every candidate of a workload is checked against: a
:class:`~.prepared.Prepared` record, made once by :func:`kernelopt_mcp.evaluation.evaluate.prepare`
(the inputs drawn from a seed the model never sees, the expected outputs (NumPy oracle, or the
CUDA reference after it matched the oracle), the reference's timings, the support module),
with the harness process it runs on. It decides which checks run, builds a candidate for the
device in one step (:meth:`Session.build`) and the harness request of one case. Running
candidates is :mod:`kernelopt_mcp.evaluation.runner`'s job.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import logging
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..compile_options import CompileLimits
from ..compiler import CompileCache, arch_problem
from ..errors import HarnessError, KerneloptError
from ..launch import DeviceLimits
from ..workload import Case, Tolerance, Workload
from .build import Built, build
from .calibrate import device_peaks
from .candidate import Candidate, EvaluateOptions, ProgressFn
from .dataset import DataSet
from .device import DeviceInfo
from .fresh_inputs import DRAW_FEATURES, SPLIT_MIN_SAMPLES, fresh_checks, fresh_count
from .harness import RequestSender, harness_features
from .harness_case import CaseJob, build_request
from .inputs import CaseInputs, estimate_gaps, hidden_seed_checks, new_input_seed
from .outcomes import EvaluationResult
from .prepared import Prepared
from .protocol import RunRequest
from .roofline import Peaks
from .tensor_maps import FEATURE as TENSOR_MAPS

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
        features: what the harness can do (default: what its binary reports).
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
        features: frozenset[str] | None = None,
    ) -> None:
        self.workload = self.loaded = workload  # loaded: as given (workload may take the record's tolerances)
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
        self._progress: ProgressFn = progress or _no_progress
        _warn_of_estimate_gaps(workload)
        if features is None:
            features = harness_features(Path(harness.binary)) if harness.binary else frozenset()
        self.features: frozenset[str] = features
        self._prepared: Prepared | None = None
        self._unprepared = Prepared(DataSet("validation", self.seed, {}))  # what is read before preparing
        self._runs = itertools.count(1)  # numbers every run's requests and outputs, the reference's included

    # --- the prepared record -----------------------------------------------------------------

    @property
    def prepared(self) -> Prepared | None:
        """What :func:`~.evaluate.prepare` made for this session (None: not prepared yet)."""
        return self._prepared

    @property
    def record(self) -> Prepared:
        """The prepared record, or before preparing an empty one (no inputs, nothing expected)."""
        return self._prepared or self._unprepared

    def adopt(self, prepared: Prepared) -> Prepared:
        """Hold ``prepared`` (:func:`~.evaluate.prepare`'s record, once) as what every candidate is checked against.

        Raises:
            KerneloptError: the session holds a record already.
        """
        if self._prepared is not None:
            raise KerneloptError("internal error: the session is prepared already; its record does not change")
        self._prepared = prepared
        self.workload = _judged_by(self.workload, prepared.tolerances)
        return prepared

    def preparing(self, so_far: Prepared) -> Session:
        """This session with what is prepared ``so_far`` as its record: the CUDA reference runs on
        it while the record is being made. It shares the harness, the working directory and the
        numbering of runs; this session is left as it is."""
        view = copy.copy(self)
        view._prepared = so_far
        return view

    @property
    def data(self) -> DataSet:
        """The validation data set (:attr:`Prepared.data`)."""
        return self.record.data

    @property
    def timed(self) -> DataSet | None:
        """The hidden data set of the timed check (:attr:`Prepared.timed`)."""
        return self.record.timed

    @property
    def inputs(self) -> dict[str, CaseInputs]:
        """The validation inputs of every case."""
        return self.record.data.inputs

    @property
    def expected(self) -> dict[str, dict[str, np.ndarray]]:
        """The expected outputs held on the host (validation inputs; not :attr:`Prepared.device_kept`'s)."""
        return self.record.data.expected

    @property
    def reference_result(self) -> EvaluationResult | None:
        """The CUDA reference's evaluation (:attr:`Prepared.reference_result`)."""
        return self.record.reference_result

    @property
    def prepare_ms(self) -> dict[str, float]:
        """Host wall ms of each preparation step (:attr:`Prepared.prepare_ms`; empty before)."""
        return dict(self.record.prepare_ms)

    def progress(self, message: str, done: int, total: int) -> None:
        """Tell the caller what a long step is doing."""
        self._progress(message, done, total)

    def report_to(self, progress: ProgressFn) -> None:
        """Tell ``progress`` what long steps are doing from now on (a server's session serves one
        call after another, each with its own)."""
        self._progress = progress

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
            "poison_subset": o.poison_subset,  # sent with fresh_launches only (runner.py)
            "timed_check": o.checked_launches > 0,
            "confirm_launch": o.check_consistency,
            "checked_dump": o.oracle_checked_launches > 0,
            "input_draw": o.device_inputs, "expected_dtype": o.device_inputs,
            "progress": o.batch_validation,
            "device_expected": (
                o.device_inputs and o.device_expected and "input_cache" in self.features
                and "device_compare" in self.features  # kept values can be compared nowhere else
            ),
        }.get(feature, True)
        return wanted and feature in self.features

    def draw_features(self, options: EvaluateOptions | None = None) -> frozenset[str]:
        """The harness's draw features in use (``fresh_inputs.DRAW_FEATURES``: structured matrices,
        choices): what its device draws may ask for; other inputs are drawn on the host."""
        return frozenset(f for f in DRAW_FEATURES if self.uses(f, options))

    def needs_support(self, device_cases: frozenset[str] | None = None) -> bool:
        """Whether any check or timing mode in use runs one of the support module's kernels (with
        the inputs of ``device_cases`` drawn on the device; default: the prepared record's)."""
        blocking = self.options.blocking and "blocking" in self.features
        drawn = self.record.device_cases if device_cases is None else device_cases
        return blocking or bool(drawn) or any(
            self.uses(f) for f in ("device_compare", "determinism", "timed_inputs", "fresh_inputs", "timed_check")
        )

    def checks_timed_launches(self, options: EvaluateOptions | None = None) -> bool:
        """Whether candidates' timed launches are checked against the CUDA reference (or PyTorch)."""
        return self.uses("timed_check", options) and (self.workload.reference_cu is not None
                                                      or bool(self.record.torch_checks))

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
                reference=self.checks_timed_launches(o), poison_subset=self.uses("poison_subset", o),
                reference_name="PyTorch" if self.record.torch_checks else "the CUDA reference",
                checked=o.checked_launches if self.uses("timed_check", o) else 0,
                consistency=(self.uses("confirm_launch", o) and self.uses("timed_inputs", o)
                             and o.timing_mode == "events"),
                oracle_checked=o.oracle_checked_launches if self.oracle_checks_timed_launches(o) else 0,
                graph=o.timing_mode == "graph" and "graph" in self.features,
                subset=self.fresh_subset(o) if o.timing_mode == "events" else None,
                later_rounds=len(o.rounds(self.features)) > 1, draw_features=self.draw_features(o),
            )
        return checks

    def fresh_subset(self, options: EvaluateOptions | None = None) -> tuple[int, int] | None:
        """With ``fresh_launches`` in use: (how many measured launches are redrawn before, of how
        many); None: a redraw before every launch, always for a PyTorch problem (PyTorch's checked
        launches are planned for that schedule: TorchCheckPlan)."""
        o = options or self.options
        if not self.uses("fresh_launches", o) or self.workload.torch_problem is not None:
            return None
        return fresh_count(max(SPLIT_MIN_SAMPLES, o.fresh_launches or 0), o.first_round), o.first_round

    @property
    def checks(self) -> list[str]:
        """The integrity checks in force with the session's options."""
        return self.checks_in_force()

    # --- building and launching -----------------------------------------------------------

    def build(self, candidate: Candidate, cases: Sequence[Case]) -> Built:
        """``candidate`` made ready for this session's harness: compiled for its arch, the entry point checked, the
        module written, and its launch resolved for each of ``cases`` on the device (:func:`.build.build`)."""
        return build(
            candidate, cases, self.workload, arch=self.arch, device_arch=self.device.arch if self.device else None,
            limits=self.limits, modules=self.workdir / "modules", cache=self.compile_cache,
            compile_limits=self.compile_limits,
            encodes_maps=self.harness.binary is None or TENSOR_MAPS in self.features,
        )

    def request(self, job: CaseJob, module: Path, options: EvaluateOptions | None = None) -> RunRequest:
        """The harness request of ``job`` with the session's data, support and check modules."""
        o = options or self.options
        return build_request(
            job, self.workload, device=self.harness.device, module=module,
            guard_bytes=o.guard_bytes, flush_l2=o.flush_l2,
            # every request names it once loaded: the harness keeps one module per path, and a request
            # without it would unload it (and blocking timing cannot run without its ko_spin)
            support=self.record.support,
            input_cache="input_cache" in self.features,
            check_module=self.record.check_module,
        )

    def harness_binary(self) -> Path:
        """The harness executable (for the sanitizer and the profiler, which start their own)."""
        if self.harness.binary is None:
            raise HarnessError("this session only writes harness requests (a frozen workload's "
                               "builder): nothing to run")
        return Path(self.harness.binary)

    def kept_keys(self, data: DataSet, case: Case) -> dict[str, str]:
        """For the CUDA reference's run on ``case`` of ``data``: output -> the key under which the
        harness keeps it on the device as the expected values (empty: written to files)."""
        if case.name not in self.record.device_kept:
            return {}
        return {p.name: data.kept_key(self.workload, case.name, p.name) for p in self.workload.signature.outputs}

    def timeout_s(self, case: Case, timing: bool, options: EvaluateOptions | None = None) -> float:
        """The deadline of one request: the base timeout, plus the timed launches' share."""
        o = options or self.options
        if not timing:
            return o.timeout_s
        # Allow the launches a generous multiple of the reference's time (or 1 s each).
        per_launch_s = max(self.record.reference_medians.get(case.name, 0.0) * 1e-3 * 20, 1.0)
        # + the check and confirm launches, and the reference on each checked launch
        launches = o.warmup + o.iterations + 3 + o.checked_launches
        adaptive_s = o.adaptive_max_ms * 1e-3 * 2 if o.adaptive_rse else 0.0
        return o.timeout_s + adaptive_s + min(per_launch_s * launches, 600.0)

    def run_tag(self, name: str) -> str:
        """The next run's name (of candidate ``name``): its requests and outputs go under it."""
        return f"{next(self._runs):04d}-{name}"

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


def _judged_by(workload: Workload, tolerances: Mapping[str, Tolerance]) -> Workload:
    """``workload`` with ``tolerances`` in place of its own for those outputs (the prepared record's,
    measured at the real sizes)."""
    if not tolerances:
        return workload
    spec = workload.spec
    return dataclasses.replace(workload, spec=spec.model_copy(update={"tolerance": {**spec.tolerance, **tolerances}}))
