"""What the compile tool and `kernelopt compile` return: one compile's result as JSON-safe fields with a
text rendering. Its own module, apart from results.py's evaluation views, so that compiling a kernel
loads neither the evaluation stack nor numpy (tests/cli/test_startup.py)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .compile_log import Diagnostic, Resources
from .compiler import CompileResult

MAX_DIAGNOSTICS = 20
MAX_MESSAGE_CHARS = 600
_COMPILE_OUTPUT_CONFINEMENT = ("how NVRTC was confined: 'landlock abi N', or 'unconfined (accepted)' by the "
                               "server's operator")


def clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how many more there were."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


class KernelResources(BaseModel):
    registers: int | None = None
    static_shared_bytes: int | None = None
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    stack_frame_bytes: int | None = None
    param_bytes: list[int] = Field(default_factory=list, description="size of each parameter")


class CompileOutput(BaseModel):
    status: str = Field(description="ok | error")
    arch: str
    arch_from: str = Field(description="why this arch: argument, server setting, this GPU, default")
    nvrtc_version: str
    duration_ms: float
    cache_hit: bool
    source_hash: str = Field(description="first 16 hex digits of the source's SHA-256")
    source_sha256: str = Field("", description="the source's full SHA-256 (64 hex digits)")
    options: list[str]
    kernels: dict[str, KernelResources] = Field(default_factory=dict, description="per __global__ function")
    diagnostics: list[Diagnostic] = Field(default_factory=list, description="errors and warnings, with 1-based lines")
    diagnostics_omitted: int = 0
    log: str = Field("", description="the compiler log, on errors only (truncated)")
    log_lines_omitted: int = 0
    confinement: str = Field("", description=_COMPILE_OUTPUT_CONFINEMENT)

    def text(self) -> str:
        head = (f"compile {self.status} for {self.arch} ({self.arch_from}; NVRTC {self.nvrtc_version}, "
                f"{self.duration_ms:.0f} ms{', cached' if self.cache_hit else ''})")
        lines = [head]
        for d in self.diagnostics:
            lines.append("  " + d.text())
        if self.diagnostics_omitted:
            lines.append(f"  ... {self.diagnostics_omitted} more diagnostics not shown")
        for name, r in self.kernels.items():
            lines.append(
                f"  kernel {name}: {r.registers} registers, {r.static_shared_bytes} B static shared, "
                f"{r.spill_store_bytes} B spill stores, {r.spill_load_bytes} B spill loads, "
                f"{r.stack_frame_bytes} B stack"
            )
        if self.status != "ok" and not self.diagnostics and self.log:
            lines.append(clip(self.log, 1500))
        return "\n".join(lines)


def compile_output(result: CompileResult, arch_from: str) -> CompileOutput:
    kernels = {
        name: KernelResources(
            **{k: getattr(r, k) for k in ("registers", "spill_store_bytes", "spill_load_bytes", "stack_frame_bytes")},
            static_shared_bytes=r.shared_bytes, param_bytes=[p.size_bytes for p in params],
        )
        for name, params in result.entries.items()
        for r in [result.resources.get(name) or Resources()]
    }
    return CompileOutput(
        status=result.status.value, arch=result.arch, arch_from=arch_from, nvrtc_version=result.nvrtc_version,
        duration_ms=result.duration_ms, cache_hit=result.cache_hit, source_hash=result.source_hash[:16],
        source_sha256=result.source_hash,
        options=result.options, kernels=kernels, diagnostics=result.diagnostics[:MAX_DIAGNOSTICS],
        diagnostics_omitted=max(0, len(result.diagnostics) - MAX_DIAGNOSTICS),
        log="" if result.ok else result.log, log_lines_omitted=0 if result.ok else result.log_lines_omitted,
        confinement=result.confinement,
    )
