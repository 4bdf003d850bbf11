// CUDA reference for sgemm: row-major C[M,N] = A[M,K] @ B[K,N], float32.
//
// A classic shared-memory tiled kernel with register blocking, no tensor cores:
// - each block of 256 threads computes a 128x128 tile of C, stepping through K in slices of 8;
// - each thread accumulates an 8x8 sub-tile in registers, as four 4x4 quadrants
//   (rows ty*4 and 64+ty*4, columns tx*4 and 64+tx*4) so that its shared-memory reads are
//   conflict-free float4 loads;
// - A's slice is stored transposed (As[k][m], rows padded by 4 floats against bank conflicts);
// - the next K slice is fetched into registers while the current one is multiplied, with two
//   shared-memory buffers, so there is one barrier per slice.
// Every global access is bounds-checked (zero-filled outside the matrices), so any M, N, K >= 1
// works, including sizes that are not multiples of the tile or of 4.
// Launch: grid (ceil_div(N, 128), ceil_div(M, 128)), block 256.

#define BM 128
#define BN 128
#define BK 8
#define NTHREADS 256

extern "C" __global__ void __launch_bounds__(NTHREADS)
sgemm(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
      int M, int N, int K) {
    __shared__ __align__(16) float As[2][BK][BM + 4];
    __shared__ __align__(16) float Bs[2][BK][BN];

    const int tid = threadIdx.x;
    const int tx = tid & 15;   // column group of this thread's 8x8 sub-tile
    const int ty = tid >> 4;   // row group
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.x * BN;

    // Global -> register mapping of one K slice: A tile is 128 rows x 8 columns, B tile is
    // 8 rows x 128 columns; 1024 elements each, 4 per thread.
    const int a_r = tid >> 3;   // + 32*i
    const int a_c = tid & 7;
    const int b_r = tid >> 7;   // + 2*i
    const int b_c = tid & 127;

    float ra[4], rb[4];
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    auto load_slice = [&](int k0) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int gr = m0 + a_r + 32 * i;
            const int gk = k0 + a_c;
            ra[i] = (gr < M && gk < K) ? A[(size_t)gr * K + gk] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int gk = k0 + b_r + 2 * i;
            const int gc = n0 + b_c;
            rb[i] = (gk < K && gc < N) ? B[(size_t)gk * N + gc] : 0.0f;
        }
    };
    auto store_slice = [&](int buf) {
#pragma unroll
        for (int i = 0; i < 4; ++i) As[buf][a_c][a_r + 32 * i] = ra[i];
#pragma unroll
        for (int i = 0; i < 4; ++i) Bs[buf][b_r + 2 * i][b_c] = rb[i];
    };

    const int num_slices = (K + BK - 1) / BK;
    load_slice(0);
    store_slice(0);
    __syncthreads();

    for (int t = 0; t < num_slices; ++t) {
        const int cur = t & 1;
        const bool has_next = t + 1 < num_slices;
        if (has_next) load_slice((t + 1) * BK);   // in flight while we compute

#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float4 a0 = *reinterpret_cast<const float4*>(&As[cur][k][ty * 4]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[cur][k][64 + ty * 4]);
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[cur][k][tx * 4]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[cur][k][64 + tx * 4]);
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }

        // The other buffer was last read before the previous barrier, so it is free.
        if (has_next) store_slice(cur ^ 1);
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
        if (row >= M) continue;
        float* crow = C + (size_t)row * N;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int col = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + (j - 4));
            if (col < N) crow[col] = acc[i][j];
        }
    }
}
