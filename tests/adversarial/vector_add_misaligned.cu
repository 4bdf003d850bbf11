// Misaligned access: a 4-byte store to an address that is 1 byte off alignment.
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)n) *(float*)((char*)(c + i) + 1) = a[i] + b[i];
}
