// CUDA reference for layernorm: per row, y = (x - mean) / sqrt(var + eps) * gamma + beta,
// biased variance, float32.
//
// One block per row (rows on grid.x, so any row count up to 2^31-1 works), two-pass
// statistics for numerical stability: the row mean, then the mean of (x - mean)^2, each a
// per-thread strided sum, a warp shuffle and a shared-memory step across warps; a third pass
// normalises and applies gamma and beta. The row is read from global memory in every pass
// (the second and third reads mostly hit L2).
// Launch: grid rows, block 256 (any multiple of 32 up to 1024 works).

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// Every thread of the block gets the result. `scratch` must hold 32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nwarps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : 0.0f;
    v = warp_sum(v);
    __syncthreads();   // scratch may be reused right after
    return v;
}

extern "C" __global__ void __launch_bounds__(1024)
layernorm(const float* __restrict__ x, const float* __restrict__ gamma,
          const float* __restrict__ beta, float* __restrict__ y, int rows, int cols, float eps) {
    __shared__ float scratch[32];
    const int row = blockIdx.x;
    if (row >= rows) return;   // uniform across the block
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;
    const float inv_cols = 1.0f / (float)cols;

    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c];
    const float mean = block_sum(s, scratch) * inv_cols;

    float sq = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float d = xr[c] - mean;
        sq = fmaf(d, d, sq);
    }
    const float var = block_sum(sq, scratch) * inv_cols;
    const float rstd = rsqrtf(var + eps);

    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = fmaf((xr[c] - mean) * rstd, gamma[c], beta[c]);
}
