// Warp-specialized attention forward on Hopper (sm_90a), FlashAttention-3's structure: TMA loads
// into an mbarrier ring fed by a producer warpgroup, wgmma for both products, bf16 in and out:
// o[b,h,i,:] = softmax_j(q[b,h,i,:] . k[b,h,j,:] / sqrt(D)) v[b,h,j,:], causal = 1 masks j > i.
//
// Design (parameters are -D defines, see tunable_tma.json):
// - two instances, head dim HD 128 and 64 (D <= 64, zero-padded), each with its own tile shape: NW
//   consumer warpgroups and BN keys a tile, NWG and BKV at HD 128, NWG64 and BKV64 at HD 64 (a
//   64-dim row's S and o take half the registers and its tiles half the shared memory: FA3 runs 192
//   query rows and 192-key tiles there);
// - grid (B * H, ceil_div(S, NW * 64)): a block takes BQ = NW * 64 query rows of one (b, h); the query
//   block index runs in reverse of blockIdx.y, so with causal the blocks with the most key tiles
//   start first and the grid's tail is made of light blocks;
// - block (max(NWG, NWG64) + 1) * 128 threads at both head dims (one kernel: one launch bound, one
//   register count): warpgroup 0 is the producer, warpgroups 1..NW the consumers, each owning 64
//   query rows, any after them idle. The producer and the idle warpgroups give registers back
//   (setmaxnreg.dec) and the consumers take them (.inc) within the CTA's pool, the block's threads x
//   the count ptxas reports (168 at 384 threads, 128 at 512): 40 + 2 x 232 of 504 (per 128 threads)
//   at 384 threads; at 512 32 + 3 x 160 (NW 3) or 24 + 24 + 2 x 232 (NW 2: why a 512-thread block
//   keeps its fourth warpgroup). tests/workloads/test_attention_tma_emulated.py checks the pools;
// - shared memory: the q tile, then STAGES stages of a k tile and a v tile (BN rows each), all
//   [HD / 64][rows][128 bytes] in the 128-byte swizzle (16-byte chunk c of a 128-byte row r at
//   c ^ (r % 8); the layout TMA's SWIZZLE_128B writes and the wgmma descriptors read), on 1024-byte
//   boundaries; then the mbarriers: fullk[s], fullv[s], emptyk[s], emptyv[s] per stage and one for
//   q. k and v have their own pairs so that k's stage is released as soon as S has read it: with
//   OVERLAP 1 and STAGES 2, v's stage is only released a tile later, and a shared pair would leave
//   the next k no time to land;
// - TMA path (D % 8 == 0 and q, k, v 16-byte aligned: the maps' 16-byte row stride): q, k and v are
//   viewed as [B * H * S, D] matrices (maps tmQ, tmK, tmV from the launch spec; boxes of 64 columns
//   by BQ or BN rows). One elected producer thread loads q (HD / 64 boxes on the q barrier), then
//   for tile t into stage s = t % STAGES: for t >= STAGES waits for emptyk[s]'s phase t / STAGES - 1
//   (every consumer warp released tile t - STAGES's k), arrive.expect_tx's the k tile's BN * HD * 2
//   bytes on fullk[s] and issues its boxes; then the same for v (emptyv[s], fullv[s]). A box may
//   run past this head's S keys into the next head's rows (or into TMA's zero fill past the
//   tensor): those keys are masked to -inf, so their P is 0 and the finite v rows there add
//   nothing. Columns past D are zero fill (D < HD);
// - fallback (D % 8 != 0 or a misaligned buffer): the maps are ignored (the launch spec gives them
//   a 1 x 1 view then) and the producer's 128 threads fill q and the stages with guarded 2-byte loads
//   (zeros past S and D) at the same swizzled places, then fence.proxy.async and an arrival each on
//   the barrier (count 128 on that path);
// - consumers, tile t: wait fullk[s]'s phase t / STAGES; S = q k^T as HD / 16 wgmma.m64nBNk16 (q
//   and k from shared memory, both K-major), completed, k released; the online softmax in the exp2
//   domain on the accumulator fragment (keys j >= S and, with causal, j > i masked where the tile
//   reaches them), the output accumulators rescaled; wait fullv[s]; o += P v as BN / 16
//   wgmma.m64nHDk16 with A = P in registers (the accumulator fragment of 16 score columns is the
//   m64k16 A fragment) and v N-major; completed, v released. A release is lane 0 of each consumer
//   warp arriving (count 4 * NW) after its own wgmma.wait_group. No __syncthreads in the loop.
//   With causal, a warpgroup whose rows all precede a tile only waits for it and releases it;
// - OVERLAP 0: each wgmma batch completes before its results are used: the softmax of one
//   warpgroup overlaps the other warpgroup's wgmma, not its own. OVERLAP 1 (FA3's intra-warpgroup
//   overlap): tile t's S batch is issued with tile t - 1's P v batch, S waited for alone
//   (wgmma.wait_group 1), the softmax of tile t runs while P v does, then P v is waited for, o
//   rescaled, P rounded into the registers the next P v reads, and tile t - 1's v released (one
//   tile later than with OVERLAP 0; k as soon as S completed). Both batches complete inside the
//   iteration: a batch in flight across iterations, a wgmma under a branch, or P's registers
//   defined while a batch is in flight made ptxas serialize every wgmma (C7513 / C7515 / C7520);
// - o = accumulator / row sum, written as bf16 pairs where D is even and o 4-byte aligned.
// Launch (NW, BN: NWG64, BKV64 where D <= 64, else NWG, BKV): grid (B * H, ceil_div(S, NW * 64)),
// block (max(NWG, NWG64) + 1) * 128, dynamic shared memory (64 * NW + 2 * STAGES * BN) *
// ceil_div(D, 64) * 128 + 1280 bytes; three tensor maps after the signature's parameters (tmQ, tmK,
// tmV: dims [D, B * H * S], box [64, NW * 64] for q and [64, BN] for k and v, 128-byte swizzle).
// Compiled with -arch=sm_90a. The PTX wrappers sit between the PTX-BEGIN / PTX-END lines:
// tests/workloads/test_attention_tma_emulated.py swaps that block for a CPU emulation.
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
#ifndef OVERLAP
#define OVERLAP 0
#endif
#ifndef NWG64
#define NWG64 2
#endif
#ifndef BKV64
#define BKV64 128
#endif

// every block launches the larger instance's warpgroups (the launch bound and register count are the kernel's)
#define NTH (((NWG64 > NWG ? NWG64 : NWG) + 1) * 128)
#define LOG2E 1.4426950408889634f
#define NEG_INF (-__int_as_float(0x7f800000))

static_assert(NWG == 1 || NWG == 2, "one or two consumer warpgroups");
static_assert(BKV == 64 || BKV == 128, "BKV must be 64 or 128");
static_assert(NWG64 == 2 || NWG64 == 3, "two or three consumer warpgroups at head dim 64");
static_assert(BKV64 == 64 || BKV64 == 128 || BKV64 == 192, "BKV64 must be 64, 128 or 192");
static_assert(STAGES >= 2, "at least two stages");

// CUtensorMap (cuda.h is not NVRTC's): 128 opaque bytes, 64-byte aligned, passed by value
struct alignas(64) TensorMap { unsigned long long opaque[16]; };

// PTX-BEGIN
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// v, seen by ptxas as the same in every lane: values derived from it (the warpgroup's wgmma descriptors)
// then sit in uniform registers, which the three-warpgroup instance's 160 a thread cannot spare
__device__ __forceinline__ int warp_uniform(int v) { return __shfl_sync(0xffffffffu, v, 0); }
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R) : "memory");
}
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R) : "memory");
}
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
// instruction, for N = 64 (32), 128 (64) and 192 (96).
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
#define KO_ACC96 KO_ACC64, \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define KO_NAMES32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KO_NAMES64 KO_NAMES32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define KO_NAMES96 KO_NAMES64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
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
__device__ __forceinline__ void wgmma_ss_n192(float (&d)[96], unsigned long long da, unsigned long long db,
                                              int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {" KO_NAMES96 "}, %96, %97, p, 1, 1, 0, 0;\n}\n"
                 : KO_ACC96 : "l"(da), "l"(db), "r"(scale_d));
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
    else if constexpr (N == 128) wgmma_ss_n128(d, da, db, scale_d);
    else wgmma_ss_n192(d, da, db, scale_d);
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

// The fallback's fill of rows [row0, row0 + ROWS) of one head's [S][D] matrix by the producer
// warpgroup's 128 threads (ptid): guarded 2-byte loads, zeros past S and D. Kept rolled: the
// producer has 24 to 40 registers.
template <int HD, int ROWS>
__device__ __forceinline__ void fill_tile(char* dst, const unsigned short* __restrict__ src, int row0, int S, int D,
                                          int ptid) {
    constexpr int CH = HD / 8;
#pragma unroll 1
    for (int c = ptid; c < ROWS * CH; c += 128) {
        const int r = c / CH, ch = c % CH;
        unsigned short* out = reinterpret_cast<unsigned short*>(dst + chunk_at<ROWS>(r, ch));
#pragma unroll 1
        for (int e = 0; e < 8; ++e) {
            const int d = ch * 8 + e;
            out[e] = (row0 + r < S && d < D) ? src[(size_t)(row0 + r) * D + d] : (unsigned short)0;
        }
    }
}

// S = q k^T for one warpgroup, issued and committed: 64 rows x BN keys, HD / 16 k-steps (16 head
// dims = 32 bytes into the swizzled rows; 64-dim blocks BQ * 128 (q) and BN * 128 (k) bytes apart);
// the first k-step overwrites sc (scale-d 0). qw: the warpgroup's 64 q rows, ks: the k tile.
template <int HD, int BN, int BQ>
__device__ __forceinline__ void qk_issue(float (&sc)[BN / 2], const char* qw, const char* ks) {
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
        const unsigned long long da = make_desc(qw + (kk >> 2) * BQ * 128 + (kk & 3) * 32, 16, 1024);
        const unsigned long long db = make_desc(ks + (kk >> 2) * BN * 128 + (kk & 3) * 32, 16, 1024);
        wgmma_ss<BN>(sc, da, db, kk > 0);
    }
    wgmma_commit();
}

// o += P v, issued and committed: BN / 16 k-steps of 16 keys (2048 bytes into the v tile vs;
// 64-dim blocks BN * 128 apart); registers 4kk..4kk+3 of p are the A fragment of keys 16kk..16kk+15
template <int HD, int BN>
__device__ __forceinline__ void pv_issue(float (&acc)[HD / 2], const unsigned (&p)[BN / 4], const char* vs) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
        const unsigned a[4] = {p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]};
        wgmma_rs<HD>(acc, a, make_desc(vs + kk * 2048, BN * 128, 1024));
    }
    wgmma_commit();
}

// The online softmax of one tile's scores sc (accumulator fragment: row w0 + g + 8 * ((i >> 1) & 1),
// key j0 + 8 * (i >> 2) + 2 * t + (i & 1)) in the exp2 domain, in place: keys j >= S and, with
// causal, j > i masked (only where the tile reaches them); the running maxima m and sums l updated;
// corr, the factor for the output accumulators; sc becomes P = exp2(s - m).
template <int BN>
__device__ __forceinline__ void softmax_tile(float (&sc)[BN / 2], float (&m)[2], float (&l)[2], float (&corr)[2],
                                             int j0, int S, int causal, int w0, const int (&row)[2], int t,
                                             float scale) {
    const bool edge = j0 + BN > S || (causal && j0 + BN - 1 > w0);
    float tmax[2] = {NEG_INF, NEG_INF};
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) {
        const int j = j0 + 8 * (i >> 2) + 2 * t + (i & 1), h = (i >> 1) & 1;
        sc[i] *= scale;
        if (edge && (j >= S || (causal && j > row[h]))) sc[i] = NEG_INF;
        tmax[h] = fmaxf(tmax[h], sc[i]);
    }
    float mnew[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 1));
        tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 2));
        mnew[h] = fmaxf(m[h], tmax[h]);
        corr[h] = mnew[h] == NEG_INF ? 1.f : exp2f(m[h] - mnew[h]);   // 0 on the first live tile
        m[h] = mnew[h];
        l[h] *= corr[h];
        // a row with every key so far masked: its scores are all -inf, so any finite max gives P = 0
        // (a select per element instead costs the three-warpgroup instance 16+ registers: spills)
        mnew[h] = mnew[h] == NEG_INF ? 0.f : mnew[h];
    }
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) {
        const int h = (i >> 1) & 1;
        sc[i] = exp2f(sc[i] - mnew[h]);
        l[h] += sc[i];
    }
}

// P rounded to bf16 pairs: register i / 2 holds elements i, i + 1, so registers 4kk..4kk+3 are the
// A fragment of keys 16kk..16kk+15 (row g cols 2t, 2t+1; row g + 8; row g cols 8 + 2t, 9 + 2t; row g + 8)
template <int BN>
__device__ __forceinline__ void pack_p(const float (&sc)[BN / 2], unsigned (&p)[BN / 4]) {
#pragma unroll
    for (int i = 0; i < BN / 2; i += 2) p[i >> 1] = pack_bf16x2(sc[i], sc[i + 1]);
}

template <int HD>
__device__ __forceinline__ void attention_block(const unsigned short* __restrict__ q,
                                                const unsigned short* __restrict__ k,
                                                const unsigned short* __restrict__ v, __nv_bfloat16* __restrict__ o,
                                                int S, int D, int causal, char* smem, bool tma, const TensorMap* tmQ,
                                                const TensorMap* tmK, const TensorMap* tmV) {
    // this head dim's tile shape: NW consumer warpgroups (BQ query rows), BN keys a tile
    constexpr int NW = HD == 64 ? NWG64 : NWG, BN = HD == 64 ? BKV64 : BKV, BQ = NW * 64;
    // registers (multiples of 8; the producer's and the idle warpgroups' PREG plus NW x CREG within
    // the CTA's pool, NTH x the launch count: 168 at 384 threads, 128 at 512)
    constexpr int CREG = NW == 3 ? 160 : 232, PREG = NTH == 384 ? 40 : NW == 3 ? 32 : 24;
    constexpr int TILE = BN * HD * 2;   // bytes of one k or v tile
    char* qs = smem;                    // [HD / 64][BQ][128 bytes]
    char* kv = smem + BQ * HD * 2;      // stage s: k at kv + 2 * s * TILE, v after it
    // k and v have their own barriers: k's stage is released once S completed, before P v ran
    const unsigned fullk0 = smem_addr(kv + 2 * STAGES * TILE), fullv0 = fullk0 + 8 * STAGES;
    const unsigned emptyk0 = fullv0 + 8 * STAGES, emptyv0 = emptyk0 + 8 * STAGES, qbar = emptyv0 + 8 * STAGES;
    const int bh = blockIdx.x;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BQ;   // the last query block (most causal keys) first
    const size_t head = (size_t)bh * S * D;
    const int last_row = min(S, q0 + BQ) - 1;
    const int kv_end = causal ? last_row + 1 : S;
    const int ntiles = (kv_end + BN - 1) / BN;
    const int wg = warp_uniform(threadIdx.x >> 7);

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            // the elected thread's arrive.expect_tx, or every producer's; one arrival per consumer warp
            mbar_init(fullk0 + 8 * s, tma ? 1 : 128);
            mbar_init(fullv0 + 8 * s, tma ? 1 : 128);
            mbar_init(emptyk0 + 8 * s, 4 * NW);
            mbar_init(emptyv0 + 8 * s, 4 * NW);
        }
        mbar_init(qbar, tma ? 1 : 128);
        fence_proxy_async();   // the initialised barriers, visible to the async proxy (TMA)
    }
    __syncthreads();

    if (wg == 0 || wg > NW) {   // the producer warpgroup, or one this head dim leaves idle
        setmaxnreg_dec<PREG>();
        if (wg > NW) return;
        if (tma) {
            if (threadIdx.x == 0) {
                const int row0 = bh * S;   // this head's first row in the [B * H * S, D] views
                mbar_arrive_expect_tx(qbar, BQ * HD * 2);
#pragma unroll
                for (int b = 0; b < HD / 64; ++b) tma_load_2d(qs + b * BQ * 128, tmQ, 64 * b, row0 + q0, qbar);
                int s = 0;
                unsigned ph = 0;   // parity of the stage's fill number t / STAGES
                for (int t = 0; t < ntiles; ++t) {
                    // fill t / STAGES of stage s needs empty[s]'s phase t / STAGES - 1 completed
                    char* ks = kv + 2 * s * TILE;
                    if (t >= STAGES)
                        while (!mbar_try_wait(emptyk0 + 8 * s, ph ^ 1)) {}
                    mbar_arrive_expect_tx(fullk0 + 8 * s, TILE);
#pragma unroll
                    for (int b = 0; b < HD / 64; ++b)
                        tma_load_2d(ks + b * BN * 128, tmK, 64 * b, row0 + t * BN, fullk0 + 8 * s);
                    if (t >= STAGES)
                        while (!mbar_try_wait(emptyv0 + 8 * s, ph ^ 1)) {}
                    mbar_arrive_expect_tx(fullv0 + 8 * s, TILE);
#pragma unroll
                    for (int b = 0; b < HD / 64; ++b)
                        tma_load_2d(ks + TILE + b * BN * 128, tmV, 64 * b, row0 + t * BN, fullv0 + 8 * s);
                    if (++s == STAGES) { s = 0; ph ^= 1; }
                }
            }
        } else {
            fill_tile<HD, BQ>(qs, q + head, q0, S, D, threadIdx.x);
            fence_proxy_async();   // this thread's stores, visible to wgmma (the async proxy) ...
            mbar_arrive(qbar);     // ... once every producer thread has arrived
            int s = 0;
            unsigned ph = 0;
#pragma unroll 1
            for (int t = 0; t < ntiles; ++t) {
                char* ks = kv + 2 * s * TILE;
                if (t >= STAGES)
                    while (!mbar_try_wait(emptyk0 + 8 * s, ph ^ 1)) {}
                fill_tile<HD, BN>(ks, k + head, t * BN, S, D, threadIdx.x);
                fence_proxy_async();
                mbar_arrive(fullk0 + 8 * s);
                if (t >= STAGES)
                    while (!mbar_try_wait(emptyv0 + 8 * s, ph ^ 1)) {}
                fill_tile<HD, BN>(ks + TILE, v + head, t * BN, S, D, threadIdx.x);
                fence_proxy_async();
                mbar_arrive(fullv0 + 8 * s);
                if (++s == STAGES) { s = 0; ph ^= 1; }
            }
        }
        return;
    }

    // a consumer warpgroup: query rows wg0 .. wg0 + 63
    setmaxnreg_inc<CREG>();
    const int cw = wg - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int wg0 = q0 + cw * 64;     // the warpgroup's first row
    const int w0 = wg0 + warp * 16;   // the warp's first row
    const float scale = rsqrtf((float)D) * LOG2E;   // scores in the exp2 domain
    // the tiles this warpgroup computes: with causal, the block's later tiles past its rows are only released
    const int mine = causal ? min(ntiles, (wg0 + 63) / BN + 1) : ntiles;

    float acc[HD / 2];   // o: row w0 + g + 8 * ((i >> 1) & 1), dimension 8 * (i >> 2) + 2 * t + (i & 1)
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) acc[i] = 0.f;
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};   // rows w0 + g, w0 + g + 8
    const int row[2] = {w0 + g, w0 + g + 8};

    while (!mbar_try_wait(qbar, 0)) {}   // q has landed
    int s = 0;
    unsigned ph = 0;
#if OVERLAP
    // FA3's intra-warpgroup overlap: tile `tile`'s S batch and tile - 1's P v batch are in flight
    // together, and the softmax of `tile` runs while P v does; both complete inside the iteration
    // (a batch in flight across iterations serializes the wgmma, C7515), then o is rescaled, P
    // rounded into the registers P v read (not before: C7513) and tile - 1's v released. The first
    // tile is peeled off (a wgmma under a branch serializes them too, C7520); mine >= 1 (S >= 1:
    // the grid is empty otherwise).
    unsigned p[BN / 4];
    float corr[2];
    while (!mbar_try_wait(fullk0, 0)) {}   // tile 0's k, in stage 0
    {
        float sc[BN / 2];
        wgmma_fence();
        qk_issue<HD, BN, BQ>(sc, qs + cw * 64 * 128, kv);
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) fence_reg(sc[i]);
        if (lane == 0) mbar_arrive(emptyk0);
        softmax_tile<BN>(sc, m, l, corr, 0, S, causal, w0, row, t, scale);   // o is 0: nothing to rescale
        pack_p<BN>(sc, p);
    }
    int prev = 0;
    unsigned php = 0;   // the phase parity of tile - 1's stage
    s = 1;              // STAGES >= 2: tile 1 in stage 1, phase 0
    for (int tile = 1; tile < mine; ++tile) {
        while (!mbar_try_wait(fullk0 + 8 * s, ph)) {}      // tile `tile`'s k, in stage s
        while (!mbar_try_wait(fullv0 + 8 * prev, php)) {}  // tile - 1's v
        float sc[BN / 2];
#pragma unroll
        for (int i = 0; i < HD / 2; ++i) fence_reg(acc[i]);
        wgmma_fence();
        qk_issue<HD, BN, BQ>(sc, qs + cw * 64 * 128, kv + 2 * s * TILE);
        pv_issue<HD, BN>(acc, p, kv + 2 * prev * TILE + TILE);
        wgmma_wait<1>();   // S has completed (P v may still run): k's stage may be refilled
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) fence_reg(sc[i]);
        if (lane == 0) mbar_arrive(emptyk0 + 8 * s);
        softmax_tile<BN>(sc, m, l, corr, tile * BN, S, causal, w0, row, t, scale);
        wgmma_wait<0>();   // tile - 1's P v has completed: its v stage may be refilled
#pragma unroll
        for (int i = 0; i < HD / 2; ++i) fence_reg(acc[i]);
#pragma unroll
        for (int i = 0; i < HD / 2; ++i) acc[i] *= corr[(i >> 1) & 1];
        pack_p<BN>(sc, p);
        if (lane == 0) mbar_arrive(emptyv0 + 8 * prev);
        prev = s;
        php = ph;
        if (++s == STAGES) { s = 0; ph ^= 1; }
    }
    while (!mbar_try_wait(fullv0 + 8 * prev, php)) {}   // the last computed tile's v
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) fence_reg(acc[i]);
    wgmma_fence();
    pv_issue<HD, BN>(acc, p, kv + 2 * prev * TILE + TILE);
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) fence_reg(acc[i]);
    if (lane == 0) mbar_arrive(emptyv0 + 8 * prev);
#else
    for (int tile = 0; tile < mine; ++tile) {
        while (!mbar_try_wait(fullk0 + 8 * s, ph)) {}   // tile `tile`'s k has landed in stage s
        const char* ks = kv + 2 * s * TILE;
        float sc[BN / 2];   // S = q k^T, completed
        wgmma_fence();
        qk_issue<HD, BN, BQ>(sc, qs + cw * 64 * 128, ks);
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) fence_reg(sc[i]);
#pragma unroll
        for (int i = 0; i < HD / 2; ++i) fence_reg(acc[i]);
        if (lane == 0) mbar_arrive(emptyk0 + 8 * s);   // this warp's reads of k are done
        unsigned p[BN / 4];
        float corr[2];
        softmax_tile<BN>(sc, m, l, corr, tile * BN, S, causal, w0, row, t, scale);
        pack_p<BN>(sc, p);
#pragma unroll
        for (int i = 0; i < HD / 2; ++i) acc[i] *= corr[(i >> 1) & 1];
        while (!mbar_try_wait(fullv0 + 8 * s, ph)) {}   // tile `tile`'s v
#pragma unroll
        for (int i = 0; i < HD / 2; ++i) fence_reg(acc[i]);
        wgmma_fence();
        pv_issue<HD, BN>(acc, p, ks + TILE);
        wgmma_wait<0>();   // this warp's reads of v are done ...
#pragma unroll
        for (int i = 0; i < HD / 2; ++i) fence_reg(acc[i]);
        if (lane == 0) mbar_arrive(emptyv0 + 8 * s);   // ... so it may be refilled once every warp says so
        if (++s == STAGES) { s = 0; ph ^= 1; }
    }
#endif
    for (int tile = mine; tile < ntiles; ++tile) {   // past the warpgroup's rows: waited for, released
        while (!mbar_try_wait(fullk0 + 8 * s, ph)) {}
        if (lane == 0) mbar_arrive(emptyk0 + 8 * s);
        while (!mbar_try_wait(fullv0 + 8 * s, ph)) {}
        if (lane == 0) mbar_arrive(emptyv0 + 8 * s);
        if (++s == STAGES) { s = 0; ph ^= 1; }
    }

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

extern "C" __global__ void __launch_bounds__(NTH, 1)
attention_fwd(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
              const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ o, int B, int H, int S, int D,
              int causal, const __grid_constant__ TensorMap tmQ, const __grid_constant__ TensorMap tmK,
              const __grid_constant__ TensorMap tmV) {
    extern __shared__ uint4 smem16[];
    // tiles on 1024-byte boundaries of the shared window (the 128-byte swizzle's period)
    char* raw = reinterpret_cast<char*>(smem16);
    char* smem = raw + ((1024 - (smem_addr(raw) & 1023)) & 1023);
    const unsigned short* qq = reinterpret_cast<const unsigned short*>(q);
    const unsigned short* kk = reinterpret_cast<const unsigned short*>(k);
    const unsigned short* vv = reinterpret_cast<const unsigned short*>(v);
    const unsigned long long any = reinterpret_cast<unsigned long long>(q) | reinterpret_cast<unsigned long long>(k) |
                                   reinterpret_cast<unsigned long long>(v);
    const bool tma = (D % 8 == 0) && (any & 15ull) == 0;   // the maps' 16-byte row stride and base
    if (D <= 64)
        attention_block<64>(qq, kk, vv, o, S, D, causal, smem, tma, &tmQ, &tmK, &tmV);
    else
        attention_block<128>(qq, kk, vv, o, S, D, causal, smem, tma, &tmQ, &tmK, &tmV);
}
