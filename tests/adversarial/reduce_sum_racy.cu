// A racy reduction: the shared-memory tree has no __syncthreads() between steps, and each
// block adds its partial sum to out with a plain (non-atomic) read-modify-write. Right only
// when one block and one warp do all the work; otherwise lost updates, differently each run.
extern "C" __global__ void reduce_sum(const float* x, float* out, int n) {
    __shared__ float s[1024];
    unsigned int tid = threadIdx.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    s[tid] = (i < (size_t)n) ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (tid < stride) s[tid] += s[tid + stride];
    }
    if (tid == 0) {
        volatile float* o = out;
        *o = *o + s[0];
    }
}
