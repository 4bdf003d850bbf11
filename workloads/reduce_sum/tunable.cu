// Tunable sum of a float32 vector: out[0] = sum(x[0..n)); out[0] is zeroed before each launch.
//
// Design (parameters are -D defines, see tunable.json):
// - grid-stride loop over float4s (when x is 16-byte aligned; a scalar tail covers n % 4 and
//   the unaligned case), UNROLL independent float4 loads in flight per thread and iteration,
//   each into its own accumulator (short dependency chains, better-conditioned partial sums);
// - THREADS threads per block, grid = min(ceil_div(n, THREADS * 4 * UNROLL), SM_COUNT * BPS)
//   (SM_COUNT: the device's multiprocessors, 132 on an H200; BPS blocks per SM);
// - block reduction: warp shuffles, then a shared-memory step across warps;
// - TWO_PASS = 0: one atomicAdd per block into out[0];
//   TWO_PASS = 1: each block writes its partial sum to a device array, and the last block to
//   finish (a ticket counter) adds the partials in a fixed order and writes out[0], so the
//   result does not depend on the order in which blocks finish; it resets the counter for the
//   next launch.
// Launch: grid max(1, min(ceil_div(n, THREADS * 4 * UNROLL), SM_COUNT * BPS)), block THREADS.

#ifndef THREADS
#define THREADS 256
#endif
#ifndef BPS
#define BPS 4
#endif
#ifndef UNROLL
#define UNROLL 1
#endif
#ifndef TWO_PASS
#define TWO_PASS 0
#endif

#define MAX_BLOCKS 4096
#define NWARPS (THREADS / 32)

static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS must be a multiple of 32, at most 1024");

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the block; the result is valid in thread 0.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (NWARPS > 1) {
        if (lane == 0) scratch[warp] = v;
        __syncthreads();
        if (warp == 0) {
            v = lane < NWARPS ? scratch[lane] : 0.f;
            v = warp_sum(v);
        }
    }
    return v;
}

#if TWO_PASS
__device__ float ko_partials[MAX_BLOCKS];
__device__ unsigned int ko_ticket = 0;
#endif

extern "C" __global__ void __launch_bounds__(THREADS, 1)
reduce_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
    __shared__ float scratch[32];
    __shared__ bool is_last;
    const size_t count = n > 0 ? (size_t)n : 0;
    const size_t stride = (size_t)gridDim.x * THREADS;
    const size_t first = (size_t)blockIdx.x * THREADS + threadIdx.x;

    float acc[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc[u] = 0.f;

    size_t scalar_start = 0;
    if ((reinterpret_cast<unsigned long long>(x) & 15ull) == 0) {
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const size_t n4 = count / 4;
        size_t i = first;
        // full rounds: all UNROLL loads in range, no per-load checks
        for (; i + (UNROLL - 1) * stride < n4; i += UNROLL * stride) {
            float4 v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) v[u] = __ldcs(x4 + i + u * stride);
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) acc[u] += (v[u].x + v[u].y) + (v[u].z + v[u].w);
        }
        // the last partial round
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const size_t j = i + u * stride;
            if (j < n4) {
                const float4 v = __ldcs(x4 + j);
                acc[u] += (v.x + v.y) + (v.z + v.w);
            }
        }
        scalar_start = n4 * 4;
    }
    for (size_t i = scalar_start + first; i < count; i += stride) acc[0] += x[i];

    float sum = 0.f;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) sum += acc[u];
    sum = block_sum(sum, scratch);

#if TWO_PASS
    if (threadIdx.x == 0) {
        ko_partials[blockIdx.x] = sum;
        __threadfence();   // the partial is visible before the ticket is taken
        const unsigned int ticket = atomicAdd(&ko_ticket, 1u);
        is_last = ticket == gridDim.x - 1;
    }
    __syncthreads();
    if (is_last) {
        __threadfence();
        float v = 0.f;
        for (unsigned int b = threadIdx.x; b < gridDim.x; b += THREADS) v += __ldcg(&ko_partials[b]);
        __syncthreads();   // scratch is reused
        v = block_sum(v, scratch);
        if (threadIdx.x == 0) {
            out[0] = v;
            ko_ticket = 0;   // ready for the next launch
        }
    }
#else
    (void)is_last;
    if (threadIdx.x == 0) atomicAdd(out, sum);
#endif
}
