"""Profiling one case of a candidate under Nsight Compute (ncu).

The profiled process is the native harness running one request without ``timing``: exactly
one launch of the entry, which ncu replays as often as its sections need (memory saved and
restored between passes, caches flushed by ncu before each pass). The request comes from
:func:`~kernelopt_mcp.evaluation.evaluate.case_request` on the workload's session, so the
kernel sees the same inputs as in ``evaluate``. The
run never feeds a timing: the duration ncu reports is under the profiler, with its clock
control, and is labelled so.

    ncu --target-processes all --kernel-name ENTRY --launch-count 1 --clock-control none
        --section ... --metrics ... -o REPORT  kernelopt-harness run REQUEST.json
    ncu --import REPORT.ncu-rep --csv --page raw --print-units base     -> ncu_report.summarize
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import expr
from .errors import (
    CountersNotPermitted,
    ProfiledKernelFailed,
    ProfilerError,
    ProfilerTimeout,
)
from .evaluation.candidate import Candidate
from .evaluation.evaluate import case_request
from .evaluation.harness import find_harness, raise_for_request_error
from .evaluation.protocol import AnswerEnvelope, CaseError, HarnessAnswer, RequestError, parse_answer, request_json
from .evaluation.session import Session
from .executables import child_env, find_executable, run_killable
from .ncu_report import ProfileSummary, parse_raw_csv, pick_kernel, summarize

NCU_NAME = "ncu"
CLOCK_CONTROLS = ("none", "base")
# Enough for the summary: speed of light, launch, occupancy, memory tables, warp states.
CURATED_SECTIONS = (
    "SpeedOfLight", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis",
    "MemoryWorkloadAnalysis_Chart", "MemoryWorkloadAnalysis_Tables", "ComputeWorkloadAnalysis",
    "SchedulerStats", "WarpStateStats",
)
# Named explicitly so the summary does not depend on what a section happens to include.
SUMMARY_METRICS = (
    "gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum", "l1tex__t_bytes.sum",
    "lts__t_sector_hit_rate.pct", "l1tex__t_sector_hit_rate.pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active", "sm__maximum_warps_per_active_cycle_pct",
    "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps", "launch__occupancy_limit_blocks",
    "launch__registers_per_thread", "launch__shared_mem_per_block_static",
    "launch__shared_mem_per_block_dynamic", "launch__block_size", "launch__grid_size",
    "launch__waves_per_multiprocessor",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct",
    "smsp__average_warp_latency_per_inst_issued.ratio",
)
PERMISSION_HELP = (
    "the driver does not let this user read the GPU's performance counters (ERR_NVGPUCTRPERM). "
    "Run kernelopt as root, or allow every user: put `options nvidia NVreg_RestrictProfilingToAdminUsers=0` "
    "in a file under /etc/modprobe.d/, then reload the nvidia module or reboot "
    "(see https://developer.nvidia.com/ERR_NVGPUCTRPERM). In a container, the host must allow it."
)
_SET_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,40}$")
# Where ncu lives when it is not on PATH (tests point these elsewhere)
NCU_FALLBACKS = ("/usr/local/cuda/bin/ncu",)
NCU_GLOB = "/opt/nvidia/nsight-compute/*/ncu"


@dataclass
class ProfileOptions:
    """How to profile: ncu binary, clock control, which sections, deadline."""

    ncu: Path | None = None
    clock_control: str = "none"
    section_set: str = "curated"  # our sections, or an ncu set: basic, detailed, full, ...
    timeout_s: float = 600.0
    extra_metrics: bool = True

    def check(self) -> None:
        if self.clock_control not in CLOCK_CONTROLS:
            raise ValueError(f"clock_control must be one of {', '.join(CLOCK_CONTROLS)}, not {self.clock_control!r}")
        if not _SET_NAME.match(self.section_set):
            raise ValueError(f"section set {self.section_set!r}: use 'curated' or an ncu set name such as basic, "
                             "detailed, full")


def find_ncu(explicit: str | Path | None = None) -> Path:
    """Locate Nsight Compute's ``ncu``: ``explicit`` (KERNELOPT_NCU), PATH, /usr/local/cuda/bin,
    then the newest /opt/nvidia/nsight-compute/*/ncu.

    Raises:
        ToolchainNotFound: with how to install it or point at it.
    """
    return find_executable(
        explicit,
        [shutil.which(NCU_NAME), *NCU_FALLBACKS, *sorted(glob.glob(NCU_GLOB), key=_version_key, reverse=True)],
        bad_explicit=f"ncu {explicit} (KERNELOPT_NCU or --ncu) does not exist or is not executable",
        missing="Nsight Compute (ncu) not found on PATH, in /usr/local/cuda/bin or /opt/nvidia/nsight-compute/*/; "
        "install it (it ships with the CUDA toolkit, or as the nsight-compute package from NVIDIA's "
        "repositories) or set KERNELOPT_NCU to the ncu binary",
    )


def _version_key(path: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", Path(path).parent.name)]


def ncu_version(ncu: Path) -> str | None:
    try:
        out = subprocess.run([str(ncu), "--version"], capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL, env=child_env())
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"Version\s+(\S+)", out.stdout)
    return match.group(1) if match else None


def profile_case(
    session: Session,
    candidate: Candidate,
    case_name: str | None,
    out_dir: Path,
    options: ProfileOptions | None = None,
    *,
    harness: Path | None = None,
    progress: Callable[[str], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> ProfileSummary:
    """Profile one case of ``candidate`` under ncu and summarise it.

    Args:
        session: the workload's session (its inputs; prepared on first use, which needs the GPU).
        case_name: a case of the workload; default the first performance case.
        out_dir: where the report (``profile.ncu-rep``), the raw CSV export and the summary go.
        harness: the kernelopt-harness binary (default: the installed one).
        cancelled: polled while ncu runs; when it returns True ncu is killed.

    Raises:
        ToolchainNotFound: ncu or the harness is missing.
        CountersNotPermitted, ProfiledKernelFailed, ProfilerTimeout, ProfilerError: see errors.py.
        HarnessCancelled: ``cancelled()`` became true.
    """
    options = options or ProfileOptions()
    options.check()
    say = progress or (lambda message: None)
    ncu = find_ncu(options.ncu)
    binary = harness or find_harness()
    wl = session.workload
    case = _pick_case(session, case_name)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = session.workdir / "profile" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{candidate.name}-{case.name}"
    say(f"preparing {wl.name} and compiling {candidate.name}")
    built = case_request(session, candidate, case.name, work / "outputs")
    if built.request is None:
        problem = built.problem or built.compiled.summary()
        raise ProfiledKernelFailed(f"{candidate.name} cannot be profiled on case {case.name!r}: {problem}")
    request_path = work / "request.json"
    request_path.write_text(json.dumps(request_json(built.request), indent=1))
    report = out_dir / "profile"
    entry = wl.signature.entry
    metrics = SUMMARY_METRICS if options.extra_metrics else ()
    say(f"profiling {entry} on case {case.name} under Nsight Compute (one launch, replayed once per metric pass)")
    stdout, rc = _run_ncu(ncu, binary, request_path, report, entry, options, metrics, out_dir, cancelled)
    notes = []
    if rc != 0 and metrics and _metric_refused(stdout):
        notes.append("this ncu refused some of kernelopt's extra metrics; the summary uses the sections' metrics only")
        say("ncu refused an extra metric; profiling again with the sections only")
        stdout, rc = _run_ncu(ncu, binary, request_path, report, entry, options, (), out_dir, cancelled)
    answer = _check_outcome(stdout, rc, candidate.name, case.name, entry)
    report_file = report.with_suffix(".ncu-rep")
    if not report_file.is_file():
        raise ProfilerError(
            f"ncu wrote no report (no launch of {entry!r} was profiled; exit code {rc}); ncu said: {_tail(stdout)}"
        )
    say("reading the report")
    export = export_raw(ncu, report_file, options.timeout_s)
    export_path = out_dir / "raw.csv"
    export_path.write_text(export)
    flops = None
    if wl.spec.cost.flops:
        flops = float(expr.evaluate(wl.spec.cost.flops, case.scalars))
    summary = summarize(
        pick_kernel(parse_raw_csv(export), entry),
        workload=wl.name, candidate=candidate.name, case=case.name, kernel=entry, flops=flops,
    )
    summary.report_path = str(report_file.resolve())
    summary.export_path = str(export_path.resolve())
    summary.clock_control = options.clock_control
    summary.section_set = options.section_set
    summary.ncu_version = ncu_version(ncu)
    summary.notes = [
        "numbers are from one launch replayed under the profiler (caches flushed before each pass); "
        "the duration is not a benchmark: use benchmark for timings",
        "outputs were not checked in the profiled run: validate the kernel separately",
        *notes,
    ]
    if summary.device is None and answer is not None and answer.device is not None:
        summary.device = answer.device.name
    (out_dir / "summary.json").write_text(summary.model_dump_json(indent=2))
    return summary


def _pick_case(session: Session, case_name: str | None) -> Any:
    spec = session.workload.spec
    if case_name is None:
        perf = spec.performance_cases
        return perf[0] if perf else spec.cases[-1]
    names = [c.name for c in spec.cases]
    if case_name not in names:
        raise ValueError(f"workload {session.workload.name!r} has no case {case_name!r}; cases: {', '.join(names)}")
    return spec.case(case_name)


def ncu_command(
    ncu: Path, harness: Path, request: Path, report: Path, entry: str, options: ProfileOptions, metrics: tuple[str, ...]
) -> list[str]:
    """The profiling command line (kept in the output directory as ncu_command.json)."""
    cmd = [
        str(ncu), "--target-processes", "all", "--kernel-name", entry, "--launch-count", "1",
        "--clock-control", options.clock_control, "-o", str(report), "--force-overwrite",
    ]
    if options.section_set == "curated":
        for section in CURATED_SECTIONS:
            cmd += ["--section", section]
    else:
        cmd += ["--set", options.section_set]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    return [*cmd, str(harness), "run", str(request)]


def _run_ncu(
    ncu: Path, harness: Path, request: Path, report: Path, entry: str, options: ProfileOptions,
    metrics: tuple[str, ...], out_dir: Path, cancelled: Callable[[], bool] | None,
) -> tuple[str, int]:
    cmd = ncu_command(ncu, harness, request, report, entry, options, metrics)
    (out_dir / "ncu_command.json").write_text(json.dumps(cmd, indent=1))
    log = out_dir / "ncu_output.txt"
    with open(log, "wb") as sink:
        rc = run_killable(cmd, stdout=sink, stderr=subprocess.STDOUT, timeout_s=options.timeout_s, cancelled=cancelled,
                          what="ncu (and the profiled harness)")
    if rc is None:
        raise ProfilerTimeout(
            f"ncu did not finish within {options.timeout_s:.0f} s and was killed (a very slow kernel times the "
            "number of replay passes, or a hang); profile a smaller case, use --set basic, or raise "
            f"KERNELOPT_PROFILE_TIMEOUT; ncu said: {_tail(log.read_text(errors='replace'))}"
        )
    return log.read_text(errors="replace"), rc


def _metric_refused(output: str) -> bool:
    return bool(re.search(r"(Failed to find metric|invalid metric|metric .* (not found|not available|does not exist))",
                          output, re.I))


def harness_answer(output: str) -> dict[str, Any] | None:
    """The harness's JSON answer among ncu's lines (the last line that parses as one)."""
    for line in reversed(output.splitlines()):
        line = line.strip()
        if line.startswith("{") and '"protocol"' in line:
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


def _check_outcome(output: str, rc: int, candidate: str, case: str, entry: str) -> HarnessAnswer | None:
    if "ERR_NVGPUCTRPERM" in output:
        raise CountersNotPermitted(PERMISSION_HELP)
    raw = harness_answer(output)
    answer = None
    if raw is not None:
        raise_for_request_error(parse_answer(raw, AnswerEnvelope), None)
        answer = parse_answer(raw)
        if answer.status == "error":
            error = answer.error or RequestError()
            raise ProfiledKernelFailed(
                f"{candidate} failed to load in the profiled harness ({error.kind}): {error.message}"
            )
        first = answer.cases[0] if answer.cases else None
        status = first.status if first is not None else None
        if status != "ok":
            err = (first.error if first is not None else None) or CaseError()
            detail = ", ".join(f"{k} {v}" for k in ("cuda_error", "call", "message") if (v := getattr(err, k)))
            raise ProfiledKernelFailed(
                f"{candidate} did not run cleanly under the profiler on case {case!r}: {status or 'no case result'}"
                + (f" ({detail})" if detail else "")
                + f"; validate it first. Harness answer: {json.dumps(raw)[:800]}"
            )
    if rc != 0:
        raise ProfilerError(f"ncu exited with code {rc} while profiling {entry!r}; ncu said: {_tail(output)}")
    return answer


def export_raw(ncu: Path, report: Path, timeout_s: float = 300) -> str:
    """``ncu --import REPORT --csv --page raw --print-units base`` (needs no GPU)."""
    cmd = [str(ncu), "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                             env=child_env())
    except subprocess.TimeoutExpired:
        raise ProfilerTimeout(f"exporting {report} did not finish within {timeout_s:.0f} s") from None
    if out.returncode != 0 or not out.stdout.strip():
        raise ProfilerError(f"ncu could not export {report} (exit code {out.returncode}): "
                            f"{_tail(out.stderr + out.stdout)}")
    return out.stdout


def _tail(text: str, lines: int = 12) -> str:
    kept = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return "\n".join(kept)[-1500:] or "(nothing)"
