// KernelBench level 1, problem 36: RMS normalization over the feature dimension (dim 1) of
// x[batch_size, features, dim1, dim2]: out = x / sqrt(mean_f(x^2) + 1e-5), float32.
//
// One thread per (sample, spatial position): it reads the position's `features` values (stride
// dim1 * dim2; consecutive threads read consecutive positions, so each read is coalesced), sums
// their squares in float32 in feature order, and writes x / rms in the module's arithmetic (a true
// division by sqrtf(mean + eps)). Up to MAX_REG features are kept in registers (a fully unrolled
// loop: compile-time indices), so x is read once; wider problems read it a second time.
// 64-bit offsets: the performance case has 1.9e9 elements.
// Launch: grid (ceil_div(dim1 * dim2, 256), batch_size), block 256.

#define EPS 1e-5f
#define MAX_REG 64

extern "C" __global__ void __launch_bounds__(256)
p36_RMSNorm(const float* __restrict__ x, float* __restrict__ out, int batch_size, int features, int dim1, int dim2) {
    const size_t plane = (size_t)dim1 * dim2;
    const size_t s = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= plane || blockIdx.y >= (unsigned)batch_size) return;
    const size_t base = (size_t)blockIdx.y * features * plane + s;
    const float* xp = x + base;
    float* op = out + base;
    if (features <= MAX_REG) {
        float v[MAX_REG];
        float sum = 0.f;
#pragma unroll
        for (int f = 0; f < MAX_REG; ++f) {
            v[f] = f < features ? __ldcs(xp + f * plane) : 0.f;
        }
#pragma unroll
        for (int f = 0; f < MAX_REG; ++f) sum = fmaf(v[f], v[f], sum);   // zeros past `features` add nothing
        const float rms = sqrtf(sum / features + EPS);
#pragma unroll
        for (int f = 0; f < MAX_REG; ++f)
            if (f < features) __stcs(op + f * plane, v[f] / rms);
    } else {
        float sum = 0.f;
        for (int f = 0; f < features; ++f) {
            const float v = xp[f * plane];
            sum = fmaf(v, v, sum);
        }
        const float rms = sqrtf(sum / features + EPS);
        for (int f = 0; f < features; ++f) op[f * plane] = xp[f * plane] / rms;
    }
}
