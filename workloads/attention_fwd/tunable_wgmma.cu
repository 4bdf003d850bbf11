// Tunable attention forward on Hopper's warpgroup tensor cores (wgmma, sm_90a), bf16 in and out:
// o[b,h,i,:] = softmax_j(q[b,h,i,:] . k[b,h,j,:] / sqrt(D)) v[b,h,j,:], causal = 1 masks j > i.
// A simplified FlashAttention-3 forward (no producer warpgroup, no intra-warpgroup softmax overlap).
//
// Design (parameters are -D defines, see tunable_wgmma.json):
// - a block takes NWG * 64 query rows of one (b, h) (grid (ceil_div(S, NWG * 64), B * H)); each
//   warpgroup (128 threads) owns 64 of them. Keys and values are walked in tiles of BKV rows;
//   per tile a warpgroup computes S = q k^T as HD / 16 wgmma.m64nBKVk16 (A = its q rows, B = the k
//   tile, both from shared memory through matrix descriptors, k K-major: imm-trans-b 0), then
//   the online softmax in the exp2 domain on the accumulator fragment (rows lane / 4 and
//   lane / 4 + 8 of the warp's 16, reduced over the 4 lanes sharing them), rescales its output
//   accumulators, and issues o += P v as BKV / 16 wgmma.m64nHDk16 with A = P in registers: the
//   accumulator fragment of 16 score columns is the register A fragment of m64k16, so P is the
//   scores rounded to bf16 pairs in place; B = the v tile N-major (imm-trans-b 1);
// - each batch is waited for (wgmma.wait_group 0) before its results are used: the warpgroups of
//   a block overlap one another's softmax, not their own (FA3's intra-warpgroup overlap is left
//   out); with causal, tiles past the block's last row are not loaded, tiles past a warpgroup's
//   last row are not computed, scores with j > i are -inf (only where the tile crosses the
//   diagonal or S); keys past S are -inf;
// - k and v tiles go through a STAGES-deep ring of shared-memory stages filled by cp.async (16
//   bytes a copy, zero-filled past S and D), loaded STAGES - 1 tiles ahead into the stage of the
//   previous tile, whose wgmma's every warpgroup completed before the barrier that publishes the
//   current one; generic-proxy writes reach wgmma through fence.proxy.async;
// - shared tiles (q, k, v alike) are [HD / 64][rows][64 elements] in the canonical 128-byte
//   swizzle: 16-byte chunk c of a 128-byte row r sits at chunk c ^ (r % 8); q and k are read
//   K-major (16 head dims = 32 bytes into the rows, 8-row groups 1024 bytes apart, 64-dim blocks
//   rows * 128 bytes apart), v N-major (16 keys = 2048 bytes on, 64-dim blocks BKV * 128 bytes
//   apart: the leading byte offset). The dynamic shared memory is aligned up to 1024 bytes;
// - D is a runtime scalar: instantiated for head dims HD = 64 and 128, the smaller HD >= D runs,
//   dimensions past D zero-filled (they add nothing to q . k and are not written); D > 128 is
//   refused by the workload. Copies are 16 bytes where D % 8 == 0 and q, k, v are 16-byte
//   aligned, else guarded 2-byte loads and shared stores into the same chunks;
// - o = accumulator / row sum, written as bf16 pairs where D is even and o 4-byte aligned.
// Launch: grid (ceil_div(S, NWG * 64), B * H), block NWG * 128, dynamic shared memory
// (64 * NWG + 2 * STAGES * BKV) * ceil_div(D, 64) * 128 + 1024 bytes. Compiled with -arch=sm_90a.
// The PTX wrappers sit between the PTX-BEGIN / PTX-END lines: tests/workloads/test_attention_wgmma_emulated.py
// swaps that block for a CPU emulation of the same instructions.
#include <cuda_bf16.h>

#ifndef NWG
#define NWG 2
#endif
#ifndef BKV
#define BKV 128
#endif
#ifndef STAGES
#define STAGES 2
#endif

#define BQ (NWG * 64)
#define NTH (NWG * 128)
#define LOG2E 1.4426950408889634f
#define NEG_INF (-__int_as_float(0x7f800000))

static_assert(NWG == 1 || NWG == 2, "one or two consumer warpgroups");
static_assert(BKV == 64 || BKV == 128, "BKV must be 64 or 128");
static_assert(STAGES >= 2, "at least two stages (loads run STAGES - 1 tiles ahead)");

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
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// keeps the compiler from moving accumulator accesses across the asynchronous wgmma
__device__ __forceinline__ void fence_reg(float& r) { asm volatile("" : "+f"(r)::"memory"); }
// A shared-memory matrix descriptor, 128-byte swizzle: start address, leading and stride byte
// offsets (each encoded >> 4 in 14 bits), base offset 0 (atoms on 1024-byte boundaries).
__device__ __forceinline__ unsigned long long make_desc(const void* p, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((smem_addr(p) & 0x3FFFF) >> 4) | (unsigned long long)((lbo & 0x3FFFF) >> 4) << 16 |
           (unsigned long long)((sbo & 0x3FFFF) >> 4) << 32 | 1ull << 62;
}
// Two floats rounded to bf16 (nearest even), lo in the low half.
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
// The accumulator operands of an m64nN f32 wgmma (N / 2 registers a thread) and their names in the
// instruction, for N = 64 (32) and 128 (64).
#define KO_ACC32 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define KO_ACC64 KO_ACC32, \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define KO_NAMES32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KO_NAMES64 KO_NAMES32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
// d (64 x N, f32) = A (64 x 16, K-major, descriptor da) * B (16 x N, K-major: imm-trans-b 0, descriptor db)
// + d where scale_d != 0
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], unsigned long long da, unsigned long long db,
                                             int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" KO_NAMES32 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : KO_ACC32 : "l"(da), "l"(db), "r"(scale_d));
}
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], unsigned long long da, unsigned long long db,
                                              int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" KO_NAMES64 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : KO_ACC64 : "l"(da), "l"(db), "r"(scale_d));
}
// d (64 x N, f32) += A (64 x 16 from registers: the m64 A fragment) * B (16 x N, N-major: imm-trans-b 1, db)
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const unsigned (&a)[4], unsigned long long db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" KO_NAMES32 "}, "
                 "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : KO_ACC32 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const unsigned (&a)[4], unsigned long long db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" KO_NAMES64 "}, "
                 "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : KO_ACC64 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
// PTX-END

template <int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], unsigned long long da, unsigned long long db, int scale_d) {
    if constexpr (N == 64) wgmma_ss_n64(d, da, db, scale_d);
    else wgmma_ss_n128(d, da, db, scale_d);
}
template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long db) {
    if constexpr (N == 64) wgmma_rs_n64(d, a, db);
    else wgmma_rs_n128(d, a, db);
}

// Byte offset of 16-byte chunk c (elements 8c..8c+7) of row r in a [HD / 64][ROWS][128 bytes] tile,
// 128-byte swizzle.
template <int ROWS>
__device__ __forceinline__ int chunk_at(int r, int c) {
    return (c >> 3) * (ROWS * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4);
}

// Rows [row0, row0 + ROWS) of one [S][D] matrix into a swizzled shared tile; rows past S and
// dimensions past D are zero. VEC: cp.async per chunk; otherwise guarded 2-byte loads and stores.
template <int HD, int ROWS, bool VEC>
__device__ __forceinline__ void load_tile(char* dst, const unsigned short* __restrict__ src, int row0, int S, int D) {
    constexpr int CH = HD / 8, CHUNKS = ROWS * CH;
    if (VEC) {
#pragma unroll
        for (int l = 0; l < (CHUNKS + NTH - 1) / NTH; ++l) {
            const int c = threadIdx.x + l * NTH;
            if (CHUNKS % NTH == 0 || c < CHUNKS) {
                const int r = c / CH, ch = c % CH;
                const bool in = row0 + r < S && ch * 8 < D;   // D % 8 == 0: the chunk is in or out
                cp_async16(dst + chunk_at<ROWS>(r, ch), in ? src + (size_t)(row0 + r) * D + ch * 8 : src, in);
            }
        }
    } else {   // kept rolled: no register pressure added to the kernel
#pragma unroll 1
        for (int c = threadIdx.x; c < CHUNKS; c += NTH) {
            const int r = c / CH, ch = c % CH;
            unsigned short* out = reinterpret_cast<unsigned short*>(dst + chunk_at<ROWS>(r, ch));
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const int d = ch * 8 + e;
                out[e] = (row0 + r < S && d < D) ? src[(size_t)(row0 + r) * D + d] : (unsigned short)0;
            }
        }
    }
}

template <int HD, bool VEC>
__device__ __forceinline__ void attention_block(const unsigned short* __restrict__ q,
                                                const unsigned short* __restrict__ k,
                                                const unsigned short* __restrict__ v, __nv_bfloat16* __restrict__ o,
                                                int S, int D, int causal, char* smem) {
    constexpr int TILE = BKV * HD * 2;   // bytes of one k or v tile
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    // causal: the heaviest query blocks (the most key tiles) first, so the grid's last wave is its lightest
    const int q0 = (causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BQ;
    const int wg0 = q0 + wg * 64;          // the warpgroup's first row
    const int w0 = wg0 + warp * 16;        // the warp's first row
    const size_t head = (size_t)blockIdx.y * S * D;
    q += head;
    k += head;
    v += head;
    char* qs = smem;                       // [HD / 64][BQ][128 bytes]
    char* kv = smem + BQ * HD * 2;         // stage s: k at kv + 2 * s * TILE, v after it

    const int last_row = min(S, q0 + BQ) - 1;
    const int kv_end = causal ? last_row + 1 : S;
    const int ntiles = (kv_end + BKV - 1) / BKV;
    const float scale = rsqrtf((float)D) * LOG2E;   // scores in the exp2 domain

    load_tile<HD, BQ, VEC>(qs, q, q0, S, D);   // in the first group, with tile 0
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ntiles) {
            load_tile<HD, BKV, VEC>(kv + 2 * s * TILE, k, s * BKV, S, D);
            load_tile<HD, BKV, VEC>(kv + (2 * s + 1) * TILE, v, s * BKV, S, D);
        }
        cp_async_commit();
    }

    float acc[HD / 2];   // o: row w0 + g + 8 * ((i >> 1) & 1), dimension 8 * (i >> 2) + 2 * t + (i & 1)
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) acc[i] = 0.f;
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};   // rows w0 + g, w0 + g + 8
    const int row[2] = {w0 + g, w0 + g + 8};

    for (int tile = 0; tile < ntiles; ++tile) {
        const int j0 = tile * BKV;
        cp_async_wait<STAGES - 2>();   // tile `tile` (and q) landed: this thread's copies ...
        fence_proxy_async();           // ... are visible to wgmma ...
        __syncthreads();               // ... everyone's; every wgmma on tile - 1's stage completed
        const int next = tile + STAGES - 1;   // into the stage of tile - 1
        if (next < ntiles) {
            load_tile<HD, BKV, VEC>(kv + 2 * (next % STAGES) * TILE, k, next * BKV, S, D);
            load_tile<HD, BKV, VEC>(kv + (2 * (next % STAGES) + 1) * TILE, v, next * BKV, S, D);
        }
        cp_async_commit();
        if (causal && j0 > wg0 + 63) continue;   // past the warpgroup's rows (so are the next tiles)
        const char* ks = kv + 2 * (tile % STAGES) * TILE;
        const char* vs = ks + TILE;

        // S = q k^T: 64 rows x BKV keys, HD / 16 k-steps (16 head dims = 32 bytes into the swizzled
        // rows; 64-dim blocks BQ * 128 (q) and BKV * 128 (k) bytes apart); the first k-step
        // overwrites s (scale-d 0)
        float s[BKV / 2];   // row w0 + g + 8 * ((i >> 1) & 1), key j0 + 8 * (i >> 2) + 2 * t + (i & 1)
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            const unsigned long long da =
                make_desc(qs + (kk >> 2) * BQ * 128 + wg * 64 * 128 + (kk & 3) * 32, 16, 1024);
            const unsigned long long db = make_desc(ks + (kk >> 2) * BKV * 128 + (kk & 3) * 32, 16, 1024);
            wgmma_ss<BKV>(s, da, db, kk > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < BKV / 2; ++i) fence_reg(s[i]);
#pragma unroll
        for (int i = 0; i < HD / 2; ++i) fence_reg(acc[i]);

        // mask, the tile's row maxima, the running maxima; the output accumulators rescaled
        const bool edge = j0 + BKV > S || (causal && j0 + BKV - 1 > w0);
        float x[BKV / 2], tmax[2] = {NEG_INF, NEG_INF};
#pragma unroll
        for (int i = 0; i < BKV / 2; ++i) {
            const int j = j0 + 8 * (i >> 2) + 2 * t + (i & 1), h = (i >> 1) & 1;
            x[i] = s[i] * scale;
            if (edge && (j >= S || (causal && j > row[h]))) x[i] = NEG_INF;
            tmax[h] = fmaxf(tmax[h], x[i]);
        }
        float mnew[2], corr[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 1));
            tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 2));
            mnew[h] = fmaxf(m[h], tmax[h]);
            corr[h] = mnew[h] == NEG_INF ? 1.f : exp2f(m[h] - mnew[h]);   // 0 on the first live tile
            m[h] = mnew[h];
            l[h] *= corr[h];
        }
#pragma unroll
        for (int i = 0; i < HD / 2; ++i) acc[i] *= corr[(i >> 1) & 1];

        // P = exp2(s - m) rounded to bf16 pairs: registers 4kk..4kk+3 are the A fragment of keys
        // 16kk..16kk+15 (row g cols 2t, 2t+1; row g + 8; row g cols 8 + 2t, 9 + 2t; row g + 8)
        unsigned p[BKV / 4];
#pragma unroll
        for (int i = 0; i < BKV / 2; i += 2) {
            const int h = (i >> 1) & 1;
            const float x0 = mnew[h] == NEG_INF ? 0.f : exp2f(x[i] - mnew[h]);
            const float x1 = mnew[h] == NEG_INF ? 0.f : exp2f(x[i + 1] - mnew[h]);
            l[h] += x0 + x1;
            p[i >> 1] = pack_bf16x2(x0, x1);
        }

        // o += P v: BKV / 16 k-steps of 16 keys (2048 bytes into the v tile; 64-dim blocks BKV * 128 apart)
#pragma unroll
        for (int i = 0; i < HD / 2; ++i) fence_reg(acc[i]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BKV / 16; ++kk) {
            const unsigned a[4] = {p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]};
            wgmma_rs<HD>(acc, a, make_desc(vs + kk * 2048, BKV * 128, 1024));
        }
        wgmma_commit();
        // completed here: a batch left in flight across the next tile's S batch (as FA3 overlaps
        // them) made ptxas 13 serialize every wgmma (C7515: accumulators defined inside the stage)
        wgmma_wait<0>();
    }
    cp_async_wait<0>();
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) fence_reg(acc[i]);

    // o = acc / l for rows < S, dimensions < D
    const bool pairs = (D % 2 == 0) && ((reinterpret_cast<unsigned long long>(o) & 3ull) == 0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float sum = l[h];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        if (row[h] >= S) continue;
        const float inv = 1.f / sum;
        __nv_bfloat16* orow = o + head + (size_t)row[h] * D;
#pragma unroll
        for (int n = 0; n < HD / 8; ++n) {
            const int d = n * 8 + 2 * t;
            const unsigned w = pack_bf16x2(acc[4 * n + 2 * h] * inv, acc[4 * n + 2 * h + 1] * inv);
            if (pairs) {
                if (d < D) *reinterpret_cast<unsigned*>(orow + d) = w;
            } else {
                if (d < D) reinterpret_cast<unsigned short*>(orow)[d] = (unsigned short)(w & 0xffffu);
                if (d + 1 < D) reinterpret_cast<unsigned short*>(orow)[d + 1] = (unsigned short)(w >> 16);
            }
        }
    }
}

template <int HD>
__device__ __forceinline__ void attention_hd(const unsigned short* q, const unsigned short* k, const unsigned short* v,
                                             __nv_bfloat16* o, int S, int D, int causal, char* smem) {
    const unsigned long long any = reinterpret_cast<unsigned long long>(q) | reinterpret_cast<unsigned long long>(k) |
                                   reinterpret_cast<unsigned long long>(v);
    const bool vec = (D % 8 == 0) && (any & 15ull) == 0;
    if (vec)
        attention_block<HD, true>(q, k, v, o, S, D, causal, smem);
    else
        attention_block<HD, false>(q, k, v, o, S, D, causal, smem);
}

extern "C" __global__ void __launch_bounds__(NTH)
attention_fwd(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
              const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ o, int B, int H, int S, int D,
              int causal) {
    extern __shared__ uint4 smem16[];
    // tiles on 1024-byte boundaries of the shared window (the 128-byte swizzle's period)
    char* raw = reinterpret_cast<char*>(smem16);
    char* smem = raw + ((1024 - (smem_addr(raw) & 1023)) & 1023);
    const unsigned short* qq = reinterpret_cast<const unsigned short*>(q);
    const unsigned short* kk = reinterpret_cast<const unsigned short*>(k);
    const unsigned short* vv = reinterpret_cast<const unsigned short*>(v);
    if (D <= 64)
        attention_hd<64>(qq, kk, vv, o, S, D, causal, smem);
    else
        attention_hd<128>(qq, kk, vv, o, S, D, causal, smem);
}
