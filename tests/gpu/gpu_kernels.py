"""Kernel sources shared by several GPU tests, and the module files a raw harness request needs."""

from __future__ import annotations

from pathlib import Path

from kernelopt_mcp.compiler import compile_kernel
from kernelopt_mcp.evaluation.support_module import support_module


def module_files(source: str, arch: str, directory: Path) -> dict[str, Path]:
    """``source`` compiled for ``arch`` (``module``) and the support module (``support``), in ``directory``."""
    compiled = compile_kernel(source, arch)
    assert compiled.ok, compiled.summary()
    module = directory / "kernels.cubin"
    module.write_bytes(compiled.cubin or b"")
    return {"module": module, "support": support_module(arch, directory / "support")}

# Correct on the first launch of each size; afterwards every thread replays what it computed
# then (a per-element result cache tagged with n: no races between blocks).
CACHING_ADD = r"""
__device__ float ko_cache[1 << 27];
__device__ int ko_tag[1 << 27];
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (ko_tag[i] == n) { c[i] = ko_cache[i]; return; }
    float v = a[i] + b[i];
    c[i] = v;
    ko_cache[i] = v;
    ko_tag[i] = n;
}
"""
