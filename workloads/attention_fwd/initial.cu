// Starting point for attention_fwd: one thread per query row, three passes over the keys
// (maximum score, then the sum of exp(score - max) with the weighted sum of v rows accumulated
// in a float32 array of D <= 128 elements), then o = acc / sum. No shared memory, no tensor
// cores; the k and v rows a warp reads are the same for all its threads (broadcasts).
#include <cuda_bf16.h>

extern "C" __global__ void attention_fwd(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                         __nv_bfloat16* o, int B, int H, int S, int D, int causal) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= S) return;
    const size_t head = (size_t)blockIdx.y * S * D;   // grid.y = B * H
    const __nv_bfloat16* qi = q + head + (size_t)i * D;
    const float scale = rsqrtf((float)D);
    const int last = causal ? i : S - 1;

    float m = -__int_as_float(0x7f800000);
    for (int j = 0; j <= last; ++j) {
        const __nv_bfloat16* kj = k + head + (size_t)j * D;
        float s = 0.0f;
        for (int d = 0; d < D; ++d) s += __bfloat162float(qi[d]) * __bfloat162float(kj[d]);
        m = fmaxf(m, s * scale);
    }
    float acc[128];
    for (int d = 0; d < D; ++d) acc[d] = 0.0f;
    float l = 0.0f;
    for (int j = 0; j <= last; ++j) {
        const __nv_bfloat16* kj = k + head + (size_t)j * D;
        const __nv_bfloat16* vj = v + head + (size_t)j * D;
        float s = 0.0f;
        for (int d = 0; d < D; ++d) s += __bfloat162float(qi[d]) * __bfloat162float(kj[d]);
        const float p = expf(s * scale - m);
        l += p;
        for (int d = 0; d < D; ++d) acc[d] += p * __bfloat162float(vj[d]);
    }
    __nv_bfloat16* oi = o + head + (size_t)i * D;
    for (int d = 0; d < D; ++d) oi[d] = __float2bfloat16(acc[d] / l);
}
