"""kernelopt: trustworthy GPU tools for writing fast CUDA kernels.

The library under the MCP server, the CLI and the orchestrator; ``__all__`` below is its public
API (the README's "Use it from Python" shows it at work). Importing it touches no GPU and imports
neither ``mcp`` nor ``openai`` (nor torch, optuna or matplotlib: they load where they are used).

- Settings and workloads: :class:`Settings` (``Settings.from_env()`` reads ``KERNELOPT_*``),
  :func:`find_workload`, :func:`load_workload`, :class:`LaunchSpec`; :func:`import_torch_problem`
  turns a KernelBench-style PyTorch problem into a workload directory.
- The application layer (:mod:`kernelopt_mcp.app`), what the CLI and the MCP server call with one
  ``Settings``: :func:`compile_source`, :func:`gpu_info`, :func:`open_harness`,
  :func:`open_session`, :func:`evaluate_kernel`, :func:`profile_kernel`, :func:`tune_kernel` ...
- The pieces under it: :func:`compile_kernel` (NVRTC, no GPU), :class:`Session` with
  :func:`prepare` / :func:`evaluate` / :func:`case_request`, :class:`HarnessProcess` (the native
  harness, one process per GPU), :func:`profile_case` (Nsight Compute), :func:`search_docs`.
- Outcomes are data (:class:`EvaluationResult` with a :class:`Status`); exceptions derive from
  :class:`KerneloptError` and mean the tool itself could not work.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .app import (
    calibrate_gpu,
    compile_cache,
    compile_source,
    default_profile_case,
    evaluate_kernel,
    evaluate_options,
    gpu_info,
    harness_binary,
    open_harness,
    open_session,
    profile_kernel,
    target_arch,
    tune_cache,
    tune_kernel,
)
from .compiler import CompileResult, compile_kernel
from .config import Settings, find_workload, list_workloads
from .docs import DocsSearchResult, search_docs
from .errors import (
    ConfinementFailed,
    CountersNotPermitted,
    DeviceUnavailable,
    ExpressionError,
    HarnessCancelled,
    HarnessError,
    InputError,
    KerneloptError,
    LaunchConfigError,
    ProfiledKernelFailed,
    ProfilerError,
    ProfilerTimeout,
    ToolchainNotFound,
    TunableError,
    UnconfinedCompilerRefused,
    WorkloadError,
)
from .evaluation.calibrate import Calibration
from .evaluation.candidate import Candidate, EvaluateOptions, initial_candidate
from .evaluation.compare import OutputComparison, compare, geometric_mean
from .evaluation.evaluate import case_request, evaluate, prepare
from .evaluation.harness import HarnessProcess, find_harness
from .evaluation.outcomes import EvaluationResult, Status
from .evaluation.session import Session
from .gpu import DeviceInfo, device_info
from .launch import LaunchConfig, LaunchSpec
from .ncu_report import ProfileSummary
from .profiler import ProfileOptions, find_ncu, profile_case
from .results import CheckedEvaluation
from .torch_import import TorchImportOptions, TorchImportResult, import_torch_problem
from .torch_problem import TorchProblemError
from .tune import Tunable, TuneResult, load_tunable
from .workload import Workload, WorkloadSpec, load_workload
from .workload_parts import load_parts

__all__ = [  # noqa: RUF022 (grouped by what the names are for, sorted within a group)
    "__version__",
    # settings and workloads
    "LaunchConfig", "LaunchSpec", "Settings", "TorchImportOptions", "TorchImportResult", "Workload", "WorkloadSpec",
    "find_workload", "import_torch_problem", "list_workloads", "load_parts", "load_workload",
    # the application layer (kernelopt_mcp.app)
    "calibrate_gpu", "compile_cache", "compile_source", "default_profile_case", "evaluate_kernel", "evaluate_options",
    "gpu_info", "harness_binary", "open_harness", "open_session", "profile_kernel", "target_arch", "tune_cache",
    "tune_kernel",
    # compiling, evaluating, profiling, tuning, documentation
    "Calibration", "Candidate", "CheckedEvaluation", "CompileResult", "DeviceInfo", "DocsSearchResult",
    "EvaluateOptions", "EvaluationResult", "HarnessProcess", "OutputComparison", "ProfileOptions", "ProfileSummary",
    "Session", "Status", "Tunable", "TuneResult", "case_request", "compare", "compile_kernel", "device_info",
    "evaluate", "find_harness", "find_ncu", "geometric_mean", "initial_candidate", "load_tunable", "prepare",
    "profile_case", "search_docs",
    # errors (the tree: kernelopt_mcp/errors.py)
    "ConfinementFailed", "CountersNotPermitted", "DeviceUnavailable", "ExpressionError", "HarnessCancelled",
    "HarnessError", "InputError", "KerneloptError", "LaunchConfigError", "ProfiledKernelFailed", "ProfilerError",
    "ProfilerTimeout", "ToolchainNotFound", "TorchProblemError", "TunableError", "UnconfinedCompilerRefused",
    "WorkloadError",
]
