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

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

# The public names are loaded where they live on first use (PEP 562), so importing one module of
# the package (the data layer, say: ``kernelopt_mcp.workload``) does not load the evaluation, the
# compiler and the server's engine with it. The imports below are what type checkers and IDEs read;
# tests/repo/test_api.py checks that they and _MODULES name the same things.
if TYPE_CHECKING:
    from .app import (
        beside_pytorch,
        cache_info,
        calibrate_gpu,
        candidate,
        clear_cache,
        compile_cache,
        compile_file,
        compile_source,
        default_profile_case,
        evaluate_kernel,
        evaluate_options,
        freeze_workload,
        gpu_info,
        harness_binary,
        open_harness,
        open_session,
        profile_dir,
        profile_kernel,
        profile_options,
        resolve_workload,
        sanitizer_binary,
        search_guidance,
        settings_from_env,
        target_arch,
        torch_baselines,
        tune_cache,
        tune_kernel,
        warn_if_unconfined_compiles,
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
    from .evaluation.device import DeviceInfo, device_info
    from .evaluation.evaluate import case_request, evaluate, prepare
    from .evaluation.harness import HarnessProcess, find_harness
    from .evaluation.outcomes import EvaluationResult
    from .evaluation.session import Session
    from .launch import LaunchConfig, LaunchSpec
    from .ncu_report import ProfileSummary
    from .profiler import ProfileOptions, find_ncu, profile_case
    from .results import CheckedEvaluation
    from .status import Status
    from .torch_import import TorchImportOptions, TorchImportResult, import_torch_problem
    from .torch_problem import TorchProblemError
    from .tune.spec import Tunable, load_tunable
    from .tune.tuner import TuneResult
    from .workload import Workload, WorkloadSpec, load_workload
    from .workload_parts import load_parts

_MODULES = {  # module under kernelopt_mcp -> the public names it defines
    "app": (
        "beside_pytorch cache_info calibrate_gpu candidate clear_cache compile_cache compile_file compile_source "
        "default_profile_case evaluate_kernel evaluate_options freeze_workload gpu_info harness_binary open_harness "
        "open_session profile_dir profile_kernel profile_options resolve_workload sanitizer_binary search_guidance "
        "settings_from_env target_arch torch_baselines tune_cache tune_kernel warn_if_unconfined_compiles"
    ),
    "compiler": "CompileResult compile_kernel",
    "config": "Settings find_workload list_workloads",
    "docs": "DocsSearchResult search_docs",
    "errors": (
        "ConfinementFailed CountersNotPermitted DeviceUnavailable ExpressionError HarnessCancelled HarnessError "
        "InputError KerneloptError LaunchConfigError ProfiledKernelFailed ProfilerError ProfilerTimeout "
        "ToolchainNotFound TunableError UnconfinedCompilerRefused WorkloadError"
    ),
    "evaluation.calibrate": "Calibration",
    "evaluation.candidate": "Candidate EvaluateOptions initial_candidate",
    "evaluation.compare": "OutputComparison compare geometric_mean",
    "evaluation.device": "DeviceInfo device_info",
    "evaluation.evaluate": "case_request evaluate prepare",
    "evaluation.harness": "HarnessProcess find_harness",
    "evaluation.outcomes": "EvaluationResult",
    "evaluation.session": "Session",
    "launch": "LaunchConfig LaunchSpec",
    "ncu_report": "ProfileSummary",
    "profiler": "ProfileOptions find_ncu profile_case",
    "results": "CheckedEvaluation",
    "status": "Status",
    "torch_import": "TorchImportOptions TorchImportResult import_torch_problem",
    "torch_problem": "TorchProblemError",
    "tune.spec": "Tunable load_tunable",
    "tune.tuner": "TuneResult",
    "workload": "Workload WorkloadSpec load_workload",
    "workload_parts": "load_parts",
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names.split()}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})


__all__ = [  # noqa: RUF022 (grouped by what the names are for, sorted within a group)
    "__version__",
    # settings and workloads
    "LaunchConfig", "LaunchSpec", "Settings", "TorchImportOptions", "TorchImportResult", "Workload", "WorkloadSpec",
    "find_workload", "import_torch_problem", "list_workloads", "load_parts", "load_workload",
    # the application layer (kernelopt_mcp.app)
    "beside_pytorch", "cache_info", "calibrate_gpu", "candidate", "clear_cache", "compile_cache", "compile_file",
    "compile_source", "default_profile_case", "evaluate_kernel", "evaluate_options", "freeze_workload", "gpu_info",
    "harness_binary", "open_harness", "open_session", "profile_dir", "profile_kernel", "profile_options",
    "resolve_workload",
    "sanitizer_binary", "search_guidance", "settings_from_env", "target_arch", "torch_baselines",
    "tune_cache", "tune_kernel",
    "warn_if_unconfined_compiles",
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
