// Tunable 256-bin histogram of a uint8 vector, int32 counts (hist zeroed before each launch).
//
// Design (parameters are -D defines, see tunable.json):
// - THREADS threads per block, GRID blocks walking the input with a grid-stride loop;
// - COPIES private sub-histograms per block in shared memory: warp w counts into copy
//   w % COPIES, so warps of one block contend less for the same bin (a one-bin input makes
//   every increment of a copy hit one address); at the end the copies are summed per bin and
//   each non-zero bin is added to the global histogram with one atomicAdd;
// - LANES 1: each copy is striped by lane, bin b of lane l at word 32 * b + l, so the 32
//   atomics of a warp always fall in 32 different banks (with one word per bin, uniform bytes
//   put ~3.5 lanes on the busiest bank, and one hot bin puts all 32 on one address); 32 KiB
//   of shared memory per copy, so COPIES is 1; the sum over lanes starts at a different lane
//   per bin, so the reduction is conflict-free too;
// - vector path (x 16-byte aligned): each thread loads VPT 16-byte vectors per iteration
//   (VPT independent loads in flight) and counts their 16 * VPT bytes; the last n % 16 bytes
//   are counted one by one; a misaligned x takes the scalar path for all of it;
// - PIPE 1: the next iteration's vectors are loaded before this one's are counted (registers
//   double-buffered), so a thread keeps its loads in flight through the counting; 0: load, count.
// Launch: grid min(ceil_div(n, THREADS * 16 * VPT), GRID), block THREADS,
// static shared memory 4 * 256 * COPIES bytes (times 32 with LANES).

#ifndef THREADS
#define THREADS 256
#endif
#ifndef VPT
#define VPT 1
#endif
#ifndef COPIES
#define COPIES 1
#endif
#ifndef GRID
#define GRID 1056
#endif
#ifndef LANES
#define LANES 0
#endif
#ifndef PIPE
#define PIPE 0
#endif

#define STRIPE (LANES ? 32 : 1)   // words per bin in a copy

static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS must be a multiple of 32, at most 1024");
static_assert(COPIES >= 1 && COPIES <= THREADS / 32, "COPIES must be between 1 and the warps per block");
static_assert(LANES == 0 || COPIES == 1, "a lane-striped copy takes 32 KiB of shared memory: COPIES must be 1");

// one increment of bin b in this thread's view of its copy (bins: the copy, offset by the lane
// with LANES)
__device__ __forceinline__ void count(int* bins, unsigned b) { atomicAdd(&bins[b * STRIPE], 1); }

__device__ __forceinline__ void count_word(int* bins, unsigned w) {
    count(bins, w & 0xffu);
    count(bins, (w >> 8) & 0xffu);
    count(bins, (w >> 16) & 0xffu);
    count(bins, w >> 24);
}

// VPT vectors of this thread's iteration at `base` (zeros past the end, which count_vectors skips)
__device__ __forceinline__ void load_vectors(uint4 (&v)[VPT], const uint4* __restrict__ x16, size_t base, size_t nvec) {
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
        const size_t i = base + (size_t)j * THREADS;
        v[j] = i < nvec ? __ldcs(x16 + i) : make_uint4(0u, 0u, 0u, 0u);
    }
}

__device__ __forceinline__ void count_vectors(int* bins, const uint4 (&v)[VPT], size_t base, size_t nvec) {
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
        if (base + (size_t)j * THREADS < nvec) {
            count_word(bins, v[j].x);
            count_word(bins, v[j].y);
            count_word(bins, v[j].z);
            count_word(bins, v[j].w);
        }
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
histogram(const unsigned char* __restrict__ x, int* __restrict__ hist, int n) {
    __shared__ int smem[COPIES * 256 * STRIPE];
    for (int i = threadIdx.x; i < COPIES * 256 * STRIPE; i += THREADS) smem[i] = 0;
    __syncthreads();
    int* bins = smem + ((threadIdx.x >> 5) % COPIES) * 256 * STRIPE + (LANES ? (threadIdx.x & 31) : 0);

    size_t done = 0;   // bytes counted by the vector loop
    if ((reinterpret_cast<unsigned long long>(x) & 15ull) == 0) {
        const size_t nvec = (size_t)n / 16;
        const uint4* x16 = reinterpret_cast<const uint4*>(x);
        const size_t step = (size_t)gridDim.x * THREADS * VPT;
        size_t base = (size_t)blockIdx.x * THREADS * VPT + threadIdx.x;
#if PIPE
        uint4 v[VPT];
        load_vectors(v, x16, base, nvec);
        for (; base < nvec; base += step) {
            uint4 next[VPT];
            load_vectors(next, x16, base + step, nvec);   // in flight while v is counted
            count_vectors(bins, v, base, nvec);
#pragma unroll
            for (int j = 0; j < VPT; ++j) v[j] = next[j];
        }
#else
        for (; base < nvec; base += step) {
            uint4 v[VPT];
            load_vectors(v, x16, base, nvec);
            count_vectors(bins, v, base, nvec);
        }
#endif
        done = nvec * 16;
    }
    const size_t stride = (size_t)gridDim.x * THREADS;
    for (size_t i = done + (size_t)blockIdx.x * THREADS + threadIdx.x; i < (size_t)n; i += stride)
        count(bins, __ldg(x + i));
    __syncthreads();

    for (int b = threadIdx.x; b < 256; b += THREADS) {
        int c = 0;
#pragma unroll
        for (int k = 0; k < COPIES; ++k)
#pragma unroll
            for (int j = 0; j < STRIPE; ++j) c += smem[(k * 256 + b) * STRIPE + ((j + b) & (STRIPE - 1))];
        if (c != 0) atomicAdd(&hist[b], c);
    }
}
