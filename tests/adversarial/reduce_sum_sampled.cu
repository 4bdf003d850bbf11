// A statistical estimate on performance-sized inputs: for n >= 2^26 every 50th block of 256
// elements is skipped (whole cache lines, so 2% less memory traffic) and the partial sums are
// scaled by 50/49. On the uniform [0, 1) inputs the performance cases had until 2026-12-04 the
// estimate was within ~1e-5 of the true sum, inside the 1e-4 tolerance, and 2% less traffic is
// above the roofline floor: nothing caught it. The defense is in the workload: its performance
// inputs (normal, mean 1, std 1000) make any subset's estimate miss (tests/evaluation/test_reduction_inputs.py).
extern "C" __global__ void reduce_sum(const float* x, float* out, int n) {
    __shared__ float s[1024];
    bool sampled = n >= (1 << 26);
    if (sampled && blockIdx.x % 50 == 49) return;
    unsigned int tid = threadIdx.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    s[tid] = (i < (size_t)n) ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (tid < stride) s[tid] += s[tid + stride];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(out, sampled ? s[0] * (50.0f / 49.0f) : s[0]);
}
