// Tunable SGEMM, row-major C[M,N] = A[M,K] @ B[K,N], float32 (FP32 SIMT, no tensor cores).
//
// Design (parameters are -D defines, see tunable.json):
// - each block computes a BM x BN tile of C with NT = (BM/TM) * (BN/TN) threads;
// - each thread accumulates a TM x TN register tile, made of (TM/4) x (TN/4) 4x4 sub-tiles
//   strided by 4*(BM/TM) rows and 4*(BN/TN) columns, so that the float4 reads of the shared
//   tiles by a warp are conflict-free (B) or broadcasts (A);
// - K is walked in BK-deep slices; A's slice is stored transposed in shared memory
//   (As[k][m], padded by 4 floats per row), B's as is (Bs[k][n]);
// - two shared-memory stages: the next slice is fetched from global memory into registers
//   while the current one is multiplied, then written to the other stage (one barrier per slice);
// - global loads are float4 when K % 4 == 0 and N % 4 == 0 and the pointers are 16-byte aligned;
//   otherwise the same slots are filled by guarded scalar loads, so any M, N, K works. Out-of-range elements are
//   loaded as zeros; C is written with float4 stores where aligned, with per-element guards.
// Launch: grid (ceil_div(N, BN), ceil_div(M, BM)), block NT, dynamic shared memory
// 2 * 4 * BK * (BM + 4 + BN) bytes.

#ifndef BM
#define BM 64
#endif
#ifndef BN
#define BN 64
#endif
#ifndef BK
#define BK 8
#endif
#ifndef TM
#define TM 4
#endif
#ifndef MINB
#define MINB 1
#endif
#ifndef TN
#define TN 4
#endif

#define NTX (BN / TN)
#define NTY (BM / TM)
#define NT (NTX * NTY)
#define MSUB (TM / 4)
#define NSUB (TN / 4)
#define MSTRIDE (4 * NTY)
#define NSTRIDE (4 * NTX)
#define AS_LD (BM + 4)
#define BS_LD (BN)
#define STAGE_FLOATS (BK * AS_LD + BK * BS_LD)

// float4-shaped load slots per thread per slice
#define A_F4 (BM * BK / 4)
#define B_F4 (BK * BN / 4)
#define A_LD ((A_F4 + NT - 1) / NT)
#define B_LD ((B_F4 + NT - 1) / NT)

static_assert(TM % 4 == 0 && TN % 4 == 0, "TM and TN must be multiples of 4");
static_assert(BM % TM == 0 && BN % TN == 0, "BM % TM and BN % TN must be 0");
static_assert(BK % 4 == 0, "BK must be a multiple of 4");
static_assert(NT <= 1024, "too many threads per block");

// Loads one BK-deep slice of A (BM x BK) and B (BK x BN) into registers, in float4-shaped
// slots: A slot = 4 consecutive k of one row, B slot = 4 consecutive n of one k. VEC: one
// float4 load per slot; otherwise four guarded scalar loads from the same base address.
template <bool VEC>
__device__ __forceinline__ void load_slice(const float* __restrict__ A, const float* __restrict__ B,
                                           int M, int N, int K, int bm0, int bn0, int k0,
                                           float4 (&ra)[A_LD], float4 (&rb)[B_LD]) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int l = 0; l < A_LD; ++l) {
        const int idx = tid + l * NT;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (A_F4 % NT == 0 || idx < A_F4) {
            const int m = idx / (BK / 4), kq = idx % (BK / 4);
            const int gr = bm0 + m, gk = k0 + kq * 4;
            if (gr < M && gk < K) {
                const float* p = A + (size_t)gr * K + gk;
                if (VEC) {   // K % 4 == 0, so gk + 3 < K too
                    v = __ldg(reinterpret_cast<const float4*>(p));
                } else {
                    v.x = __ldg(p);
                    if (gk + 1 < K) v.y = __ldg(p + 1);
                    if (gk + 2 < K) v.z = __ldg(p + 2);
                    if (gk + 3 < K) v.w = __ldg(p + 3);
                }
            }
        }
        ra[l] = v;
    }
#pragma unroll
    for (int l = 0; l < B_LD; ++l) {
        const int idx = tid + l * NT;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (B_F4 % NT == 0 || idx < B_F4) {
            const int k = idx / (BN / 4), nq = idx % (BN / 4);
            const int gk = k0 + k, gn = bn0 + nq * 4;
            if (gk < K && gn < N) {
                const float* p = B + (size_t)gk * N + gn;
                if (VEC) {   // N % 4 == 0
                    v = __ldg(reinterpret_cast<const float4*>(p));
                } else {
                    v.x = __ldg(p);
                    if (gn + 1 < N) v.y = __ldg(p + 1);
                    if (gn + 2 < N) v.z = __ldg(p + 2);
                    if (gn + 3 < N) v.w = __ldg(p + 3);
                }
            }
        }
        rb[l] = v;
    }
}

// Writes the slice held in registers to one shared-memory stage (A transposed).
__device__ __forceinline__ void store_slice(float* __restrict__ stage, const float4 (&ra)[A_LD],
                                            const float4 (&rb)[B_LD]) {
    const int tid = threadIdx.x;
    float* As = stage;
    float* Bs = stage + BK * AS_LD;
#pragma unroll
    for (int l = 0; l < A_LD; ++l) {
        const int idx = tid + l * NT;
        if (A_F4 % NT == 0 || idx < A_F4) {
            const int m = idx / (BK / 4), kq = idx % (BK / 4);
            As[(kq * 4 + 0) * AS_LD + m] = ra[l].x;
            As[(kq * 4 + 1) * AS_LD + m] = ra[l].y;
            As[(kq * 4 + 2) * AS_LD + m] = ra[l].z;
            As[(kq * 4 + 3) * AS_LD + m] = ra[l].w;
        }
    }
#pragma unroll
    for (int l = 0; l < B_LD; ++l) {
        const int idx = tid + l * NT;
        if (B_F4 % NT == 0 || idx < B_F4) {
            const int k = idx / (BN / 4), nq = idx % (BN / 4);
            *reinterpret_cast<float4*>(Bs + k * BS_LD + nq * 4) = rb[l];
        }
    }
}

template <bool VEC>
__device__ __forceinline__ void gemm_block(const float* __restrict__ A, const float* __restrict__ B,
                                           float* __restrict__ C, int M, int N, int K, float* smem) {
    const int tid = threadIdx.x;
    const int tx = tid % NTX, ty = tid / NTX;
    const int bm0 = blockIdx.y * BM, bn0 = blockIdx.x * BN;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    float4 ra[A_LD], rb[B_LD];
    const int ntiles = (K + BK - 1) / BK;

    load_slice<VEC>(A, B, M, N, K, bm0, bn0, 0, ra, rb);
    store_slice(smem, ra, rb);
    __syncthreads();

    for (int t = 0; t < ntiles; ++t) {
        const bool more = t + 1 < ntiles;
        if (more) load_slice<VEC>(A, B, M, N, K, bm0, bn0, (t + 1) * BK, ra, rb);

        const float* As = smem + (t & 1) * STAGE_FLOATS;
        const float* Bs = As + BK * AS_LD;
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < MSUB; ++i) {
                const float4 v = *reinterpret_cast<const float4*>(As + kk * AS_LD + i * MSTRIDE + ty * 4);
                a[4 * i + 0] = v.x; a[4 * i + 1] = v.y; a[4 * i + 2] = v.z; a[4 * i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < NSUB; ++j) {
                const float4 v = *reinterpret_cast<const float4*>(Bs + kk * BS_LD + j * NSTRIDE + tx * 4);
                b[4 * j + 0] = v.x; b[4 * j + 1] = v.y; b[4 * j + 2] = v.z; b[4 * j + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }

        if (more) store_slice(smem + ((t + 1) & 1) * STAGE_FLOATS, ra, rb);
        __syncthreads();
    }

    const bool vec_c = (N % 4 == 0) && ((reinterpret_cast<unsigned long long>(C) & 15ull) == 0);
#pragma unroll
    for (int i = 0; i < MSUB; ++i) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int row = bm0 + i * MSTRIDE + ty * 4 + r;
            if (row >= M) continue;
            float* crow = C + (size_t)row * N;
#pragma unroll
            for (int j = 0; j < NSUB; ++j) {
                const int col = bn0 + j * NSTRIDE + tx * 4;
                const float* v = &acc[4 * i + r][4 * j];
                if (vec_c && col < N) {
                    *reinterpret_cast<float4*>(crow + col) = make_float4(v[0], v[1], v[2], v[3]);
                } else {
#pragma unroll
                    for (int c = 0; c < 4; ++c)
                        if (col + c < N) crow[col + c] = v[c];
                }
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(NT, MINB)
sgemm(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K) {
    extern __shared__ float4 smem4[];
    float* smem = reinterpret_cast<float*>(smem4);
    const bool vec = (K % 4 == 0) && (N % 4 == 0) &&
                     (((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B)) & 15ull) == 0);
    if (vec)
        gemm_block<true>(A, B, C, M, N, K, smem);
    else
        gemm_block<false>(A, B, C, M, N, K, smem);
}
