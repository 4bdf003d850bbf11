// Correct output, but it reads memory nothing initialised: a device-heap block from malloc()
// and a __device__ array nobody writes. The values are compared with an unlikely constant,
// so validation passes; only the sanitizer tier (initcheck) can see the reads.
__device__ float never_written[256];

extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    __shared__ float* scratch;
    if (threadIdx.x == 0) scratch = (float*)malloc(blockDim.x * sizeof(float));
    __syncthreads();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    float junk = (scratch ? scratch[threadIdx.x] : 0.0f) + never_written[threadIdx.x % 256];
    if (i < (size_t)n) c[i] = (junk == 1.2345e-30f) ? 0.0f : a[i] + b[i];
    __syncthreads();
    if (threadIdx.x == 0 && scratch) free(scratch);
}
