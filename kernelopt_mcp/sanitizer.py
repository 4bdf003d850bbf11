"""The sanitizer tier: a candidate's correctness cases under NVIDIA compute-sanitizer.

Validation compares outputs; it cannot see an out-of-bounds *read*, a read of uninitialised
memory or a shared-memory race that happened to give the right answer this time. This tier
runs ``compute-sanitizer --tool memcheck|racecheck|initcheck`` on
``kernelopt-harness run REQUEST.json`` for each correctness case (the same request the
evaluator sends, from :func:`~kernelopt_mcp.evaluation.evaluate.case_request`) and parses its report into a
:class:`SanitizerReport` per tool per case. Kernels are compiled with ``-lineinfo`` (the
compiler always adds it), so findings name the kernel's source line.

The sanitizer's report goes to a log file (``--log-file``), never into the harness's JSON
answer on stdout. For memcheck the request's guard bytes are set to 0: guards are part of the
allocation, so a read that strays into them would be invisible to memcheck otherwise (writes
into guards are caught by validation already).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from .errors import KerneloptError, ToolchainNotFound
from .evaluation.protocol import RunRequest, parse_answer, request_json
from .executables import find_executable, run_killable

if TYPE_CHECKING:
    from .evaluation.candidate import Candidate
    from .evaluation.session import Session

SANITIZER_NAME = "compute-sanitizer"
SANITIZER_ERROR = "sanitizer_error"  # the status a candidate gets when a tool reports an error
ERROR_EXITCODE = 86  # what compute-sanitizer exits with when it reported an error
MAX_FINDINGS = 5
MAX_DETAIL_LINES = 6
PRINT_LIMIT = 100
DEFAULT_TIMEOUT_S = 300.0


class SanitizerTool(StrEnum):
    memcheck = "memcheck"
    racecheck = "racecheck"
    initcheck = "initcheck"


ALL_TOOLS = (SanitizerTool.memcheck, SanitizerTool.racecheck, SanitizerTool.initcheck)


class SanitizerUnavailable(ToolchainNotFound):
    """compute-sanitizer ran but could not check anything here (unsupported device, ...)."""


class SanitizerFinding(BaseModel):
    """One error (or racecheck warning) as compute-sanitizer printed it."""

    kind: str = Field(description="the report's headline, e.g. 'Invalid __global__ read of size 4 bytes'")
    severity: str = Field("error", description="error | warning")
    function: str | None = Field(None, description="the kernel (or device function) it happened in")
    pc_offset: str | None = Field(None, description="offset into the function, e.g. 0x90")
    file: str | None = None
    line: int | None = Field(None, description="source line (needs -lineinfo, which kernelopt always passes)")
    thread: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    address: str | None = None
    detail: list[str] = Field(default_factory=list, description="the report's further lines (host frames left out)")

    def summary(self) -> str:
        where = (f" at {self.file}:{self.line}" if self.line is not None
                 else (f" in {self.function}" if self.function else ""))
        who = f" by thread {self.thread} in block {self.block}" if self.thread and self.block else ""
        addr = f" (address {self.address})" if self.address else ""
        return f"{self.kind}{where}{who}{addr}"


class SanitizerReport(BaseModel):
    """One tool on one case."""

    tool: SanitizerTool
    case: str
    passed: bool
    errors: int = Field(description="errors the tool counted (its summary line)")
    warnings: int = 0
    findings: list[SanitizerFinding] = Field(default_factory=list, description=f"the first {MAX_FINDINGS}")
    findings_omitted: int = 0
    harness_status: str | None = Field(None,
                                       description="the case's status in the harness's answer (e.g. runtime_error)")
    exit_code: int | None = None
    timed_out: bool = False
    message: str = ""

    def summary(self) -> str:
        if self.passed:
            return f"{self.tool} on {self.case}: clean"
        first = self.findings[0].summary() if self.findings else self.message
        return f"{self.tool} on {self.case}: {self.errors} error(s); first: {first}"


# --- finding the tool --------------------------------------------------------------------


def find_sanitizer(
    explicit: str | Path | None = None, *, cuda_home: Path | None = None, search_path: str | None = None
) -> Path:
    """``explicit`` (``Settings.sanitizer``: KERNELOPT_SANITIZER), else ``search_path`` (default:
    PATH), else ``cuda_home``/bin (``Settings.cuda_home``: CUDA_HOME or CUDA_PATH), else
    /usr/local/cuda/bin.

    Raises:
        ToolchainNotFound: with how to install it.
    """
    homes = [cuda_home, Path("/usr/local/cuda")]
    return find_executable(
        explicit,
        [shutil.which(SANITIZER_NAME, path=search_path),
         *(home / sub / SANITIZER_NAME for home in homes if home is not None for sub in ("bin", "compute-sanitizer"))],
        bad_explicit=f"the sanitizer {explicit} does not exist or is not executable; fix or unset KERNELOPT_SANITIZER",
        missing=f"{SANITIZER_NAME} not found on PATH or under $CUDA_HOME/bin or /usr/local/cuda/bin; it ships with the "
        "CUDA toolkit (apt install cuda-sanitizer-13-0, or pip install nvidia-cuda-sanitizer-api); or point "
        "KERNELOPT_SANITIZER at the binary",
    )


def sanitizer_command(
    sanitizer: Path, tool: SanitizerTool, harness: Path, request: Path, log_file: Path
) -> list[str]:
    """The command line for one tool on one request file."""
    return [
        str(sanitizer), "--tool", tool.value, "--log-file", str(log_file), "--print-limit", str(PRINT_LIMIT),
        "--error-exitcode", str(ERROR_EXITCODE),
        # the harness probes the driver and handles refusals itself: those are not the kernel's errors
        "--report-api-errors", "no",
        str(harness), "run", str(request),
    ]


# --- parsing ------------------------------------------------------------------------------

_PREFIX = "========="
_AT_PATTERNS = [
    # at vector_add+0x90 in /tmp/kernel.cu:5      (recent versions, with -lineinfo)
    re.compile(r"^at (?P<func>.+?)\+0x(?P<off>[0-9a-fA-F]+) in (?P<file>.+?):(?P<line>\d+)$"),
    # at 0xa0a50 in /path/file.cuh:272:ThreadLoad<...>   (12.x with line info)
    re.compile(r"^at 0x(?P<off>[0-9a-fA-F]+) in (?P<file>[^:]+?):(?P<line>\d+):(?P<func>.+)$"),
    # at vector_add+0x90                          (no line info)
    re.compile(r"^at (?P<func>.+?)\+0x(?P<off>[0-9a-fA-F]+)$"),
    # at 0x150 in void kernel<int>(int*)          (older, no line info)
    re.compile(r"^at 0x(?P<off>[0-9a-fA-F]+) in (?P<func>.+)$"),
]
_THREAD_RE = re.compile(r"by thread \((\d+),(\d+),(\d+)\) in block \((\d+),(\d+),(\d+)\)")
# "Address 0x.. is out of bounds" (12.x) and "Access to 0x.. is out of bounds" (13.0, seen on an H200)
_ADDRESS_RE = re.compile(r"(?:address|access at|access to) (0x[0-9a-f]+)", re.IGNORECASE)
_RACE_RE = re.compile(r"^(?P<sev>Error|Warning): Race reported between (?P<first>.+)$")
_HAZARDS_RE = re.compile(r"\s*\[[\d,]+ hazards?\]\s*$")
_ERROR_SUMMARY_RE = re.compile(r"ERROR SUMMARY: ([\d,]+) errors?")
_RACE_SUMMARY_RE = re.compile(r"RACECHECK SUMMARY: ([\d,]+) hazards? displayed \(([\d,]+) errors?, "
                              r"([\d,]+) warnings?\)")
_NOT_FINDINGS = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY",
                 "Target application returned")
_TOOL_FAILURES = (
    "Device not supported", "Target application terminated before first instrumented API call",
    "No attachable process found", "Unable to ", "Could not ", "Failed to ",
)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_report(text: str) -> tuple[list[SanitizerFinding], int, int]:
    """Findings, error count and warning count from compute-sanitizer's output.

    Counts come from the summary line when there is one, else from the findings.

    Raises:
        SanitizerUnavailable: the tool reports it could not check (e.g. "Device not supported").
    """
    findings: list[SanitizerFinding] = []
    current: SanitizerFinding | None = None
    errors = warnings = None
    in_host_frames = False
    for raw in text.splitlines():
        if not raw.startswith(_PREFIX):
            continue
        body = raw[len(_PREFIX):]
        stripped = body.strip()
        if not stripped:
            current, in_host_frames = None, False
            continue
        if m := _ERROR_SUMMARY_RE.search(stripped):
            errors = _int(m.group(1)) if errors is None else errors
            continue
        if m := _RACE_SUMMARY_RE.search(stripped):
            errors, warnings = _int(m.group(2)), _int(m.group(3))
            continue
        top_level = body.startswith(" ") and not body.startswith("  ")
        if top_level:
            if stripped.startswith(_NOT_FINDINGS):
                current = None
                continue
            if (stripped.startswith("Error:") and not _RACE_RE.match(stripped)
                    and any(f in stripped for f in _TOOL_FAILURES)):
                raise SanitizerUnavailable(f"compute-sanitizer could not check this kernel here: {stripped}")
            current = _start_finding(stripped)
            findings.append(current)
            in_host_frames = False
            continue
        if current is None:
            continue
        if stripped.startswith(("Saved host backtrace", "Host Frame")) or in_host_frames:
            in_host_frames = in_host_frames or stripped.startswith("Saved host backtrace")
            continue
        _add_detail(current, stripped)
    if errors is None:
        errors = sum(f.severity == "error" for f in findings)
    if warnings is None:
        warnings = sum(f.severity == "warning" for f in findings)
    return findings, errors, warnings


def _start_finding(headline: str) -> SanitizerFinding:
    if m := _RACE_RE.match(headline):
        finding = SanitizerFinding(
            kind="Race reported between " + m["first"].split(" at ")[0].strip(),
            severity="error" if m["sev"] == "Error" else "warning",
        )
        _add_detail(finding, _access_location(m["first"]))
        finding.detail[-1:] = [headline]
        return finding
    severity = "warning" if headline.lower().startswith("warning") else "error"
    return SanitizerFinding(kind=headline.rstrip(":"), severity=severity)


def _access_location(text: str) -> str:
    """'Write access at k+0x150 in f.cu:8 [4 hazards]' -> 'at k+0x150 in f.cu:8' (for _AT_PATTERNS)."""
    _, _, rest = text.partition(" access at ")
    return "at " + _HAZARDS_RE.sub("", rest).strip()


def _add_detail(finding: SanitizerFinding, line: str) -> None:
    if finding.function is None:
        for pattern in _AT_PATTERNS:
            if m := pattern.match(line):
                finding.function, finding.pc_offset = m["func"].strip(), f"0x{m['off']}"
                if "file" in m.groupdict() and m["file"]:
                    finding.file, finding.line = m["file"].strip(), int(m["line"])
                break
    if finding.thread is None and (t := _THREAD_RE.search(line)):
        nums = tuple(int(x) for x in t.groups())
        finding.thread, finding.block = nums[:3], nums[3:]  # type: ignore[assignment]
    if finding.address is None and (a := _ADDRESS_RE.search(line)):
        finding.address = a.group(1)
    if len(finding.detail) < MAX_DETAIL_LINES:
        finding.detail.append(line)


# --- running ------------------------------------------------------------------------------


def run_tool(
    sanitizer: Path, tool: SanitizerTool, harness: Path, request: RunRequest, case: str, workdir: Path,
    *, timeout_s: float = DEFAULT_TIMEOUT_S, cancelled: Callable[[], bool] | None = None,
) -> SanitizerReport:
    """Run one tool on one harness request and parse what it reports.

    Raises:
        HarnessCancelled: ``cancelled()`` became true; the sanitizer and the harness under it were killed.
        HarnessError: the harness's answer lacks a status.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    request = request.model_copy(deep=True)
    if tool is SanitizerTool.memcheck:
        request.guard_bytes = 0
    for entry in request.cases[:1]:
        entry.timing = None  # correctness only: one launch
    request_path = workdir / f"{tool.value}.request.json"
    request_path.write_text(json.dumps(request_json(request), indent=1))
    log_file = workdir / f"{tool.value}.log"
    log_file.unlink(missing_ok=True)
    cmd = sanitizer_command(sanitizer, tool, harness, request_path, log_file)
    out_path, err_path = workdir / f"{tool.value}.stdout", workdir / f"{tool.value}.stderr"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        code = run_killable(cmd, stdout=out, stderr=err, timeout_s=timeout_s, cancelled=cancelled,
                            what=f"compute-sanitizer ({tool})")
    stdout, stderr = _read_capped(out_path), _read_capped(err_path)  # the harness's answer is the last line
    log = log_file.read_text(errors="replace") if log_file.exists() else ""
    text = log or stderr.decode(errors="replace")
    harness_status = _harness_case_status(stdout)
    if code is None:
        return SanitizerReport(
            tool=tool, case=case, passed=False, errors=0, exit_code=None, timed_out=True,
            harness_status=harness_status,
            message=f"{tool} did not finish within {timeout_s:.0f} s (the kernel runs far slower under the sanitizer)",
        )
    findings, errors, warnings = parse_report(text)
    if code not in (0, ERROR_EXITCODE) and not findings and harness_status is None:
        raise KerneloptError(
            f"{tool} exited with code {code} without a report or an answer from the harness: "
            f"{(text or stderr.decode(errors='replace')).strip()[-600:]}"
        )
    passed = errors == 0 and code == 0
    return SanitizerReport(
        tool=tool, case=case, passed=passed, errors=errors, warnings=warnings,
        findings=findings[:MAX_FINDINGS], findings_omitted=max(0, len(findings) - MAX_FINDINGS),
        harness_status=harness_status, exit_code=code,
        message="" if passed else (findings[0].summary() if findings else f"exit code {code}"),
    )


def _read_capped(path: Path, limit: int = 1 << 20) -> bytes:
    """The last ``limit`` bytes of a file (a kernel's printf flood must not fill memory)."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - limit))
        return f.read()


def _harness_case_status(stdout: bytes) -> str | None:
    """The status of the harness's answer (its last JSON line): the case's, else the request's.

    Raises:
        HarnessError: the answer lacks a status (named).
    """
    for line in reversed(stdout.decode(errors="replace").strip().splitlines()):
        try:
            raw = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(raw, dict):
            return None
        answer = parse_answer(raw)
        return answer.cases[0].status if answer.cases else answer.status
    return None


def sanitize_candidate(
    session: Session, candidate: Candidate, sanitizer: Path, harness: Path, workdir: Path,
    *, tools: Iterable[SanitizerTool] = ALL_TOOLS, timeout_s: float = DEFAULT_TIMEOUT_S,
    cancelled: Callable[[], bool] | None = None,
) -> list[SanitizerReport]:
    """Every tool on every correctness case of ``candidate``, on the session's inputs.

    Raises:
        KerneloptError: the candidate cannot be run (it does not compile or its launch is invalid:
            validate it first), or the sanitizer failed without a report (HarnessError: the
            harness's answer lacks a status).
        SanitizerUnavailable: the sanitizer cannot check kernels on this machine.
        HarnessCancelled: ``cancelled()`` became true (polled while each tool runs).
    """
    from .evaluation.evaluate import case_request  # the evaluation stack, loaded when a candidate is sanitized

    reports = []
    cases = [c.name for c in session.workload.spec.cases if c.kind == "correctness"]
    for case in cases:
        built = case_request(session, candidate, case, workdir / case / "outputs")
        if built.request is None:
            raise KerneloptError(
                f"case {case!r} cannot be run under the sanitizer: {built.problem}; validate the kernel first"
            )
        for tool in tools:
            reports.append(run_tool(sanitizer, SanitizerTool(tool), harness, built.request, case, workdir / case,
                                    timeout_s=timeout_s, cancelled=cancelled))
    return reports


def verdict(reports: list[SanitizerReport]) -> tuple[bool, str]:
    """(all clean, a one-line message naming the first problem)."""
    bad = [r for r in reports if not r.passed]
    if not bad:
        tools = sorted({r.tool.value for r in reports})
        return True, f"sanitizer clean: {', '.join(tools)} on {len({r.case for r in reports})} correctness case(s)"
    return (False, f"{SANITIZER_ERROR}: {len(bad)} of {len(reports)} check(s) failed; "
            + "; ".join(r.summary() for r in bad[:3]))
