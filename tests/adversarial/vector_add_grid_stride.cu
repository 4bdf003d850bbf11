// A correct kernel shaped unlike the starting one: a persistent grid of 4 blocks per SM (the
// launch uses SM_COUNT) and a grid-stride loop with float4 loads where the pointers allow. It
// must stay ok on every case, odd sizes and single elements included.
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    bool aligned = ((size_t)a % 16 == 0) && ((size_t)b % 16 == 0) && ((size_t)c % 16 == 0);
    size_t vec = aligned ? (size_t)n / 4 : 0;
    for (size_t i = first; i < vec; i += stride) {
        float4 x = reinterpret_cast<const float4*>(a)[i];
        float4 y = reinterpret_cast<const float4*>(b)[i];
        reinterpret_cast<float4*>(c)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
    for (size_t i = vec * 4 + first; i < (size_t)n; i += stride) c[i] = a[i] + b[i];
}
