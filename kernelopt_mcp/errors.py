"""Exceptions raised when kernelopt itself cannot do its job.

Kernel outcomes (a compile error, a mismatch, a fault, a timeout) are *data*: see
``kernelopt_mcp.status.Status``. Exceptions are for the tool failing:

    KerneloptError                  root: catch this to catch everything below
    ├── WorkloadError               a workload file or spec is malformed (names file, field, fix)
    │   └── TunableError            a tunable candidate (tunable.json) is malformed or does not fit
    ├── LaunchConfigError           a launch configuration is invalid for a case or the device
    ├── ExpressionError             a shape/launch/cost expression is not allowed or fails
    ├── InputError                  an input generator or data file cannot produce the buffer
    ├── ToolchainNotFound           NVRTC, the CUDA headers, the harness or ncu are missing
    │   └── UnconfinedCompilerRefused  no Landlock to confine NVRTC, and running it unconfined
    │       │                          was not accepted (--unconfined-compiler)
    │       └── ConfinementFailed   Landlock is there but the compile worker could not restrict itself
    ├── DeviceUnavailable           no CUDA driver or device where one is needed
    ├── HarnessError                the native harness misbehaved (bad answer, I/O, protocol)
    ├── HarnessCancelled            the caller cancelled the job; the harness was stopped
    ├── GpuCallTooLong              a GPU job ran past the server's per-call cap; the harness was stopped
    ├── ServerBusy                  too many jobs of a kind wait already; retry in N s
    └── ProfilerError               Nsight Compute could not profile the case (output attached)
        ├── CountersNotPermitted    ERR_NVGPUCTRPERM: this user may not read the GPU's counters
        ├── ProfiledKernelFailed    the kernel did not run cleanly under the profiler
        └── ProfilerTimeout         ncu did not finish within its deadline (it was killed)

Every message says what failed, why, and what to do next.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pydantic import ValidationError


class KerneloptError(Exception):
    """Root of all kernelopt exceptions."""


class WorkloadError(KerneloptError):
    """A workload (directory, JSON spec or seed-style files) is malformed."""


class TunableError(WorkloadError):
    """A tunable candidate (params, constraints, defaults, launch) is malformed or clashes with its workload."""


class LaunchConfigError(KerneloptError):
    """A launch configuration cannot be used for a case on the target device."""


class ExpressionError(KerneloptError, ValueError):
    """An expression uses something other than arithmetic on known names, or fails."""


class InputError(KerneloptError):
    """An input buffer cannot be generated or loaded."""


class ToolchainNotFound(KerneloptError):
    """A required tool (NVRTC, CUDA headers, kernelopt-harness) is not installed."""


class UnconfinedCompilerRefused(ToolchainNotFound):
    """The kernel offers no Landlock to confine NVRTC, and the user did not accept running it unconfined."""


class ConfinementFailed(UnconfinedCompilerRefused):
    """The kernel has Landlock, but the worker could not restrict itself (a seccomp filter, an LSM)."""


class DeviceUnavailable(KerneloptError):
    """No usable CUDA driver or device."""


class HarnessError(KerneloptError):
    """The native harness could not be run or answered outside its contract."""


class HarnessCancelled(KerneloptError):
    """The job was cancelled: the harness was killed and will not restart until re-armed."""


class GpuCallTooLong(KerneloptError):
    """A GPU job ran past the server's per-call GPU-time cap: the harness was killed, as on cancel."""


class ServerBusy(KerneloptError):
    """Too many jobs of a kind wait already (for this client or in all); nothing was queued."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ProfilerError(KerneloptError):
    """Nsight Compute (ncu) ran but could not produce a profile."""


class CountersNotPermitted(ProfilerError):
    """The driver refuses access to the GPU's performance counters (ERR_NVGPUCTRPERM)."""


class ProfiledKernelFailed(ProfilerError):
    """The candidate did not compile, launch or finish cleanly in the profiled process."""


class ProfilerTimeout(ProfilerError):
    """ncu did not finish in time; its process group was killed."""


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``; did you mean 'sgemm'?`` for the known name closest to a misspelled ``name`` ("" when
    none is close), to follow a "no such name" message."""
    match = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f"; did you mean {match[0]!r}?" if match else ""


def format_validation_error(exc: ValidationError, source: str) -> str:
    """A pydantic error as ``SOURCE: field.path: problem`` lines a person can act on (one per
    problem, no pydantic boilerplate or links). A misspelled key is one line: the required field
    it was meant to be, with what was given (``cases.tiny.block: required field is missing; got
    "blok": did you mean "block"?``)."""
    errors = exc.errors(include_url=False)
    missing = {tuple(e["loc"]): e for e in errors if e["type"] == "missing"}
    extra = {tuple(e["loc"]): e for e in errors if e["type"] == "extra_forbidden"}
    meant: dict[tuple[Any, ...], str] = {}  # a missing field's loc -> the unknown key given instead
    for loc in extra:
        candidates = [str(m[-1]) for m in missing if m[:-1] == loc[:-1] and m not in meant]
        match = difflib.get_close_matches(str(loc[-1]), candidates, n=1, cutoff=0.6)
        if match:
            meant[(*loc[:-1], match[0])] = str(loc[-1])
    lines = []
    for err in errors:
        loc_t = tuple(err["loc"])
        if err["type"] == "extra_forbidden" and any(m[:-1] == loc_t[:-1] and g == str(loc_t[-1])
                                                    for m, g in meant.items()):
            continue  # told with the field it was meant to be
        # a key with a newline or control characters (unknown fields are echoed) stays on its line
        where = ".".join(str(p) if str(p).isprintable() else repr(p) for p in loc_t) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field; remove it or check its spelling (see `kernelopt schema`)"
        elif err["type"] == "missing":
            msg = "required field is missing"
            if loc_t in meant:
                msg += f'; got "{meant[loc_t]}": did you mean "{loc_t[-1]}"?'
        elif err["type"] == "json_invalid":
            msg = f"invalid JSON ({err.get('ctx', {}).get('error', msg)})"
        lines.append(f"{source}: {where}: {' '.join(msg.split())}")
    return "\n".join(lines)
