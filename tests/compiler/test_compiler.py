from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from kernelopt_mcp import compiler
from kernelopt_mcp.compile_log import WITHHELD, parse_diagnostics, parse_ptx_entries, parse_resources, quote_own_lines
from kernelopt_mcp.compile_options import OptionError, check_options
from kernelopt_mcp.compiler import CompileCache, compile_kernel

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


def test_the_version_read_through_ctypes_is_the_bindings_and_the_worker_is_given_that_library() -> None:
    """The cache key's NVRTC version comes from the library a worker will load (no cuda.bindings.nvrtc
    in this process); the bindings, which the workers compile with, report the same."""
    nv = compiler._load_nvrtc()
    assert nv.toolchain.nvrtc_lib is not None and Path(nv.toolchain.nvrtc_lib).is_file()
    assert nv.version == compiler._library_version(nv.toolchain.nvrtc_lib) == compiler._bindings_version()
    assert re.fullmatch(r"\d+\.\d+", nv.version)
    out = compile_kernel(GOOD, "sm_90")
    assert out.ok and out.nvrtc_version == nv.version


def test_a_library_that_is_not_nvrtc_is_an_error_naming_it(tmp_path: Path) -> None:
    bogus = tmp_path / "libnvrtc.so.13"
    bogus.write_bytes(b"not an ELF file")
    with pytest.raises(OSError, match=r"libnvrtc\.so\.13"):
        compiler._library_version(str(bogus))


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
    src = ('#include <cuda_fp16.h>\n#include <cuda_bf16.h>\nextern "C" __global__ void k(__half* h, __nv_bfloat16* b) '
           '{ h[0] = __float2half(1.0f); b[0] = __float2bfloat16(2.0f); }')
    r = compile_kernel(src, "sm_90")
    assert r.ok, r.log
    assert [p.size_bytes for p in r.entries["k"]] == [8, 8]


def test_half_and_64bit_scalars_have_their_sizes_in_ptx() -> None:
    src = ('#include <cuda_fp16.h>\nextern "C" __global__ void k(__half s, double d, char c, long long n, float* out) '
           '{ out[0] = (float)s + d + c + n; }')
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


@pytest.mark.parametrize("opt", ["-rdc=true", "--relocatable-device-code=true", "-I/etc", "--gpu-architecture=sm_80",
                                 "-include=/etc/passwd", "--dlink-time-opt", "-DX=$(rm)", "-Xptxas=--bogus"])
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
    d = parse_diagnostics('kernel.cu(12): error: identifier "x" is undefined\n'
                          'kernel.cu(3): warning #177-D: variable "i" was declared')
    assert [(x.line, x.severity) for x in d] == [(12, "error"), (3, "warning")]
    ptx = (".visible .entry k(\n\t.param .u64 .ptr .global .align 4 k_param_0,\n\t.param .align 2 .b8 k_param_1[2],\n"
           "\t.param .u32 k_param_2\n)")
    assert [p.size_bytes for p in parse_ptx_entries(ptx)["k"]] == [8, 2, 4]


# --- compile logs quote only the candidate's own lines -------------------------------------------

HEADER_ERROR = '#define __half_raw 1\n#include <cuda_fp16.h>\nextern "C" __global__ void k(float* x) { x[0] = 1; }\n'


def test_a_log_quotes_no_line_of_an_included_header() -> None:
    r = compile_kernel(HEADER_ERROR, "sm_90", cache=CompileCache())
    assert not r.ok
    located = [re.match(r"(\S+cuda_fp16\.h)\((\d+)\): error", line) for line in r.log.splitlines()]
    located = [m for m in located if m]
    assert located and any(d.line is None and "cuda_fp16.h" in d.message for d in r.diagnostics), r.log
    # NVRTC quoted the header's lines after each of those errors; none of them reach the result
    for m in located:
        quoted = Path(m[1]).read_text().splitlines()[int(m[2]) - 1].strip()
        assert quoted and quoted not in r.log, quoted
    own = set(HEADER_ERROR.splitlines())
    for line in r.log.splitlines():
        if line.startswith("  ") and line.strip() and not set(line.strip()) <= {"^"}:
            assert line[2:] in own or line.lstrip().startswith(("detected during", "instantiation")), line


def test_a_log_quotes_the_candidates_line_from_the_source_sent() -> None:
    r = compile_kernel(SYNTAX_ERROR, "sm_90", cache=CompileCache())
    lines = r.log.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("kernel.cu(3): error"))
    assert lines[at + 1] == "  " + SYNTAX_ERROR.splitlines()[2] and lines[at + 2].strip() == "^"


def test_quote_own_lines_on_a_recorded_log() -> None:
    log = (
        'kernel.cu(1): catastrophic error: cannot open source file "x"\n  #include "x"\n            ^\n'
        "/etc/passwd(1): error: this declaration has no storage class or type specifier\n"
        "  root:x:0:0:root:/root:/bin/bash\n  ^\n"
        "/cuda/include/cuda_fp16.h(171): warning #47-D: incompatible redefinition of macro \"X\"\n"
        "  #define X\n          ^\n"
        "kernel.cu(9): error: beyond the source\n  anything at all\n  ^\n"
        "/tmp/a dir (x)/s.h(2): error #20: identifier \"root\" is undefined\n  root:x:0\n  ^\n"
        "2 errors detected in the compilation of \"kernel.cu\".\n"
    )
    out = quote_own_lines(log, 'int a = 0; // mine\n', "kernel.cu", ("/cuda/include",))
    assert "root" not in out and "#define X" not in out and "anything at all" not in out
    assert out.splitlines() == [
        'kernel.cu(1): catastrophic error: cannot open source file "x"', "  int a = 0; // mine", "            ^",
        f"/etc/passwd(1): error: {WITHHELD}",
        '/cuda/include/cuda_fp16.h(171): warning #47-D: incompatible redefinition of macro "X"',
        "kernel.cu(9): error: beyond the source",
        f"/tmp/a dir (x)/s.h(2): error: {WITHHELD}",
        '2 errors detected in the compilation of "kernel.cu".',
    ]



def test_nvrtcs_builtin_header_keeps_its_message() -> None:
    # NVRTC's out-of-memory on the H200 was reported at its in-memory builtin header; withholding
    # that message left a failed compile with no reason. Its quoted line is still dropped.
    log = (
        "__nv_nvrtc_builtin_header.h(838): catastrophic error: out of memory\n"
        "  __host__ __device__ constexpr dim3(unsigned int vx = 1) : x(vx) {}\n      ^\n"
    )
    out = quote_own_lines(log, "int a;\n", "kernel.cu", ("/cuda/include",))
    assert out.splitlines() == ["__nv_nvrtc_builtin_header.h(838): catastrophic error: out of memory"]

# --- the disk cache: bounded, evicting, safe under concurrent writers ----------------------------

def _kernel(i: int, pad: int = 0) -> str:
    body = "".join(f"  x[{j}] = {j}.0f;\n" for j in range(pad))
    return f'extern "C" __global__ void k{i}(float* x) {{\n  x[0] = {i}.0f;\n{body}}}\n'


def _disk_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.iterdir() if p.is_file())


def test_the_disk_cache_evicts_the_least_recently_used_past_its_bound(tmp_path: Path) -> None:
    probe = compile_kernel(_kernel(0), cache=CompileCache(tmp_path / "probe"))
    entry = _disk_bytes(tmp_path / "probe")
    assert entry > 0 and probe.ok
    cache = CompileCache(tmp_path / "c", max_bytes=int(entry * 4.5))
    compile_kernel(_kernel(1), cache=cache)
    for i in range(2, 5):
        compile_kernel(_kernel(i), cache=cache)
        # entry 1 used again: fresh, so it outlives 2 and 3
        assert CompileCache(tmp_path / "c").get(_key(cache, 1)) is not None
    assert cache.evicted == 0
    compile_kernel(_kernel(5), cache=cache)  # past 4.5 entries: evicted down to 3/4 of the bound
    assert cache.evicted >= 2
    assert _disk_bytes(tmp_path / "c") <= cache.max_bytes
    fresh = CompileCache(tmp_path / "c")
    assert fresh.get(_key(cache, 1)) is not None and fresh.get(_key(cache, 5)) is not None
    assert fresh.get(_key(cache, 2)) is None


def _key(cache: CompileCache, i: int) -> str:
    return next(k for k, r in cache._items.items() if f"k{i}" in r.entries)


def test_an_entry_over_the_cap_is_kept_without_its_ptx_or_not_at_all(tmp_path: Path) -> None:
    big = compile_kernel(_kernel(7, pad=400), cache=CompileCache())
    assert big.ok and big.ptx and big.cubin
    cap = len(big.cubin) + 4096  # room for the CUBIN and the metadata, not the PTX
    assert len(big.ptx) > 4096
    cache = CompileCache(tmp_path / "c", max_entry_bytes=cap)
    compile_kernel(_kernel(7, pad=400), cache=cache)
    assert not list((tmp_path / "c").glob("*.ptx")) and len(list((tmp_path / "c").glob("*.cubin"))) == 1
    again = compile_kernel(_kernel(7, pad=400), cache=CompileCache(tmp_path / "c"))
    assert again.cache_hit and again.cubin == big.cubin and again.ptx is None
    tiny = CompileCache(tmp_path / "t", max_entry_bytes=100)
    compile_kernel(_kernel(7, pad=400), cache=tiny)
    assert not (tmp_path / "t").exists() or not list((tmp_path / "t").iterdir())


def test_concurrent_writers_of_one_entry(tmp_path: Path) -> None:
    first = compile_kernel(GOOD, cache=CompileCache())
    errors: list[BaseException] = []

    def put() -> None:
        try:
            for _ in range(20):
                CompileCache(tmp_path).put("k" * 64, first)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=put) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    got = CompileCache(tmp_path).get("k" * 64)
    assert got is not None and got.cubin == first.cubin
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{'k' * 64}.{ext}" for ext in ("cubin", "json", "ptx")]


def test_eviction_removes_temporary_files_left_by_dead_writers(tmp_path: Path) -> None:
    import os

    stale, fresh = tmp_path / ".x.cubin.abc.tmp", tmp_path / ".y.cubin.def.tmp"
    stale.write_bytes(b"0" * 10)
    fresh.write_bytes(b"0" * 10)
    os.utime(stale, (0, 0))
    CompileCache(tmp_path, max_bytes=1).evict()
    assert not stale.exists() and fresh.exists()
