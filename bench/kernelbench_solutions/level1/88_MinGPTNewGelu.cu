// KernelBench level 1, problem 88: minGPT's tanh GELU, out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// float32, x of batch_size x dim elements.
//
// Memory-bound: a grid-stride loop of 16-byte loads and stores (where x and out are 16-byte
// aligned) over the flat array, the last n % 4 elements one by one; 64-bit indices. The
// arithmetic is the module's, in float32 and in its order (x^3 as x * x * x, tanhf: no fast-math
// approximations).
// Launch: grid min(ceil_div(n, 1024), SM_COUNT * 32), block 256.

__device__ __forceinline__ float new_gelu(float v) {
    const float k = 0.7978845608028654f;   // sqrt(2 / pi)
    return 0.5f * v * (1.f + tanhf(k * (v + 0.044715f * (v * v * v))));
}

extern "C" __global__ void __launch_bounds__(256)
p88_MinGPTNewGelu(const float* __restrict__ x, float* __restrict__ out, int batch_size, int dim) {
    const size_t n = (size_t)batch_size * (size_t)dim;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t done = 0;
    if (((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(out)) & 15ull) == 0) {
        const size_t n4 = n / 4;
        const float4* x4 = reinterpret_cast<const float4*>(x);
        float4* o4 = reinterpret_cast<float4*>(out);
        for (size_t i = tid; i < n4; i += stride) {
            float4 v = __ldcs(x4 + i);
            v.x = new_gelu(v.x); v.y = new_gelu(v.y); v.z = new_gelu(v.z); v.w = new_gelu(v.w);
            __stcs(o4 + i, v);
        }
        done = n4 * 4;
    }
    for (size_t i = done + tid; i < n; i += stride) out[i] = new_gelu(x[i]);
}
