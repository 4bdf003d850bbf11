// KernelBench level 1, problem 40: nn.LayerNorm over (features, dim1, dim2) of
// x[batch_size, features, dim1, dim2], with elementwise ln_weight and ln_bias, eps 1e-5, float32.
//
// A sample is 4M elements and there are only 16 of them: one block per sample would leave most
// of the GPU idle. Instead a thread-block cluster of CLUSTER blocks (Hopper, sm_90) shares a sample:
// 1. each block takes a contiguous 1/CLUSTER of the sample; each thread sums d = x - pivot and
//    d^2 in float32 over its elements (pivot = the sample's first element: the shift keeps the
//    variance's E[d^2] - E[d]^2 free of cancellation), the block adds the threads' sums in double;
// 2. every block reads all CLUSTER blocks' sums through distributed shared memory (in the same
//    order, so all agree to the bit) after a cluster barrier: mean and 1 / sqrt(var + eps), the
//    biased variance as torch's;
// 3. each block writes its part: (x - mean) * rstd * w + b (x read again, w and b once per sample).
// 16-byte loads and stores where the sample size is a multiple of 4 and the pointers 16-byte aligned.
// 64-bit offsets.
// Launch: grid (CLUSTER, batch_size), block 1024 (the cluster shape is compiled in: __cluster_dims__).

#include <cooperative_groups.h>

namespace cg = cooperative_groups;

#define CLUSTER 8
#define THREADS 1024
#define EPS 1e-5

__device__ __forceinline__ void accumulate(float v, float pivot, float& s1, float& s2) {
    const float d = v - pivot;
    s1 += d;
    s2 = fmaf(d, d, s2);
}

extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS)
p40_LayerNorm(const float* __restrict__ x, const float* __restrict__ ln_weight, const float* __restrict__ ln_bias,
              float* __restrict__ out, int batch_size, int features, int dim1, int dim2) {
    __shared__ double warp_sums[THREADS / 32][2];
    __shared__ double block_sums[2];
    cg::cluster_group cluster = cg::this_cluster();
    const size_t n = (size_t)features * dim1 * dim2;
    const size_t sample = blockIdx.y;
    const unsigned rank = cluster.block_rank();
    const float* xs = x + sample * n;
    float* os = out + sample * n;
    const bool vec = n % 4 == 0 && ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(out) |
                                     reinterpret_cast<unsigned long long>(ln_weight) |
                                     reinterpret_cast<unsigned long long>(ln_bias)) & 15ull) == 0;
    // this block's part [begin, end), a multiple of 4 long except the sample's last
    const size_t part = (n + 4 * CLUSTER - 1) / (4 * CLUSTER) * 4;
    const size_t begin = min(n, (size_t)rank * part), end = min(n, begin + part);
    const float pivot = __ldg(xs);

    float s1 = 0.f, s2 = 0.f;
    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(xs);
        for (size_t i = begin / 4 + threadIdx.x; i < end / 4; i += THREADS) {
            const float4 v = x4[i];
            accumulate(v.x, pivot, s1, s2); accumulate(v.y, pivot, s1, s2);
            accumulate(v.z, pivot, s1, s2); accumulate(v.w, pivot, s1, s2);
        }
    } else {
        for (size_t i = begin + threadIdx.x; i < end; i += THREADS) accumulate(xs[i], pivot, s1, s2);
    }
    double d1 = s1, d2 = s2;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        d1 += __shfl_xor_sync(0xffffffffu, d1, o);
        d2 += __shfl_xor_sync(0xffffffffu, d2, o);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { warp_sums[warp][0] = d1; warp_sums[warp][1] = d2; }
    __syncthreads();
    if (warp == 0) {
        d1 = warp_sums[lane][0];
        d2 = warp_sums[lane][1];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            d1 += __shfl_xor_sync(0xffffffffu, d1, o);
            d2 += __shfl_xor_sync(0xffffffffu, d2, o);
        }
        if (lane == 0) { block_sums[0] = d1; block_sums[1] = d2; }
    }
    cluster.sync();   // every block's sums are written (and visible across the cluster)
    double t1 = 0.0, t2 = 0.0;
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) {
        const double* other = cluster.map_shared_rank(block_sums, r);
        t1 += other[0];
        t2 += other[1];
    }
    cluster.sync();   // no block leaves (freeing its shared memory) while another still reads it
    const double mean_d = t1 / (double)n;
    const double var = fmax(t2 / (double)n - mean_d * mean_d, 0.0);
    const float mean = (float)((double)pivot + mean_d);
    const float rstd = (float)(1.0 / sqrt(var + EPS));

    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(xs);
        const float4* w4 = reinterpret_cast<const float4*>(ln_weight);
        const float4* b4 = reinterpret_cast<const float4*>(ln_bias);
        float4* o4 = reinterpret_cast<float4*>(os);
        for (size_t i = begin / 4 + threadIdx.x; i < end / 4; i += THREADS) {
            const float4 v = __ldcs(x4 + i), w = __ldg(w4 + i), b = __ldg(b4 + i);
            float4 r;
            r.x = fmaf((v.x - mean) * rstd, w.x, b.x);
            r.y = fmaf((v.y - mean) * rstd, w.y, b.y);
            r.z = fmaf((v.z - mean) * rstd, w.z, b.z);
            r.w = fmaf((v.w - mean) * rstd, w.w, b.w);
            __stcs(o4 + i, r);
        }
    } else {
        for (size_t i = begin + threadIdx.x; i < end; i += THREADS)
            os[i] = fmaf((xs[i] - mean) * rstd, __ldg(ln_weight + i), __ldg(ln_bias + i));
    }
}
