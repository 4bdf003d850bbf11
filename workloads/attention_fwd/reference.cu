// CUDA reference for attention_fwd: flash-style (online softmax over key tiles), float32 math on
// the CUDA cores, bf16 in and out. Not tensor cores: a correct, conventional baseline. It is also
// what checks every candidate's timed launches on their own inputs, so it is built to be cheap
// to run as well as plain (its first version, 8 threads per row with one 2-byte shared read per
// FMA, took 0.2 s a launch at 4x32x4096x128 on an H200).
//
// - each block of 128 threads takes 32 query rows of one (b, h) (grid (ceil_div(S, 32), B * H));
//   each row is handled by 4 neighbouring threads, thread t owning the float4 chunks t, t + 4, ...
//   of the row (dimensions 4c .. 4c + 3 of chunk c: 32 of DMAX = 128) of q (pre-scaled by
//   1/sqrt(D)) and of the output accumulator, so every shared-memory read is a 16-byte broadcast
//   feeding 4 FMAs;
// - keys and values are walked in tiles of 32 rows, widened to float32 in shared memory with
//   dimensions D .. DMAX - 1 zeroed (any D <= 128 takes the same path: zeros add nothing);
// - per tile: the 32 scores of each row (4 partial sums per thread, then two shuffles over the
//   row's 4 threads), the tile's maximum, then the running (max, sum, accumulator) rescaled
//   once and the tile's exp(score - max) * v added. Keys past S or (causal) past the row are
//   -inf; with causal, tiles past the block's last row are not visited;
// - o = accumulator / sum, rounded to bf16.
// Launch: grid (ceil_div(S, 32), B * H), block 128 (128 registers, 32 KiB shared: 4 blocks an SM).
#include <cuda_bf16.h>

#define BQ 32
#define TPR 4
#define BKV 32
#define DMAX 128
#define CHUNKS (DMAX / 4 / TPR)   // float4 chunks per thread
#define NTHREADS (BQ * TPR)
#define NEG_INF (-__int_as_float(0x7f800000))

extern "C" __global__ void __launch_bounds__(NTHREADS)
attention_fwd(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
              const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ o, int B, int H, int S, int D,
              int causal) {
    __shared__ __align__(16) float ks[BKV * DMAX];
    __shared__ __align__(16) float vs[BKV * DMAX];
    const int tid = threadIdx.x, t = tid % TPR;
    const int i = blockIdx.x * BQ + tid / TPR;   // this thread's query row
    const bool valid = i < S;
    const size_t head = (size_t)blockIdx.y * S * D;
    const float scale = rsqrtf((float)D);

    float qr[CHUNKS * 4], acc[CHUNKS * 4];
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int d = 4 * (t + TPR * c) + u;
            qr[4 * c + u] = (valid && d < D) ? __bfloat162float(q[head + (size_t)i * D + d]) * scale : 0.0f;
            acc[4 * c + u] = 0.0f;
        }
    }
    float m = NEG_INF, l = 0.0f;
    const int block_last = min(S - 1, (int)blockIdx.x * BQ + BQ - 1);
    const int kv_end = causal ? block_last + 1 : S;

    for (int j0 = 0; j0 < kv_end; j0 += BKV) {
        const int n = min(BKV, S - j0);
        const __nv_bfloat16* kt = k + head + (size_t)j0 * D;
        const __nv_bfloat16* vt = v + head + (size_t)j0 * D;
        __syncthreads();   // everyone is done with the previous tile
        for (int e = tid; e < BKV * DMAX; e += NTHREADS) {
            const int row = e / DMAX, d = e % DMAX;
            const bool in = row < n && d < D;
            ks[e] = in ? __bfloat162float(kt[(size_t)row * D + d]) : 0.0f;
            vs[e] = in ? __bfloat162float(vt[(size_t)row * D + d]) : 0.0f;
        }
        __syncthreads();

        float s[BKV];
        float tile_max = NEG_INF;
#pragma unroll
        for (int jj = 0; jj < BKV; ++jj) {
            const float4* kr = reinterpret_cast<const float4*>(ks + jj * DMAX) + t;
            float p0 = 0.0f, p1 = 0.0f, p2 = 0.0f, p3 = 0.0f;
#pragma unroll
            for (int c = 0; c < CHUNKS; ++c) {
                const float4 kv = kr[TPR * c];
                p0 += qr[4 * c] * kv.x;
                p1 += qr[4 * c + 1] * kv.y;
                p2 += qr[4 * c + 2] * kv.z;
                p3 += qr[4 * c + 3] * kv.w;
            }
            float part = (p0 + p1) + (p2 + p3);
            part += __shfl_xor_sync(0xffffffffu, part, 2);
            part += __shfl_xor_sync(0xffffffffu, part, 1);
            const bool live = jj < n && (!causal || j0 + jj <= i);
            s[jj] = live ? part : NEG_INF;   // rows past n are zeros: never used
            tile_max = fmaxf(tile_max, s[jj]);
        }
        const float m_new = fmaxf(m, tile_max);
        if (m_new != NEG_INF) {
            const float corr = expf(m - m_new);   // 0 on the first live tile (m = -inf)
            l *= corr;
#pragma unroll
            for (int e = 0; e < CHUNKS * 4; ++e) acc[e] *= corr;
#pragma unroll
            for (int jj = 0; jj < BKV; ++jj) {
                if (s[jj] == NEG_INF) continue;
                const float p = expf(s[jj] - m_new);
                l += p;
                const float4* vr = reinterpret_cast<const float4*>(vs + jj * DMAX) + t;
#pragma unroll
                for (int c = 0; c < CHUNKS; ++c) {
                    const float4 vv = vr[TPR * c];
                    acc[4 * c] += p * vv.x;
                    acc[4 * c + 1] += p * vv.y;
                    acc[4 * c + 2] += p * vv.z;
                    acc[4 * c + 3] += p * vv.w;
                }
            }
            m = m_new;
        }
    }
    if (!valid) return;
    const float inv = 1.0f / l;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int d = 4 * (t + TPR * c) + u;
            if (d < D) o[head + (size_t)i * D + d] = __float2bfloat16(acc[4 * c + u] * inv);
        }
    }
}
