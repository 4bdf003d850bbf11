// KernelBench level 1, problem 23: out = softmax(x, dim=1), float32, x of batch_size x dim.
//
// One block of 1024 threads per row, two passes over the row:
// 1. online softmax: each thread keeps a running maximum m and sum s of exp(x - m) over its
//    elements (s rescaled by exp(m_old - m_new) when the maximum grows), then the block merges
//    the (m, s) pairs, warp shuffles first, then one warp over the warps' pairs;
// 2. out = exp(x - m) / s, written with streaming stores.
// The row is read twice and written once (the minimum a row of 1.5 MiB allows without keeping it
// on chip), where a max pass, a sum pass and a write pass read it three times. 16-byte loads and
// stores where dim % 4 == 0 and both pointers are 16-byte aligned. expf, not __expf: the strict
// float32 tolerance. Rows are 64-bit offsets (4096 x 393216 elements pass 2^31).
// Launch: grid batch_size, block 1024.

#define THREADS 1024
#define NEG_INF __int_as_float(0xff800000)

struct MaxSum {
    float m, s;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
    const float m = fmaxf(a.m, b.m);
    if (m == NEG_INF) return {m, 0.f};   // both empty: no exp(-inf - -inf) = NaN
    return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ void add(MaxSum& a, float v) {
    if (v > a.m) {
        a.s = a.s * expf(a.m - v) + 1.f;
        a.m = v;
    } else {
        a.s += expf(v - a.m);
    }
}

// (m, s) of the whole block, in every thread
__device__ __forceinline__ MaxSum block_merge(MaxSum v) {
    __shared__ MaxSum warps[THREADS / 32];
    __shared__ MaxSum total;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        MaxSum other = {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
        v = merge(v, other);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warps[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < THREADS / 32 ? warps[lane] : MaxSum{NEG_INF, 0.f};
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            MaxSum other = {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
            v = merge(v, other);
        }
        if (lane == 0) total = v;
    }
    __syncthreads();
    return total;
}

extern "C" __global__ void __launch_bounds__(THREADS)
p23_Softmax(const float* __restrict__ x, float* __restrict__ out, int batch_size, int dim) {
    const size_t row = blockIdx.x;
    if (row >= (size_t)batch_size) return;
    const float* xr = x + row * dim;
    float* orow = out + row * dim;
    const bool vec = dim % 4 == 0 &&
                     ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(out)) & 15ull) == 0;
    MaxSum acc = {NEG_INF, 0.f};
    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        for (int i = threadIdx.x; i < dim / 4; i += THREADS) {
            const float4 v = x4[i];
            add(acc, v.x); add(acc, v.y); add(acc, v.z); add(acc, v.w);
        }
    } else {
        for (int i = threadIdx.x; i < dim; i += THREADS) add(acc, xr[i]);
    }
    const MaxSum t = block_merge(acc);
    const float inv = 1.f / t.s;
    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        float4* o4 = reinterpret_cast<float4*>(orow);
        for (int i = threadIdx.x; i < dim / 4; i += THREADS) {
            float4 v = __ldcs(x4 + i);
            v.x = expf(v.x - t.m) * inv; v.y = expf(v.y - t.m) * inv;
            v.z = expf(v.z - t.m) * inv; v.w = expf(v.w - t.m) * inv;
            __stcs(o4 + i, v);
        }
    } else {
        for (int i = threadIdx.x; i < dim; i += THREADS) orow[i] = expf(xr[i] - t.m) * inv;
    }
}
