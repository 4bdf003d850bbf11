// CUDA reference for gemm_bf16: row-major C[M,N] = A[M,K] @ B[K,N], A and B bfloat16, C float32,
// on tensor cores with float32 accumulation.
//
// A conventional tiled mma.sync kernel (inline PTX: no header beyond cuda_bf16.h):
// - each block of 256 threads (8 warps, 2 along M x 4 along N) computes a 128x128 tile of C;
//   each warp a 64x32 sub-tile = 4 x 4 mma.sync.m16n8k16 tiles with f32 accumulators;
// - K is walked in slices of 32; the next slice is fetched from global memory into registers
//   (16-byte loads where K % 8 == 0, N % 8 == 0 and A, B are 16-byte aligned; guarded 2-byte
//   loads otherwise, zero outside the matrices) while the current one is multiplied, then
//   stored to the other of two shared-memory buffers: one barrier per slice;
// - shared rows are padded by 8 bf16 (16 bytes) so each ldmatrix phase is conflict-free;
//   A fragments come from ldmatrix.x4, B fragments (B is k-major) from ldmatrix.x4.trans;
// - C is written with per-element bounds checks.
// Launch: grid (ceil_div(N, 128), ceil_div(M, 128)), block 256.
#include <cuda_bf16.h>

#define BM 128
#define BN 128
#define BK 32
#define AS_LD (BK + 8)
#define BS_LD (BN + 8)
#define NTHREADS 256

// PTX-BEGIN
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// PTX-END

// One slice = A 128x32 (512 chunks of 8 bf16) + B 32x128 (512 chunks): 2 + 2 chunks per thread.
struct Slice {
    uint4 a[2], b[2];
};

__device__ __forceinline__ uint4 load_chunk(const unsigned short* p, bool vec, int valid) {
    if (vec) return valid > 0 ? __ldg(reinterpret_cast<const uint4*>(p)) : make_uint4(0u, 0u, 0u, 0u);
    unsigned short e[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) e[i] = i < valid ? p[i] : (unsigned short)0;
    return make_uint4(e[0] | (unsigned)e[1] << 16, e[2] | (unsigned)e[3] << 16, e[4] | (unsigned)e[5] << 16,
                      e[6] | (unsigned)e[7] << 16);
}

__device__ __forceinline__ void load_slice(Slice& s, const unsigned short* A, const unsigned short* B, int M, int N,
                                           int K, int m0, int n0, int k0, bool vec) {
#pragma unroll
    for (int l = 0; l < 2; ++l) {
        const int c = threadIdx.x + l * NTHREADS;
        const int r = c >> 2, kc = (c & 3) * 8;   // A: 4 chunks per row of 32
        const int gr = m0 + r, gk = k0 + kc;
        const int valid = gr < M ? min(8, K - gk) : 0;
        s.a[l] = load_chunk(A + (valid > 0 ? (size_t)gr * K + gk : 0), vec, valid);
    }
#pragma unroll
    for (int l = 0; l < 2; ++l) {
        const int c = threadIdx.x + l * NTHREADS;
        const int r = c >> 4, nc = (c & 15) * 8;   // B: 16 chunks per row of 128
        const int gk = k0 + r, gn = n0 + nc;
        const int valid = gk < K ? min(8, N - gn) : 0;
        s.b[l] = load_chunk(B + (valid > 0 ? (size_t)gk * N + gn : 0), vec, valid);
    }
}

__device__ __forceinline__ void store_slice(const Slice& s, unsigned short* as, unsigned short* bs) {
#pragma unroll
    for (int l = 0; l < 2; ++l) {
        const int c = threadIdx.x + l * NTHREADS;
        *reinterpret_cast<uint4*>(as + (c >> 2) * AS_LD + (c & 3) * 8) = s.a[l];
        *reinterpret_cast<uint4*>(bs + (c >> 4) * BS_LD + (c & 15) * 8) = s.b[l];
    }
}

extern "C" __global__ void __launch_bounds__(NTHREADS)
gemm_bf16(const __nv_bfloat16* __restrict__ A_, const __nv_bfloat16* __restrict__ B_, float* __restrict__ C,
          int M, int N, int K) {
    __shared__ __align__(16) unsigned short As[2][BM * AS_LD];
    __shared__ __align__(16) unsigned short Bs[2][BK * BS_LD];
    const unsigned short* A = reinterpret_cast<const unsigned short*>(A_);
    const unsigned short* B = reinterpret_cast<const unsigned short*>(B_);
    const bool vec = (K % 8 == 0) && (N % 8 == 0) &&
                     (((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B)) & 15ull) == 0);

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm0 = (warp >> 2) * 64, wn0 = (warp & 3) * 32;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

    Slice s;
    const int nslices = (K + BK - 1) / BK;
    load_slice(s, A, B, M, N, K, m0, n0, 0, vec);
    store_slice(s, As[0], Bs[0]);
    __syncthreads();

    for (int t = 0; t < nslices; ++t) {
        const int cur = t & 1;
        const bool more = t + 1 < nslices;
        if (more) load_slice(s, A, B, M, N, K, m0, n0, (t + 1) * BK, vec);   // in flight during the mma

#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned af[4][4], bfr[4][2];
#pragma unroll
            for (int i = 0; i < 4; ++i)
                ldmatrix_x4(af[i], &As[cur][(wm0 + i * 16 + (lane & 15)) * AS_LD + kk + (lane >> 4) * 8]);
#pragma unroll
            for (int j = 0; j < 4; j += 2) {
                unsigned r[4];
                ldmatrix_x4_trans(r, &Bs[cur][(kk + (lane & 7) + ((lane >> 3) & 1) * 8) * BS_LD + wn0 + j * 8 +
                                              (lane >> 4) * 8]);
                bfr[j][0] = r[0]; bfr[j][1] = r[1];
                bfr[j + 1][0] = r[2]; bfr[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) mma_bf16_16816(acc[i][j], af[i], bfr[j]);
        }

        // The other buffer was last read before the previous barrier, so it is free.
        if (more) store_slice(s, As[cur ^ 1], Bs[cur ^ 1]);
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + wm0 + i * 16 + (lane >> 2) + h * 8;
            if (row >= M) continue;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int col = n0 + wn0 + j * 8 + (lane & 3) * 2;
                if (col < N) C[(size_t)row * N + col] = acc[i][j][2 * h];
                if (col + 1 < N) C[(size_t)row * N + col + 1] = acc[i][j][2 * h + 1];
            }
        }
}
