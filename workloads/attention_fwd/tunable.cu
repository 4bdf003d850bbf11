// Tunable attention forward on tensor cores (flash-attention style), bf16 in and out:
// o[b,h,i,:] = softmax_j(q[b,h,i,:] . k[b,h,j,:] / sqrt(D)) v[b,h,j,:], causal = 1 masks j > i.
//
// Design (parameters are -D defines, see tunable.json):
// - a block takes WARPS * 16 * RPW query rows of one (b, h) (grid (ceil_div(S, WARPS * 16 * RPW),
//   B * H)); each warp owns RPW blocks of 16 rows, so every k and v fragment it reads from shared
//   memory feeds RPW mma's (RPW = 2 halves the shared-memory traffic per mma, as FlashAttention-2
//   does with 32+ rows a warp, for twice the accumulators); QREG = 1 keeps the q fragments in
//   registers for the whole key loop (RPW * D/4 more registers per thread), QREG = 0 reads them
//   from shared memory again for each tile;
// - keys and values are walked in tiles of BKV rows through two shared-memory buffers: tile t + 1
//   is copied (cp.async) while tile t is used. With causal, tiles past the block's last row are
//   not visited and scores with j > i are -inf; keys past S are -inf;
// - per tile and warp: S = q k^T (mma.sync.m16n8k16 bf16, float32 accumulators; k's rows are the
//   mma's B columns, read with ldmatrix), the running row maximum and sum (online softmax in the
//   exp2 domain, rows reduced over the 4 lanes that share them), the output accumulator rescaled,
//   then P (rounded to bf16; the accumulator layout of S is the A-fragment layout of P) times v
//   (ldmatrix.trans: v's rows are the mma's k);
// - D is a runtime scalar: the kernel is instantiated for head dims HD = 32, 64, 96 and 128 and
//   runs the smallest HD >= D, dimensions past D zero-filled (they add nothing to q . k, and are
//   not written); D > 128 is refused by the workload;
// - copies are 16 bytes where D % 8 == 0 and q, k, v are 16-byte aligned, else one element at a
//   time (same tiles, plain loads);
// - o = accumulator / sum, written as bf16 pairs where D is even and o 4-byte aligned.
// Launch: grid (ceil_div(S, WARPS * 16 * RPW), B * H), block WARPS * 32, dynamic shared memory
// 2 * (WARPS * 16 * RPW + 4 * BKV) * (ceil_div(D, 32) * 32 + 8) bytes (q, then two buffers of k and v).
// The PTX wrappers sit between the PTX-BEGIN / PTX-END lines: tests/workloads/test_new_workloads_emulated.py
// swaps that block for a CPU emulation of the same instructions.
#include <cuda_bf16.h>

#ifndef WARPS
#define WARPS 4
#endif
#ifndef BKV
#define BKV 64
#endif
#ifndef QREG
#define QREG 1
#endif
#ifndef RPW
#define RPW 1
#endif

#define BQ (WARPS * 16 * RPW)
#define NTH (WARPS * 32)
#define LOG2E 1.4426950408889634f
#define NEG_INF (-__int_as_float(0x7f800000))

static_assert(BKV % 16 == 0, "BKV must be a multiple of 16");

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
// Two floats rounded to bf16 (nearest even), lo in the low half.
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
// PTX-END

// Rows [row0, row0 + rows) of one [S][D] matrix into a [rows][HD + 8] shared tile; rows past S
// and dimensions past D are zero.
template <int HD, bool VEC>
__device__ __forceinline__ void load_rows(unsigned short* dst, const unsigned short* __restrict__ src, int row0,
                                          int rows, int S, int D) {
    constexpr int LD = HD + 8;
    if (VEC) {
        const int chunks = rows * (HD / 8);
        for (int c = threadIdx.x; c < chunks; c += NTH) {
            const int r = c / (HD / 8), d = (c % (HD / 8)) * 8;
            const bool in = row0 + r < S && d < D;   // D % 8 == 0: the chunk is in or out
            cp_async16(dst + r * LD + d, in ? src + (size_t)(row0 + r) * D + d : src, in);
        }
    } else {
        for (int c = threadIdx.x; c < rows * HD; c += NTH) {
            const int r = c / HD, d = c % HD;
            dst[r * LD + d] = (row0 + r < S && d < D) ? src[(size_t)(row0 + r) * D + d] : (unsigned short)0;
        }
    }
}

template <int HD, bool VEC>
__device__ __forceinline__ void attention_block(const unsigned short* __restrict__ q,
                                                const unsigned short* __restrict__ k,
                                                const unsigned short* __restrict__ v, __nv_bfloat16* __restrict__ o,
                                                int S, int D, int causal, unsigned short* smem) {
    constexpr int LD = HD + 8;
    constexpr int KD = HD / 16;   // k-steps of q . k
    constexpr int NS = BKV / 8;   // score tiles (8 keys each) per 16-row block
    constexpr int NO = HD / 8;    // output tiles (8 dimensions each)
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int q0 = blockIdx.x * BQ;
    const int w0 = q0 + warp * 16 * RPW;   // the warp's first row; its RPW blocks of 16 follow
    const size_t head = (size_t)blockIdx.y * S * D;
    q += head;
    k += head;
    v += head;
    unsigned short* qs = smem;
    unsigned short* kvs = smem + BQ * LD;   // buffer b: k at kvs + 2 * b * BKV * LD, v after it

    const int last_row = min(S, q0 + BQ) - 1;
    const int kv_end = causal ? last_row + 1 : S;
    const int ntiles = (kv_end + BKV - 1) / BKV;
    const float scale = rsqrtf((float)D) * LOG2E;   // scores in the exp2 domain

    load_rows<HD, VEC>(qs, q, q0, BQ, S, D);
    load_rows<HD, VEC>(kvs, k, 0, BKV, S, D);
    load_rows<HD, VEC>(kvs + BKV * LD, v, 0, BKV, S, D);
    cp_async_commit();

    unsigned qf[QREG ? RPW : 1][QREG ? KD : 1][4];
    float acc[RPW][NO][4];
#pragma unroll
    for (int r = 0; r < RPW; ++r)
#pragma unroll
        for (int n = 0; n < NO; ++n)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[r][n][c] = 0.f;
    float m[RPW][2], l[RPW][2];   // rows g and g + 8 of each of the warp's 16-row blocks
    int row[RPW][2];
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
        m[r][0] = m[r][1] = NEG_INF;
        l[r][0] = l[r][1] = 0.f;
        row[r][0] = w0 + r * 16 + g;
        row[r][1] = w0 + r * 16 + g + 8;
    }

    for (int tile = 0; tile < ntiles; ++tile) {
        const int j0 = tile * BKV;
        if (tile + 1 < ntiles) {   // the next tile into the other buffer (freed at the end of the last iteration)
            unsigned short* nb = kvs + 2 * ((tile + 1) & 1) * BKV * LD;
            load_rows<HD, VEC>(nb, k, j0 + BKV, BKV, S, D);
            load_rows<HD, VEC>(nb + BKV * LD, v, j0 + BKV, BKV, S, D);
        }
        cp_async_commit();
        cp_async_wait<1>();   // this tile (and q) landed: this thread's copies ...
        __syncthreads();      // ... and everyone's
        if (QREG && tile == 0) {
#pragma unroll
            for (int r = 0; r < RPW; ++r)
#pragma unroll
                for (int kd = 0; kd < KD; ++kd)
                    ldmatrix_x4(qf[QREG ? r : 0][QREG ? kd : 0],
                                qs + (warp * 16 * RPW + r * 16 + (lane & 15)) * LD + kd * 16 + (lane >> 4) * 8);
        }
        const unsigned short* ks = kvs + 2 * (tile & 1) * BKV * LD;
        const unsigned short* vs = ks + BKV * LD;

        // S = q k^T for the warp's RPW x 16 rows and the tile's BKV keys: each k fragment read
        // from shared memory feeds RPW row blocks
        float s[RPW][NS][4];
#pragma unroll
        for (int r = 0; r < RPW; ++r)
#pragma unroll
            for (int n = 0; n < NS; ++n)
#pragma unroll
                for (int c = 0; c < 4; ++c) s[r][n][c] = 0.f;
#pragma unroll
        for (int kd = 0; kd < KD; ++kd) {
            unsigned qa[RPW][4];
#pragma unroll
            for (int r = 0; r < RPW; ++r) {
                if (QREG) {
#pragma unroll
                    for (int c = 0; c < 4; ++c) qa[r][c] = qf[QREG ? r : 0][QREG ? kd : 0][c];
                } else {
                    ldmatrix_x4(qa[r], qs + (warp * 16 * RPW + r * 16 + (lane & 15)) * LD + kd * 16 + (lane >> 4) * 8);
                }
            }
#pragma unroll
            for (int n = 0; n < NS; n += 2) {
                unsigned b[4];
                ldmatrix_x4(b, ks + (n * 8 + (lane & 7) + ((lane >> 4) & 1) * 8) * LD + kd * 16 + ((lane >> 3) & 1) * 8);
                const unsigned b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
                for (int r = 0; r < RPW; ++r) {
                    mma_bf16_16816(s[r][n], qa[r], b0);
                    mma_bf16_16816(s[r][n + 1], qa[r], b1);
                }
            }
        }

        // mask, the tile's row maxima, the running maxima; the output accumulators rescaled
        const bool edge = j0 + BKV > S || (causal && j0 + BKV - 1 > w0);
        float mnew[RPW][2];
#pragma unroll
        for (int r = 0; r < RPW; ++r) {
            float tmax[2] = {NEG_INF, NEG_INF};
#pragma unroll
            for (int n = 0; n < NS; ++n)
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const int j = j0 + n * 8 + 2 * t + (c & 1);
                    float x = s[r][n][c] * scale;
                    if (edge && (j >= S || (causal && j > row[r][c >> 1]))) x = NEG_INF;
                    s[r][n][c] = x;
                    tmax[c >> 1] = fmaxf(tmax[c >> 1], x);
                }
            float corr[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 1));
                tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 2));
                mnew[r][h] = fmaxf(m[r][h], tmax[h]);
                corr[h] = mnew[r][h] == NEG_INF ? 1.f : exp2f(m[r][h] - mnew[r][h]);   // 0 on the first live tile
                m[r][h] = mnew[r][h];
                l[r][h] *= corr[h];
            }
            if (corr[0] != 1.f || corr[1] != 1.f) {   // once the maxima settle, most tiles change neither
#pragma unroll
                for (int n = 0; n < NO; ++n)
#pragma unroll
                    for (int c = 0; c < 4; ++c) acc[r][n][c] *= corr[c >> 1];
            }
        }

        // P = exp2(s - m), its row sums, and acc += P v, 16 keys at a time: each v fragment feeds
        // RPW row blocks
#pragma unroll
        for (int kk = 0; kk < BKV / 16; ++kk) {
            unsigned pa[RPW][4];
#pragma unroll
            for (int r = 0; r < RPW; ++r) {
                float p[2][4];
#pragma unroll
                for (int half = 0; half < 2; ++half)
#pragma unroll
                    for (int c = 0; c < 4; ++c) {
                        const float mm = mnew[r][c >> 1];
                        const float x = mm == NEG_INF ? 0.f : exp2f(s[r][2 * kk + half][c] - mm);
                        p[half][c] = x;
                        l[r][c >> 1] += x;
                    }
                // the S accumulators of keys 16kk..16kk+15 are P's A fragment for those 16 keys
                pa[r][0] = pack_bf16x2(p[0][0], p[0][1]);
                pa[r][1] = pack_bf16x2(p[0][2], p[0][3]);
                pa[r][2] = pack_bf16x2(p[1][0], p[1][1]);
                pa[r][3] = pack_bf16x2(p[1][2], p[1][3]);
            }
#pragma unroll
            for (int n = 0; n < NO; n += 2) {
                unsigned b[4];
                ldmatrix_x4_trans(b, vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + n * 8 + (lane >> 4) * 8);
                const unsigned b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
                for (int r = 0; r < RPW; ++r) {
                    mma_bf16_16816(acc[r][n], pa[r], b0);
                    mma_bf16_16816(acc[r][n + 1], pa[r], b1);
                }
            }
        }
        __syncthreads();   // everyone is done with this buffer before it is refilled
    }
    cp_async_wait<0>();

    // o = acc / l for rows < S, dimensions < D
    const bool pairs = (D % 2 == 0) && ((reinterpret_cast<unsigned long long>(o) & 3ull) == 0);
#pragma unroll
    for (int r = 0; r < RPW; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float sum = l[r][h];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            if (row[r][h] >= S) continue;
            const float inv = 1.f / sum;
            __nv_bfloat16* orow = o + head + (size_t)row[r][h] * D;
#pragma unroll
            for (int n = 0; n < NO; ++n) {
                const int d = n * 8 + 2 * t;
                const float v0 = acc[r][n][2 * h] * inv, v1 = acc[r][n][2 * h + 1] * inv;
                if (pairs) {
                    if (d < D) *reinterpret_cast<unsigned*>(orow + d) = pack_bf16x2(v0, v1);
                } else {
                    const unsigned w = pack_bf16x2(v0, v1);
                    if (d < D) reinterpret_cast<unsigned short*>(orow)[d] = (unsigned short)(w & 0xffffu);
                    if (d + 1 < D) reinterpret_cast<unsigned short*>(orow)[d + 1] = (unsigned short)(w >> 16);
                }
            }
        }
}

template <int HD>
__device__ __forceinline__ void attention_hd(const unsigned short* q, const unsigned short* k, const unsigned short* v,
                                             __nv_bfloat16* o, int S, int D, int causal, unsigned short* smem) {
    const bool vec = (D % 8 == 0) && (((reinterpret_cast<unsigned long long>(q) | reinterpret_cast<unsigned long long>(k) |
                                        reinterpret_cast<unsigned long long>(v)) & 15ull) == 0);
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
    unsigned short* smem = reinterpret_cast<unsigned short*>(smem16);
    const unsigned short* qq = reinterpret_cast<const unsigned short*>(q);
    const unsigned short* kk = reinterpret_cast<const unsigned short*>(k);
    const unsigned short* vv = reinterpret_cast<const unsigned short*>(v);
    if (D <= 32)
        attention_hd<32>(qq, kk, vv, o, S, D, causal, smem);
    else if (D <= 64)
        attention_hd<64>(qq, kk, vv, o, S, D, causal, smem);
    else if (D <= 96)
        attention_hd<96>(qq, kk, vv, o, S, D, causal, smem);
    else
        attention_hd<128>(qq, kk, vv, o, S, D, causal, smem);
}
