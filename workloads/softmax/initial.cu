// Starting point for softmax: one thread per row, three sequential passes over the row
// (max, sum of exponentials, normalise). Neighbouring threads read different rows, so
// nothing is coalesced, and long rows leave most of the GPU idle.
extern "C" __global__ void softmax(const float* x, float* y, int rows, int cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;

    float m = -__int_as_float(0x7f800000);   // -infinity
    for (int c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);

    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += expf(xr[c] - m);

    for (int c = 0; c < cols; ++c) yr[c] = expf(xr[c] - m) / s;
}
