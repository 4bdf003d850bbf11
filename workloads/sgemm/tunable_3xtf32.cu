// Tunable FP32 GEMM on tensor cores at FP32 accuracy (3xTF32), row-major C[M,N] = A[M,K] @ B[K,N].
//
// A single TF32 product keeps 10 mantissa bits of each operand: too coarse for sgemm's tolerance
// (tests/adversarial/sgemm_tf32.cu fails it). Here every operand x is split into big = tf32(x) and
// small = tf32(x - big), and each product is taken as a_big*b_small + a_small*b_big + a_big*b_big:
// three mma.sync.m16n8k8 TF32 products accumulated in float32 (the small*small term, about 2^-22 of
// the product, is dropped), which is about FP32 SIMT's accuracy at up to a third of the TF32
// tensor-core rate.
//
// Design (parameters are -D defines, see tunable_3xtf32.json):
// - each block computes a BM x BN tile of C with (BM/WM) x (BN/WN) warps; each warp owns a
//   WM x WN sub-tile made of (WM/16) x (WN/8) m16n8k8 tiles (float32 accumulators in registers);
// - K is walked in BK-deep slices through a STAGES-deep ring of shared-memory buffers filled by
//   cp.async, so STAGES - 1 slices are in flight while one is multiplied; one barrier per slice;
// - shared tiles: A as [BM][BK + 4] floats, B as [BK][BN + 8]. An A fragment (rows g, g + 8,
//   columns t, t + 4 of a 16x8 tile) is one ldmatrix.x4: four 8x4-float matrices, each lane
//   receiving one 32-bit word; the 16-byte pad puts a matrix's 8 rows in distinct banks. A B
//   fragment is two 32-bit shared loads (rows t and t + 4, column g); the pad of 8 floats puts the
//   32 lanes' words in 32 distinct banks;
// - operands are split after the shared-memory load, once per fragment: each B fragment of the
//   warp tile is split once and used WM/16 times, each A fragment WN/8 times (one A fragment is
//   live at a time);
// - cp.async copies 16 bytes (4 floats) where K % 4 == 0, N % 4 == 0 and A, B are 16-byte aligned,
//   otherwise 4 bytes per element; both zero-fill what lies outside the matrices, so any M, N,
//   K >= 1 run through the same pipeline;
// - C is written from the accumulators with float2 stores where N is even and C 8-byte aligned,
//   guarded per element otherwise;
// - PROMOTE 1 accumulates each BK slice on a partial tile of its own (its first product on a zeroed
//   accumulator) and adds it to the accumulator with float32 adds (round to nearest): a tensor
//   core's float32 accumulation truncates, and over a long K those truncations compound on one
//   accumulator (bench/kernelbench_solutions' K = 8192 GEMMs missed the strict float32 tolerance by
//   it); the partial tile costs WM * WN / 32 registers more.
// Launch: grid (ceil_div(N, BN), ceil_div(M, BM)), block (BM/WM) * (BN/WN) * 32, dynamic shared
// memory STAGES * 4 * (BM * (BK + 4) + BK * (BN + 8)) bytes.
// The PTX wrappers sit between the PTX-BEGIN / PTX-END lines: tests/workloads/test_new_workloads_emulated.py swaps
// that block for a CPU emulation of the same instructions.

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
#ifndef PROMOTE
#define PROMOTE 0
#endif

#define NWN (BN / WN)
#define NTH ((BM / WM) * NWN * 32)
#define MT (WM / 16)
#define NT (WN / 8)
#define AS_LD (BK + 4)
#define BS_LD (BN + 8)
#define A_STAGE (BM * AS_LD)
#define B_STAGE (BK * BS_LD)
#define A_CHUNKS (BM * BK / 4)
#define B_CHUNKS (BK * BN / 4)
#define A_LD ((A_CHUNKS + NTH - 1) / NTH)
#define B_LD ((B_CHUNKS + NTH - 1) / NTH)

static_assert(BM % WM == 0 && BN % WN == 0, "BM % WM and BN % WN must be 0");
static_assert(WM % 16 == 0 && WN % 8 == 0 && BK % 8 == 0, "WM % 16, WN % 8 and BK % 8 must be 0");
static_assert(BN % 32 == 0, "BN % 32 must be 0 (the B pad keeps fragment loads conflict-free)");
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
// 4 bytes global -> shared, asynchronously; zero-filled when !pred.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool pred) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(pred ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
// Four 8x8 b16 matrices, i.e. four 8x4 32-bit ones; lanes 8i..8i+7 give the row addresses of
// matrix i; lane l receives the word at row l / 4, column l % 4 of each.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
// x = big + small with both TF32 (big rounded to nearest, small the rounded remainder).
__device__ __forceinline__ void split_tf32(unsigned x, unsigned& big, unsigned& small) {
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(big) : "f"(__uint_as_float(x)));
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(small) : "f"(__uint_as_float(x) - __uint_as_float(big)));
}
// d = a (16x8, row) * b (8x8, col) on a zeroed accumulator (a slice's first product, PROMOTE 1).
__device__ __forceinline__ void mma_tf32_1688_first(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%10, %10, %10, %10};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(0.f));
}
// d += a (16x8, row) * b (8x8, col), tf32 in, f32 accumulate.
__device__ __forceinline__ void mma_tf32_1688(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// PTX-END

// Issues the loads of one BK-deep slice (A: BM x BK, B: BK x BN) into one stage. VEC: one 16-byte
// cp.async per 4-float chunk; otherwise one 4-byte cp.async per element.
template <bool VEC>
__device__ __forceinline__ void load_slice(const float* __restrict__ A, const float* __restrict__ B, float* as,
                                           float* bs, int M, int N, int K, int m0, int n0, int k0) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int l = 0; l < A_LD; ++l) {
        const int c = tid + l * NTH;
        if (A_CHUNKS % NTH == 0 || c < A_CHUNKS) {
            const int r = c / (BK / 4), kc = (c % (BK / 4)) * 4;
            const int gr = m0 + r, gk = k0 + kc;
            float* dst = as + r * AS_LD + kc;
            if (VEC) {
                const bool in = gr < M && gk < K;   // K % 4 == 0: the whole chunk is in or out
                cp_async16(dst, in ? A + (size_t)gr * K + gk : A, in);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const bool in = gr < M && gk + e < K;
                    cp_async4(dst + e, in ? A + (size_t)gr * K + gk + e : A, in);
                }
            }
        }
    }
#pragma unroll
    for (int l = 0; l < B_LD; ++l) {
        const int c = tid + l * NTH;
        if (B_CHUNKS % NTH == 0 || c < B_CHUNKS) {
            const int r = c / (BN / 4), nc = (c % (BN / 4)) * 4;
            const int gk = k0 + r, gn = n0 + nc;
            float* dst = bs + r * BS_LD + nc;
            if (VEC) {
                const bool in = gk < K && gn < N;   // N % 4 == 0
                cp_async16(dst, in ? B + (size_t)gk * N + gn : B, in);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const bool in = gk < K && gn + e < N;
                    cp_async4(dst + e, in ? B + (size_t)gk * N + gn + e : B, in);
                }
            }
        }
    }
}

template <bool VEC>
__device__ __forceinline__ void gemm_block(const float* __restrict__ A, const float* __restrict__ B,
                                           float* __restrict__ C, int M, int N, int K, float* smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm0 = (warp / NWN) * WM, wn0 = (warp % NWN) * WN;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    float* as_base = smem;
    float* bs_base = smem + STAGES * A_STAGE;

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
            load_slice<VEC>(A, B, as_base + (next % STAGES) * A_STAGE, bs_base + (next % STAGES) * B_STAGE, M, N, K,
                            m0, n0, next * BK);
        cp_async_commit();

        const float* as = as_base + (t % STAGES) * A_STAGE;
        const float* bs = bs_base + (t % STAGES) * B_STAGE;
        const unsigned* bw = reinterpret_cast<const unsigned*>(bs);
#if PROMOTE
        float part[MT][NT][4];   // this slice's products, added to acc after its last k8 step
#endif
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            // B fragments for the whole warp tile, then one A fragment at a time: fewer live registers
            unsigned b_big[NT][2], b_small[NT][2];
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const unsigned* col = bw + (kk + (lane & 3)) * BS_LD + wn0 + j * 8 + (lane >> 2);
                split_tf32(col[0], b_big[j][0], b_small[j][0]);
                split_tf32(col[4 * BS_LD], b_big[j][1], b_small[j][1]);
            }
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                unsigned raw[4], a_big[4], a_small[4];
                ldmatrix_x4(raw, as + (wm0 + i * 16 + (lane & 15)) * AS_LD + kk + (lane >> 4) * 4);
#pragma unroll
                for (int q = 0; q < 4; ++q) split_tf32(raw[q], a_big[q], a_small[q]);
                // the small terms first, then the big product on an accumulator that holds them
#pragma unroll
                for (int j = 0; j < NT; ++j) {
#if PROMOTE
                    if (kk == 0) mma_tf32_1688_first(part[i][j], a_big, b_small[j]);
                    else mma_tf32_1688(part[i][j], a_big, b_small[j]);
                    mma_tf32_1688(part[i][j], a_small, b_big[j]);
                    mma_tf32_1688(part[i][j], a_big, b_big[j]);
#else
                    mma_tf32_1688(acc[i][j], a_big, b_small[j]);
                    mma_tf32_1688(acc[i][j], a_small, b_big[j]);
                    mma_tf32_1688(acc[i][j], a_big, b_big[j]);
#endif
                }
            }
        }
#if PROMOTE
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int q = 0; q < 4; ++q) acc[i][j][q] += part[i][j][q];   // round to nearest
#endif
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

extern "C" __global__ void __launch_bounds__(NTH, 1)
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
