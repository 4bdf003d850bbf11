// Starting point for gemm_bf16: one thread per element of C, a plain float32 loop over K on the
// CUDA cores (no tensor cores). Row-major C[M,N] = A[M,K] @ B[K,N], A and B bfloat16, C float32.
// threadIdx.x runs along a row of C, so the reads of B and the writes of C are coalesced.
#include <cuda_bf16.h>

extern "C" __global__ void gemm_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C,
                                     int M, int N, int K) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += __bfloat162float(A[(size_t)row * K + k]) * __bfloat162float(B[(size_t)k * N + col]);
        }
        C[(size_t)row * N + col] = acc;
    }
}
