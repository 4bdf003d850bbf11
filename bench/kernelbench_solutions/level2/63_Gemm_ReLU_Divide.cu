// KernelBench level 2, problem 63: out = relu(x @ linear_weight^T + linear_bias) / 2, float32
// (the module's divisor, 2.0, is a constant of the problem).
//
// The product runs on tensor cores at FP32 accuracy (3xTF32): each operand x is split into
// big = tf32(x) and small = tf32(x - big), and each product is taken as a_big*b_small +
// a_small*b_big + a_big*b_big (three mma.sync.m16n8k8 TF32 products, float32 accumulation; the
// small*small term, about 2^-22 of the product, is dropped). A single TF32 product would miss the
// strict float32 tolerance, and so would one tensor-core accumulator over all of K = 8192 (see
// KO_PROMOTE): each BK slice is accumulated on its own partial tile, added to the float32
// accumulator with round-to-nearest adds. The design is the bundled sgemm's tunable_3xtf32.cu
// (BM 128, BN 128, BK 32, STAGES 2; warps of 64 x 32 for the second tile), both operands K-contiguous
// (x[M,K] and nn.Linear's weight[N,K]): both tiles are stored [rows][BK + 4] (the pad keeps
// ldmatrix conflict-free) and the weight's fragments come from ldmatrix.x4 too, two n8 tiles each.
// 16-byte cp.async where K % 4 == 0 and both operands are 16-byte aligned, 4-byte otherwise; both
// zero-fill what lies outside the matrices, so any size (5 x 7 x 11, 65 x 515 x 517) runs the same
// pipeline. The epilogue is applied to the float32 accumulator as it is stored.
// Launch: grid (ceil_div(N, 128), ceil_div(M, 128)), block 256, dynamic shared memory
// STAGES * 4 * (BM + BN) * (BK + 4) = 73728 bytes.
// The PTX wrappers sit between the PTX-BEGIN / PTX-END lines: tests/workloads/test_kernelbench_gemm_emulated.py
// swaps them for a CPU emulation (a truncating accumulator among them) and runs the kernel.

#define DIVISOR 2.0f

// relu(acc + bias[col]) / DIVISOR, in the module's order (a true division, as torch's)
__device__ __forceinline__ float epilogue(float acc, int col, const float* __restrict__ bias) {
    return fmaxf(acc + __ldg(bias + col), 0.f) / DIVISOR;
}

// the tile (each may be given with -D: the launch's block is (BM / WM) * (BN / WN) * 32 threads)
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
#define STAGES 2
#endif
// KO_PROMOTE: how the tensor core's float32 accumulation, which truncates, is kept from compounding
// over a long K (these three mismatched at K = 8192 on the H200 and the H100, 1.8e-4 of the
// output's scale at most against the module's own 1.2e-5: 3072 truncating steps on one accumulator).
// scripts/device_issue40.sh gemmtune times both at KernelBench's size.
//   0: one accumulator for the whole K (the error grows with K);
//   1 (the default): each BK slice's products on a zeroed partial tile, added to the accumulator
//      once per slice by float32 adds (round to nearest): 4 adds per 3 * BK / 8 mma, but a second
//      accumulator tile (200 registers at WN 32, no spills). Adding each k8 step's products instead
//      passed on the H100 too, but spilled and ran no faster than eager.
#ifndef KO_PROMOTE
#define KO_PROMOTE 1
#endif

#define NWN (BN / WN)
#define NTH ((BM / WM) * NWN * 32)
#define MT (WM / 16)
#define NT (WN / 8)
#define S_LD (BK + 4)
#define A_STAGE (BM * S_LD)
#define B_STAGE (BN * S_LD)
#define A_CHUNKS (BM * BK / 4)
#define B_CHUNKS (BN * BK / 4)
#define A_LD ((A_CHUNKS + NTH - 1) / NTH)
#define B_LD ((B_CHUNKS + NTH - 1) / NTH)
#define SHARED_BYTES (STAGES * 4 * (A_STAGE + B_STAGE))

static_assert(BM % WM == 0 && BN % WN == 0, "BM % WM and BN % WN must be 0");
static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 8 == 0, "WM % 16, WN % 16 and BK % 8 must be 0");
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
// Four 8x4 32-bit matrices; lanes 8i..8i+7 give the row addresses of matrix i; lane l receives
// the word at row l / 4, column l % 4 of each.
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
// d += a (16x8, row) * b (8x8, col), tf32 in, f32 accumulate.
__device__ __forceinline__ void mma_tf32_1688(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// d = a (16x8, row) * b (8x8, col) on a zeroed accumulator (a slice's first product, KO_PROMOTE 1).
__device__ __forceinline__ void mma_tf32_1688_first(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%10, %10, %10, %10};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(0.f));
}
// PTX-END

// Issues the copies of ROWS x BK of a K-contiguous matrix (rows r0.., columns k0..) into one
// stage laid out [ROWS][BK + 4]. VEC: one 16-byte cp.async per 4-float chunk; otherwise one
// 4-byte cp.async per element. Rows past `rows` and columns past K are zero-filled.
template <int ROWS, bool VEC>
__device__ __forceinline__ void load_tile(const float* __restrict__ src, float* dst, int rows, int K, int r0, int k0) {
    constexpr int CHUNKS = ROWS * BK / 4;
#pragma unroll
    for (int l = 0; l < (CHUNKS + NTH - 1) / NTH; ++l) {
        const int c = threadIdx.x + l * NTH;
        if (CHUNKS % NTH == 0 || c < CHUNKS) {
            const int r = c / (BK / 4), kc = (c % (BK / 4)) * 4;
            const int gr = r0 + r, gk = k0 + kc;
            float* d = dst + r * S_LD + kc;
            if (VEC) {
                const bool in = gr < rows && gk < K;   // K % 4 == 0: the whole chunk is in or out
                cp_async16(d, in ? src + (size_t)gr * K + gk : src, in);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const bool in = gr < rows && gk + e < K;
                    cp_async4(d + e, in ? src + (size_t)gr * K + gk + e : src, in);
                }
            }
        }
    }
}

// acc = X[M,K] @ W[N,K]^T for this block's BM x BN tile, both operands K-contiguous (nn.Linear's
// layout); then out[row, col] = epilogue(acc, col, aux) for every element inside M x N.
template <bool VEC>
__device__ __forceinline__ void gemm_nt_block(const float* __restrict__ X, const float* __restrict__ W,
                                              const float* __restrict__ aux, float* __restrict__ out,
                                              int M, int N, int K, float* smem) {
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
        if (s < nslices) {
            load_tile<BM, VEC>(X, as_base + s * A_STAGE, M, K, m0, s * BK);
            load_tile<BN, VEC>(W, bs_base + s * B_STAGE, N, K, n0, s * BK);
        }
        cp_async_commit();
    }

    for (int t = 0; t < nslices; ++t) {
        cp_async_wait<STAGES - 2>();   // slice t has landed (this thread's copies) ...
        __syncthreads();               // ... everyone's, and stage (t - 1) % STAGES is free
        const int next = t + STAGES - 1;
        if (next < nslices) {
            load_tile<BM, VEC>(X, as_base + (next % STAGES) * A_STAGE, M, K, m0, next * BK);
            load_tile<BN, VEC>(W, bs_base + (next % STAGES) * B_STAGE, N, K, n0, next * BK);
        }
        cp_async_commit();

        const float* as = as_base + (t % STAGES) * A_STAGE;
        const float* bs = bs_base + (t % STAGES) * B_STAGE;
#if KO_PROMOTE
        float part[MT][NT][4];   // this slice's products, added to acc after its last k8 step
#endif
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            // B fragments of the whole warp tile, two n8 tiles per ldmatrix.x4 (W's rows are the
            // columns of the product: matrix 0 = W rows 0-7 x k 0-3 = b[0] of tile j, matrix 1 =
            // rows 8-15 = b[0] of tile j + 1, matrices 2, 3 = k 4-7 = their b[1]); then one A
            // fragment at a time: fewer live registers
            unsigned b_big[NT][2], b_small[NT][2];
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                unsigned raw[4];
                ldmatrix_x4(raw, bs + (wn0 + j * 8 + (lane & 15)) * S_LD + kk + (lane >> 4) * 4);
                split_tf32(raw[0], b_big[j][0], b_small[j][0]);
                split_tf32(raw[1], b_big[j + 1][0], b_small[j + 1][0]);
                split_tf32(raw[2], b_big[j][1], b_small[j][1]);
                split_tf32(raw[3], b_big[j + 1][1], b_small[j + 1][1]);
            }
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                unsigned raw[4], a_big[4], a_small[4];
                ldmatrix_x4(raw, as + (wm0 + i * 16 + (lane & 15)) * S_LD + kk + (lane >> 4) * 4);
#pragma unroll
                for (int q = 0; q < 4; ++q) split_tf32(raw[q], a_big[q], a_small[q]);
                // the small terms first, then the big product on an accumulator that holds them
#pragma unroll
                for (int j = 0; j < NT; ++j) {
#if KO_PROMOTE
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
#if KO_PROMOTE
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int q = 0; q < 4; ++q) acc[i][j][q] += part[i][j][q];   // round to nearest
#endif
    }
    cp_async_wait<0>();

    const bool vec_out = (N % 2 == 0) && ((reinterpret_cast<unsigned long long>(out) & 7ull) == 0);
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + wm0 + i * 16 + (lane >> 2) + h * 8;
            if (row >= M) continue;
            float* orow = out + (size_t)row * N;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int col = n0 + wn0 + j * 8 + (lane & 3) * 2;
                if (col >= N) continue;
                const float v0 = epilogue(acc[i][j][2 * h], col, aux);
                if (vec_out) {   // N even: col + 1 < N too
                    *reinterpret_cast<float2*>(orow + col) = make_float2(v0, epilogue(acc[i][j][2 * h + 1], col + 1, aux));
                } else {
                    orow[col] = v0;
                    if (col + 1 < N) orow[col + 1] = epilogue(acc[i][j][2 * h + 1], col + 1, aux);
                }
            }
        }
    }
}

// the entry's body: the 16-byte path where K % 4 == 0 and both operands are 16-byte aligned
#define GEMM_NT_ENTRY(X, W, AUX, OUT, M, N, K)                                                              \
    extern __shared__ float4 smem4[];                                                                    \
    float* smem = reinterpret_cast<float*>(smem4);                                                       \
    const bool vec = ((K) % 4 == 0) &&                                                                   \
                     (((reinterpret_cast<unsigned long long>(X) | reinterpret_cast<unsigned long long>(W)) & 15ull) == 0); \
    if (vec)                                                                                             \
        gemm_nt_block<true>(X, W, AUX, OUT, M, N, K, smem);                                              \
    else                                                                                                 \
        gemm_nt_block<false>(X, W, AUX, OUT, M, N, K, smem);

extern "C" __global__ void __launch_bounds__(NTH, 1)
p63_Gemm_ReLU_Divide(const float* __restrict__ x, const float* __restrict__ linear_weight,
                     const float* __restrict__ linear_bias, float* __restrict__ out, int batch_size, int in_features,
                     int out_features) {
    GEMM_NT_ENTRY(x, linear_weight, linear_bias, out, batch_size, out_features, in_features)
}
