// CUDA reference for transpose: out[cols, rows] = in[rows, cols]^T, float32.
//
// The classic shared-memory tile: a block of 32x8 threads moves a 32x32 tile, reading rows of
// `in` and writing rows of `out` (both coalesced); the tile's rows are padded to 33 floats so
// the column-wise reads from shared memory are free of bank conflicts. Edges are
// bounds-checked, so any rows, cols >= 1 work.
// Launch: grid (ceil_div(cols, 32), ceil_div(rows, 32)), block (32, 8).
// (grid.y <= 65535 limits rows to 2,097,120; every case is far below.)

#define TILE 32
#define BLOCK_ROWS 8

extern "C" __global__ void __launch_bounds__(TILE * BLOCK_ROWS)
transpose(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];

    const int c0 = blockIdx.x * TILE;   // first input column of this tile
    const int r0 = blockIdx.y * TILE;   // first input row

    int c = c0 + threadIdx.x;
#pragma unroll
    for (int j = threadIdx.y; j < TILE; j += BLOCK_ROWS) {
        const int r = r0 + j;
        if (r < rows && c < cols) tile[j][threadIdx.x] = in[(size_t)r * cols + c];
    }
    __syncthreads();

    // out row = input column, out column = input row
    const int r = r0 + threadIdx.x;
#pragma unroll
    for (int j = threadIdx.y; j < TILE; j += BLOCK_ROWS) {
        c = c0 + j;
        if (c < cols && r < rows) out[(size_t)c * rows + r] = tile[threadIdx.x][j];
    }
}
