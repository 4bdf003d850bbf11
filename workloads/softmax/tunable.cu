// Tunable row-wise softmax: y[r, c] = exp(x[r, c] - max_r) / sum_c' exp(x[r, c'] - max_r).
//
// Design (parameters are -D defines, see tunable.json):
// - TPR threads per row (32 = one warp per row), RPB rows per block (block = TPR * RPB threads);
// - cached path: when cols % 4 == 0, the pointers are 16-byte aligned and the row fits in
//   TPR * VPT float4 registers, the row is read once with float4 loads and kept in registers:
//   exact max, sum of exponentials, then y is written (one read, one write);
// - streaming path otherwise (long or odd rows): one pass computing the running maximum and
//   the sum of exponentials rescaled on the fly (online softmax, Milakov & Gimelshein 2018),
//   float4 loads where aligned and scalar loads otherwise, then a second pass writing y;
//   with SMEM = 1 the first pass also stores the row in dynamic shared memory when the block's
//   RPB rows fit (<= 220 KiB), and the second pass reads it from there: one DRAM read of x;
// - reductions: warp shuffles, then (TPR > 32) a shared-memory step across the row's warps.
// Launch: grid ceil_div(rows, RPB), block TPR * RPB.

#ifndef TPR
#define TPR 256
#endif
#ifndef RPB
#define RPB 1
#endif
#ifndef VPT
#define VPT 0
#endif
#ifndef SMEM
#define SMEM 0
#endif
// dynamic shared memory a block may use for its rows (tunable.json's shared_bytes uses the same number)
#define SMEM_LIMIT 225280

#define NTHREADS (TPR * RPB)
#define NWARPS_ROW (TPR / 32)

static_assert(TPR % 32 == 0 && TPR <= 1024, "TPR must be a multiple of 32, at most 1024");
static_assert(NTHREADS <= 1024, "TPR * RPB must be at most 1024");

#define NEG_INF (-__int_as_float(0x7f800000))

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Merge the running (max, sum) pair (m2, s2) into (m, s); an empty pair has m = -inf, s = 0.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    const float mn = fmaxf(m, m2);
    if (mn == NEG_INF) return;
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
}

__device__ __forceinline__ void warp_merge(float& m, float& s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        merge(m, s, m2, s2);
    }
}

// Row-wide reductions across the TPR threads of a row (every thread of the row gets the
// result). All threads of the block must call them (they contain __syncthreads when TPR > 32).
__device__ __forceinline__ float row_max(float v, float* scratch) {
    v = warp_max(v);
    if (NWARPS_ROW > 1) {
        const int lane = threadIdx.x & 31, wr = (threadIdx.x % TPR) >> 5;
        float* sc = scratch + (threadIdx.x / TPR) * NWARPS_ROW;
        if (lane == 0) sc[wr] = v;
        __syncthreads();
        v = sc[0];
#pragma unroll
        for (int w = 1; w < NWARPS_ROW; ++w) v = fmaxf(v, sc[w]);
        __syncthreads();
    }
    return v;
}

__device__ __forceinline__ float row_sum(float v, float* scratch) {
    v = warp_sum(v);
    if (NWARPS_ROW > 1) {
        const int lane = threadIdx.x & 31, wr = (threadIdx.x % TPR) >> 5;
        float* sc = scratch + (threadIdx.x / TPR) * NWARPS_ROW;
        if (lane == 0) sc[wr] = v;
        __syncthreads();
        v = 0.f;
#pragma unroll
        for (int w = 0; w < NWARPS_ROW; ++w) v += sc[w];
        __syncthreads();
    }
    return v;
}

__device__ __forceinline__ void row_merge(float& m, float& s, float* scratch) {
    warp_merge(m, s);
    if (NWARPS_ROW > 1) {
        const int lane = threadIdx.x & 31, wr = (threadIdx.x % TPR) >> 5;
        float* sm = scratch + (threadIdx.x / TPR) * NWARPS_ROW;
        float* ss = scratch + RPB * NWARPS_ROW + (threadIdx.x / TPR) * NWARPS_ROW;
        if (lane == 0) { sm[wr] = m; ss[wr] = s; }
        __syncthreads();
        m = sm[0];
        s = ss[0];
#pragma unroll
        for (int w = 1; w < NWARPS_ROW; ++w) merge(m, s, sm[w], ss[w]);
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
softmax(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    __shared__ float scratch[2 * RPB * NWARPS_ROW];
    const int t = threadIdx.x % TPR;
    const long long row = (long long)blockIdx.x * RPB + threadIdx.x / TPR;
    const bool valid = row < rows;   // invalid rows still take part in the block's barriers
    const float* xr = x + (valid ? row : 0) * (long long)cols;
    float* yr = y + (valid ? row : 0) * (long long)cols;
    const bool vec = (cols % 4 == 0) &&
                     (((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(y)) & 15ull) == 0);

#if VPT > 0
    if (vec && cols <= TPR * VPT * 4) {
        const int nv = cols >> 2;
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        float4 v[VPT];
        float m = NEG_INF;
#pragma unroll
        for (int j = 0; j < VPT; ++j) {
            const int i = t + j * TPR;
            if (valid && i < nv) {
                v[j] = __ldcs(x4 + i);
                m = fmaxf(m, fmaxf(fmaxf(v[j].x, v[j].y), fmaxf(v[j].z, v[j].w)));
            } else {
                v[j] = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
            }
        }
        m = row_max(m, scratch);
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < VPT; ++j) {
            if (t + j * TPR < nv) {   // padding slots would give exp(-inf - m) = 0 anyway
                v[j].x = expf(v[j].x - m); v[j].y = expf(v[j].y - m);
                v[j].z = expf(v[j].z - m); v[j].w = expf(v[j].w - m);
                s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
            }
        }
        s = row_sum(s, scratch);
        const float inv = 1.0f / s;
        if (valid) {
            float4* y4 = reinterpret_cast<float4*>(yr);
#pragma unroll
            for (int j = 0; j < VPT; ++j) {
                const int i = t + j * TPR;
                if (i < nv) __stcs(y4 + i, make_float4(v[j].x * inv, v[j].y * inv, v[j].z * inv, v[j].w * inv));
            }
        }
        return;
    }
#endif

    // streaming path: online (max, sum), then a second pass that writes y. With SMEM, where the
    // launch gives the block's rows in dynamic shared memory (SMEM_LIMIT: the same rule as
    // tunable.json's shared_bytes), the first pass keeps what it read there and the second reads
    // it back, so x is read from DRAM once; each thread reads back only the float4s it stored.
#if SMEM
    extern __shared__ float4 rowbuf[];
    const bool keep = vec && (long long)RPB * cols * 4 <= SMEM_LIMIT;
    float4* rb = rowbuf + (long long)(threadIdx.x / TPR) * (cols >> 2);
#else
    const bool keep = false;
    float4* rb = nullptr;
#endif
    float m = NEG_INF, s = 0.f;
    if (valid) {
        if (vec) {
            const int nv = cols >> 2;
            const float4* x4 = reinterpret_cast<const float4*>(xr);
#pragma unroll 4
            for (int i = t; i < nv; i += TPR) {
                const float4 v = __ldg(x4 + i);
                if (keep) rb[i] = v;
                const float lm = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
                const float mn = fmaxf(m, lm);
                s = s * expf(m - mn) + ((expf(v.x - mn) + expf(v.y - mn)) + (expf(v.z - mn) + expf(v.w - mn)));
                m = mn;
            }
        } else {
            for (int i = t; i < cols; i += TPR) {
                const float v = __ldg(xr + i);
                if (v > m) {
                    s = s * expf(m - v) + 1.0f;
                    m = v;
                } else {
                    s += expf(v - m);
                }
            }
        }
    }
    row_merge(m, s, scratch);
    if (!valid) return;
    const float inv = 1.0f / s;
    if (vec) {
        const int nv = cols >> 2;
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        float4* y4 = reinterpret_cast<float4*>(yr);
        for (int i = t; i < nv; i += TPR) {
            const float4 v = keep ? rb[i] : __ldg(x4 + i);
            __stcs(y4 + i, make_float4(expf(v.x - m) * inv, expf(v.y - m) * inv,
                                       expf(v.z - m) * inv, expf(v.w - m) * inv));
        }
    } else {
        for (int i = t; i < cols; i += TPR) yr[i] = expf(__ldg(xr + i) - m) * inv;
    }
}
