// Tunable layer normalisation over rows: y = (x - mean) / sqrt(var + eps) * gamma + beta,
// biased variance, float32.
//
// Design (parameters are -D defines, see tunable.json):
// - TPR threads per row (32 = one warp per row), RPB rows per block (block = TPR * RPB);
// - cached path: when cols % 4 == 0, every pointer is 16-byte aligned and the row fits in
//   TPR * VPT float4 registers, the row is read once with float4 loads and kept in registers;
//   the statistics are exact two-pass ones over the registers (mean, then the mean of the
//   squared deviations: stable for any offset), then y is written with float4 stores;
// - streaming path otherwise: one pass of per-thread Welford updates (count, mean, M2), merged
//   across the row with Chan et al.'s parallel formula, then a second pass that writes y;
// - reductions: warp shuffles, then (TPR > 32) a shared-memory step across the row's warps;
// - WR 1: rows short enough for one warp's registers (cols <= 128 * VPT) are given a warp each
//   (TPR * RPB / 32 rows per block, shuffles only, no barrier), whatever TPR is, while longer
//   rows keep TPR threads: one compiled kernel serves a tall-narrow and a wide case well.
// Launch: grid ceil_div(rows, rows per block), block TPR * RPB; rows per block is RPB, or
// TPR * RPB / 32 where WR takes the warp path (the launch expression tests the same condition).

#ifndef TPR
#define TPR 256
#endif
#ifndef RPB
#define RPB 1
#endif
#ifndef VPT
#define VPT 0
#endif
#ifndef WR
#define WR 0
#endif

#define NTHREADS (TPR * RPB)
#define NWARPS_ROW (TPR / 32)

static_assert(TPR % 32 == 0 && TPR <= 1024, "TPR must be a multiple of 32, at most 1024");
static_assert(NTHREADS <= 1024, "TPR * RPB must be at most 1024");

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum across the T threads of a row; every thread of the row gets it. All threads of the
// block must call it (it contains __syncthreads when T > 32).
template <int T>
__device__ __forceinline__ float row_sum(float v, float* scratch) {
    constexpr int NW = T / 32;
    v = warp_sum(v);
    if (NW > 1) {
        const int lane = threadIdx.x & 31, wr = (threadIdx.x % T) >> 5;
        float* sc = scratch + (threadIdx.x / T) * NW;
        if (lane == 0) sc[wr] = v;
        __syncthreads();
        v = 0.f;
#pragma unroll
        for (int w = 0; w < NW; ++w) v += sc[w];
        __syncthreads();
    }
    return v;
}

// Chan et al.: merge the statistics (nb, mb, qb) into (n, m, q); q is the sum of squared
// deviations from the mean (M2). Counts are floats (exact up to 2^24).
__device__ __forceinline__ void welford_merge(float& n, float& m, float& q, float nb, float mb, float qb) {
    const float nn = n + nb;
    if (nn == 0.f) return;
    const float d = mb - m;
    const float f = nb / nn;
    m += d * f;
    q += qb + d * d * n * f;
    n = nn;
}

template <int T>
__device__ __forceinline__ void row_welford(float& n, float& m, float& q, float* scratch) {
    constexpr int NW = T / 32, R = NTHREADS / T;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float nb = __shfl_xor_sync(0xffffffffu, n, o);
        const float mb = __shfl_xor_sync(0xffffffffu, m, o);
        const float qb = __shfl_xor_sync(0xffffffffu, q, o);
        welford_merge(n, m, q, nb, mb, qb);
    }
    if (NW > 1) {
        const int lane = threadIdx.x & 31, wr = (threadIdx.x % T) >> 5;
        const int base = (threadIdx.x / T) * NW;
        float* sn = scratch + base;
        float* sm = scratch + R * NW + base;
        float* sq = scratch + 2 * R * NW + base;
        if (lane == 0) { sn[wr] = n; sm[wr] = m; sq[wr] = q; }
        __syncthreads();
        n = sn[0]; m = sm[0]; q = sq[0];
#pragma unroll
        for (int w = 1; w < NW; ++w) welford_merge(n, m, q, sn[w], sm[w], sq[w]);
        __syncthreads();
    }
}

// The rows of one block, T threads per row (NTHREADS / T rows).
template <int T>
__device__ __forceinline__ void layernorm_rows(const float* __restrict__ x, const float* __restrict__ gamma,
                                               const float* __restrict__ beta, float* __restrict__ y, int rows,
                                               int cols, float eps, float* scratch) {
    const int t = threadIdx.x % T;
    const long long row = (long long)blockIdx.x * (NTHREADS / T) + threadIdx.x / T;
    const bool valid = row < rows;   // invalid rows still take part in the block's barriers
    const float* xr = x + (valid ? row : 0) * (long long)cols;
    float* yr = y + (valid ? row : 0) * (long long)cols;
    const unsigned long long addr_bits = reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(y) |
                                         reinterpret_cast<unsigned long long>(gamma) | reinterpret_cast<unsigned long long>(beta);
    const bool vec = (cols % 4 == 0) && ((addr_bits & 15ull) == 0);

#if VPT > 0
    if (vec && cols <= T * VPT * 4) {
        const int nv = cols >> 2;
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        float4 v[VPT];
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < VPT; ++j) {
            const int i = t + j * T;
            v[j] = (valid && i < nv) ? __ldcs(x4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
            s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
        }
        const float mean = row_sum<T>(s, scratch) / (float)cols;
        float q = 0.f;
#pragma unroll
        for (int j = 0; j < VPT; ++j) {
            if (t + j * T < nv) {
                const float a = v[j].x - mean, b = v[j].y - mean, c = v[j].z - mean, d = v[j].w - mean;
                q += (a * a + b * b) + (c * c + d * d);
            }
        }
        const float var = row_sum<T>(q, scratch) / (float)cols;
        const float rstd = rsqrtf(var + eps);
        if (valid) {
            const float4* g4 = reinterpret_cast<const float4*>(gamma);
            const float4* b4 = reinterpret_cast<const float4*>(beta);
            float4* y4 = reinterpret_cast<float4*>(yr);
#pragma unroll
            for (int j = 0; j < VPT; ++j) {
                const int i = t + j * T;
                if (i < nv) {
                    const float4 g = __ldg(g4 + i), b = __ldg(b4 + i);
                    __stcs(y4 + i, make_float4((v[j].x - mean) * rstd * g.x + b.x, (v[j].y - mean) * rstd * g.y + b.y,
                                               (v[j].z - mean) * rstd * g.z + b.z, (v[j].w - mean) * rstd * g.w + b.w));
                }
            }
        }
        return;
    }
#endif

    // streaming path: per-thread Welford, merged across the row, then a pass that writes y
    float n = 0.f, m = 0.f, q = 0.f;
    if (valid) {
        if (vec) {
            const int nv = cols >> 2;
            const float4* x4 = reinterpret_cast<const float4*>(xr);
            for (int i = t; i < nv; i += T) {
                const float4 v = __ldg(x4 + i);
                // merge the 4 values as a group: their own mean and M2, then Chan's formula
                const float gm = ((v.x + v.y) + (v.z + v.w)) * 0.25f;
                const float a = v.x - gm, b = v.y - gm, c = v.z - gm, d = v.w - gm;
                welford_merge(n, m, q, 4.f, gm, (a * a + b * b) + (c * c + d * d));
            }
        } else {
            for (int i = t; i < cols; i += T) {
                const float v = __ldg(xr + i);
                n += 1.f;
                const float d = v - m;
                m += d / n;
                q += d * (v - m);
            }
        }
    }
    row_welford<T>(n, m, q, scratch);
    if (!valid) return;
    const float rstd = rsqrtf(q / (float)cols + eps);
    if (vec) {
        const int nv = cols >> 2;
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const float4* g4 = reinterpret_cast<const float4*>(gamma);
        const float4* b4 = reinterpret_cast<const float4*>(beta);
        float4* y4 = reinterpret_cast<float4*>(yr);
        for (int i = t; i < nv; i += T) {
            const float4 v = __ldg(x4 + i), g = __ldg(g4 + i), b = __ldg(b4 + i);
            __stcs(y4 + i, make_float4((v.x - m) * rstd * g.x + b.x, (v.y - m) * rstd * g.y + b.y,
                                       (v.z - m) * rstd * g.z + b.z, (v.w - m) * rstd * g.w + b.w));
        }
    } else {
        for (int i = t; i < cols; i += T) yr[i] = (__ldg(xr + i) - m) * rstd * __ldg(gamma + i) + __ldg(beta + i);
    }
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
layernorm(const float* __restrict__ x, const float* __restrict__ gamma, const float* __restrict__ beta,
          float* __restrict__ y, int rows, int cols, float eps) {
    __shared__ float scratch[3 * RPB * NWARPS_ROW];
#if WR && VPT > 0
    if (cols <= 32 * VPT * 4) {   // a warp per row (the launch gives TPR * RPB / 32 rows per block)
        layernorm_rows<32>(x, gamma, beta, y, rows, cols, eps, scratch);
        return;
    }
#endif
    layernorm_rows<TPR>(x, gamma, beta, y, rows, cols, eps, scratch);
}
