"""Tools that compile and evaluate a kernel: gpu_properties, compile, validate, benchmark."""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult
from pydantic import Field

from ..compile_report import CompileOutput
from ..config import LAUNCH_DEFAULTS
from ..evaluation.candidate import PRECISION_MIN_ITERATIONS, PRECISION_RSE
from ..results import EvaluationOutput, GpuProperties
from ..server_config import MAX_ITERATIONS, MAX_WARMUP
from ..service import KerneloptService
from .roots import SharedRoots, shared_roots
from .session import callers_frozen_workloads
from .toolkit import (
    CompileOptions,
    Launch,
    Source,
    SourcePath,
    WorkloadName,
    notifier,
    tool,
    tool_errors,
    tool_result,
)

# Parameter descriptions too long for their line (each is part of the tool's manual).
_COMPILE_TOOL_ARCH = "target such as sm_90 or sm_90a; default: the server's GPU, else sm_90"
_VALIDATE_SANITIZE = ("after a pass, also run compute-sanitizer memcheck, racecheck and initcheck on the correctness "
                      "cases (slower: seconds to minutes)")
_BENCHMARK_WARMUP = ("untimed launches per performance case (default: the server's, "
                     f"{LAUNCH_DEFAULTS.warmup} unless configured)")
_BENCHMARK_ITERATIONS = (f"timed launches per performance case (default: the server's, {LAUNCH_DEFAULTS.iterations} "
                         "unless configured)")


def register_evaluate_tools(app: MCPServer, service: KerneloptService) -> None:
    @tool(app, "gpu_properties", "GPU properties")
    async def gpu_properties() -> Annotated[CallToolResult, GpuProperties]:
        """The GPU this server evaluates kernels on: name, compute capability and NVRTC arch (e.g.
        sm_90), SM count, clocks, memory size, L2 size, shared memory and registers per SM and per
        block (with the opt-in maximum for dynamic shared memory), thread/block/grid limits, driver
        version; plus peak hints: theoretical DRAM bandwidth and FP32 FLOP/s, and measured anchors
        where known (H200: copy bandwidth, cuBLAS SGEMM, tensor-core GEMM). Call it once before
        designing a kernel (tile sizes, occupancy, shared-memory budget) and to judge a benchmark
        against the roofline. Cheap (cached after the first call, ~0.5 s). Fails with an error when
        no CUDA device is usable; compile still works then."""
        with tool_errors():
            out = await service.gpus.properties()
        return tool_result(out, out.text(), drop_nulls=False)  # DeviceInfo has required nullable fields

    @tool(app, "compile", "Compile a kernel (NVRTC)")
    async def compile_tool(
        shared: SharedRoots,
        source: Source = None,
        path: SourcePath = None,
        arch: Annotated[str | None, Field(pattern=r"^sm_\d{2,3}[a-z]?$", description=_COMPILE_TOOL_ARCH)] = None,
        options: CompileOptions = None,
    ) -> Annotated[CallToolResult, CompileOutput]:
        """Compile CUDA C++ (device code only, `extern "C" __global__` entries) with NVRTC, no GPU: fix
        errors (diagnostics with line numbers; an error is a result, not a tool failure) and read registers,
        shared memory and spills before spending GPU time. Give `source` or `path`. ~0.1-2 s, cached.

        Compile CUDA C++ with NVRTC to a CUBIN without running it: the fast way to fix syntax and
        type errors and to read each kernel's registers, static shared memory, spills and stack
        before spending GPU time. Give exactly one of `source` or `path`. Device code only:
        `extern "C" __global__` entry points; CUDA headers such as cuda_fp16.h, cuda_bf16.h, cuda_fp8.h,
        mma.h (WMMA), cuda_pipeline.h, cuda/pipeline, cuda/barrier, cuda/ptx, cuda/std/* and
        cooperative_groups.h (+ cooperative_groups/reduce.h) may be included; no host code, 512 KiB
        at most. arch sm_90a (or the option -arch=sm_90a) reaches Hopper's wgmma and setmaxnreg.
        Result status ok or error; an error is a normal result whose diagnostics carry 1-based line
        numbers (plus the compiler log, truncated with a count), not a tool failure. spill_store_bytes
        > 0 usually means too many registers per thread. Cost ~0.1-2 s, no GPU, cached by source
        hash, runs concurrently with GPU jobs. Tool errors: both or neither of source/path, a path
        outside the allowed directories, a compile option outside the whitelist."""
        with shared_roots(shared), tool_errors():
            out = await service.checks.compile(source, path, arch, options)
        return tool_result(out, out.text())

    @tool(app, "validate", "Validate a kernel on every case")
    async def validate(
        workload: WorkloadName,
        launch: Launch,
        ctx: Context,
        shared: SharedRoots,
        source: Source = None,
        path: SourcePath = None,
        compile_options: CompileOptions = None,
        sanitize: Annotated[bool, Field(description=_VALIDATE_SANITIZE)] = False,
    ) -> Annotated[CallToolResult, EvaluationOutput]:
        """Check a kernel against a workload on the GPU: every case, correctness and performance, must
        pass before a kernel counts. Use after compile, before benchmark. Never a tool error for a bad
        kernel: status ok, or compile_error, invalid_launch, runtime_error, timeout, mismatch (first
        mismatching indices, expected vs actual), out_of_bounds_write, input_modified, sanitizer_error.
        Usually 1-10 s (the first call on a workload also prepares it); progress notifications.

        Check a kernel against a workload: compile it, launch it once per case (all correctness
        and performance cases) with its per-case launch configuration, and compare every output
        with the expected values. Use after compile succeeds, before benchmark: a kernel counts only
        if every case passes. The kernel must match describe_workload's c_prototype exactly.
        Correctness: compared in float64; an element passes when |actual - expected| <=
        atol * rms(expected) + rtol * |expected|; NaN/Inf never pass. Outputs are filled with NaN
        before each launch (NaN in a result = an element never written); guard bytes around every
        buffer catch out-of-bounds writes; inputs must stay unchanged. Inputs are random, drawn once
        per workload while this server runs, from a seed you cannot see or choose.
        Result (never a tool error): status ok, or the most serious failure: compile_error (line
        numbers), invalid_launch (a dimension or shared memory over the device limits),
        runtime_error (the kernel faulted, e.g. CUDA_ERROR_ILLEGAL_ADDRESS; later cases are
        skipped), timeout (an infinite loop or a __syncthreads deadlock), mismatch (per output: how
        many, max errors, the first mismatching indices with expected and actual values),
        out_of_bounds_write, input_modified; with sanitize=true, a kernel that passes is also run
        under compute-sanitizer (memcheck: out-of-bounds or misaligned reads; racecheck: shared-memory
        races; initcheck: reads of uninitialised global memory) on the correctness cases, and any
        error makes it sanitizer_error with the first findings (kind, source line, thread, block,
        address). A faulting or hanging kernel cannot harm the server.
        Cost: one launch per case, usually 1-10 s; the first call on a workload in a session also
        prepares it (inputs, expected outputs, timing the CUDA reference). One GPU job runs at a
        time; progress notifications give the queue position and each case. Tool errors: unknown
        workload, bad arguments, a path outside the allowed directories, no usable GPU."""
        with shared_roots(shared), callers_frozen_workloads(ctx), tool_errors():
            out = await service.checks.evaluate(
                workload, source, path, launch, compile_options, benchmark=False, sanitize=sanitize,
                notify=notifier(ctx),
            )
        return tool_result(out, out.text())

    @tool(app, "benchmark", "Validate, then time a kernel")
    async def benchmark(
        workload: WorkloadName,
        launch: Launch,
        ctx: Context,
        shared: SharedRoots,
        source: Source = None,
        path: SourcePath = None,
        compile_options: CompileOptions = None,
        warmup: Annotated[int | None, Field(ge=0, le=MAX_WARMUP, description=_BENCHMARK_WARMUP)] = None,
        iterations: Annotated[int | None, Field(ge=1, le=MAX_ITERATIONS, description=_BENCHMARK_ITERATIONS)] = None,
        timing_mode: Annotated[
            Literal["events", "graph"],
            Field(description="events: one CUDA event pair per launch, L2 flushed before each; graph: back-to-back "
                  "launches in a CUDA graph, per-launch time = graph time / launches (for kernels under ~20 us)"),
        ] = "events",
        adaptive_rse: Annotated[
            float | None,
            Field(ge=0.001, le=0.2, description="keep timing until the median's relative standard error is below "
                  "this (e.g. 0.01), within ~2 s per case; default: exactly `iterations` launches"),
        ] = None,
        stop: Annotated[
            Literal["count", "precision"],
            Field(description=f"count (default): exactly `iterations` timed launches; precision (for searching): "
                  f"{PRECISION_MIN_ITERATIONS}, then more until the median's relative standard error is at most "
                  f"{100 * PRECISION_RSE:g}% (or adaptive_rse), `iterations` at most"),
        ] = "count",
    ) -> Annotated[CallToolResult, EvaluationOutput]:
        """Validate a kernel like `validate`, then time each performance case (CUDA events, L2 flushed,
        outputs of timed launches checked): per-case median, spread and speedup over the CUDA reference;
        score_ms = geometric mean of the medians (lower is better). A failing case is reported as
        validate does and nothing is timed. Usually 5-60 s; progress notifications.

        Validate a kernel on every case exactly like `validate`, then time each performance case:
        `warmup` untimed launches, then `iterations` launches each timed with CUDA events, with the
        L2 cache flushed before every launch outside the timed window and the launches queued behind
        a blocking kernel (no host gaps). After timing, one more launch runs on inputs drawn from a
        hidden seed and its outputs are checked (status timed_mismatch if wrong: results must never be
        cached across launches). Per performance case: median, quartiles, IQR, cv, the relative
        standard error of the median and a noisy flag with its reason; the CUDA reference's median
        (timed the same way when the workload was prepared on this GPU) and the speedup over it; achieved FLOP/s and bytes/s and
        their % of the device's calibrated peaks (roofline); a median below the roofline floor is
        status impossible_time (work was skipped). score_ms = geometric mean of the performance
        cases' median latencies (lower is better); speedup = reference score / score (>1 is faster).
        An imported PyTorch problem's passing result also has torch_baseline: PyTorch eager and
        torch.compile timed the same way on the same GPU (the first time; cached after), with the speedups.
        If any case fails nothing is timed and the result reports the failure as validate does.
        warmup and iterations (limits and defaults in the arguments): fewer is quicker but noisier.
        Cost: validate's plus about (warmup + iterations) x (kernel time + L2 flush) per performance
        case, usually 5-60 s. Tool errors as for validate."""  # noqa: E501 (the tool's manual, served as written)
        with shared_roots(shared), callers_frozen_workloads(ctx), tool_errors():
            out = await service.checks.evaluate(
                workload, source, path, launch, compile_options, benchmark=True, warmup=warmup,
                iterations=iterations, timing_mode=timing_mode, adaptive_rse=adaptive_rse, stop=stop,
                notify=notifier(ctx),
            )
        return tool_result(out, out.text())
