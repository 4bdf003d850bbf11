// CUDA reference for histogram: 256 bins of a uint8 vector, int32 counts.
//
// Shared-memory privatisation: each block counts into its own 256 bins in shared memory
// (shared atomics, cheap and local to the SM), then adds its non-zero bins to the global
// histogram (at most 256 global atomics per block). Blocks walk the input with a grid-stride
// loop; where x is 4-byte aligned, each thread reads 4 bytes at once (the last n % 4 bytes,
// or all of them when x is misaligned, are read one by one).
// hist is zeroed by the harness before each launch (init "zero").
// Launch: grid min(ceil_div(n, 4096), 1056) (8 blocks per SM on an H200), block 256
// (any multiple of 32 works).

extern "C" __global__ void __launch_bounds__(1024)
histogram(const unsigned char* __restrict__ x, int* __restrict__ hist, int n) {
    __shared__ int bins[256];
    for (int b = threadIdx.x; b < 256; b += blockDim.x) bins[b] = 0;
    __syncthreads();

    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t done = 0;   // bytes handled by the 4-byte loop
    if ((reinterpret_cast<unsigned long long>(x) & 3ull) == 0) {
        const size_t words = (size_t)n / 4;
        const unsigned* x4 = reinterpret_cast<const unsigned*>(x);
        for (size_t i = tid; i < words; i += stride) {
            const unsigned w = __ldg(x4 + i);
            atomicAdd(&bins[w & 0xffu], 1);
            atomicAdd(&bins[(w >> 8) & 0xffu], 1);
            atomicAdd(&bins[(w >> 16) & 0xffu], 1);
            atomicAdd(&bins[w >> 24], 1);
        }
        done = words * 4;
    }
    for (size_t i = done + tid; i < (size_t)n; i += stride) atomicAdd(&bins[__ldg(x + i)], 1);
    __syncthreads();

    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
        const int c = bins[b];
        if (c != 0) atomicAdd(&hist[b], c);
    }
}
