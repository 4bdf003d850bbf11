"""Vendor-library baselines measured by the harness ("op": "baseline" of protocol 2).

A candidate's speed means most next to what the vendor library achieves on the same device,
measured the same way (L2 flush, CUDA events, adaptive stopping). The harness dlopens cuBLAS
itself, so kernelopt needs no cuBLAS at build time; this module finds the library and builds
and runs the request.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from .config import LAUNCH_DEFAULTS
from .errors import HarnessError, ToolchainNotFound
from .evaluation.harness import HarnessProcess, raise_for_request_error
from .evaluation.protocol import (
    AnswerEnvelope,
    BaselineAnswer,
    BaselineRequest,
    RequestError,
    TimingRequest,
    parse_answer,
)

# Sonames in order of preference: CUDA 13, then CUDA 12.
CUBLAS_SONAMES = ("libcublas.so.13", "libcublas.so.12")
# pip packages that ship libcublas: nvidia-cublas (CUDA 13: nvidia/cu13/lib; CUDA 12 wheels:
# nvidia/cublas/lib).
CUBLAS_PIP_PACKAGES = ("nvidia.cu13", "nvidia.cublas")
SYSTEM_CUDA_LIB_DIRS = (Path("/usr/local/cuda/lib64"),)
DEFAULT_TIMING = TimingRequest(warmup=LAUNCH_DEFAULTS.warmup, iterations=LAUNCH_DEFAULTS.iterations)


def _pip_lib_dirs() -> list[Path]:
    """The ``lib`` directories of the installed pip packages that may hold cuBLAS."""
    dirs: list[Path] = []
    for name in CUBLAS_PIP_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            dirs.append(Path(location) / "lib")
    return dirs


def _ldconfig_paths() -> dict[str, Path]:
    """soname -> path from the dynamic linker's cache (``ldconfig -p``); empty if unavailable."""
    ldconfig = shutil.which("ldconfig") or ("/sbin/ldconfig" if Path("/sbin/ldconfig").exists() else None)
    if ldconfig is None:
        return {}
    try:
        out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found: dict[str, Path] = {}
    for line in out.splitlines():
        name, sep, target = line.strip().partition(" => ")
        if sep:
            found.setdefault(name.split(" (")[0], Path(target.strip()))
    return found


def cublas_search_dirs(cuda_home: Path | None = None) -> list[Path]:
    """Where :func:`find_cublas` looks, in order (before the linker cache); ``cuda_home`` is
    ``Settings.cuda_home`` (CUDA_HOME, else CUDA_PATH, read at the entry point)."""
    dirs = _pip_lib_dirs()
    if cuda_home is not None:
        dirs.append(cuda_home / "lib64")
    dirs.extend(SYSTEM_CUDA_LIB_DIRS)
    return dirs


def find_cublas(cuda_home: Path | None = None) -> Path | None:
    """The path of a loadable ``libcublas.so.13`` (or ``.12``), or None if there is none.

    Order: the ``nvidia.cu13`` / ``nvidia.cublas`` pip packages' ``lib`` directories,
    ``cuda_home/lib64`` (``Settings.cuda_home``), ``/usr/local/cuda/lib64``, then the names
    ``ldconfig -p`` knows.
    """
    for directory in cublas_search_dirs(cuda_home):
        for soname in CUBLAS_SONAMES:
            candidate = directory / soname
            if candidate.is_file():
                return candidate.absolute()
    cache = _ldconfig_paths()
    for soname in CUBLAS_SONAMES:
        if soname in cache and cache[soname].is_file():
            return cache[soname]
    return None


def cublas_sgemm_request(
    m: int,
    n: int,
    k: int,
    timing: TimingRequest | Mapping[str, Any] | None = None,
    device: int = 0,
    *,
    library_path: Path | None = None,
    flush_l2: bool = True,
    support_module: Path | None = None,
    cuda_home: Path | None = None,
) -> BaselineRequest:
    """The harness request that times row-major FP32 ``C[m,n] = A[m,k] B[k,n]`` with cuBLAS.

    ``timing`` is the protocol's timing object (``warmup``, ``iterations``, ``mode``,
    ``blocking``, ``adaptive``...; a mapping is read as a :class:`TimingRequest`); default
    ``config.LAUNCH_DEFAULTS``' warm-up and measured launches. ``support_module`` (a CUBIN from
    :func:`kernelopt_mcp.evaluation.support_module.support_module`) is needed for ``blocking``,
    gives ``launch_overhead_ms``, and makes the L2 flush the read candidates get (``ko_flush_l2``);
    without it the flush is a memset, whose dirty lines the timed call writes back: pass it
    whenever the figure is compared with a kernel's.

    Raises:
        ValueError: a dimension is not a positive integer, or ``timing`` is not a timing object
            (a pydantic ``ValidationError`` naming the field).
        ToolchainNotFound: no ``library_path`` given and :func:`find_cublas` finds none.
    """
    for name, value in (("m", m), ("n", n), ("k", k)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if timing is None:
        timing = DEFAULT_TIMING
    # a copy: the request never shares the caller's object (nor the default)
    timing = timing.model_copy(deep=True) if isinstance(timing, TimingRequest) else TimingRequest.model_validate(timing)
    if library_path is None:
        library_path = find_cublas(cuda_home)
        if library_path is None:
            raise ToolchainNotFound(
                "cuBLAS not found (looked in " + ", ".join(str(d) for d in cublas_search_dirs(cuda_home))
                + " and the ldconfig cache); install it with `pip install nvidia-cublas` or set CUDA_HOME"
            )
    return BaselineRequest(
        device=device, library="cublas", library_path=str(Path(library_path).absolute()), routine="sgemm",
        m=m, n=n, k=k, flush_l2=flush_l2, timing=timing,
        support_module=str(Path(support_module).absolute()) if support_module is not None else None,
    )


class BaselineResult(BaseModel):
    """A library routine's measured speed on one device."""

    library: str
    routine: str
    library_version: int | None = None
    m: int
    n: int
    k: int
    median_ms: float = Field(description="median time of one call, milliseconds")
    q1_ms: float
    q3_ms: float
    tflops: float = Field(description="2*m*n*k / median time, in 10^12 floating-point operations per second")
    result_ok: bool | None = Field(None, description="the harness's spot check of C (every element k/8)")
    launch_overhead_ms: float | None = None
    timing: dict[str, Any] = Field(description="the harness's whole timing object")


def baseline_result(answer: BaselineAnswer) -> BaselineResult:
    """Turn an ``ok`` baseline answer into a :class:`BaselineResult`."""
    timing = answer.timing
    median_ms = timing.median_ms
    flops = 2.0 * answer.m * answer.n * answer.k
    return BaselineResult(
        library=answer.library, routine=answer.routine, library_version=answer.library_version,
        m=answer.m, n=answer.n, k=answer.k, median_ms=median_ms, q1_ms=timing.q1_ms, q3_ms=timing.q3_ms,
        tflops=flops / (median_ms * 1e-3) / 1e12 if median_ms > 0 else 0.0,
        result_ok=answer.result_ok, launch_overhead_ms=timing.launch_overhead_ms,
        timing=timing.model_dump(mode="json", exclude_unset=True),
    )


def run_cublas_sgemm(
    proc: HarnessProcess,
    m: int,
    n: int,
    k: int,
    timing: TimingRequest | Mapping[str, Any] | None = None,
    *,
    library_path: Path | None = None,
    flush_l2: bool = True,
    support_module: Path | None = None,
    cuda_home: Path | None = None,
    timeout_s: float = 300,
) -> BaselineResult:
    """Time cuBLAS SGEMM on ``proc``'s device and return its median and TFLOP/s.

    Raises:
        ToolchainNotFound: cuBLAS is missing, or the harness could not load it.
        HarnessError: the harness refused the request, a cuBLAS call failed, no answer came
            within ``timeout_s`` seconds (the harness was then restarted), or the answer lacks
            a field the result needs (named).
        DeviceUnavailable: no usable GPU.
    """
    request = cublas_sgemm_request(
        m, n, k, timing, proc.device, library_path=library_path, flush_l2=flush_l2, support_module=support_module,
        cuda_home=cuda_home,
    )
    reply = proc.request(request, timeout_s)
    if reply.timed_out:
        raise HarnessError(f"cuBLAS sgemm {m}x{n}x{k} did not finish within {timeout_s} s; the harness was restarted")
    envelope = reply.parsed(AnswerEnvelope)
    raise_for_request_error(envelope, reply.exit_code)
    if reply.answer is None or envelope is None:
        raise HarnessError(f"the harness exited with code {reply.exit_code} without an answer; stderr: "
                           f"{reply.stderr[-500:]}")
    error = envelope.error or RequestError()
    if error.kind == "library_unavailable":
        raise ToolchainNotFound(f"the harness could not use cuBLAS: {error.message}")
    if envelope.status != "ok":
        raise HarnessError(f"cuBLAS baseline failed: {error.kind}: {error.message}")
    return baseline_result(parse_answer(reply.answer, BaselineAnswer))  # HarnessError naming a missing field
