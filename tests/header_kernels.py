"""Kernels that use each CUDA header family, and small workloads to run them on: the CPU tests
(test_headers.py) compile every one of them; the GPU tests (gpu/test_headers_gpu.py) run them
through the real evaluation path. One module, so that a kernel the H200 runs is one that compiles here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# --- one small kernel per header (compiled only) ----------------------------------------------

HEADER_KERNELS: dict[str, str] = {
    "mma.h": """#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void k(const __half* a, const __half* b, float* c) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}
""",
    "cuda/pipeline": """#include <cooperative_groups.h>
#include <cuda/pipeline>
extern "C" __global__ void k(const float* in, float* out) {
    __shared__ float s[128];
    __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, 1> state;
    auto block = cooperative_groups::this_thread_block();
    auto pipe = cuda::make_pipeline(block, &state);
    pipe.producer_acquire();
    cuda::memcpy_async(block, s, in, sizeof(s), pipe);
    pipe.producer_commit();
    pipe.consumer_wait();
    out[threadIdx.x] = s[threadIdx.x];
    pipe.consumer_release();
}
""",
    "cuda/barrier": """#include <cuda/barrier>
extern "C" __global__ void k(float* out) {
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    if (threadIdx.x == 0) init(&bar, blockDim.x);
    __syncthreads();
    bar.arrive_and_wait();
    out[threadIdx.x] = 1.0f;
}
""",
    "cooperative_groups.h": """#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void k(float* out) {
    auto block = cg::this_thread_block();
    auto warp = cg::tiled_partition<32>(block);
    out[block.thread_rank()] = warp.shfl_down(float(warp.thread_rank()), 1);
}
""",
    "cooperative_groups/reduce.h": """#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
extern "C" __global__ void k(const float* in, float* out) {
    auto warp = cg::tiled_partition<32>(cg::this_thread_block());
    float v = cg::reduce(warp, in[threadIdx.x], cg::plus<float>());
    if (warp.thread_rank() == 0) out[threadIdx.x / 32] = v;
}
""",
    "cuda_fp8.h": """#include <cuda_fp8.h>
extern "C" __global__ void k(const float* in, float* out) {
    out[0] = float(__nv_fp8_e4m3(in[0]));
    out[1] = float(__nv_fp8_e5m2(in[1]));
}
""",
    "cuda_fp16.h": """#include <cuda_fp16.h>
extern "C" __global__ void k(const float* in, float* out) {
    __half h = __float2half(in[0]);
    out[0] = __half2float(__hmul(h, h));
}
""",
    "cuda_bf16.h": """#include <cuda_bf16.h>
extern "C" __global__ void k(const float* in, float* out) {
    __nv_bfloat16 b = __float2bfloat16(in[0]);
    out[0] = __bfloat162float(__hmul(b, b));
}
""",
    "cuda_pipeline.h": """#include <cuda_pipeline.h>
extern "C" __global__ void k(const float* in, float* out) {
    __shared__ float s[32];
    __pipeline_memcpy_async(&s[threadIdx.x], &in[threadIdx.x], sizeof(float));
    __pipeline_commit();
    __pipeline_wait_prior(0);
    out[threadIdx.x] = s[threadIdx.x];
}
""",
    "cuda/std": """#include <cuda/std/array>
#include <cuda/std/atomic>
#include <cuda/std/cstdint>
#include <cuda/std/limits>
#include <cuda/std/type_traits>
extern "C" __global__ void k(float* out) {
    static_assert(cuda::std::is_same_v<cuda::std::uint32_t, unsigned>, "uint32_t");
    cuda::std::array<int, 2> a{1, 2};
    cuda::std::atomic_ref<float> r(out[0]);
    r.fetch_add(float(a[1]) + cuda::std::numeric_limits<float>::epsilon());
}
""",
    "cuda/ptx": """#include <cuda/ptx>
extern "C" __global__ void k(unsigned* out) {
    out[threadIdx.x] = cuda::ptx::get_sreg_laneid();
}
""",
}

# Hopper's arch-specific instructions: ptxas accepts them for sm_90a, not for sm_90
SETMAXNREG_KERNEL = """extern "C" __global__ void __launch_bounds__(128) k(float* out) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\\n" ::: "memory");
    out[threadIdx.x] = 1.0f;
}
"""

# --- workloads that run a kernel per header family on the GPU ---------------------------------

COPY_REFERENCE = """extern "C" __global__ void copy(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
"""

# cuda::pipeline + cuda::memcpy_async (cuda/pipeline, cooperative_groups): a block copies its tile
PIPELINE_COPY = """#include <cooperative_groups.h>
#include <cuda/pipeline>
namespace cg = cooperative_groups;
#define TILE 256
extern "C" __global__ void copy(const float* x, float* y, int n) {
    __shared__ float tile[TILE];
    __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, 1> state;
    auto block = cg::this_thread_block();
    auto pipe = cuda::make_pipeline(block, &state);
    const int base = blockIdx.x * TILE;
    const int count = min(TILE, n - base);
    pipe.producer_acquire();
    cuda::memcpy_async(block, tile, x + base, sizeof(float) * count, pipe);
    pipe.producer_commit();
    pipe.consumer_wait();
    if ((int)threadIdx.x < count) y[base + threadIdx.x] = tile[threadIdx.x];
    pipe.consumer_release();
}
"""

# cuda::barrier completing a cuda::memcpy_async (cuda/barrier)
BARRIER_COPY = """#include <cooperative_groups.h>
#include <cuda/barrier>
namespace cg = cooperative_groups;
#define TILE 256
extern "C" __global__ void copy(const float* x, float* y, int n) {
    __shared__ float tile[TILE];
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    auto block = cg::this_thread_block();
    if (block.thread_rank() == 0) init(&bar, block.size());
    block.sync();
    const int base = blockIdx.x * TILE;
    const int count = min(TILE, n - base);
    cuda::memcpy_async(block, tile, x + base, sizeof(float) * count, bar);
    bar.arrive_and_wait();
    if ((int)threadIdx.x < count) y[base + threadIdx.x] = tile[threadIdx.x];
}
"""

# the cp.async primitives (cuda_pipeline.h) and cuda/std types
PRIMITIVES_COPY = """#include <cuda/std/cstdint>
#include <cuda_pipeline.h>
#define TILE 256
extern "C" __global__ void copy(const float* x, float* y, int n) {
    __shared__ float tile[TILE];
    const cuda::std::int64_t i = (cuda::std::int64_t)blockIdx.x * TILE + threadIdx.x;
    if (i < n) __pipeline_memcpy_async(&tile[threadIdx.x], &x[i], sizeof(float));
    __pipeline_commit();
    __pipeline_wait_prior(0);
    if (i < n) y[i] = tile[threadIdx.x];
}
"""

# wgmma's fence and group instructions (no wgmma in flight: they only order), sm_90a only
SM90A_COPY = """extern "C" __global__ void copy(const float* x, float* y, int n) {
    asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");
    asm volatile("wgmma.commit_group.sync.aligned;\\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\\n" ::: "memory");
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
"""

COPY_LAUNCH = {"default": {"grid": ["ceil_div(n, 256)"], "block": [256]}}

WARP_SUM_REFERENCE = """extern "C" __global__ void warp_sum(const float* x, float* out, int m) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;
    float s = 0.0f;
    for (int j = 0; j < 32; ++j) s += x[32 * (long long)i + j];
    out[i] = s;
}
"""

# cooperative_groups::reduce over a 32-thread tile: one warp per row of 32
CG_WARP_SUM = """#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
extern "C" __global__ void warp_sum(const float* x, float* out, int m) {
    auto warp = cg::tiled_partition<32>(cg::this_thread_block());
    const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= m) return;  // a whole warp: row is the same for its 32 threads
    float v = cg::reduce(warp, x[row * 32 + warp.thread_rank()], cg::plus<float>());
    if (warp.thread_rank() == 0) out[row] = v;
}
"""

WARP_SUM_LAUNCH = {"default": {"grid": ["ceil_div(m, 8)"], "block": [256]}}

QUANTIZE_REFERENCE = """#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
extern "C" __global__ void quantize(const float* x, float* q8, float* h, float* bf, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    q8[i] = float(__nv_fp8_e4m3(x[i]));
    h[i] = __half2float(__float2half_rn(x[i]));
    bf[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
}
"""

# the same round trips through the conversion intrinsics (cuda_fp8.h's, by way of a half)
QUANTIZE_INTRINSICS = """#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
extern "C" __global__ void quantize(const float* x, float* q8, float* h, float* bf, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __nv_fp8_storage_t s = __nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, __NV_E4M3);
    q8[i] = __half2float(__half(__nv_cvt_fp8_to_halfraw(s, __NV_E4M3)));
    h[i] = __low2float(__float2half2_rn(x[i]));
    bf[i] = __low2float(__float2bfloat162_rn(x[i]));
}
"""

WMMA_REFERENCE = """#include <cuda_fp16.h>
extern "C" __global__ void wmma_gemm(const __half* A, const __half* B, float* C, int M, int N, int K) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += __half2float(A[(long long)row * K + k]) * __half2float(B[(long long)k * N + col]);
    C[(long long)row * N + col] = acc;
}
"""  # noqa: E501

# WMMA (mma.h): one warp per 16x16 tile of C; M, N, K are multiples of 16
WMMA_GEMM = """#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void wmma_gemm(const __half* A, const __half* B, float* C, int M, int N, int K) {
    const size_t tile_n = blockIdx.x, tile_m = blockIdx.y;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::fill_fragment(c, 0.0f);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(a, A + tile_m * 16 * K + k, K);
        wmma::load_matrix_sync(b, B + (size_t)k * N + tile_n * 16, N);
        wmma::mma_sync(c, a, b, c);
    }
    wmma::store_matrix_sync(C + tile_m * 16 * N + tile_n * 16, c, N, wmma::mem_row_major);
}
"""

WMMA_LAUNCH = {"default": {"grid": ["ceil_div(N, 16)", "ceil_div(M, 16)"], "block": [32]}}


def _buffer(name: str, dtype: str, role: str, shape: list[str]) -> dict[str, Any]:
    return {"kind": "buffer", "name": name, "dtype": dtype, "role": role, "shape": shape}


def _scalars(*names: str) -> list[dict[str, Any]]:
    return [{"kind": "scalar", "name": n, "dtype": "int32"} for n in names]


WORKLOADS: dict[str, dict[str, Any]] = {
    "hdr_copy": {
        "spec": {
            "signature": {"entry": "copy", "params": [
                _buffer("x", "float32", "in", ["n"]), _buffer("y", "float32", "out", ["n"]), *_scalars("n")]},
            "inputs": {"x": {"generator": "normal"}},
            "cases": [
                {"name": "one", "kind": "correctness", "scalars": {"n": 1}},
                {"name": "odd_100003", "kind": "correctness", "scalars": {"n": 100003}},
                {"name": "n_2e22", "kind": "performance", "scalars": {"n": 4194304}},
            ],
            "tolerance": {"y": {"rtol": 0, "atol": 0}},
            "reference": {"launch": {"grid": ["ceil_div(n, 128)"], "block": [128]}},
            "cost": {"flops": "0", "bytes": "8 * n"},
        },
        "oracle": "def reference(x, n):\n    return {'y': x.astype(np.float64)}\n",
        "reference_cu": COPY_REFERENCE,
    },
    "hdr_warp_sum": {
        "spec": {
            "signature": {"entry": "warp_sum", "params": [
                _buffer("x", "float32", "in", ["32 * m"]), _buffer("out", "float32", "out", ["m"]), *_scalars("m")]},
            "inputs": {"x": {"generator": "normal"}},
            "cases": [
                {"name": "one", "kind": "correctness", "scalars": {"m": 1}},
                {"name": "odd_1001", "kind": "correctness", "scalars": {"m": 1001}},
                {"name": "m_2e17", "kind": "performance", "scalars": {"m": 131072}},
            ],
            "tolerance": {"out": {"rtol": 1e-5, "atol": 1e-5}},
            "reference": {"launch": {"grid": ["ceil_div(m, 128)"], "block": [128]}},
            "cost": {"flops": "32 * m", "bytes": "132 * m"},
        },
        "oracle": "def reference(x, m):\n    return {'out': x.astype(np.float64).reshape(m, 32).sum(axis=1)}\n",
        "reference_cu": WARP_SUM_REFERENCE,
    },
    "hdr_quantize": {
        "spec": {
            "signature": {"entry": "quantize", "params": [
                _buffer("x", "float32", "in", ["n"]), _buffer("q8", "float32", "out", ["n"]),
                _buffer("h", "float32", "out", ["n"]), _buffer("bf", "float32", "out", ["n"]), *_scalars("n")]},
            "inputs": {"x": {"generator": "uniform", "low": -4, "high": 4}},
            "cases": [
                {"name": "one", "kind": "correctness", "scalars": {"n": 1}},
                {"name": "odd_65537", "kind": "correctness", "scalars": {"n": 65537}},
                {"name": "n_2e20", "kind": "performance", "scalars": {"n": 1048576}},
            ],
            # round trips are exact: one step of fp8 is 6% of the value
            "tolerance": {n: {"rtol": 0, "atol": 0} for n in ("q8", "h", "bf")},
            "reference": {"launch": {"grid": ["ceil_div(n, 256)"], "block": [256]}},
            "cost": {"flops": "3 * n", "bytes": "16 * n"},
        },
        "oracle": (
            "import ml_dtypes\n\n"
            "def reference(x, n):\n"
            "    return {'q8': x.astype(ml_dtypes.float8_e4m3fn).astype(np.float64),\n"
            "            'h': x.astype(np.float16).astype(np.float64),\n"
            "            'bf': x.astype(ml_dtypes.bfloat16).astype(np.float64)}\n"
        ),
        "reference_cu": QUANTIZE_REFERENCE,
    },
    "hdr_wmma": {
        "spec": {
            "signature": {"entry": "wmma_gemm", "params": [
                _buffer("A", "float16", "in", ["M", "K"]), _buffer("B", "float16", "in", ["K", "N"]),
                _buffer("C", "float32", "out", ["M", "N"]), *_scalars("M", "N", "K")]},
            "inputs": {"A": {"generator": "uniform", "low": -1, "high": 1},
                       "B": {"generator": "uniform", "low": -1, "high": 1}},
            "cases": [
                {"name": "tile", "kind": "correctness", "scalars": {"M": 16, "N": 16, "K": 16}},
                {"name": "m64_n48_k80", "kind": "correctness", "scalars": {"M": 64, "N": 48, "K": 80}},
                {"name": "n_1024", "kind": "performance", "scalars": {"M": 1024, "N": 1024, "K": 1024}},
            ],
            # fp16 products are exact in fp32; only the order of the sums differs
            "tolerance": {"C": {"rtol": 1e-4, "atol": 1e-4}},
            "reference": {"launch": {"grid": ["ceil_div(N, 16)", "ceil_div(M, 16)"], "block": [16, 16]}},
            "cost": {"flops": "2 * M * N * K", "bytes": "2 * M * K + 2 * K * N + 4 * M * N"},
        },
        "oracle": "def reference(A, B, M, N, K):\n    return {'C': A.astype(np.float64) @ B.astype(np.float64)}\n",
        "reference_cu": WMMA_REFERENCE,
    },
}

# (workload, kernel, launch, compile options): what the GPU test runs, one per header family
GPU_CANDIDATES: dict[str, tuple[str, str, dict[str, Any], list[str]]] = {
    "mma.h": ("hdr_wmma", WMMA_GEMM, WMMA_LAUNCH, []),
    "cuda/pipeline": ("hdr_copy", PIPELINE_COPY, COPY_LAUNCH, []),
    "cuda/barrier": ("hdr_copy", BARRIER_COPY, COPY_LAUNCH, []),
    "cuda_pipeline.h": ("hdr_copy", PRIMITIVES_COPY, COPY_LAUNCH, []),
    "cooperative_groups/reduce.h": ("hdr_warp_sum", CG_WARP_SUM, WARP_SUM_LAUNCH, []),
    "cuda_fp8.h": ("hdr_quantize", QUANTIZE_INTRINSICS,
                   {"default": {"grid": ["ceil_div(n, 128)"], "block": [128]}}, []),
    "sm_90a": ("hdr_copy", SM90A_COPY, COPY_LAUNCH, ["-arch=sm_90a"]),
}


def write_workload(parent: Path, name: str) -> Path:
    """Workload ``name`` of :data:`WORKLOADS` as a directory under ``parent``; returns the directory."""
    w = WORKLOADS[name]
    spec = {"name": name, "description": f"{name}: a CUDA header test workload", **w["spec"]}
    spec["reference"] = {"python": "reference.py", "cuda": "reference.cu", **spec["reference"]}
    spec["initial"] = {"source": "reference.cu", "launch": spec["reference"]["launch"]}
    directory = parent / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "workload.json").write_text(json.dumps(spec, indent=1))
    (directory / "reference.py").write_text("import numpy as np\n\n" + w["oracle"])
    (directory / "reference.cu").write_text(w["reference_cu"])
    return directory
