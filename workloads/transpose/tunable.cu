// Tunable out-of-place transpose: out[c, r] = in[r, c], in[rows, cols], out[cols, rows].
//
// Design (parameters are -D defines, see tunable.json): each block moves a TILE x TILE tile
// through shared memory padded by one float per row (no bank conflicts on the transposed
// read). The block has TILE x ROWS threads; each thread handles TILE / ROWS elements, read
// along a row of `in` (coalesced) and written along a row of `out` (coalesced). Edge tiles are
// guarded element by element, so any rows and cols work. STCS = 1 writes interior tiles with
// streaming stores (evict-first: the output is not read again); STCS = 0 with plain stores,
// which keep a partly written 32-byte sector in L2 until the neighbouring tile fills the rest:
// where rows is not a multiple of 8 every output row starts mid-sector, and a sector evicted
// half written costs DRAM a read-modify-write. ALIGN = A (8, 16 or 32 floats) removes partial
// writes instead: where rows % A != 0, each output row is written in TILE-long windows shifted to
// start on a 4A-byte boundary (8: 32-byte sectors; 16: 64 bytes, the pair of sectors DRAM moves
// at once; 32: 128-byte lines); the block stages A more input rows, and the grid has one more
// tile row. ALIGN = 0: no shifted windows. MINB: the blocks per SM the registers must leave room for
// (__launch_bounds__' second argument): a transpose waits on its loads, and more resident blocks keep
// more of them in flight (Nsight Compute on the H200: registers held occupancy at 70% with MINB 1).
// Interior tiles of the ALIGN path (every staged row and every window inside the matrix) skip the
// per-element bounds checks, as the unshifted path's do. VEC = 1: the ALIGN path's interior tiles stage their
// rows with 16-byte loads from the 16-byte boundary before each row's first column, scattered into the tile
// shifted (ko_stage_vec), where the input is 16-byte aligned: a misaligned row's warp requests then span 512
// bytes, not 128 bytes split over two lines.
// Launch: grid (ceil_div(cols, TILE), ceil_div(rows + max(ALIGN - 1, 0), TILE)), block (TILE, ROWS).

#ifndef TILE
#define TILE 32
#endif
#ifndef ROWS
#define ROWS 8
#endif
#ifndef STCS
#define STCS 1
#endif
#ifndef ALIGN
#define ALIGN 0
#endif
#ifndef MINB
#define MINB 1
#endif
#ifndef VEC
#define VEC 0
#endif

static_assert(TILE % ROWS == 0, "ROWS must divide TILE");
static_assert(ALIGN == 0 || ALIGN == 8 || ALIGN == 16 || ALIGN == 32, "ALIGN must be 0, 8, 16 or 32 (floats)");
static_assert(TILE * ROWS <= 1024, "TILE * ROWS must be at most 1024");

// the staged rows: TILE + ALIGN of them
#define KO_STAGED (TILE + ALIGN)

__device__ __forceinline__ void ko_store(float* dst, float v) {
    if (STCS)
        __stcs(dst, v);
    else
        *dst = v;
}

#if VEC
// Stages rows first .. first + KO_STAGED - 1, columns c0 .. c0 + TILE - 1 of `in` (16-byte aligned) into
// tile[0 ..][0 .. TILE) with 16-byte loads: a row's TILE floats start m = its offset % 4 floats past a
// 16-byte boundary, so TILE / 4 + 1 aligned float4 from that boundary cover them (the last only when m > 0;
// it reads at most 3 floats past the tile, inside the next row), each scattered into the tile shifted by
// m. A warp's request then spans 512 bytes instead of 128 (fewer requests, and a row's partly used sectors
// are 2 in 9 instead of 2 in 8 split over two requests). Every thread of the block takes items in turn.
__device__ __forceinline__ void ko_stage_vec(float (*tile)[TILE + 1], const float* __restrict__ in, int first,
                                             int c0, int cols) {
    constexpr int Q = TILE / 4 + 1, ITEMS = KO_STAGED * Q, THREADS = TILE * ROWS;
    const int tid = threadIdx.y * TILE + threadIdx.x;
#pragma unroll
    for (int i0 = 0; i0 < ITEMS; i0 += THREADS) {
        const int i = i0 + tid;
        if (ITEMS % THREADS != 0 && i >= ITEMS) break;
        const int j = i / Q, k = i - j * Q;
        const size_t a = (size_t)(first + j) * cols + c0;
        const int m = (int)(a & 3);
        if (k == Q - 1 && m == 0) continue;
        const float4 v = __ldg(reinterpret_cast<const float4*>(in + (a - m)) + k);
        const int col = 4 * k - m;  // where v.x goes: -3 .. TILE - 1
        if (col >= 0) tile[j][col] = v.x;
        if (col + 1 >= 0 && col + 1 < TILE) tile[j][col + 1] = v.y;
        if (col + 2 >= 0 && col + 2 < TILE) tile[j][col + 2] = v.z;
        if (col + 3 < TILE) tile[j][col + 3] = v.w;
    }
}
#endif

extern "C" __global__ void __launch_bounds__(TILE * ROWS, MINB)
transpose(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[KO_STAGED][TILE + 1];
    const int c0 = blockIdx.x * TILE, r0 = blockIdx.y * TILE;
    const int tx = threadIdx.x, ty = threadIdx.y;
#if ALIGN
    if (rows & (ALIGN - 1)) {
        // Output rows start off the boundary. Output row oc is written in windows
        // [r0 - s, r0 - s + TILE) with s = (oc * rows) % ALIGN, which start on 4 * ALIGN-byte
        // boundaries and, the same s for every tile of the row, partition it (the grid has one more
        // tile row for the last window); the block stages input rows r0 - ALIGN .. r0 + TILE - 1 so
        // every window's elements are at hand. s from the low bits alone: (oc % A) * (rows % A) % A.
        const int rows_low = rows & (ALIGN - 1);
        if (r0 >= ALIGN && r0 + TILE <= rows && c0 + TILE <= cols) {
            // interior: every staged row and every window inside the matrix, no checks
#if VEC
            if ((reinterpret_cast<unsigned long long>(in) & 15) == 0 && r0 + TILE < rows) {
                ko_stage_vec(tile, in, r0 - ALIGN, c0, cols);  // the last staged row is not the matrix's
            } else
#endif
            {
                const float* src = in + (size_t)(r0 - ALIGN + ty) * cols + c0 + tx;
#pragma unroll
                for (int j = ty; j < KO_STAGED; j += ROWS, src += (size_t)ROWS * cols) tile[j][tx] = __ldg(src);
            }
            __syncthreads();
#pragma unroll
            for (int j = 0; j < TILE; j += ROWS) {
                const int oc = c0 + ty + j;
                const int s = ((oc & (ALIGN - 1)) * rows_low) & (ALIGN - 1);
                ko_store(out + (size_t)oc * rows + (r0 - s + tx), tile[ALIGN - s + tx][ty + j]);
            }
            return;
        }
#pragma unroll
        for (int j = ty; j < KO_STAGED; j += ROWS) {
            const int r = r0 - ALIGN + j, c = c0 + tx;
            tile[j][tx] = (r >= 0 && r < rows && c < cols) ? __ldg(in + (size_t)r * cols + c) : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < TILE; j += ROWS) {
            const int oc = c0 + ty + j;
            const int s = ((oc & (ALIGN - 1)) * rows_low) & (ALIGN - 1);
            const int r = r0 - s + tx;
            if (oc < cols && r >= 0 && r < rows) ko_store(out + (size_t)oc * rows + r, tile[ALIGN - s + tx][ty + j]);
        }
        return;
    }
#endif

    const int c = c0 + tx;
    if (r0 + TILE <= rows && c0 + TILE <= cols) {  // interior tile: no checks
#pragma unroll
        for (int j = 0; j < TILE; j += ROWS) tile[ty + j][tx] = __ldg(in + (size_t)(r0 + ty + j) * cols + c);
        __syncthreads();
        const int r = r0 + tx;
#pragma unroll
        for (int j = 0; j < TILE; j += ROWS) ko_store(out + (size_t)(c0 + ty + j) * rows + r, tile[tx][ty + j]);
        return;
    }
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS) {
        const int r = r0 + ty + j;
        if (r < rows && c < cols) tile[ty + j][tx] = __ldg(in + (size_t)r * cols + c);
    }
    __syncthreads();
    const int r = r0 + tx;
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS) {
        const int oc = c0 + ty + j;
        if (oc < cols && r < rows) out[(size_t)oc * rows + r] = tile[tx][ty + j];
    }
}
