"""kernelopt: trustworthy GPU tools for writing fast CUDA kernels.

The library under the MCP server, the CLI and the orchestrator. Importing it touches no GPU
and imports neither ``mcp`` nor ``openai``.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .evaluation.compare import OutputComparison, compare, geometric_mean
from .compiler import CompileResult, compile_kernel
from .config import Settings, find_workload, list_workloads
from .docs import DocsSearchResult, search_docs
from .errors import (
    CountersNotPermitted,
    DeviceUnavailable,
    ExpressionError,
    HarnessError,
    InputError,
    KerneloptError,
    LaunchConfigError,
    ProfiledKernelFailed,
    ProfilerError,
    ProfilerTimeout,
    ToolchainNotFound,
    WorkloadError,
)
from .evaluation.candidate import Candidate, EvaluateOptions, initial_candidate
from .evaluation.evaluate import case_request, evaluate, prepare
from .evaluation.outcomes import EvaluationResult, Status
from .evaluation.session import Session
from .gpu import DeviceInfo, device_info
from .evaluation.harness import HarnessProcess, find_harness
from .launch import LaunchConfig, LaunchSpec
from .ncu_report import ProfileSummary
from .profiler import ProfileOptions, find_ncu, profile_case
from .workload import Workload, WorkloadSpec, load_parts, load_workload

__all__ = [
    "Candidate", "CompileResult", "CountersNotPermitted", "DeviceInfo", "DeviceUnavailable", "DocsSearchResult",
    "EvaluateOptions", "ProfileOptions", "ProfileSummary", "ProfiledKernelFailed", "ProfilerError", "ProfilerTimeout",
    "find_ncu", "profile_case", "search_docs",
    "EvaluationResult", "ExpressionError", "HarnessError", "HarnessProcess",
    "InputError", "KerneloptError", "LaunchConfig", "LaunchConfigError", "LaunchSpec",
    "OutputComparison", "Session", "Settings", "Status", "ToolchainNotFound", "Workload", "WorkloadError",
    "WorkloadSpec", "__version__", "case_request", "compare", "compile_kernel", "device_info", "evaluate", "find_harness",
    "find_workload", "geometric_mean", "initial_candidate", "list_workloads", "load_parts", "prepare",
    "load_workload",
]
