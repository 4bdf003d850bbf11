// Starting point for transpose: one thread per element, out[c, r] = in[r, c].
// Reads are coalesced along a row of `in`; writes stride through `out` by `rows` floats.
extern "C" __global__ void transpose(const float* in, float* out, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) {
        out[(size_t)c * rows + r] = in[(size_t)r * cols + c];
    }
}
