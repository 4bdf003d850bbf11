// Returns zeros.
extern "C" __global__ void sgemm(const float* A, const float* B, float* C, int M, int N, int K) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) C[(size_t)row * N + col] = 0.0f;
}
