// A correct reduction whose summation order changes from launch to launch: a grid-stride loop
// per thread, a warp-shuffle sum, then one atomicAdd per warp into out in whatever order the
// warps finish. Its result differs in the last bits between launches on the same inputs, which
// the workload allows (it is not declared bitwise deterministic): it must stay ok.
extern "C" __global__ void reduce_sum(const float* x, float* out, int n) {
    float v = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += (size_t)gridDim.x * blockDim.x)
        v += x[i];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, v);
}
