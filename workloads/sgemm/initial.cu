// Starting point for sgemm: one thread per element of C, a plain loop over K.
// Row-major C[M,N] = A[M,K] @ B[K,N]. threadIdx.x runs along a row of C, so the
// reads of B and the writes of C are coalesced; every A element is re-read from memory.
extern "C" __global__ void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
        }
        C[(size_t)row * N + col] = acc;
    }
}
