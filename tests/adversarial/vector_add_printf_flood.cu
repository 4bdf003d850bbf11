// Correct, and prints a line from every thread (millions of lines on the large cases): the
// result must stand on its merits, the log must stay capped, the server must keep answering.
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)n) {
        c[i] = a[i] + b[i];
        printf("thread %llu of %d: %f + %f\n", (unsigned long long)i, n, a[i], b[i]);
    }
}
