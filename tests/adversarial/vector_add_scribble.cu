// Scribbles backwards from its input `a` over 4 GiB (one float every 4 KiB, from every thread),
// then computes the right answer: an attempt to corrupt whatever the harness keeps below `a` in
// the same context. In setup() each buffer's staged copy (the cached input, the float64
// expected values) is allocated just before the buffer's guarded allocation, so with device
// addresses growing upward the copies of this request and of earlier ones lie below `a`. They
// are mapped read-only (PROTOCOL.md, "Read-only staging"): the first write into one faults.
// A write into a's front guard is out_of_bounds_write; one into unmapped memory faults too.
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t threads = (size_t)gridDim.x * blockDim.x;
    for (size_t k = 1 + i; k <= ((size_t)1 << 20); k += threads) {
        ((float*)a)[-(long long)(k * 1024)] = 1e30f;
    }
    if (i < (size_t)n) c[i] = a[i] + b[i];
}
