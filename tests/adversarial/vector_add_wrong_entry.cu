// Correct code under the wrong name: the workload's entry point vector_add does not exist.
extern "C" __global__ void vector_add_fast(const float* a, const float* b, float* c, int n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)n) c[i] = a[i] + b[i];
}
