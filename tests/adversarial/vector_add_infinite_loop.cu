// Never finishes: spins on a flag in global memory that nothing sets. (A volatile *local*
// flag is not enough: NVRTC proved it constant and removed the loop, and the kernel passed.)
__device__ volatile int ko_release = 0;

extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    while (ko_release == 0) { }
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)n) c[i] = a[i] + b[i];
}
