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
// half written costs DRAM a read-modify-write. ALIGN = 1 removes those partial sectors instead:
// where rows % 8 != 0, each output row is written in TILE-long windows shifted to start on a
// 32-byte boundary (the block stages 8 more input rows; the grid has one more tile row).
// Launch: grid (ceil_div(cols, TILE), ceil_div(rows + 7 * ALIGN, TILE)), block (TILE, ROWS).

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

static_assert(TILE % ROWS == 0, "ROWS must divide TILE");
static_assert(TILE * ROWS <= 1024, "TILE * ROWS must be at most 1024");

extern "C" __global__ void __launch_bounds__(TILE * ROWS, 1)
transpose(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[TILE + (ALIGN ? 8 : 0)][TILE + 1];
    const int c0 = blockIdx.x * TILE, r0 = blockIdx.y * TILE;
    const int tx = threadIdx.x, ty = threadIdx.y;
#if ALIGN
    if (rows & 7) {
        // Output rows start mid-sector. Output row oc is written in windows [r0 - s, r0 - s + TILE)
        // with s = (oc * rows) % 8, which start on 32-byte boundaries and, the same s for every
        // tile of the row, partition it (the grid has one more tile row for the last window); the
        // block stages input rows r0 - 8 .. r0 + TILE - 1 so every window's elements are at hand.
#pragma unroll
        for (int j = ty; j < TILE + 8; j += ROWS) {
            const int r = r0 - 8 + j, c = c0 + tx;
            tile[j][tx] = (r >= 0 && r < rows && c < cols) ? __ldg(in + (size_t)r * cols + c) : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < TILE; j += ROWS) {
            const int oc = c0 + ty + j;
            const int s = (int)(((size_t)oc * (size_t)rows) & 7u);
            const int r = r0 - s + tx;
            if (oc < cols && r >= 0 && r < rows) {
                if (STCS)
                    __stcs(out + (size_t)oc * rows + r, tile[8 - s + tx][ty + j]);
                else
                    out[(size_t)oc * rows + r] = tile[8 - s + tx][ty + j];
            }
        }
        return;
    }
#endif

    const int c = c0 + tx;
    if (r0 + TILE <= rows && c0 + TILE <= cols) {   // interior tile: no checks
#pragma unroll
        for (int j = 0; j < TILE; j += ROWS)
            tile[ty + j][tx] = __ldg(in + (size_t)(r0 + ty + j) * cols + c);
        __syncthreads();
        const int r = r0 + tx;
#pragma unroll
        for (int j = 0; j < TILE; j += ROWS)
            if (STCS)
                __stcs(out + (size_t)(c0 + ty + j) * rows + r, tile[tx][ty + j]);
            else
                out[(size_t)(c0 + ty + j) * rows + r] = tile[tx][ty + j];
    } else {
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
}
