// Tunable bf16 GEMM on Hopper's warpgroup tensor cores (wgmma, sm_90a), row-major
// C[M,N] = A[M,K] @ B[K,N]: A and B bfloat16, products accumulated in float32, C float32.
//
// Design (parameters are -D defines, see tunable_wgmma.json):
// - each block computes a BM x BN tile of C with BM / 64 warpgroups (128 threads each); warpgroup
//   w owns rows 64w .. 64w + 63 of the tile and all BN columns, as one wgmma.m64nBNk16 per
//   16-deep k-step with float32 accumulators in registers (BN / 2 per thread);
// - K is walked in 64-deep slices through a STAGES-deep ring of shared-memory stages filled by
//   cp.async (16 bytes per copy, zero-filled outside the matrices). Slices are loaded STAGES - 2
//   ahead and one slice's wgmma batch stays in flight while the next is issued
//   (wgmma.wait_group 1), so a stage is refilled only after every warpgroup's wgmma on it has
//   completed (the barrier after that wait);
// - shared tiles are in the canonical 128-byte swizzled layouts wgmma reads through matrix
//   descriptors: A K-major (a 64-element k row is 128 bytes; 16-byte chunk c of row r at
//   chunk c ^ (r % 8)), B N-major (64-column blocks of 64 k rows, 128 bytes each, chunk c of
//   k row r at c ^ (r % 8); blocks 8 KiB apart, the descriptor's leading byte offset). Stages
//   start on 1024-byte boundaries (the dynamic shared memory is aligned up by hand);
// - generic-proxy writes (cp.async, the scalar path's stores) are made visible to wgmma (the
//   async proxy) with fence.proxy.async before the barrier that publishes a slice;
// - cp.async needs K % 8 == 0, N % 8 == 0 and 16-byte aligned A and B. Otherwise the same
//   chunks are filled with guarded 2-byte loads and shared stores (slower, any M, N, K >= 1);
// - C is written from the accumulators (the m64nN f32 fragment: row 16 * warp + lane / 4
//   (+ 8), column 8 * j + 2 * (lane % 4) (+ 1)) with float2 stores where N is even.
// Launch: grid (ceil_div(N, BN), ceil_div(M, BM)), block BM * 2, dynamic shared memory
// STAGES * 128 * (BM + BN) + 1024 bytes. Compiled with -arch=sm_90a (wgmma is arch-specific).
// The PTX wrappers sit between the PTX-BEGIN / PTX-END lines: tests/workloads/test_gemm_bf16_wgmma_emulated.py
// swaps that block for a CPU emulation of the same instructions.
#include <cuda_bf16.h>

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 256
#endif
#ifndef STAGES
#define STAGES 4
#endif

#define BK 64
#define WGS (BM / 64)
#define NTH (WGS * 128)
#define A_STAGE_BYTES (BM * 128)
#define B_STAGE_BYTES (BN * 128)
#define A_CHUNKS (BM * 8)
#define B_CHUNKS (BN * 8)
#define A_LD ((A_CHUNKS + NTH - 1) / NTH)
#define B_LD ((B_CHUNKS + NTH - 1) / NTH)

static_assert(BM % 64 == 0 && BM >= 64 && BM <= 256, "BM must be 64, 128, 192 or 256");
static_assert(BN == 64 || BN == 128 || BN == 256, "BN must be 64, 128 or 256");
static_assert(STAGES >= 3, "at least three stages (loads run STAGES - 2 slices ahead)");

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
// this thread's generic-proxy shared writes, ordered before later async-proxy (wgmma) reads
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// keeps the compiler from moving accumulator accesses across the asynchronous wgmma
__device__ __forceinline__ void fence_reg(float& r) { asm volatile("" : "+f"(r)::"memory"); }
// A shared-memory matrix descriptor, 128-byte swizzle: start address, leading and stride byte
// offsets (each encoded >> 4 in 14 bits), base offset 0 (atoms on 1024-byte boundaries).
__device__ __forceinline__ unsigned long long make_desc(const void* p, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((smem_addr(p) & 0x3FFFF) >> 4) | (unsigned long long)((lbo & 0x3FFFF) >> 4) << 16 |
           (unsigned long long)((sbo & 0x3FFFF) >> 4) << 32 | 1ull << 62;
}
// d (64 x BN tile, f32) += A (64 x 16, K-major, descriptor da) * B (16 x BN, N-major: imm-trans-b 1, db)
#if BN == 64
__device__ __forceinline__ void wgmma_n64(float (&d)[32], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, 0, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(1));
}
#elif BN == 128
__device__ __forceinline__ void wgmma_n128(float (&d)[64], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1, 0, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(1));
}
#else
__device__ __forceinline__ void wgmma_n256(float (&d)[128], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1, 0, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(1));
}
#endif
// PTX-END

// Byte offsets of 16-byte chunks in a stage, 128-byte swizzle: chunk kc (k columns 8kc..8kc+7) of A
// row r; chunk nc (columns 8nc..8nc+7) of B's k row r, in 64-column blocks of 8 KiB.
__device__ __forceinline__ int a_chunk(int r, int kc) { return r * 128 + ((kc ^ (r & 7)) << 4); }
__device__ __forceinline__ int b_chunk(int r, int nc) { return (nc >> 3) * 8192 + r * 128 + (((nc & 7) ^ (r & 7)) << 4); }

// Issues the loads of one 64-deep slice (A: BM x 64, B: 64 x BN) into one stage, in 8-element
// chunks at their swizzled places. VEC: cp.async per chunk; otherwise guarded scalar loads and
// shared stores.
template <bool VEC>
__device__ __forceinline__ void load_slice(const unsigned short* __restrict__ A, const unsigned short* __restrict__ B,
                                           char* as, char* bs, int M, int N, int K, int m0, int n0, int k0) {
    const int tid = threadIdx.x;
    if (VEC) {
#pragma unroll
        for (int l = 0; l < A_LD; ++l) {
            const int c = tid + l * NTH;
            if (A_CHUNKS % NTH == 0 || c < A_CHUNKS) {
                const int r = c >> 3, kc = c & 7;
                const int gr = m0 + r, gk = k0 + kc * 8;
                const bool in = gr < M && gk < K;   // K % 8 == 0: the whole chunk is in or out
                cp_async16(as + a_chunk(r, kc), in ? A + (size_t)gr * K + gk : A, in);
            }
        }
#pragma unroll
        for (int l = 0; l < B_LD; ++l) {
            const int c = tid + l * NTH;
            if (B_CHUNKS % NTH == 0 || c < B_CHUNKS) {
                const int r = c / (BN / 8), nc = c % (BN / 8);
                const int gk = k0 + r, gn = n0 + nc * 8;
                const bool in = gk < K && gn < N;   // N % 8 == 0
                cp_async16(bs + b_chunk(r, nc), in ? B + (size_t)gk * N + gn : B, in);
            }
        }
    } else {   // the slow path: kept rolled, so it adds no register pressure to the kernel
#pragma unroll 1
        for (int c = tid; c < A_CHUNKS; c += NTH) {
            const int r = c >> 3, kc = c & 7;
            const int gr = m0 + r, gk = k0 + kc * 8;
            unsigned short* dst = reinterpret_cast<unsigned short*>(as + a_chunk(r, kc));
#pragma unroll
            for (int e = 0; e < 8; ++e)
                dst[e] = (gr < M && gk + e < K) ? A[(size_t)gr * K + gk + e] : (unsigned short)0;
        }
#pragma unroll 1
        for (int c = tid; c < B_CHUNKS; c += NTH) {
            const int r = c / (BN / 8), nc = c % (BN / 8);
            const int gk = k0 + r, gn = n0 + nc * 8;
            unsigned short* dst = reinterpret_cast<unsigned short*>(bs + b_chunk(r, nc));
#pragma unroll
            for (int e = 0; e < 8; ++e)
                dst[e] = (gk < K && gn + e < N) ? B[(size_t)gk * N + gn + e] : (unsigned short)0;
        }
    }
}

template <bool VEC>
__device__ __forceinline__ void gemm_block(const unsigned short* __restrict__ A, const unsigned short* __restrict__ B,
                                           float* __restrict__ C, int M, int N, int K, char* smem) {
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    char* as_base = smem;
    char* bs_base = smem + STAGES * A_STAGE_BYTES;

    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;

    const int nslices = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) {
        if (s < nslices)
            load_slice<VEC>(A, B, as_base + s * A_STAGE_BYTES, bs_base + s * B_STAGE_BYTES, M, N, K, m0, n0, s * BK);
        cp_async_commit();
    }

    for (int t = 0; t < nslices; ++t) {
        cp_async_wait<STAGES - 3>();   // slice t has landed (this thread's copies) ...
        fence_proxy_async();           // ... is visible to wgmma ...
        __syncthreads();               // ... everyone's; and every wgmma on slice t - 2 has completed
        const int next = t + STAGES - 2;   // into stage (t - 2) % STAGES
        if (next < nslices)
            load_slice<VEC>(A, B, as_base + (next % STAGES) * A_STAGE_BYTES, bs_base + (next % STAGES) * B_STAGE_BYTES,
                            M, N, K, m0, n0, next * BK);
        cp_async_commit();

        const char* as = as_base + (t % STAGES) * A_STAGE_BYTES + wg * 64 * 128;
        const char* bs = bs_base + (t % STAGES) * B_STAGE_BYTES;
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) fence_reg(acc[i]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            // A: 16 k-columns = 32 bytes into the swizzled rows; 8-row groups 1024 bytes apart.
            // B: 16 k-rows = 2048 bytes on; 64-column blocks 8192 bytes apart, 8-row groups 1024.
            const unsigned long long da = make_desc(as + kk * 32, 16, 1024);
            const unsigned long long db = make_desc(bs + kk * 2048, 8192, 1024);
#if BN == 64
            wgmma_n64(acc, da, db);
#elif BN == 128
            wgmma_n128(acc, da, db);
#else
            wgmma_n256(acc, da, db);
#endif
        }
        wgmma_commit();
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) fence_reg(acc[i]);
        wgmma_wait<1>();   // slice t - 1's batch has completed; slice t's may still run
    }
    wgmma_wait<0>();
    cp_async_wait<0>();
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) fence_reg(acc[i]);

    const bool vec_c = (N % 2 == 0) && ((reinterpret_cast<unsigned long long>(C) & 7ull) == 0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = m0 + wg * 64 + warp * 16 + (lane >> 2) + h * 8;
        if (row >= M) continue;
        float* crow = C + (size_t)row * N;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int col = n0 + j * 8 + (lane & 3) * 2;
            const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
            if (vec_c) {
                if (col < N) *reinterpret_cast<float2*>(crow + col) = make_float2(v0, v1);
            } else {
                if (col < N) crow[col] = v0;
                if (col + 1 < N) crow[col + 1] = v1;
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(NTH)
gemm_bf16(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B, float* __restrict__ C,
          int M, int N, int K) {
    extern __shared__ uint4 smem16[];
    // stages on 1024-byte boundaries of the shared window (the 128-byte swizzle's period)
    char* raw = reinterpret_cast<char*>(smem16);
    char* smem = raw + ((1024 - (smem_addr(raw) & 1023)) & 1023);
    const unsigned short* a = reinterpret_cast<const unsigned short*>(A);
    const unsigned short* b = reinterpret_cast<const unsigned short*>(B);
    const bool vec = (K % 8 == 0) && (N % 8 == 0) &&
                     (((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B)) & 15ull) == 0);
    if (vec)
        gemm_block<true>(a, b, C, M, N, K, smem);
    else
        gemm_block<false>(a, b, C, M, N, K, smem);
}
