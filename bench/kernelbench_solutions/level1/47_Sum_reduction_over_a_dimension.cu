// KernelBench level 1, problem 47: out[b, 0, j] = sum_i x[b, i, j] for x[batch_size, dim1, dim2],
// float32 (torch.sum over dim 1, keepdim).
//
// Each block owns 32 consecutive columns j of one sample b and has 8 rows of 32 threads: row r
// sums x[b, r], x[b, r + 8], ... in float32 (a warp reads 128 contiguous bytes per row: coalesced;
// the unrolled loop keeps several loads in flight), then the 8 partial sums of each column are
// added in shared memory. Reading x once is the whole cost (8.6 GB in the performance case).
// 64-bit offsets: the performance case has 2.1e9 elements.
// Launch: grid (ceil_div(dim2, 32), batch_size), block (32, 8).

#define COLS 32
#define ROWS 8

extern "C" __global__ void __launch_bounds__(COLS * ROWS)
p47_Sum_reduction_over_a_dimension(const float* __restrict__ x, float* __restrict__ out, int batch_size, int dim1,
                                   int dim2) {
    __shared__ float partial[ROWS][COLS + 1];
    const int j = blockIdx.x * COLS + threadIdx.x;
    const int b = blockIdx.y;
    float sum = 0.f;
    if (j < dim2 && b < batch_size) {
        const float* col = x + (size_t)b * dim1 * dim2 + j;
#pragma unroll 8
        for (int i = threadIdx.y; i < dim1; i += ROWS) sum += __ldcs(col + (size_t)i * dim2);
    }
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && j < dim2 && b < batch_size) {
#pragma unroll
        for (int r = 1; r < ROWS; ++r) sum += partial[r][threadIdx.x];
        out[(size_t)b * dim2 + j] = sum;
    }
}
