"""What is evaluated and how: a :class:`Candidate` kernel and the :class:`EvaluateOptions`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..config import LAUNCH_DEFAULTS
from ..errors import WorkloadError
from ..launch import LaunchSpec
from ..workload import Workload
from .protocol import AdaptiveRequest, TimingRequest
from .stats import adaptive_round

__all__ = [
    "PRECISION_MIN_ITERATIONS", "PRECISION_RSE", "STOP_RULES", "Candidate", "EvaluateOptions", "ProgressFn",
    "initial_candidate", "stop_rule",
]

#: progress(message, done, total): what a long evaluation is doing now
ProgressFn = Callable[[str, int, int], None]


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


#: When a case's timing stops. "count": exactly ``iterations`` measured launches (the default for
#: evaluating, with LAUNCH_DEFAULTS' counts). "precision" (search's default: ``kernelopt tune``,
#: ``kernelopt optimize``, the autotune tool), as nvbench stops on noise rather than a count:
#: PRECISION_MIN_ITERATIONS measured launches, then rounds of as many until the median's
#: relative standard error is at most PRECISION_RSE, never more than ``iterations`` launches in
#: all nor (past the first round) ``adaptive_max_ms`` of wall time. A 4 ms sgemm case that is
#: quiet stops after PRECISION_MIN_ITERATIONS launches; a noisy one keeps going up to ``iterations``.
STOP_RULES = ("count", "precision")
PRECISION_MIN_ITERATIONS = 20
PRECISION_RSE = 0.003


def stop_rule(stop: str | None, *, warmup: int | None, iterations: int | None) -> str:
    """Search's stopping rule: ``stop`` if given, else "count" when a launch count was asked
    for (``--warmup`` / ``--iterations``: whoever names a count gets exactly that many launches),
    else "precision"."""
    if stop is not None:
        return stop
    return "count" if warmup is not None or iterations is not None else "precision"


@dataclass
class EvaluateOptions:
    """How candidates are checked and timed (launch counts: ``config.LAUNCH_DEFAULTS``)."""

    warmup: int = LAUNCH_DEFAULTS.warmup
    iterations: int = LAUNCH_DEFAULTS.iterations
    flush_l2: bool = True
    timeout_s: float = 60.0
    guard_bytes: int = 65536
    timing_mode: str = "events"  # "events": one event pair per launch; "graph": CUDA graph batches
    blocking: bool = True  # hold the stream while launches are queued (no host enqueue gaps)
    adaptive_rse: float | None = None  # repeat until the median's relative standard error is below
    adaptive_max_ms: float = 2000.0
    stop: str = "count"  # STOP_RULES: "count", or "precision" (iterations is then the most launches)
    check_determinism: bool = True  # repeat each validation launch and compare the two
    check_timed_outputs: bool = True  # validate one launch after timing on hidden-seed inputs
    device_compare: bool = True  # compare outputs on the GPU when the harness can
    fresh_inputs: bool = True  # redraw inputs on the device before every timed launch
    # Redraw before only this many hidden measured launches (and the first warm-up); the others
    # reuse the last draw and their times are compared with the new-input launches'
    # (fresh_inputs.split_problem). None: redraw before every launch. Events mode only. 16 since the
    # adversarial suite passed with it on every path (docs/integrity.md)
    fresh_launches: int | None = 16
    # With fresh_launches: outputs poisoned before the first warm-up, the redrawn and the checked
    # measured launches only (the others find the launch before's outputs, for the same inputs); a
    # kernel doing less where outputs hold numbers is then fast on the reused launches alone, named by
    # the same split. On since the adversarial suite passed with it on the H200 (docs/integrity.md)
    poison_subset: bool = True
    checked_launches: int = 3  # hidden measured launches whose outputs the CUDA reference checks
    check_consistency: bool = True  # flag launches on unseen inputs much slower than the median
    oracle_checked_launches: int = 1  # without a CUDA reference: hidden launches checked by the NumPy oracle
    # draw performance cases' inputs on the device where the CUDA reference gives their expected
    # outputs (no host draw, file or upload; inputs.py); False: every input made on the host
    device_inputs: bool = True
    # keep those cases' expected outputs (the CUDA reference's) on the device: never written, read
    # or stored on the host (harness feature device_expected); False: written to files, and a
    # mismatch on a performance case lists its first five mismatching elements, not one
    device_expected: bool = True
    # validate every case of a candidate in one harness request (harness feature progress: each
    # case still has its own deadline and a hang is named by case); False: one request per case
    batch_validation: bool = True

    def __post_init__(self) -> None:
        if self.stop not in STOP_RULES:
            raise ValueError(f"stop must be one of {', '.join(STOP_RULES)}, not {self.stop!r}")

    @property
    def first_round(self) -> int:
        """Measured launches every timed case is sure to get: ``iterations``, or with "precision"
        the launches before the noise rule may stop. The first of :meth:`rounds` (a redrawn subset
        is at most half of each: :func:`~.fresh_inputs.fresh_count`)."""
        if self.stop != "precision":
            return self.iterations
        return min(self.iterations, PRECISION_MIN_ITERATIONS)

    def rounds(self, features: frozenset[str]) -> list[tuple[int, int]]:
        """The measured launches as the harness takes them, [start, end) per round: one round of
        ``iterations``, or with "precision" the first round and the later ones (as many launches
        each, at least 16: :func:`~.stats.adaptive_round`) up to ``iterations``, of which only
        those before the stop run. Hidden checks go in every round: a kernel that is honest in
        the first round and cheats once the noise rule has asked for more would escape checks
        picked in the first round alone."""
        timing = self.timing_request(features)
        if timing.adaptive is None:
            return [(0, timing.iterations)]
        out, start, step = [(0, timing.iterations)], timing.iterations, adaptive_round(timing.iterations)
        while start < self.iterations:
            out.append((start, min(start + step, self.iterations)))
            start += step
        return out

    def timing_request(self, features: frozenset[str]) -> TimingRequest:
        """The harness's ``timing`` object, using only what this harness supports (a harness
        without adaptive timing gets "precision" as a count: ``iterations`` launches)."""
        timing = TimingRequest(warmup=self.warmup, iterations=self.iterations)
        if self.timing_mode == "graph" and "graph" in features:
            timing.mode = "graph"
        if "blocking" in features:
            timing.blocking = self.blocking
        if "adaptive" not in features:
            return timing
        if self.stop == "precision" and self.first_round < self.iterations:
            timing.iterations = self.first_round
            timing.adaptive = AdaptiveRequest(
                target_rse=self.adaptive_rse or PRECISION_RSE, max_ms=self.adaptive_max_ms,
                max_iterations=self.iterations,
            )
        elif self.adaptive_rse is not None and self.stop == "count":
            timing.adaptive = AdaptiveRequest(target_rse=self.adaptive_rse, max_ms=self.adaptive_max_ms)
        return timing


def initial_candidate(workload: Workload) -> Candidate:
    """The workload's starting kernel (initial.cu with its launch and options).

    Raises:
        WorkloadError: the workload has none.
    """
    if workload.initial_cu is None or workload.spec.initial is None:
        raise WorkloadError(f"workload {workload.name!r} has no initial kernel; pass a KERNEL.cu")
    return Candidate(
        workload.initial_cu, workload.spec.initial.launch, workload.spec.initial.compile_options, "initial"
    )
