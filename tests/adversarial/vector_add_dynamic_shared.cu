// Correct, but its launch asks for more dynamic shared memory than a block can have
// (the table's launch gives shared_bytes = 1 MiB).
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    extern __shared__ float tile[];
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = (i < (size_t)n) ? a[i] + b[i] : 0.0f;
    __syncthreads();
    if (i < (size_t)n) c[i] = tile[threadIdx.x];
}
