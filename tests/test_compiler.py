from __future__ import annotations

from pathlib import Path

import pytest

from kernelopt_mcp.compiler import (
    CompileCache,
    OptionError,
    check_options,
    compile_kernel,
    parse_diagnostics,
    parse_ptx_entries,
    parse_resources,
)

GOOD = r'''
extern "C" __global__ void scale(float* __restrict__ y, const float* __restrict__ x, float a, int n) {
    __shared__ float tile[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (i < n) y[i] = a * tile[threadIdx.x];
}
'''

SYNTAX_ERROR = '''extern "C" __global__ void k(float* a) {
    int i = threadIdx.x
    a[i] = 1.0f;
}
'''


def test_compiles_to_cubin_and_ptx_with_resources() -> None:
    r = compile_kernel(GOOD, "sm_90")
    assert r.ok, r.log
    assert r.cubin and r.cubin[:4] == b"\x7fELF"
    assert r.ptx and ".entry scale" in r.ptx and ".target sm_90" in r.ptx
    res = r.resources["scale"]
    assert res.registers and res.registers > 0
    assert res.shared_bytes == 1024
    assert res.spill_store_bytes == 0 and res.stack_frame_bytes == 0
    assert [p.size_bytes for p in r.entries["scale"]] == [8, 8, 4, 4]
    assert r.nvrtc_version.startswith("13.")


def test_syntax_error_is_data_with_its_line_number() -> None:
    r = compile_kernel(SYNTAX_ERROR, "sm_90")
    assert not r.ok and r.cubin is None
    errors = [d for d in r.diagnostics if d.severity == "error"]
    assert errors and errors[0].line == 3 and "expected a \";\"" in errors[0].message
    assert "line 3" in r.summary()


def test_cuda_headers_are_on_the_include_path() -> None:
    src = '#include <cuda_fp16.h>\n#include <cuda_bf16.h>\nextern "C" __global__ void k(__half* h, __nv_bfloat16* b) { h[0] = __float2half(1.0f); b[0] = __float2bfloat16(2.0f); }'
    r = compile_kernel(src, "sm_90")
    assert r.ok, r.log
    assert [p.size_bytes for p in r.entries["k"]] == [8, 8]


def test_half_and_64bit_scalars_have_their_sizes_in_ptx() -> None:
    src = '#include <cuda_fp16.h>\nextern "C" __global__ void k(__half s, double d, char c, long long n, float* out) { out[0] = (float)s + d + c + n; }'
    r = compile_kernel(src, "sm_90")
    assert [p.size_bytes for p in r.entries["k"]] == [2, 8, 1, 8, 8]


def test_other_arch_without_a_gpu() -> None:
    r = compile_kernel(GOOD, "sm_80")
    assert r.ok and ".target sm_80" in (r.ptx or "")


def test_cache_by_source_options_and_arch(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path)
    first = compile_kernel(GOOD, "sm_90", cache=cache)
    assert not first.cache_hit
    assert compile_kernel(GOOD, "sm_90", cache=cache).cache_hit
    assert not compile_kernel(GOOD, "sm_90", ["-DX=1"], cache=cache).cache_hit
    assert not compile_kernel(GOOD, "sm_80", cache=cache).cache_hit
    # a fresh in-memory cache over the same directory finds the files
    again = compile_kernel(GOOD, "sm_90", cache=CompileCache(tmp_path))
    assert again.cache_hit and again.cubin == first.cubin


@pytest.mark.parametrize("opt", ["-rdc=true", "--relocatable-device-code=true", "-I/etc", "--gpu-architecture=sm_80", "-include=/etc/passwd", "--dlink-time-opt", "-DX=$(rm)", "-Xptxas=--bogus"])
def test_options_outside_the_whitelist_are_refused(opt: str) -> None:
    with pytest.raises(OptionError, match="not allowed"):
        check_options([opt])


def test_whitelisted_options_pass() -> None:
    opts = ["-DBM=128", "--use_fast_math", "-std=c++20", "--maxrregcount=64", "-Xptxas=-O3", "--ftz=true", "-lineinfo"]
    assert check_options(opts) == opts
    assert compile_kernel(GOOD, "sm_90", opts).ok


def test_oversized_source_and_bad_arch_are_refused() -> None:
    with pytest.raises(ValueError, match="limit"):
        compile_kernel("//" + "x" * (600 * 1024), "sm_90")
    with pytest.raises(ValueError, match="arch"):
        compile_kernel(GOOD, "compute_90; rm -rf")


def test_parsers_on_recorded_logs() -> None:
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'sgemm' for 'sm_90'
ptxas info    : Function properties for sgemm
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 8192 bytes smem, 400 bytes cmem[0]
"""
    r = parse_resources(log)["sgemm"]
    assert (r.registers, r.shared_bytes, r.constant_bytes, r.barriers) == (128, 8192, 400, 1)
    assert (r.stack_frame_bytes, r.spill_store_bytes, r.spill_load_bytes) == (16, 8, 12)
    d = parse_diagnostics('kernel.cu(12): error: identifier "x" is undefined\nkernel.cu(3): warning #177-D: variable "i" was declared')
    assert [(x.line, x.severity) for x in d] == [(12, "error"), (3, "warning")]
    ptx = ".visible .entry k(\n\t.param .u64 .ptr .global .align 4 k_param_0,\n\t.param .align 2 .b8 k_param_1[2],\n\t.param .u32 k_param_2\n)"
    assert [p.size_bytes for p in parse_ptx_entries(ptx)["k"]] == [8, 2, 4]
