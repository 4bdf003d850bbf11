// CUDA reference for attention_fwd: flash-style (online softmax over key tiles), float32 math on
// the CUDA cores, bf16 in and out. Not tensor cores: a correct, conventional baseline.
//
// - each block of 128 threads takes 16 query rows of one (b, h) (grid (ceil_div(S, 16), B * H));
//   each row is handled by 8 neighbouring threads, thread t owning the dimensions t, t + 8, ...
//   (at most 16 of D <= 128) of q (pre-scaled by 1/sqrt(D)) and of the output accumulator;
// - keys and values are walked in tiles of 32 rows, copied to shared memory as bf16 (16-byte
//   copies where D % 8 == 0 and k, v are 16-byte aligned): a tile of k and v is contiguous;
// - per tile: the 32 scores of each row (partial dot products reduced over the row's 8 threads
//   with shuffles), the tile's maximum, then the running (max, sum, accumulator) rescaled once
//   and the tile's exp(score - max) * v added. Keys past S or (causal) past the row are -inf;
//   with causal, tiles past the block's last row are not visited;
// - o = accumulator / sum, rounded to bf16.
// Launch: grid (ceil_div(S, 16), B * H), block 128.
#include <cuda_bf16.h>

#define BQ 16     // query rows per block
#define TPR 8     // threads per query row
#define BKV 32    // keys per tile
#define DMAX 128
#define EPT (DMAX / TPR)
#define NTHREADS (BQ * TPR)
#define NEG_INF (-__int_as_float(0x7f800000))

extern "C" __global__ void __launch_bounds__(NTHREADS)
attention_fwd(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
              const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ o, int B, int H, int S, int D,
              int causal) {
    __shared__ __align__(16) __nv_bfloat16 ks[BKV * DMAX];
    __shared__ __align__(16) __nv_bfloat16 vs[BKV * DMAX];
    const int tid = threadIdx.x, t = tid % TPR;
    const int i = blockIdx.x * BQ + tid / TPR;   // this thread's query row
    const bool valid = i < S;
    const size_t head = (size_t)blockIdx.y * S * D;
    const float scale = rsqrtf((float)D);
    const bool vec = (D % 8 == 0) &&
                     (((reinterpret_cast<unsigned long long>(k) | reinterpret_cast<unsigned long long>(v)) & 15ull) == 0);

    float qr[EPT], acc[EPT];
#pragma unroll
    for (int e = 0; e < EPT; ++e) {
        const int d = t + e * TPR;
        qr[e] = (valid && d < D) ? __bfloat162float(q[head + (size_t)i * D + d]) * scale : 0.0f;
        acc[e] = 0.0f;
    }
    float m = NEG_INF, l = 0.0f;
    const int block_last = min(S - 1, (int)blockIdx.x * BQ + BQ - 1);
    const int kv_end = causal ? block_last + 1 : S;

    for (int j0 = 0; j0 < kv_end; j0 += BKV) {
        const int n = min(BKV, S - j0);
        const __nv_bfloat16* kt = k + head + (size_t)j0 * D;
        const __nv_bfloat16* vt = v + head + (size_t)j0 * D;
        __syncthreads();   // everyone is done with the previous tile
        if (vec) {
            for (int c = tid; c < n * D / 8; c += NTHREADS) {
                reinterpret_cast<uint4*>(ks)[c] = __ldg(reinterpret_cast<const uint4*>(kt) + c);
                reinterpret_cast<uint4*>(vs)[c] = __ldg(reinterpret_cast<const uint4*>(vt) + c);
            }
        } else {
            for (int c = tid; c < n * D; c += NTHREADS) {
                ks[c] = kt[c];
                vs[c] = vt[c];
            }
        }
        __syncthreads();

        float s[BKV];
        float tile_max = NEG_INF;
#pragma unroll
        for (int jj = 0; jj < BKV; ++jj) {
            float part = 0.0f;
#pragma unroll
            for (int e = 0; e < EPT; ++e) {
                const int d = t + e * TPR;
                if (d < D) part += qr[e] * __bfloat162float(ks[jj * D + d]);
            }
            part += __shfl_xor_sync(0xffffffffu, part, 4);
            part += __shfl_xor_sync(0xffffffffu, part, 2);
            part += __shfl_xor_sync(0xffffffffu, part, 1);
            const bool live = jj < n && (!causal || j0 + jj <= i);
            s[jj] = live ? part : NEG_INF;   // slots past n hold stale shared memory: never used
            tile_max = fmaxf(tile_max, s[jj]);
        }
        const float m_new = fmaxf(m, tile_max);
        if (m_new != NEG_INF) {
            const float corr = expf(m - m_new);   // 0 on the first live tile (m = -inf)
            l *= corr;
#pragma unroll
            for (int e = 0; e < EPT; ++e) acc[e] *= corr;
#pragma unroll
            for (int jj = 0; jj < BKV; ++jj) {
                if (s[jj] == NEG_INF) continue;
                const float p = expf(s[jj] - m_new);
                l += p;
#pragma unroll
                for (int e = 0; e < EPT; ++e) {
                    const int d = t + e * TPR;
                    if (d < D) acc[e] += p * __bfloat162float(vs[jj * D + d]);
                }
            }
            m = m_new;
        }
    }
    if (!valid) return;
    const float inv = 1.0f / l;
#pragma unroll
    for (int e = 0; e < EPT; ++e) {
        const int d = t + e * TPR;
        if (d < D) o[head + (size_t)i * D + d] = __float2bfloat16(acc[e] * inv);
    }
}
