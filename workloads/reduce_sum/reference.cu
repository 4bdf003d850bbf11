// CUDA reference for reduce_sum: out[0] = sum(x[0..n)).
//
// Grid-stride loop (float4 loads when x is 16-byte aligned, scalar tail), per-thread partial
// sums, a warp-shuffle + shared-memory block reduction, and one atomicAdd per block into
// out[0], which the harness zeroes before each launch.
// Launch: grid min(ceil_div(n, 1024), 1056) (8 blocks per SM on 132 SMs), block 256
// (any multiple of 32 up to 1024 works).

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

extern "C" __global__ void __launch_bounds__(1024)
reduce_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
    __shared__ float warp_sums[32];

    const size_t count = n > 0 ? (size_t)n : 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

    float sum = 0.0f;
    size_t scalar_start = 0;
    if ((reinterpret_cast<unsigned long long>(x) & 15ull) == 0) {
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const size_t n4 = count / 4;
#pragma unroll 4
        for (size_t i = first; i < n4; i += stride) {
            const float4 v = x4[i];
            sum += (v.x + v.y) + (v.z + v.w);
        }
        scalar_start = n4 * 4;
    }
    for (size_t i = scalar_start + first; i < count; i += stride) sum += x[i];

    sum = warp_sum(sum);
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = sum;
    __syncthreads();
    if (warp == 0) {
        const int nwarps = (blockDim.x + 31) >> 5;
        sum = lane < nwarps ? warp_sums[lane] : 0.0f;
        sum = warp_sum(sum);
        if (lane == 0) atomicAdd(out, sum);
    }
}
