// Writes one element past the end of the output (an off-by-one bound: i <= n).
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= (size_t)n) c[i] = (i < (size_t)n) ? a[i] + b[i] : 0.0f;
}
