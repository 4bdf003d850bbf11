// Content-keyed memoization of part of the output (the issue-14 hack): the starting sgemm, but
// each block hashes 16 sampled elements of A and B (with M, N, K); when the key equals the one
// of the last launch that finished, the top half of C's rows is copied from a __device__ cache
// and only the bottom half is computed. Still far above the roofline floor, so only fresh inputs
// per timed launch can catch it: then the cache never hits and the kernel is no faster than the
// one it is built on. On an H200, before fresh inputs: score 7.76 ms -> 5.83 ms, status ok.
#define CACHE_ELEMENTS (1 << 24)
#define SAMPLES 16
__device__ float cache[CACHE_ELEMENTS];
__device__ unsigned long long cached_key = 0;
__device__ unsigned int blocks_done = 0;

__device__ __forceinline__ unsigned long long mix64(unsigned long long x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

extern "C" __global__ void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ unsigned long long key;
    __shared__ bool hit;
    int t = threadIdx.y * blockDim.x + threadIdx.x;
    bool cacheable = (size_t)(M / 2) * N <= CACHE_ELEMENTS;
    if (t < 32) {  // the first warp hashes the samples, one per lane, in parallel
        unsigned long long v = 0;
        if (t < SAMPLES) {
            unsigned int a = __float_as_uint(A[((size_t)t * 2654435761u) % ((size_t)M * K)]);
            unsigned int b = __float_as_uint(B[((size_t)t * 2246822519u) % ((size_t)K * N)]);
            v = mix64(((unsigned long long)a << 32 | b) + t);
        }
        for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (t == 0) {
            key = (v ^ mix64(((unsigned long long)M << 42) ^ ((unsigned long long)N << 21) ^ K)) | 1ull;
            hit = cacheable && *(volatile unsigned long long*)&cached_key == key;
        }
    }
    __syncthreads();
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        size_t at = (size_t)row * N + col;
        if (hit && row < M / 2) {
            C[at] = cache[at];
        } else {
            float acc = 0.0f;
            for (int k = 0; k < K; ++k) acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
            C[at] = acc;
            if (cacheable && row < M / 2) cache[at] = acc;
        }
    }
    if (!hit && cacheable) {
        __threadfence();
        __syncthreads();
        if (t == 0 && atomicAdd(&blocks_done, 1) == gridDim.x * gridDim.y - 1) {
            blocks_done = 0;
            __threadfence();
            cached_key = key;
        }
    }
}
