// Writes into an input: computes c = a + b, then scribbles over a (const cast away).
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)n) {
        c[i] = a[i] + b[i];
        ((float*)a)[i] = 0.0f;
    }
}
