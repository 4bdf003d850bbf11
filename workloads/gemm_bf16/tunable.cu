// Tunable bf16 GEMM on tensor cores (mma.sync), row-major C[M,N] = A[M,K] @ B[K,N]:
// A and B bfloat16, products accumulated in float32, C float32.
//
// Design (parameters are -D defines, see tunable.json):
// - each block computes a BM x BN tile of C with (BM/WM) x (BN/WN) warps; each warp owns a
//   WM x WN sub-tile made of (WM/16) x (WN/8) mma.sync.m16n8k16 tiles (float32 accumulators
//   in registers);
// - K is walked in BK-deep slices through a STAGES-deep ring of shared-memory buffers filled
//   by cp.async (16 bytes per copy, zero-filled outside the matrices), so STAGES - 1 slices
//   are in flight while one is multiplied; one barrier per slice;
// - shared tiles: A as [BM][BK + 8], B as [BK][BN + 8] (the 16-byte pad makes the 8 rows an
//   ldmatrix reads fall in distinct banks); A fragments come from ldmatrix.x4, B fragments from
//   ldmatrix.x4.trans (B is k-major in memory, the mma wants it "col");
// - cp.async needs 16-byte aligned rows: K % 8 == 0, N % 8 == 0 and 16-byte aligned A and B.
//   Otherwise the same slots are filled with guarded 2-byte loads and plain shared stores
//   (slower, any M, N, K >= 1);
// - C is written from the accumulators with float2 stores where N is even, guarded per element.
// Launch: grid (ceil_div(N, BN), ceil_div(M, BM)), block (BM/WM) * (BN/WN) * 32, dynamic shared
// memory STAGES * 2 * (BM * (BK + 8) + BK * (BN + 8)) bytes.
// The PTX wrappers sit between the PTX-BEGIN / PTX-END lines: tests/workloads/test_new_workloads.py
// swaps that block for a CPU emulation of the same instructions.
#include <cuda_bf16.h>

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 32
#endif
#ifndef WM
#define WM 64
#endif
#ifndef WN
#define WN 32
#endif
#ifndef STAGES
#define STAGES 3
#endif

#define NWN (BN / WN)
#define NTH ((BM / WM) * NWN * 32)
#define MT (WM / 16)
#define NT (WN / 8)
#define AS_LD (BK + 8)
#define BS_LD (BN + 8)
#define A_STAGE (BM * AS_LD)
#define B_STAGE (BK * BS_LD)
#define A_CHUNKS (BM * BK / 8)
#define B_CHUNKS (BK * BN / 8)
#define A_LD ((A_CHUNKS + NTH - 1) / NTH)
#define B_LD ((B_CHUNKS + NTH - 1) / NTH)

static_assert(BM % WM == 0 && BN % WN == 0, "BM % WM and BN % WN must be 0");
static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "WM, WN and BK must be multiples of 16");
static_assert(STAGES >= 2, "at least two stages");
static_assert(NTH <= 1024, "too many threads per block");

// PTX-BEGIN
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared, asynchronously; zero-filled (nothing read) when !pred.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool pred) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(pred ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i.
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
// d += a (16x16, row) * b (16x8, col), bf16 in, f32 accumulate.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// PTX-END

// Issues the loads of one BK-deep slice (A: BM x BK, B: BK x BN) into one stage, in 8-element
// chunks. VEC: cp.async per chunk; otherwise guarded scalar loads and shared stores.
template <bool VEC>
__device__ __forceinline__ void load_slice(const unsigned short* __restrict__ A, const unsigned short* __restrict__ B,
                                           unsigned short* as, unsigned short* bs, int M, int N, int K,
                                           int m0, int n0, int k0) {
    const int tid = threadIdx.x;
    if (VEC) {
#pragma unroll
        for (int l = 0; l < A_LD; ++l) {
            const int c = tid + l * NTH;
            if (A_CHUNKS % NTH == 0 || c < A_CHUNKS) {
                const int r = c / (BK / 8), kc = (c % (BK / 8)) * 8;
                const int gr = m0 + r, gk = k0 + kc;
                const bool in = gr < M && gk < K;   // K % 8 == 0: the whole chunk is in or out
                cp_async16(as + r * AS_LD + kc, in ? A + (size_t)gr * K + gk : A, in);
            }
        }
#pragma unroll
        for (int l = 0; l < B_LD; ++l) {
            const int c = tid + l * NTH;
            if (B_CHUNKS % NTH == 0 || c < B_CHUNKS) {
                const int r = c / (BN / 8), nc = (c % (BN / 8)) * 8;
                const int gk = k0 + r, gn = n0 + nc;
                const bool in = gk < K && gn < N;   // N % 8 == 0
                cp_async16(bs + r * BS_LD + nc, in ? B + (size_t)gk * N + gn : B, in);
            }
        }
    } else {   // the slow path: kept rolled, so it adds no register pressure to the kernel
#pragma unroll 1
        for (int c = tid; c < A_CHUNKS; c += NTH) {
            const int r = c / (BK / 8), kc = (c % (BK / 8)) * 8;
            const int gr = m0 + r, gk = k0 + kc;
            unsigned short* dst = as + r * AS_LD + kc;
#pragma unroll
            for (int e = 0; e < 8; ++e)
                dst[e] = (gr < M && gk + e < K) ? A[(size_t)gr * K + gk + e] : (unsigned short)0;
        }
#pragma unroll 1
        for (int c = tid; c < B_CHUNKS; c += NTH) {
            const int r = c / (BN / 8), nc = (c % (BN / 8)) * 8;
            const int gk = k0 + r, gn = n0 + nc;
            unsigned short* dst = bs + r * BS_LD + nc;
#pragma unroll
            for (int e = 0; e < 8; ++e)
                dst[e] = (gk < K && gn + e < N) ? B[(size_t)gk * N + gn + e] : (unsigned short)0;
        }
    }
}

template <bool VEC>
__device__ __forceinline__ void gemm_block(const unsigned short* __restrict__ A, const unsigned short* __restrict__ B,
                                           float* __restrict__ C, int M, int N, int K, unsigned short* smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm0 = (warp / NWN) * WM, wn0 = (warp % NWN) * WN;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    unsigned short* as_base = smem;
    unsigned short* bs_base = smem + STAGES * A_STAGE;

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

    const int nslices = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < nslices)
            load_slice<VEC>(A, B, as_base + s * A_STAGE, bs_base + s * B_STAGE, M, N, K, m0, n0, s * BK);
        cp_async_commit();
    }

    for (int t = 0; t < nslices; ++t) {
        cp_async_wait<STAGES - 2>();   // slice t has landed (this thread's copies) ...
        __syncthreads();               // ... everyone's, and stage (t - 1) % STAGES is free
        const int next = t + STAGES - 1;
        if (next < nslices)
            load_slice<VEC>(A, B, as_base + (next % STAGES) * A_STAGE, bs_base + (next % STAGES) * B_STAGE,
                            M, N, K, m0, n0, next * BK);
        cp_async_commit();

        const unsigned short* as = as_base + (t % STAGES) * A_STAGE;
        const unsigned short* bs = bs_base + (t % STAGES) * B_STAGE;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned af[MT][4], bfr[NT][2];
#pragma unroll
            for (int i = 0; i < MT; ++i)
                ldmatrix_x4(af[i], as + (wm0 + i * 16 + (lane & 15)) * AS_LD + kk + (lane >> 4) * 8);
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                unsigned r[4];
                ldmatrix_x4_trans(r, bs + (kk + (lane & 7) + ((lane >> 3) & 1) * 8) * BS_LD + wn0 + j * 8 + (lane >> 4) * 8);
                bfr[j][0] = r[0]; bfr[j][1] = r[1];
                bfr[j + 1][0] = r[2]; bfr[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j) mma_bf16_16816(acc[i][j], af[i], bfr[j]);
        }
    }
    cp_async_wait<0>();

    const bool vec_c = (N % 2 == 0) && ((reinterpret_cast<unsigned long long>(C) & 7ull) == 0);
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + wm0 + i * 16 + (lane >> 2) + h * 8;
            if (row >= M) continue;
            float* crow = C + (size_t)row * N;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int col = n0 + wn0 + j * 8 + (lane & 3) * 2;
                const float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
                if (vec_c) {
                    if (col < N) *reinterpret_cast<float2*>(crow + col) = make_float2(v0, v1);
                } else {
                    if (col < N) crow[col] = v0;
                    if (col + 1 < N) crow[col + 1] = v1;
                }
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(NTH)
gemm_bf16(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B, float* __restrict__ C,
          int M, int N, int K) {
    extern __shared__ uint4 smem16[];
    unsigned short* smem = reinterpret_cast<unsigned short*>(smem16);
    const unsigned short* a = reinterpret_cast<const unsigned short*>(A);
    const unsigned short* b = reinterpret_cast<const unsigned short*>(B);
    const bool vec = (K % 8 == 0) && (N % 8 == 0) &&
                     (((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B)) & 15ull) == 0);
    if (vec)
        gemm_block<true>(a, b, C, M, N, K, smem);
    else
        gemm_block<false>(a, b, C, M, N, K, smem);
}
