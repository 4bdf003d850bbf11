// Warp-specialized bf16 GEMM on Hopper (sm_90a): TMA loads, an mbarrier ring, wgmma. Row-major
// C[M,N] = A[M,K] @ B[K,N]: A and B bfloat16, products accumulated in float32, C float32.
//
// Design (parameters are -D defines, see tunable_tma.json):
// - a block (384 threads) computes a 128 x BN tile of C: warpgroup 0 is the producer
//   (setmaxnreg.dec to 40 registers), warpgroups 1 and 2 the consumers (setmaxnreg.inc to 232),
//   consumer c owning tile rows 64c .. 64c + 63 with one wgmma.m64nBNk16 per 16-deep k-step,
//   float32 accumulators in registers (BN / 2 per thread). Tiles are visited in groups of GROUP
//   tile rows (the linear block index walks down a group's rows first) for L2 reuse of B;
// - K is walked in 64-deep slices through a STAGES-deep ring of shared-memory stages (on 1024-byte
//   boundaries, the 128-byte swizzle's period), each with two mbarriers: full[s] (count 1) and
//   empty[s] (count 2, one arrival per consumer warpgroup);
// - TMA path: one elected producer thread, for slice t into stage s = t % STAGES: for t >= STAGES
//   waits empty[s]'s phase t / STAGES - 1 (parity (t / STAGES - 1) & 1: both consumers released
//   slice t - STAGES), arrive.expect_tx's the stage's (128 + BN) * 128 bytes on full[s] and
//   issues cp.async.bulk.tensor.2d loads completing on full[s]: A's box [64 (K), 128 rows] with
//   the 128-byte swizzle lands exactly in the K-major layout wgmma reads (a 64-element k row is
//   128 bytes; 16-byte chunk c of row r at c ^ (r % 8)); BN / 64 boxes [64 (N), 64 (K)] of B land
//   as the N-major 64-column blocks of 64 k rows, 8 KiB apart (the descriptor's leading byte
//   offset). Boxes past the matrices are zero-filled and still count their full bytes;
// - consumers, slice t: wait full[s]'s phase t / STAGES (parity (t / STAGES) & 1), issue the 4
//   k16 wgmmas, commit, wgmma.wait_group 1 (slice t - 1's batch has now completed), then thread 0
//   of each consumer warpgroup arrives on empty[(t - 1) % STAGES], releasing that stage;
// - fallback: TMA needs 16-byte global strides and addresses (K % 8 == 0, N % 8 == 0, A and B
//   16-byte aligned). Otherwise the maps are ignored (the launch spec gives them a harmless 1 x 1
//   view) and the whole producer warpgroup fills the stages with guarded 2-byte loads and shared
//   stores at the same swizzled places, then fence.proxy.async and one arrival each on full[s]
//   (initialised with count 128 on that path); the ring and the consumers are the same;
// - C is written from the accumulators (the m64nN f32 fragment: row 16 * warp + lane / 4
//   (+ 8), column 8 * j + 2 * (lane % 4) (+ 1)) with float2 stores where N is even.
// Launch: grid (ceil_div(N, BN), ceil_div(M, 128)), block 384, dynamic shared memory
// STAGES * 128 * (128 + BN) + 1280 bytes; two tensor maps after the signature's parameters
// (tmA over A: dims [K, M], box [64, 128]; tmB over B: dims [N, K], box [64, 64]; 128-byte
// swizzle). Unverified here (no GPU): whether cuTensorMapEncodeTiled accepts a box larger than
// the tensor's dims (the 1 x 1 views of the fallback and small matrices ask for that), and the
// speed. Compiled with -arch=sm_90a. The PTX wrappers sit between the PTX-BEGIN / PTX-END lines:
// tests/workloads/test_gemm_bf16_tma_emulated.py swaps that block for a CPU emulation.
#include <cuda_bf16.h>

#ifndef BN
#define BN 256
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP
#define GROUP 8
#endif

#define BM 128
#define BK 64
#define NTH 384
#define A_STAGE_BYTES (BM * 128)
#define B_STAGE_BYTES (BN * 128)
#define STAGE_BYTES (A_STAGE_BYTES + B_STAGE_BYTES)

static_assert(BN == 128 || BN == 256, "BN must be 128 or 256");
static_assert(STAGES >= 2, "at least two stages");

// CUtensorMap (cuda.h is not NVRTC's): 128 opaque bytes, 64-byte aligned, passed by value
struct alignas(64) TensorMap { unsigned long long opaque[16]; };

// PTX-BEGIN
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void setmaxnreg_dec40() { asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory"); }
__device__ __forceinline__ void setmaxnreg_inc232() { asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// true once the phase of parity `parity` has completed (the current phase's parity differs)
__device__ __forceinline__ bool mbar_try_wait(unsigned bar, unsigned parity) {
    unsigned done;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    return done != 0;
}
// box at (c0, c1) of the tensor `map` -> shared dst; its bytes complete on the mbarrier bar
__device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap* map, int c0, int c1, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}
// generic-proxy shared accesses (barrier init, the fallback's stores) ordered before the async proxy's
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
#if BN == 128
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

// Byte offsets of 16-byte chunks in a stage, 128-byte swizzle (what TMA's SWIZZLE_128B writes):
// chunk kc (k columns 8kc..8kc+7) of A row r; chunk nc (columns 8nc..8nc+7) of B's k row r, in
// 64-column blocks of 8 KiB.
__device__ __forceinline__ int a_chunk(int r, int kc) { return r * 128 + ((kc ^ (r & 7)) << 4); }
__device__ __forceinline__ int b_chunk(int r, int nc) { return (nc >> 3) * 8192 + r * 128 + (((nc & 7) ^ (r & 7)) << 4); }

// The fallback's fill of one 64-deep slice (A: 128 x 64, B: 64 x BN) by the producer warpgroup's
// 128 threads (ptid): guarded 2-byte loads, zeros outside the matrices. Kept rolled: the producer
// has 40 registers.
__device__ __forceinline__ void fill_scalar(const unsigned short* __restrict__ A, const unsigned short* __restrict__ B,
                                            char* as, char* bs, int M, int N, int K, int m0, int n0, int k0, int ptid) {
#pragma unroll 1
    for (int c = ptid; c < BM * 8; c += 128) {
        const int r = c >> 3, kc = c & 7;
        const int gr = m0 + r, gk = k0 + kc * 8;
        unsigned short* dst = reinterpret_cast<unsigned short*>(as + a_chunk(r, kc));
#pragma unroll 1
        for (int e = 0; e < 8; ++e)
            dst[e] = (gr < M && gk + e < K) ? A[(size_t)gr * K + gk + e] : (unsigned short)0;
    }
#pragma unroll 1
    for (int c = ptid; c < BN * 8; c += 128) {
        const int r = c / (BN / 8), nc = c % (BN / 8);
        const int gk = k0 + r, gn = n0 + nc * 8;
        unsigned short* dst = reinterpret_cast<unsigned short*>(bs + b_chunk(r, nc));
#pragma unroll 1
        for (int e = 0; e < 8; ++e)
            dst[e] = (gk < K && gn + e < N) ? B[(size_t)gk * N + gn + e] : (unsigned short)0;
    }
}

extern "C" __global__ void __launch_bounds__(NTH, 1)
gemm_bf16(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B, float* __restrict__ C,
          int M, int N, int K, const __grid_constant__ TensorMap tmA, const __grid_constant__ TensorMap tmB) {
    extern __shared__ uint4 smem16[];
    // stages on 1024-byte boundaries of the shared window (the 128-byte swizzle's period), then the
    // barriers: full[s] at bar0 + 8s, empty[s] at bar0 + 8 (STAGES + s)
    char* raw = reinterpret_cast<char*>(smem16);
    char* smem = raw + ((1024 - (smem_addr(raw) & 1023)) & 1023);
    char* as_base = smem;
    char* bs_base = smem + STAGES * A_STAGE_BYTES;
    const unsigned full0 = smem_addr(smem + STAGES * STAGE_BYTES), empty0 = full0 + 8 * STAGES;
    const bool tma = (K % 8 == 0) && (N % 8 == 0) &&
                     (((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B)) & 15ull) == 0);
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full0 + 8 * s, tma ? 1 : 128);   // the elected thread's arrive.expect_tx, or every producer's
            mbar_init(empty0 + 8 * s, 2);              // one arrival per consumer warpgroup
        }
        fence_proxy_async();   // the initialised barriers, visible to the async proxy (TMA)
    }
    __syncthreads();

    // this block's tile: linear block ids walk the tile rows of a GROUP-row band first
    const int tiles_n = gridDim.x, tiles_m = gridDim.y;
    const int bid = blockIdx.y * tiles_n + blockIdx.x, band = GROUP * tiles_n;
    const int first_m = (bid / band) * GROUP, rows = min(tiles_m - first_m, GROUP);
    const int m0 = (first_m + (bid % band) % rows) * BM, n0 = ((bid % band) / rows) * BN;
    const int nslices = (K + BK - 1) / BK;
    const int wg = threadIdx.x >> 7;

    if (wg == 0) {   // the producer warpgroup
        setmaxnreg_dec40();
        if (tma) {
            if (threadIdx.x == 0) {
                int s = 0;
                unsigned ph = 0;   // parity of the stage's fill number t / STAGES
                for (int t = 0; t < nslices; ++t) {
                    // fill t / STAGES of stage s needs empty[s]'s phase t / STAGES - 1 completed
                    if (t >= STAGES)
                        while (!mbar_try_wait(empty0 + 8 * s, ph ^ 1)) {}
                    const unsigned full = full0 + 8 * s;
                    mbar_arrive_expect_tx(full, STAGE_BYTES);
                    tma_load_2d(as_base + s * A_STAGE_BYTES, &tmA, t * BK, m0, full);
#pragma unroll
                    for (int j = 0; j < BN / 64; ++j)
                        tma_load_2d(bs_base + s * B_STAGE_BYTES + j * 8192, &tmB, n0 + 64 * j, t * BK, full);
                    if (++s == STAGES) { s = 0; ph ^= 1; }
                }
            }
        } else {
            const unsigned short* a = reinterpret_cast<const unsigned short*>(A);
            const unsigned short* b = reinterpret_cast<const unsigned short*>(B);
            int s = 0;
            unsigned ph = 0;
#pragma unroll 1
            for (int t = 0; t < nslices; ++t) {
                if (t >= STAGES)
                    while (!mbar_try_wait(empty0 + 8 * s, ph ^ 1)) {}
                fill_scalar(a, b, as_base + s * A_STAGE_BYTES, bs_base + s * B_STAGE_BYTES, M, N, K, m0, n0, t * BK,
                            threadIdx.x);
                fence_proxy_async();   // this thread's stores, visible to wgmma (the async proxy) ...
                mbar_arrive(full0 + 8 * s);   // ... once every producer thread has arrived
                if (++s == STAGES) { s = 0; ph ^= 1; }
            }
        }
        return;
    }

    // a consumer warpgroup: tile rows 64 cw .. 64 cw + 63
    setmaxnreg_inc232();
    const int cw = wg - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;

    int s = 0, prev = STAGES - 1;
    unsigned ph = 0;
    for (int t = 0; t < nslices; ++t) {
        while (!mbar_try_wait(full0 + 8 * s, ph)) {}   // slice t has landed in stage s
        const char* as = as_base + s * A_STAGE_BYTES + cw * 64 * 128;
        const char* bs = bs_base + s * B_STAGE_BYTES;
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) fence_reg(acc[i]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            // A: 16 k-columns = 32 bytes into the swizzled rows; 8-row groups 1024 bytes apart.
            // B: 16 k-rows = 2048 bytes on; 64-column blocks 8192 bytes apart, 8-row groups 1024.
            const unsigned long long da = make_desc(as + kk * 32, 16, 1024);
            const unsigned long long db = make_desc(bs + kk * 2048, 8192, 1024);
#if BN == 128
            wgmma_n128(acc, da, db);
#else
            wgmma_n256(acc, da, db);
#endif
        }
        wgmma_commit();
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) fence_reg(acc[i]);
        wgmma_wait<1>();   // slice t - 1's batch has completed (slice t's may still run) ...
        if (t > 0 && (threadIdx.x & 127) == 0) mbar_arrive(empty0 + 8 * prev);   // ... so its stage is free
        prev = s;
        if (++s == STAGES) { s = 0; ph ^= 1; }
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) fence_reg(acc[i]);

    const bool vec_c = (N % 2 == 0) && ((reinterpret_cast<unsigned long long>(C) & 7ull) == 0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = m0 + cw * 64 + warp * 16 + (lane >> 2) + h * 8;
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
