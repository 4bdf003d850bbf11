"""Kernel sources shared by several GPU tests, and the module files a raw harness request needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernelopt_mcp.compiler import compile_kernel
from kernelopt_mcp.evaluation.harness import HarnessProcess
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


def copy_request(files: dict[str, Path], dtype: str, nbytes: int, draw: dict[str, Any], seed: int, out: Path,
                 **case: Any) -> dict[str, Any]:
    """A harness request running copy_bytes (module_files of a byte-copy kernel) over one buffer of
    ``nbytes`` of ``dtype`` drawn on the device as ``draw`` under ``seed``, its copy written to ``out``."""
    args: list[dict[str, Any]] = [
        {"kind": "buffer", "name": "x", "role": "in", "bytes": nbytes, "dtype": dtype,
         "input_draw": {"seed": seed, **draw}},
        {"kind": "buffer", "name": "y", "role": "out", "bytes": nbytes, "output": str(out)},
        {"kind": "scalar", "name": "n", "dtype": "uint64", "raw": nbytes.to_bytes(8, "little").hex()},
    ]
    return {"protocol": 2, "device": 0, "module": str(files["module"]), "entry": "copy_bytes",
            "support_module": str(files["support"]), "guard_bytes": 4096, "flush_l2": False,
            "cases": [{"name": "c", "args": args, "launch": {"grid": [512, 1, 1], "block": [256, 1, 1]}, **case}]}


def ok_answer(proc: HarnessProcess, request: dict[str, Any]) -> dict[str, Any]:
    """The harness's answer to ``request``, asserted ok for the request and its one case."""
    reply = proc.request(request, timeout_s=120)
    assert reply.answer is not None and reply.answer["status"] == "ok", (reply.answer, reply.stderr[-2000:])
    assert reply.answer["cases"][0]["status"] == "ok", reply.answer
    return reply.answer
