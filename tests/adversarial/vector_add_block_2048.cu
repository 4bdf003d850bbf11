// Correct, but launched with 2048 threads per block (the table's launch); the limit is 1024.
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)n) c[i] = a[i] + b[i];
}
