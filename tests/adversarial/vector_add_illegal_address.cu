// Writes through a pointer into unmapped memory (far past the end of the output).
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)n) c[i + ((size_t)1 << 40)] = a[i] + b[i];
}
