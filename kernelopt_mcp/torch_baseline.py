"""PyTorch eager and ``torch.compile`` timed beside a candidate: the speedups KernelBench reports.

An imported PyTorch problem (``kernelopt import-torch``) keeps its problem file as ``problem.py``
in the workload. :func:`measure_baselines` runs that module on the GPU in a confined child
(:mod:`._torch_baseline_child` under :func:`~.confined_python.run_torch_child`: never in this
process) and times it for each performance case, eager and compiled,
by the rules the harness times a candidate by (``warmup`` then ``iterations`` calls, a CUDA event
pair around each, L2 flushed between calls outside the timed window, the precision stop where
asked); the times are summarized with the harness's statistics (:func:`.evaluation.stats.summarize`).

:func:`workload_baselines` does that for an imported workload's performance cases, through a
:class:`BaselineCache` keyed by the problem file's sha256, the case and its sizes, the device's
name, torch's version and the timing rules: a second evaluation does not time them again (its
records say ``cached``). :func:`compare` puts them beside a candidate's result: per case and as
geometric means, with the speedups (baseline time / ours).

Where torch is missing, no GPU is visible, or the child cannot be confined, the report says so in
one line (``note``) and nothing is timed: an evaluation never fails for want of a baseline.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import json
import math
import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from .config import LAUNCH_DEFAULTS, Settings
from .confined_python import ChildLimits, installed_requirements, read_child_file, run_torch_child
from .errors import KerneloptError
from .evaluation.candidate import PRECISION_MIN_ITERATIONS, PRECISION_RSE, EvaluateOptions
from .evaluation.device import DeviceInfo
from .evaluation.outcomes import EvaluationResult
from .evaluation.stats import summarize
from .files import write_atomic
from .torch_comparison import COMPILE_MODE, BaselineTiming, CaseComparison, TorchComparison
from .workload import Workload, case_shape

__all__ = [
    "COMPILE_MODE", "BaselineCache", "BaselineJob", "BaselineOptions", "BaselineReport", "BaselineTiming",
    "CaseBaseline",
    "TorchComparison", "baseline_timing", "compare", "imported_problem", "measure_baselines", "measure_batch",
    "performance_sizes",
    "settings_baselines", "settings_batch_baselines", "torch_version", "workload_baselines", "workloads_baselines",
]

CHILD_MODULE = "kernelopt_mcp._torch_baseline_child"
BASELINE_TIMEOUT_S = 900.0
CHILD_START_S = 240.0  # a batch child's start (torch's import, the first CUDA context) beyond its problems' deadlines
# compiling is CPU work (inductor and triton in Python, ptxas) a batch's problems can share: half
# the CPUs, at most 8 problems' inputs on the GPU at once
COMPILE_AHEAD = min(8, (os.cpu_count() or 1) // 2)
PROBLEM_FILE = "problem.py"
# what the timing child may execute: the NVIDIA tools torch and triton ship (TOOL_DIRS, found beside
# the installed torch; inductor points triton at torch's own ptxas where there is one), the C
# compiler triton builds its launcher with (gcc or clang, cc1, as, ld) and /sbin/ldconfig, which
# it asks where libcuda is; they run under the child's own Landlock and seccomp
COMPILER_EXECUTE = ("/usr/bin", "/bin", "/usr/lib/gcc", "/usr/libexec/gcc", "/sbin/ldconfig", "/usr/sbin/ldconfig",
                    "/sbin/ldconfig.real", "/usr/sbin/ldconfig.real")  # Ubuntu's ldconfig is a script that runs .real
COMPILER_READ = ("/usr/include", "/usr/local/include")
TOOL_DIRS = (Path("torch") / "bin", Path("triton") / "backends" / "nvidia" / "bin")  # ptxas, cuobjdump, nvdisasm


@dataclass(frozen=True)
class BaselineOptions:
    """How the baselines are timed: the candidate's rules (:meth:`following` an evaluation's
    options), whether ``torch.compile`` is timed too, and the child's deadline (s)."""

    warmup: int = LAUNCH_DEFAULTS.warmup
    iterations: int = LAUNCH_DEFAULTS.iterations
    flush_l2: bool = True
    stop: str = "count"
    precision_rse: float = PRECISION_RSE
    precision_min_iterations: int = PRECISION_MIN_ITERATIONS
    max_ms: float = 2000.0
    compile: bool = True
    timeout_s: float = BASELINE_TIMEOUT_S
    #: problems of a batch compiled at once before any is timed (the child's compile-ahead phase);
    #: 1 or less: each problem compiles in its own timing job
    compile_ahead: int = COMPILE_AHEAD

    @classmethod
    def following(cls, options: EvaluateOptions, *, compile: bool = True,
                  timeout_s: float = BASELINE_TIMEOUT_S) -> BaselineOptions:
        """The timing rules of ``options`` (warm-up, iterations, L2 flush, the precision stop)."""
        return cls(warmup=options.warmup, iterations=options.iterations, flush_l2=options.flush_l2, stop=options.stop,
                   precision_rse=options.adaptive_rse or PRECISION_RSE, max_ms=options.adaptive_max_ms,
                   compile=compile, timeout_s=timeout_s)

    def timing(self) -> dict[str, Any]:
        """The fields that change a time (the cache key's part): not the deadline."""
        data = asdict(self)
        data.pop("timeout_s")
        data.pop("compile_ahead")  # where compiling happened: the times are taken alone either way
        return data


def baseline_timing(times_ms: Sequence[float], options: BaselineOptions) -> BaselineTiming:
    """One baseline's per-call times summarized as the harness summarizes a candidate's."""
    s = summarize(times_ms, warmup=options.warmup, flush_l2=options.flush_l2, iterations=options.iterations)
    return BaselineTiming(median_ms=s.median_ms, iqr_ms=s.iqr_ms, cv=s.cv, samples=s.samples, noisy=s.noisy,
                          noisy_reason=s.noisy_reason)


class CaseBaseline(BaseModel):
    """PyTorch eager and ``torch.compile`` on one performance case; a missing time has its note."""

    case: str
    eager: BaselineTiming | None = None
    compile: BaselineTiming | None = None
    eager_note: str | None = None
    compile_note: str | None = None
    torch_version: str | None = None
    device_name: str | None = None
    mode: str = Field(COMPILE_MODE, description="torch.compile's mode")
    cached: bool = Field(False, description="read from the baseline cache, not timed in this evaluation")
    compile_s: float | None = Field(None, description="torch.compile's compilation, wall seconds (never in a time)")


class BaselineReport(BaseModel):
    """The baselines of a problem's performance cases; ``note`` says why none were timed (torch
    missing, no GPU, the child refused or failed) or what went wrong part way (a deadline)."""

    problem_sha256: str | None = None
    cases: list[CaseBaseline] = Field(default_factory=list)
    note: str | None = None
    blocked: bool = Field(False, description="nothing can be timed on this machine (torch missing, no CUDA device, the "
                          "child cannot be confined): the same for every problem")
    options: dict[str, Any] = Field(default_factory=dict)
    seconds: float | None = Field(None, description="wall seconds the timing child spent on this problem (its own "
                                  "process and CUDA context, compiles included)")
    startup_s: float | None = Field(None, description="the timing child's start: torch's import and a first CUDA "
                                    "context, paid once per batch")
    cuda_s: float | None = Field(None, description="this problem's own process: its CUDA context's start (in seconds)")

    @classmethod
    def unmeasured(cls, note: str, problem_sha256: str | None = None, *, blocked: bool = False) -> BaselineReport:
        return cls(problem_sha256=problem_sha256, note=note, blocked=blocked)

    def case(self, name: str) -> CaseBaseline | None:
        return next((c for c in self.cases if c.case == name), None)

    def geomean_ms(self, which: str) -> float | None:
        """The geometric mean of ``which`` ("eager" or "compile") over the cases, None unless every case has it."""
        times = [t.median_ms if (t := getattr(c, which)) is not None else None for c in self.cases]
        return _geomean(times) if times and all(t is not None for t in times) else None  # type: ignore[arg-type]

    def why_missing(self, which: str) -> str | None:
        """One line saying why ``which`` has no geometric mean (None where it has one)."""
        if self.geomean_ms(which) is not None:
            return None
        if self.note:
            return self.note
        notes = [f"{c.case}: {n}" for c in self.cases
                 if getattr(c, which) is None and (n := getattr(c, f"{which}_note"))]
        return "; ".join(notes) or "not measured"


def _geomean(values: Sequence[float]) -> float | None:
    good = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    if len(good) == 1 == len(values):
        return good[0]  # exactly the one time (exp(log(x)) may differ in the last bit)
    return math.exp(sum(map(math.log, good)) / len(good)) if good and len(good) == len(values) else None


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# --- the runner ------------------------------------------------------------------------------


def torch_version(python_path: Sequence[str] = ()) -> str | None:
    """The version of the torch this interpreter (with ``python_path``) would import, as its
    ``torch.__version__`` says (the timing child reports that one), without importing torch: the
    literal in its ``torch/version.py``, which carries the build's local part (``2.11.0+cu130``)
    that the distribution's metadata (``2.11.0``) may leave out, else the metadata's; None where
    torch is not installed."""
    for dist in importlib.metadata.distributions(name="torch", path=[*python_path, *sys.path]):
        try:
            tree = ast.parse(Path(str(dist.locate_file("torch/version.py"))).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            return str(dist.version)
        for node in tree.body:
            if (isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str)
                    and any(isinstance(t, ast.Name) and t.id == "__version__"
                            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))):
                return node.value.value
        return str(dist.version)
    return None


def _execute_paths(dirs: Sequence[str]) -> list[str]:
    found = [str(Path(d) / tools) for d in dirs for tools in TOOL_DIRS if (Path(d) / tools).is_dir()]
    # and the interpreter itself: inductor probes the CPU's vector ISA in a new Python process (torch 2.13);
    # it runs in the child's own confinement, which it inherits
    interpreter = [str(Path(sys.executable).resolve())] if sys.executable else []
    return [*dict.fromkeys(found), *interpreter, *COMPILER_EXECUTE]


def compiler_access(python_path: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """What a child that runs torch.compile may read besides torch (the C headers, Python's) and
    execute (triton's ptxas, the C compiler), with torch found on this interpreter's path or
    ``python_path``."""
    include = sysconfig.get_paths().get("include")
    read = [*COMPILER_READ, *([include] if include else [])]
    return read, _execute_paths([*installed_requirements("torch").path, *python_path])


@dataclass(frozen=True)
class BaselineJob:
    """One problem to time: its file's source, the cases (name, size constants) and a label."""

    problem_text: str
    cases: Sequence[tuple[str, dict[str, int]]]
    label: str = PROBLEM_FILE
    bytes: int = 0  # its largest case's buffers (inputs, parameters, output): what it holds on the GPU, about


def measure_baselines(
    problem_text: str, cases: Sequence[tuple[str, dict[str, int]]], *, device: int,
    options: BaselineOptions | None = None,
    label: str = PROBLEM_FILE, seed: int = 0, python: str = sys.executable, python_path: Sequence[str] = (),
    limits: ChildLimits | None = None, workdir: Path | None = None,
) -> BaselineReport:
    """Time one problem's module, eager and compiled, on each of ``cases`` (name, size constants)
    on CUDA device ``device``, in a confined child: :func:`measure_batch` of one job."""
    [report] = measure_batch([BaselineJob(problem_text, cases, label)], device=device, options=options, seed=seed,
                             python=python, python_path=python_path, limits=limits, workdir=workdir)
    return report


def measure_batch(
    jobs: Sequence[BaselineJob], *, device: int, options: BaselineOptions | None = None, seed: int = 0,
    python: str = sys.executable, python_path: Sequence[str] = (), limits: ChildLimits | None = None,
    workdir: Path | None = None,
) -> list[BaselineReport]:
    """Time several problems in one child (torch's import paid once), each problem in a confined
    process of its own (it writes only its own directory: it cannot change another's times), a
    report per job in order. Never raises for a problem's sake: what could not be timed is a note.

    Each problem has ``limits.timeout_s`` (default ``options.timeout_s``) to itself: past it its
    process is killed and its report says so; a CUDA error ends its own context alone. Where the
    child itself ends early (its backstop), the problems after the last it finished are timed in
    a new child. Where the child cannot run at all (torch missing, no CUDA device, no
    confinement) every report carries that one note, ``blocked``.

    Args:
        python / python_path: the interpreter the child runs and directories besides its
            installation it imports from (where torch lies outside it).
        limits: the child's caps and confinement (:meth:`ChildLimits.following` the settings).
        workdir: where the staging directories are made (removed after).
    """
    options = options or BaselineOptions()
    limits = limits or ChildLimits(timeout_s=options.timeout_s)
    reports: list[BaselineReport | None] = [None] * len(jobs)
    pending = list(range(len(jobs)))
    while pending:
        batch = [jobs[i] for i in pending]
        answer, stopped = _run_child(batch, device, options, seed, python, python_path, limits, workdir)
        if isinstance(answer, BaselineReport):  # nothing was timed: the same for every problem left
            for i in pending:
                reports[i] = answer.model_copy(update={"problem_sha256": sha256_text(jobs[i].problem_text)})
            break
        started = answer.get("problems", [])[: len(batch)]
        for i, entry in zip(pending, started, strict=False):
            reports[i] = _report(answer, entry, sha256_text(jobs[i].problem_text), options, stopped=stopped,
                                 limit_s=limits.timeout_s)
        if not started:  # a child that started none would start none again
            why = _report(answer, {}, "", options, stopped=stopped, limit_s=limits.timeout_s).note
            for i in pending:
                reports[i] = BaselineReport.unmeasured(why or "the timing child started no problem",
                                                       sha256_text(jobs[i].problem_text))
            break
        pending = pending[len(started):]
    return [r if r is not None else BaselineReport.unmeasured("not timed") for r in reports]


def _run_child(
    batch: Sequence[BaselineJob], device: int, options: BaselineOptions, seed: int, python: str,
    python_path: Sequence[str],
    limits: ChildLimits, workdir: Path | None,
) -> tuple[dict[str, Any] | BaselineReport, str | None]:
    """One child over ``batch``: its answer and, where it ended before the end, why (None: it
    finished); or a report saying why it timed nothing."""
    staging = Path(tempfile.mkdtemp(prefix="torch-baseline-", dir=workdir))
    try:
        answer_path = staging / "answer.json"
        problems = []
        for k, job in enumerate(batch):
            path = staging / (PROBLEM_FILE if len(batch) == 1 else f"problem_{k}.py")
            path.write_text(job.problem_text, encoding="utf-8")
            problems.append({"problem": str(path), "label": job.label, "bytes": job.bytes,
                             "cases": [{"name": n, "values": v} for n, v in job.cases]})
        request = {"answer": str(answer_path), "device": device, "seed": seed, "problems": problems,
                   "problem_timeout_s": limits.timeout_s, "compile_ahead": options.compile_ahead, **options.timing()}
        (staging / "request.json").write_text(json.dumps(request))
        read, execute = compiler_access(python_path)
        # torch.compile compiles in the problem's own process (no worker pool); its caches, triton's
        # and CUDA's lie in the problem's directory (the child sets them for each)
        # torch asks NVML, not CUDA, whether a GPU is there: the child's first process, which
        # forks the problems' processes, must never start CUDA itself
        env = {"TORCHINDUCTOR_COMPILE_THREADS": "1", "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
        # the child kills a problem at its deadline (in the compile-ahead phase, and when timed); the
        # supervisor's is the backstop
        rounds = len(batch) + (math.ceil(len(batch) / options.compile_ahead) if options.compile_ahead > 1 else 0)
        backstop = replace(limits, timeout_s=limits.timeout_s * rounds + CHILD_START_S)
        result = run_torch_child(
            CHILD_MODULE, [str(staging / "request.json")], staging=staging, python=python, python_path=python_path,
            read=read, execute=execute, limits=backstop, env=env, each_job=True,
        )
        if result.refused is not None:
            if result.missing == "torch":
                return BaselineReport.unmeasured(
                    f"PyTorch eager and torch.compile not timed: torch is not installed for {python} (pip install "
                    "torch)",
                    blocked=True), None
            return BaselineReport.unmeasured(f"PyTorch eager and torch.compile not timed: {result.refused}",
                                             blocked=True), None
        try:
            answer: dict[str, Any] = json.loads(read_child_file(answer_path))
        except (OSError, ValueError):
            tail = [line for line in result.stderr_tail.splitlines() if line.strip()]
            why = "timed out" if result.timed_out else f"exit {result.returncode}"
            return BaselineReport.unmeasured(
                f"PyTorch eager and torch.compile not timed: the timing child gave no answer ({why}): "
                f"{tail[-1].strip()[:300] if tail else 'no output'}"), None
        if answer.get("error") and not answer.get("problems"):
            return BaselineReport.unmeasured(f"PyTorch eager and torch.compile not timed: {answer['error']}",
                                             blocked=bool(answer.get("blocked"))), None
        if answer.get("finished"):
            return answer, None
        return answer, answer.get("error") or ("timed out" if result.timed_out else f"exit {result.returncode}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _report(answer: dict[str, Any], entry: dict[str, Any], digest: str, options: BaselineOptions, *,
            stopped: str | None, limit_s: float) -> BaselineReport:
    """One problem's entry of a child's answer as a report (``stopped``: the child ended early)."""
    version, device_name = answer.get("torch_version"), answer.get("device_name")
    cases = []
    for c in entry.get("cases", []):
        record = CaseBaseline(case=c["name"], eager_note=c.get("eager_note"), compile_note=c.get("compile_note"),
                              torch_version=version, device_name=device_name, mode=answer.get("mode") or COMPILE_MODE,
                              compile_s=c.get("compile_s"))
        for which in ("eager", "compile"):
            times = (c.get(which) or {}).get("times_ms")
            if times:
                setattr(record, which, baseline_timing(times, options))
        if record.compile is None and record.compile_note is None and stopped:
            record.compile_note = f"torch.compile not timed: the timing child ran past its {limit_s:.0f} s deadline"
        cases.append(record)
    note = entry.get("error")
    if note:
        note = f"PyTorch eager and torch.compile not timed: {note}" if not cases else note
    elif not entry.get("finished"):
        note = (f"the timing child ran past its {limit_s:.0f} s deadline after {len(cases)} case(s)"
                if stopped == "timed out"
                else f"the timing child stopped ({stopped or 'no answer'}) after {len(cases)} case(s)")
    return BaselineReport(problem_sha256=digest, cases=cases, note=note, options=options.timing(),
                          seconds=entry.get("seconds"), startup_s=answer.get("startup_s"), cuda_s=entry.get("cuda_s"))


# --- an imported workload's baselines, cached --------------------------------------------------


def imported_problem(workload: Workload) -> Path | None:
    """The problem file of a workload ``kernelopt import-torch`` wrote (its ``problem.py``; the spec
    records the import in ``imported``, or, written before that field, is judged as imported:
    :func:`~.torch_import.judged_as_imported`), else None."""
    spec = workload.spec
    judged = not spec.deterministic and spec.cost.floor_from == "bytes"
    if workload.root is None or not (spec.imported is not None or judged):
        return None
    path = workload.root / PROBLEM_FILE
    return path if path.is_file() else None


def performance_sizes(workload: Workload, constants: dict[str, int]) -> list[tuple[str, dict[str, int]]]:
    """Each performance case with the problem's size constants (``constants``, as the file writes
    them) where the case's scalars name one, else as written: the import names a case's scalar
    after the size constant it stands for, and its performance case is the problem as written."""
    out = []
    for case in workload.spec.performance_cases:
        values = {name: int(v) if isinstance(v := case.scalars.get(name), int) and not isinstance(v, bool) else value
                  for name, value in constants.items()}
        out.append((case.name, values))
    return out


def performance_bytes(workload: Workload) -> int:
    """The bytes of the largest performance case's buffers (inputs, parameters, output) of an
    imported workload: about what its module holds on the GPU when timed (0 where a shape cannot
    be worked out)."""
    try:
        return max((sum(math.prod(case_shape(p, c.scalars)) * p.dtype.itemsize for p in workload.signature.buffers)
                    for c in workload.spec.performance_cases), default=0)
    except (KerneloptError, ValueError):
        return 0


class BaselineCache:
    """Case baselines on disk (one JSON file each under ``root``), keyed by :meth:`key`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @staticmethod
    def key(problem_sha256: str, case: str, values: dict[str, int], device_name: str, version: str,
            options: BaselineOptions) -> str:
        data = {"problem": problem_sha256, "case": case, "values": values, "device": device_name, "torch": version,
                "timing": options.timing()}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def get(self, key: str) -> CaseBaseline | None:
        try:
            return CaseBaseline.model_validate_json((self.root / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None

    def put(self, key: str, record: CaseBaseline) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        write_atomic(self.root / f"{key}.json", record.model_dump_json().encode(), durable=False)


def workload_baselines(
    workload: Workload, *, device: int, device_name: str | None, options: BaselineOptions | None = None,
    cache: BaselineCache | None = None, python: str = sys.executable, python_path: Sequence[str] = (),
    limits: ChildLimits | None = None, workdir: Path | None = None,
) -> BaselineReport:
    """The baselines of an imported workload's performance cases: :func:`workloads_baselines` of one."""
    [report] = workloads_baselines([workload], device=device, device_name=device_name, options=options, cache=cache,
                                   python=python, python_path=python_path, limits=limits, workdir=workdir)
    return report


@dataclass
class _Planned:
    """One workload's way to its report: its problem, its performance cases' sizes, those the cache held."""

    digest: str
    label: str
    text: str
    sizes: list[tuple[str, dict[str, int]]]
    found: dict[str, CaseBaseline]
    bytes: int = 0

    @property
    def todo(self) -> list[tuple[str, dict[str, int]]]:
        return [(n, v) for n, v in self.sizes if n not in self.found]


def _plan(workload: Workload, cache: BaselineCache | None, key: Any) -> _Planned | BaselineReport:
    from .torch_problem import TorchProblemError, parse_problem

    path = imported_problem(workload)
    if path is None:
        return BaselineReport.unmeasured(f"{workload.name} is not an imported PyTorch problem (no {PROBLEM_FILE}): no "
                                         "PyTorch baseline")
    try:
        text = path.read_text(encoding="utf-8")
        source = parse_problem(text, path.name)
    except (OSError, UnicodeDecodeError, TorchProblemError) as exc:
        return BaselineReport.unmeasured(f"PyTorch eager and torch.compile not timed: {path}: {exc}")
    digest = sha256_text(text)
    planned = _Planned(digest, path.name, text,
                       performance_sizes(workload, {c.name: c.value for c in source.constants}), {},
                       performance_bytes(workload))
    if cache is not None and key is not None:
        for name, values in planned.sizes:
            hit = cache.get(key(digest, name, values))
            if hit is not None:
                planned.found[name] = hit.model_copy(update={"cached": True})
    return planned


def workloads_baselines(
    workloads: Sequence[Workload], *, device: int, device_name: str | None, options: BaselineOptions | None = None,
    cache: BaselineCache | None = None, python: str = sys.executable, python_path: Sequence[str] = (),
    limits: ChildLimits | None = None, workdir: Path | None = None,
) -> list[BaselineReport]:
    """The baselines of imported workloads' performance cases, a report each in order: from ``cache``
    where it holds them (keyed with ``device_name`` and the torch version this interpreter would
    import), the others timed together by :func:`measure_batch` (one child for them all) and
    stored. A workload that is not an imported problem, or whose problem file cannot be read, gets
    a report with a note."""
    options = options or BaselineOptions()
    version = torch_version(python_path) if python == sys.executable else None
    keyed = cache is not None and version is not None and device_name is not None

    def key(digest: str, case: str, values: dict[str, int]) -> str:
        return BaselineCache.key(digest, case, values, device_name or "", version or "", options)

    plans = [_plan(w, cache, key if keyed else None) for w in workloads]
    runs = [(i, p) for i, p in enumerate(plans) if isinstance(p, _Planned) and p.todo]
    timed = measure_batch([BaselineJob(p.text, p.todo, p.label, p.bytes) for _, p in runs], device=device,
                          options=options,
                          python=python, python_path=python_path, limits=limits, workdir=workdir) if runs else []
    measured = {i: r for (i, _), r in zip(runs, timed, strict=True)}
    reports = []
    for i, plan in enumerate(plans):
        if isinstance(plan, BaselineReport):
            reports.append(plan)
            continue
        report = measured.get(i) or BaselineReport(problem_sha256=plan.digest, options=options.timing())
        if keyed:
            assert cache is not None  # keyed: a cache was given
            for record in report.cases:
                if record.eager is not None and record.torch_version == version:
                    cache.put(key(plan.digest, record.case, dict(plan.sizes)[record.case]), record)
        by_case = {c.case: c for c in report.cases}
        report.cases = [plan.found.get(n) or by_case.get(n)
                        or CaseBaseline(case=n, eager_note=report.note or "not timed",
                                                                              compile_note=report.note or "not timed")
                        for n, _ in plan.sizes]
        if report.note and all(c.cached for c in report.cases):
            report.note = None
        reports.append(report)
    return reports


CACHE_DIR = "torch-baselines"  # under the settings' cache root


def settings_baselines(
    settings: Settings, workload: Workload, device: DeviceInfo, options: EvaluateOptions, *, compile: bool = True,
    workdir: Path | None = None,
) -> BaselineReport | None:
    """:func:`workload_baselines` as the CLI runs them: timed by ``options``' rules on ``device``,
    cached under the settings' cache root, the child confined as the settings confine compiles.
    None for a workload that is not an imported problem (nothing is run: a file's existence is
    the one check on the way of every other workload)."""
    if imported_problem(workload) is None:
        return None
    return settings_batch_baselines(settings, [workload], device, options, compile=compile, workdir=workdir)[0]


def settings_batch_baselines(
    settings: Settings, workloads: Sequence[Workload], device: DeviceInfo, options: EvaluateOptions, *,
    compile: bool = True,
    workdir: Path | None = None,
) -> list[BaselineReport]:
    """:func:`workloads_baselines` as the CLI runs them (see :func:`settings_baselines`): one child
    times every workload's uncached cases (``kernelopt kernelbench`` hands it 8 problems at a time)."""
    baseline = BaselineOptions.following(options, compile=compile)
    return workloads_baselines(
        workloads, device=device.ordinal, device_name=device.name, options=baseline,
        cache=BaselineCache(settings.cache_root() / CACHE_DIR), workdir=workdir,
        limits=ChildLimits.following(settings.compile_limits(), baseline.timeout_s),
    )


# --- beside a candidate's result ---------------------------------------------------------------


def _ratio(theirs: BaselineTiming | float | None, ours: float | None) -> float | None:
    t = theirs.median_ms if isinstance(theirs, BaselineTiming) else theirs
    return t / ours if t and ours and ours > 0 else None


def compare(result: EvaluationResult, report: BaselineReport) -> TorchComparison:
    """``report`` beside ``result``'s performance cases; the speedups need our times (a result
    that did not pass has none: the baselines are still shown)."""
    ours = {c.name: c.timing.median_ms for c in result.cases if c.kind == "performance" and c.timing is not None}
    first = report.cases[0] if report.cases else None
    out = TorchComparison(
        torch_version=first.torch_version if first else None, device_name=first.device_name if first else None,
        mode=first.mode if first else COMPILE_MODE, note=report.note,
        cached=bool(report.cases) and all(c.cached for c in report.cases),
        ours_ms=result.score_ms, eager_ms=report.geomean_ms("eager"), compile_ms=report.geomean_ms("compile"),
        eager_note=report.why_missing("eager"), compile_note=report.why_missing("compile"),
    )
    for c in report.cases:
        mine = ours.get(c.case)
        out.cases.append(CaseComparison(
            case=c.case, ours_ms=mine, eager=c.eager, compile=c.compile, speedup_eager=_ratio(c.eager, mine),
            speedup_compile=_ratio(c.compile, mine), eager_note=c.eager_note, compile_note=c.compile_note,
            cached=c.cached,
        ))
    out.speedup_eager = _ratio(out.eager_ms, out.ours_ms)
    out.speedup_compile = _ratio(out.compile_ms, out.ours_ms)
    return out
