// KernelBench level 2, problem 14: out[b, 0] = 1.5 * sum_n (x @ weight^T)[b, n] / 2, float32, for
// x[batch_size, input_size] and weight[hidden_size, input_size].
//
// The sum over n comes before the product: sum_n sum_k x[b, k] w[n, k] = sum_k x[b, k] c[k] with
// c[k] = sum_n w[n, k], so the GEMM (2 * B * H * K flops) becomes one read of the weight and one of
// x (memory-bound: the 256 MiB weight is the cost), in one kernel:
// 1. each block owns COLS consecutive columns k: its 32 x 32 threads add up the weight's column
//    sums c[k] (a warp reads 128 contiguous bytes per weight row: coalesced) in float32 per thread,
//    then in double across the 32 rows of threads;
// 2. each warp takes rows b of x and adds x[b, k] * c[k] over the block's columns, then atomically
//    adds that partial dot product (double) to acc[b], a buffer of this module's own;
// 3. the last block to finish (a counter, after a memory fence) writes out[b] = 0.75 * acc[b] and
//    sets acc and the counter back to zero for the next launch (atomicExch reads and clears at once).
// So launches must not overlap (they do not in the harness), and batch_size is at most
// MAX_BATCH (past it every output is NaN: a loud failure, not a wrong number).
// Launch: grid ceil_div(input_size, 32), block (32, 32).

#define COLS 32
#define ROWS 32
#define MAX_BATCH 65536
#define SCALE 0.75   // x / 2, summed, * 1.5

__device__ double acc[MAX_BATCH];
__device__ unsigned int blocks_done;

extern "C" __global__ void __launch_bounds__(COLS * ROWS)
p14_Gemm_Divide_Sum_Scaling(const float* __restrict__ x, const float* __restrict__ weight, float* __restrict__ out,
                            int batch_size, int input_size, int hidden_size) {
    __shared__ double col_part[ROWS][COLS + 1];
    __shared__ float colsum[COLS];
    __shared__ bool last;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int k = blockIdx.x * COLS + tx;

    if (batch_size > MAX_BATCH) {
        for (int b = blockIdx.x * COLS * ROWS + ty * COLS + tx; b < batch_size; b += gridDim.x * COLS * ROWS)
            out[b] = __int_as_float(0x7fc00000);
        return;
    }

    // 1. column sums of the weight over this block's columns
    float s = 0.f;
    if (k < input_size) {
        const float* wk = weight + k;
#pragma unroll 8
        for (int n = ty; n < hidden_size; n += ROWS) s += __ldcs(wk + (size_t)n * input_size);
    }
    col_part[ty][tx] = s;
    __syncthreads();
    if (ty == 0) {
        double c = 0.0;
#pragma unroll
        for (int r = 0; r < ROWS; ++r) c += col_part[r][tx];
        colsum[tx] = (float)c;
    }
    __syncthreads();

    // 2. partial dot products: warp ty takes rows b = ty, ty + ROWS, ...; lane tx is column k
    const float c = k < input_size ? colsum[tx] : 0.f;
    for (int b = ty; b < batch_size; b += ROWS) {
        double p = k < input_size ? (double)(__ldg(x + (size_t)b * input_size + k) * c) : 0.0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) p += __shfl_xor_sync(0xffffffffu, p, o);
        if (tx == 0) atomicAdd(acc + b, p);
    }

    // 3. the last block writes the outputs and clears the accumulators
    __threadfence();
    __syncthreads();
    if (tx == 0 && ty == 0) last = atomicAdd(&blocks_done, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int b = ty * COLS + tx; b < batch_size; b += COLS * ROWS) {
        const unsigned long long bits = atomicExch(reinterpret_cast<unsigned long long*>(acc + b), 0ull);
        out[b] = (float)(SCALE * __longlong_as_double((long long)bits));
    }
    if (tx == 0 && ty == 0) atomicExch(&blocks_done, 0u);
}
