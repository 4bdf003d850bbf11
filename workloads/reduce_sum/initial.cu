// Starting point for reduce_sum: one element per thread, a shared-memory tree with
// interleaved addressing (divergent modulo test, bank conflicts), then one atomicAdd per block.
// out[0] is zeroed by the harness before each launch.
// Launch: grid ceil_div(n, 256), block 256 (any power of two up to 1024 works).
extern "C" __global__ void reduce_sum(const float* x, float* out, int n) {
    __shared__ float s[1024];
    unsigned int tid = threadIdx.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    s[tid] = (i < (size_t)n) ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned int stride = 1; stride < blockDim.x; stride *= 2) {
        if (tid % (2 * stride) == 0) {
            s[tid] += s[tid + stride];
        }
        __syncthreads();
    }
    if (tid == 0) {
        atomicAdd(out, s[0]);
    }
}
