"""The histogram, gemm_bf16 and attention_fwd kernels (reference, initial, tunable) executed on the CPU.

The CUDA emulator of tests/workloads/test_tunable_emulated.py (threads as fibers, barriers, shuffles) runs
each kernel source as C++ against exact CPU results. gemm_bf16's tensor-core kernels use inline
PTX (cp.async, ldmatrix, mma.sync), which a CPU cannot run: their wrappers sit between
`// PTX-BEGIN` and `// PTX-END`, and this test swaps that block for an emulation written from the
PTX ISA's fragment layouts (mma.m16n8k16 .bf16: A rows groupID / groupID + 8, k pairs
2 * threadID_in_group (+8); B k pairs 2 * threadID_in_group (+8), column groupID; C rows
groupID / groupID + 8, columns 2 * threadID_in_group + {0, 1}; ldmatrix: lanes 8i..8i+7 give
matrix i's row addresses, lane l receives row l / 4, columns 2 * (l % 4) + {0, 1}, transposed
for .trans). cp.async copies are queued per thread and land only at cp.async.wait_group, so a
slice read before its wait reads stale shared memory and fails.

So the kernels' indexing, bounds, pipelining and fragment bookkeeping are checked here; whether
the emulation matches the hardware is checked by tests/gpu/test_new_workloads_gpu.py on an H200.
gemm_bf16's wgmma kernel runs in tests/workloads/test_gemm_bf16_wgmma_emulated.py, on this file's emulator
(program, build, run, gemm_failures) with an emulation of wgmma in place of mma.sync.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_tunable_emulated import CUDA_EMU, run_emulated
from test_tunable_kernels import LIMITS, Config, load_tunable

from kernelopt_mcp.launch import LaunchSpec, resolve
from kernelopt_mcp.workload import load_workload

REPO = Path(__file__).resolve().parents[2]
GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(GXX is None, reason="needs g++ to build the CUDA emulator")

EMU_EXT = r"""
#include <algorithm>
struct alignas(16) uint4 { unsigned x, y, z, w; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
struct alignas(8) float2 { float x, y; };
static inline float2 make_float2(float a, float b) { return float2{a, b}; }
struct __nv_bfloat16 { unsigned short bits; };
static inline float bf16_bits_to_float(unsigned short b) { unsigned u = (unsigned)b << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline float __bfloat162float(__nv_bfloat16 v) { return bf16_bits_to_float(v.bits); }
static inline __nv_bfloat16 __float2bfloat16(float f) {   // round to nearest even (no NaN inputs here)
    unsigned u; std::memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return __nv_bfloat16{(unsigned short)(u >> 16)};
}
static inline int atomicAdd(int* p, int v) { int o = *p; *p = o + v; return o; }
template <class T> static inline T min(T a, T b) { return a < b ? a : b; }
#define __align__(n) __attribute__((aligned(n)))

namespace emu {
static unsigned long long xchg[2][1024][8];
static unsigned xchg_count[1024];
struct Copy { void* dst; const void* src; bool pred; int bytes; };
static std::vector<Copy> open_group[1024];
static std::vector<std::vector<Copy>> groups[1024];
static int lin() { return fibers[current].lin; }
// every lane of the warp publishes 8 words; returns the warp's 32 rows of them
static const unsigned long long (*exchange(const unsigned long long (&mine)[8]))[8] {
    const int me = lin();
    const int p = xchg_count[me]++ & 1;
    std::memcpy(xchg[p][me], mine, sizeof mine);
    yield(AT_WARP);
    return &xchg[p][me & ~31];
}
}  // namespace emu
"""  # noqa: E501

# cp.async and ldmatrix, shared by the bf16 and the tf32 kernels
PTX_EMU_COPIES = r"""
static inline void cp_async16(void* dst, const void* src, bool pred) { emu::open_group[emu::lin()].push_back({dst, src, pred, 16}); }
static inline void cp_async_commit() {
    const int me = emu::lin();
    emu::groups[me].push_back(emu::open_group[me]);
    emu::open_group[me].clear();
}
template <int N> static inline void cp_async_wait() {   // the copies land now, not before
    auto& g = emu::groups[emu::lin()];
    while ((int)g.size() > N) {
        for (const auto& c : g.front()) {
            if (c.pred) std::memcpy(c.dst, c.src, c.bytes); else std::memset(c.dst, 0, c.bytes);
        }
        g.erase(g.begin());
    }
}
static inline void ldmatrix_x4_impl(unsigned (&r)[4], const void* p, bool trans) {
    unsigned long long mine[8] = {(unsigned long long)(uintptr_t)p};
    const auto* all = emu::exchange(mine);
    const int lane = emu::lin() & 31;
    for (int i = 0; i < 4; ++i) {
        unsigned short v[2];
        for (int e = 0; e < 2; ++e) {
            // plain: row lane/4 of matrix i, column 2*(lane%4)+e; trans: row 2*(lane%4)+e, column lane/4
            const int row = trans ? 2 * (lane & 3) + e : lane >> 2;
            const int col = trans ? lane >> 2 : 2 * (lane & 3) + e;
            const unsigned short* rp = (const unsigned short*)(uintptr_t)all[8 * i + row][0];
            v[e] = rp[col];
        }
        r[i] = v[0] | (unsigned)v[1] << 16;
    }
}
static inline void ldmatrix_x4(unsigned (&r)[4], const void* p) { ldmatrix_x4_impl(r, p, false); }
static inline void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) { ldmatrix_x4_impl(r, p, true); }
"""  # noqa: E501

PTX_EMU = PTX_EMU_COPIES + r"""
static inline void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    unsigned long long mine[8] = {a[0], a[1], a[2], a[3], b[0], b[1]};
    const auto* all = emu::exchange(mine);
    const int lane = emu::lin() & 31, g = lane >> 2, t = lane & 3;
    auto half = [](unsigned long long w, int k) { return bf16_bits_to_float((unsigned short)(w >> (16 * (k & 1)))); };
    auto A = [&](int row, int k) { return half(all[4 * (row & 7) + ((k & 7) >> 1)][(row >> 3) + 2 * (k >> 3)], k); };
    auto B = [&](int k, int n) { return half(all[4 * n + ((k & 7) >> 1)][4 + (k >> 3)], k); };
    for (int q = 0; q < 4; ++q) {
        const int row = g + 8 * (q >> 1), col = 2 * t + (q & 1);
        double s = 0;
        for (int k = 0; k < 16; ++k) s += (double)A(row, k) * B(k, col);   // exact: bf16 products
        d[q] = (float)(d[q] + s);
    }
}
"""

# attention_fwd's tunable kernel: the bf16 instructions, and cvt.rn.bf16x2.f32 (two floats rounded to
# nearest even, the first operand to the high half)
PTX_EMU_ATTN = PTX_EMU + r"""
static inline unsigned pack_bf16x2(float lo, float hi) {
    return (unsigned)__float2bfloat16(lo).bits | (unsigned)__float2bfloat16(hi).bits << 16;
}
"""

# sgemm's 3xTF32 kernel (workloads/sgemm/tunable_3xtf32.cu): 4-byte cp.async, the TF32 split
# (cvt.rna: round to nearest, ties away from zero, to 10 mantissa bits) and mma.m16n8k8 .tf32, whose
# operands are read as TF32 (the low 13 bits ignored). Fragments, from the PTX ISA: A (16x8) a0 row
# groupID, column threadID_in_group; a1 row + 8; a2 column + 4; a3 both; B (8x8) b0 row
# threadID_in_group, column groupID, b1 row + 4; C as for m16n8k16.
PTX_EMU_TF32 = PTX_EMU_COPIES + r"""
static inline void cp_async4(void* dst, const void* src, bool pred) { emu::open_group[emu::lin()].push_back({dst, src, pred, 4}); }
static inline float f32_of(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline unsigned cvt_rna_tf32(float f) {
    unsigned u; std::memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return u;   // inf, nan: unchanged
    return (u + 0x1000u) & 0xffffe000u;
}
static inline void split_tf32(unsigned x, unsigned& big, unsigned& small) {
    big = cvt_rna_tf32(f32_of(x));
    small = cvt_rna_tf32(f32_of(x) - f32_of(big));
}
static inline void mma_tf32_1688(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    unsigned long long mine[8] = {a[0], a[1], a[2], a[3], b[0], b[1]};
    const auto* all = emu::exchange(mine);
    const int lane = emu::lin() & 31, g = lane >> 2, t = lane & 3;
    auto tf32 = [](unsigned long long w) { return f32_of((unsigned)w & 0xffffe000u); };
    auto A = [&](int row, int k) { return tf32(all[4 * (row & 7) + (k & 3)][(row >> 3) + 2 * (k >> 2)]); };
    auto B = [&](int k, int n) { return tf32(all[4 * n + (k & 3)][4 + (k >> 2)]); };
    for (int q = 0; q < 4; ++q) {
        const int row = g + 8 * (q >> 1), col = 2 * t + (q & 1);
        double s = 0;
        for (int k = 0; k < 8; ++k) s += (double)A(row, k) * B(k, col);   // exact: tf32 products
        d[q] = (float)(d[q] + s);
    }
}
static inline void mma_tf32_1688_first(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    for (int q = 0; q < 4; ++q) d[q] = 0.f;   // a slice's first product, on a zeroed accumulator
    mma_tf32_1688(d, a, b);
}
"""  # noqa: E501

# the drivers' inputs: a seeded xorshift in [0, 1), and buffers with guard words on both sides
DRIVER_BUFFERS = r"""
static uint64_t rng = 88172645463325252ull;
static double urand() { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (rng >> 11) * (1.0 / 9007199254740992.0); }

template <class T> struct Buf {   // n elements after `off` guard elements, guards after too
    std::vector<T> mem; size_t off, n; T guard;
    Buf(size_t n_, size_t misalign, T g) : n(n_), guard(g) { off = 64 + misalign; mem.assign(off + n + 64, g); }
    T* p() { return mem.data() + off; }
    bool guards_ok() const {
        for (size_t i = 0; i < mem.size(); ++i)
            if ((i < off || i >= off + n) && std::memcmp(&mem[i], &guard, sizeof(T)) != 0) return false;
        return true;
    }
};
"""  # noqa: E501

DRIVER = DRIVER_BUFFERS + r"""
// argv: grid.x grid.y grid.z block.x block.y block.z shared_bytes misalign <workload arguments>
int main(int argc, char** argv) {
    dim3 grid{(unsigned)atoi(argv[1]), (unsigned)atoi(argv[2]), (unsigned)atoi(argv[3])};
    dim3 block{(unsigned)atoi(argv[4]), (unsigned)atoi(argv[5]), (unsigned)atoi(argv[6])};
    size_t shared = atol(argv[7]);
    size_t mis = atoi(argv[8]);
    std::vector<float4> smem(shared / 16 + 1);
    ko_emu_dyn_smem = reinterpret_cast<char*>(smem.data());
    int fail = 0;
#if defined(WL_histogram)
    int n = atoi(argv[9]), dist = atoi(argv[10]);   // 0 uniform, 1 all 255, 2 four middle bins
    Buf<unsigned char> X(n, mis, 0x5a);
    Buf<int> H(256, 0, 0x7e57);
    std::vector<long long> ref(256, 0);
    for (int i = 0; i < n; ++i) {
        unsigned v = dist == 0 ? (unsigned)(urand() * 256) : dist == 1 ? 255u : 126u + (unsigned)(urand() * 4);
        X.p()[i] = (unsigned char)v;
        ref[v]++;
    }
    for (int b = 0; b < 256; ++b) H.p()[b] = 0;   // init "zero"
    unsigned char* x = X.p(); int* h = H.p();
    emu::launch(grid, block, [&] { histogram(x, h, n); });
    for (int b = 0; b < 256; ++b)
        if (h[b] != ref[b]) { if (fail < 5) std::fprintf(stderr, "hist[%d] = %d, expected %lld\n", b, h[b], ref[b]); ++fail; }
    if (!(X.guards_ok() && H.guards_ok())) { std::fprintf(stderr, "guard words overwritten\n"); fail = 1; }
#elif defined(WL_gemm_bf16)
    int M = atoi(argv[9]), N = atoi(argv[10]), K = atoi(argv[11]);
    double rtol = atof(argv[12]), atol = atof(argv[13]);
    const __nv_bfloat16 g16{0x7fc1};
    Buf<__nv_bfloat16> A((size_t)M * K, mis, g16), B((size_t)K * N, 0, g16);
    Buf<float> C((size_t)M * N, 0, 12345.0f);
    auto draw = [] { float f = (float)(2 * urand() - 1); unsigned u; std::memcpy(&u, &f, 4); return __nv_bfloat16{(unsigned short)(u >> 16)}; };
    for (size_t i = 0; i < A.n; ++i) A.p()[i] = draw();
    for (size_t i = 0; i < B.n; ++i) B.p()[i] = draw();
    for (size_t i = 0; i < C.n; ++i) C.p()[i] = std::nanf("");
    std::vector<double> ref((size_t)M * N);
    double sq = 0;
    for (int m = 0; m < M; ++m) for (int j = 0; j < N; ++j) {
        double s = 0;
        for (int k = 0; k < K; ++k) s += (double)__bfloat162float(A.p()[(size_t)m * K + k]) * __bfloat162float(B.p()[(size_t)k * N + j]);
        ref[(size_t)m * N + j] = s; sq += s * s; }
    const double rms = std::sqrt(sq / ref.size());
    __nv_bfloat16 *a = A.p(), *b = B.p(); float* c = C.p();
    emu::launch(grid, block, [&] { gemm_bf16(a, b, c, M, N, K); });
    for (size_t i = 0; i < ref.size(); ++i)
        if (!(std::fabs(c[i] - ref[i]) <= atol * rms + rtol * std::fabs(ref[i]))) {
            if (fail < 5) std::fprintf(stderr, "C[%zu] = %.9g, expected %.9g\n", i, c[i], ref[i]);
            ++fail; }
    if (!(A.guards_ok() && B.guards_ok() && C.guards_ok())) { std::fprintf(stderr, "guard words overwritten\n"); fail = 1; }
#elif defined(WL_sgemm)
    int M = atoi(argv[9]), N = atoi(argv[10]), K = atoi(argv[11]);
    double rtol = atof(argv[12]), atol = atof(argv[13]);
    Buf<float> A((size_t)M * K, mis, 12345.0f), B((size_t)K * N, 0, 12345.0f), C((size_t)M * N, 0, 12345.0f);
    for (size_t i = 0; i < A.n; ++i) A.p()[i] = (float)(2 * urand() - 1);   // all 24 mantissa bits
    for (size_t i = 0; i < B.n; ++i) B.p()[i] = (float)(2 * urand() - 1);
    for (size_t i = 0; i < C.n; ++i) C.p()[i] = std::nanf("");
    float *a = A.p(), *b = B.p(), *c = C.p();
    emu::launch(grid, block, [&] { sgemm(a, b, c, M, N, K); });
    for (int m = 0; m < M; ++m) for (int j = 0; j < N; ++j) {
        double s = 0;
        for (int k = 0; k < K; ++k) s += (double)a[(size_t)m * K + k] * b[(size_t)k * N + j];
        const float got = c[(size_t)m * N + j];
        if (!(std::fabs(got - s) <= atol + rtol * std::fabs(s))) {
            if (fail < 5) std::fprintf(stderr, "C[%d, %d] = %.9g, expected %.9g\n", m, j, got, s);
            ++fail; }
    }
    if (!(A.guards_ok() && B.guards_ok() && C.guards_ok())) { std::fprintf(stderr, "guard words overwritten\n"); fail = 1; }
#elif defined(WL_attention_fwd)
    int Bn = atoi(argv[9]), Hn = atoi(argv[10]), S = atoi(argv[11]), D = atoi(argv[12]), causal = atoi(argv[13]);
    double rtol = atof(argv[14]), atol = atof(argv[15]);
    const size_t n = (size_t)Bn * Hn * S * D;
    const __nv_bfloat16 g16{0x7fc1};
    Buf<__nv_bfloat16> Q(n, 0, g16), Kb(n, mis, g16), V(n, 0, g16), O(n, 0, g16);   // k misaligned: scalar tile copies
    auto normal = [] { double u = urand() + 1e-12, w = urand(); return (float)(std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * w)); };
    for (size_t i = 0; i < n; ++i) { Q.p()[i] = __float2bfloat16(normal()); Kb.p()[i] = __float2bfloat16(normal()); V.p()[i] = __float2bfloat16(normal()); }
    for (size_t i = 0; i < n; ++i) O.p()[i] = __nv_bfloat16{0x7fff};   // NaN poison
    std::vector<double> ref(n);
    double sq = 0;
    for (int bh = 0; bh < Bn * Hn; ++bh)
        for (int i = 0; i < S; ++i) {
            const size_t base = (size_t)bh * S * D;
            std::vector<double> sc(S);
            double mx = -INFINITY;
            const int last = causal ? i : S - 1;
            for (int j = 0; j <= last; ++j) {
                double dot = 0;
                for (int d = 0; d < D; ++d) dot += (double)__bfloat162float(Q.p()[base + (size_t)i * D + d]) * __bfloat162float(Kb.p()[base + (size_t)j * D + d]);
                sc[j] = dot / std::sqrt((double)D); mx = std::max(mx, sc[j]);
            }
            double l = 0;
            for (int j = 0; j <= last; ++j) l += std::exp(sc[j] - mx);
            for (int d = 0; d < D; ++d) {
                double a = 0;
                for (int j = 0; j <= last; ++j) a += std::exp(sc[j] - mx) * __bfloat162float(V.p()[base + (size_t)j * D + d]);
                ref[base + (size_t)i * D + d] = a / l; sq += (a / l) * (a / l);
            }
        }
    const double rms = std::sqrt(sq / n);
    __nv_bfloat16 *q = Q.p(), *k = Kb.p(), *v = V.p(), *o = O.p();
    emu::launch(grid, block, [&] { attention_fwd(q, k, v, o, Bn, Hn, S, D, causal); });
    for (size_t i = 0; i < n; ++i) {
        const float got = __bfloat162float(o[i]);
        if (!(std::fabs(got - ref[i]) <= atol * rms + rtol * std::fabs(ref[i]))) {
            if (fail < 5) std::fprintf(stderr, "o[%zu] = %.9g, expected %.9g\n", i, got, ref[i]);
            ++fail; }
    }
    if (!(Q.guards_ok() && Kb.guards_ok() && V.guards_ok() && O.guards_ok())) { std::fprintf(stderr, "guard words overwritten\n"); fail = 1; }
#endif
    if (fail) { std::fprintf(stderr, "FAIL\n"); return 1; }
    std::printf("OK\n");
    return 0;
}
"""  # noqa: E501


def program(source: str, ptx: str = PTX_EMU, driver: str = DRIVER) -> str:
    """One C++ translation unit: the emulator, the kernel (includes dropped, PTX emulated by ``ptx``), the
    driver (this file's, or another test's ``main``)."""
    kernel = re.sub(r"^#include <cuda_bf16\.h>$", "", source, flags=re.MULTILINE)
    kernel = re.sub(r"// PTX-BEGIN\n.*?// PTX-END\n", lambda _: ptx, kernel, flags=re.DOTALL)
    kernel = re.sub(r"extern __shared__ (\w+) (\w+)\[\];", r"\1* \2 = reinterpret_cast<\1*>(ko_emu_dyn_smem);", kernel)
    return (CUDA_EMU + EMU_EXT + "static char* ko_emu_dyn_smem;\n#line 1 \"kernel.cu\"\n" + kernel
            + "\n#line 1 \"driver.cpp\"\n" + driver)


def build(name: str, source: str, config: Config, directory: Path, tag: str, ptx: str = PTX_EMU) -> Path:
    cpp, exe = directory / f"{tag}.cpp", directory / tag
    cpp.write_text(program(source, ptx))
    cmd = [GXX or "g++", "-O1", "-std=c++17", "-w", f"-DWL_{name}", *(f"-D{k}={v}" for k, v in config.items()),
           str(cpp), "-o", str(exe)]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    assert done.returncode == 0, f"{tag}: the emulator build failed:\n{done.stderr[-3000:]}"
    return exe


def run(exe: Path, launch: dict[str, object], scalars: dict[str, int], config: Config, misalign: int,
        args: list[object]) -> str:
    """'' when the kernel matched, else what went wrong."""
    r = resolve(LaunchSpec.model_validate({"default": launch}).for_case("x"), {**scalars, **config}, LIMITS, "x")
    return run_emulated(exe, r, misalign, args, f"{exe.name} {scalars}")


# --- histogram ----------------------------------------------------------------------------------

HIST_CASES = [(1, 0), (31, 0), (4097, 1), (100003, 0), (65537, 1), (30011, 2)]  # (n, distribution)


def hist_failures(source: str, launch: dict[str, object], config: Config, directory: Path, tag: str) -> list[str]:
    exe = build("histogram", source, config, directory, tag)
    return [f for n, dist in HIST_CASES for mis in (0, 1)
            if (f := run(exe, launch, {"n": n}, config, mis, [n, dist]))]


def test_histogram_reference_and_initial_count_exactly(tmp_path: Path) -> None:
    wl = load_workload(REPO / "workloads" / "histogram")
    assert wl.reference_cu and wl.initial_cu and wl.spec.reference.launch and wl.spec.initial
    failures = hist_failures(wl.reference_cu, wl.spec.reference.launch.default.model_dump(), {}, tmp_path, "ref")
    failures += hist_failures(wl.initial_cu, wl.spec.initial.launch.default.model_dump(), {}, tmp_path, "init")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("config", [
    {"THREADS": 256, "VPT": 1, "COPIES": 1, "GRID": 1056},
    {"THREADS": 128, "VPT": 4, "COPIES": 4, "GRID": 264},
    {"THREADS": 1024, "VPT": 2, "COPIES": 8, "GRID": 2112},
    {"THREADS": 256, "VPT": 2, "COPIES": 1, "GRID": 264, "LANES": 1},
    {"THREADS": 128, "VPT": 4, "COPIES": 1, "GRID": 2112, "LANES": 1},
    {"THREADS": 256, "VPT": 2, "COPIES": 1, "GRID": 264, "LANES": 1, "PIPE": 1},
    {"THREADS": 128, "VPT": 1, "COPIES": 4, "GRID": 2112, "LANES": 0, "PIPE": 1},
])
def test_histogram_tunable_counts_exactly(config: Config, tmp_path: Path) -> None:
    t = load_tunable("histogram")
    assert not hist_failures(t.source, t.spec["launch"]["default"], config, tmp_path, "tun")


def test_the_histogram_emulation_catches_a_lost_tail(tmp_path: Path) -> None:
    t = load_tunable("histogram")
    broken = t.source.replace("for (size_t i = done + ", "for (size_t i = done + 16 + ")
    assert broken != t.source
    failures = hist_failures(broken, t.spec["launch"]["default"], t.spec["defaults"], tmp_path, "broken")
    assert failures and all("expected" in f for f in failures)


# --- gemm_bf16 ----------------------------------------------------------------------------------

# odd shapes (scalar path), K % 8 == N % 8 == 0 with ragged M / K tails (cp.async path, zero-filled
# chunks), and K deep enough to wrap a 4-stage ring; each also with A misaligned (scalar path)
GEMM_CASES = [(1, 1, 1), (17, 33, 9), (127, 129, 61), (200, 136, 72), (70, 64, 328)]


def gemm_failures(source: str, launch: dict[str, object], config: Config, directory: Path, tag: str,
                  ptx: str = PTX_EMU, cases: list[tuple[int, int, int]] = GEMM_CASES) -> list[str]:
    tol = load_workload(REPO / "workloads" / "gemm_bf16").spec.tolerance["C"]
    exe = build("gemm_bf16", source, config, directory, tag, ptx)
    return [f for m, n, k in cases for mis in (0, 1)
            if (f := run(exe, launch, {"M": m, "N": n, "K": k}, config, mis, [m, n, k, tol.rtol / 10, tol.atol / 10]))]


def test_gemm_bf16_reference_and_initial_match_float64(tmp_path: Path) -> None:
    wl = load_workload(REPO / "workloads" / "gemm_bf16")
    assert wl.reference_cu and wl.initial_cu and wl.spec.reference.launch and wl.spec.initial
    failures = gemm_failures(wl.reference_cu, wl.spec.reference.launch.default.model_dump(), {}, tmp_path, "ref")
    failures += gemm_failures(wl.initial_cu, wl.spec.initial.launch.default.model_dump(), {}, tmp_path, "init")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("config", [
    {"BM": 128, "BN": 128, "BK": 32, "WM": 64, "WN": 32, "STAGES": 3},
    {"BM": 64, "BN": 128, "BK": 64, "WM": 32, "WN": 64, "STAGES": 2},
    {"BM": 128, "BN": 256, "BK": 32, "WM": 64, "WN": 64, "STAGES": 4},
    {"BM": 256, "BN": 64, "BK": 32, "WM": 64, "WN": 32, "STAGES": 4},
])
def test_gemm_bf16_tunable_matches_float64(config: Config, tmp_path: Path) -> None:
    t = load_tunable("gemm_bf16")
    failures = gemm_failures(t.source, t.spec["launch"]["default"], config, tmp_path, "tun")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(("old", "new"), [
    ("cp_async_wait<STAGES - 2>();", "cp_async_wait<STAGES - 1>();"),   # reads a slice before it lands
    ("((lane >> 3) & 1) * 8) * BS_LD", "((lane >> 4) & 1) * 8) * BS_LD"),   # wrong ldmatrix.trans rows
])
def test_the_gemm_emulation_catches_a_pipeline_or_fragment_bug(old: str, new: str, tmp_path: Path) -> None:
    t = load_tunable("gemm_bf16")
    broken = t.source.replace(old, new)
    assert broken != t.source
    assert gemm_failures(broken, t.spec["launch"]["default"], t.spec["defaults"], tmp_path, "broken")


# --- sgemm on tensor cores (3xTF32) ---------------------------------------------------------------

# the same shapes as gemm_bf16's (K % 4 == N % 4 == 0 takes the 16-byte cp.async path), each also with
# A misaligned by one float (the 4-byte path); the workload's tolerance, tightened 10x
SGEMM_CASES = [(1, 1, 1), (17, 33, 9), (127, 129, 61), (200, 136, 72), (70, 64, 328)]


def sgemm_tc_failures(source: str, launch: dict[str, object], config: Config, directory: Path, tag: str) -> list[str]:
    tol = load_workload(REPO / "workloads" / "sgemm").spec.tolerance["C"]
    exe = build("sgemm", source, config, directory, tag, PTX_EMU_TF32)
    return [f for m, n, k in SGEMM_CASES for mis in (0, 1)
            if (f := run(exe, launch, {"M": m, "N": n, "K": k}, config, mis, [m, n, k, tol.rtol / 10, tol.atol / 10]))]


@pytest.mark.parametrize("config", [
    {"BM": 128, "BN": 128, "BK": 32, "WM": 64, "WN": 32, "STAGES": 3},
    {"BM": 64, "BN": 128, "BK": 16, "WM": 32, "WN": 32, "STAGES": 2},
    {"BM": 128, "BN": 256, "BK": 16, "WM": 64, "WN": 64, "STAGES": 4},
    {"BM": 256, "BN": 64, "BK": 32, "WM": 64, "WN": 32, "STAGES": 4},
    {"BM": 128, "BN": 128, "BK": 32, "WM": 64, "WN": 32, "STAGES": 3, "PROMOTE": 1},   # each slice apart
    {"BM": 256, "BN": 64, "BK": 16, "WM": 32, "WN": 64, "STAGES": 2, "PROMOTE": 1},
])
def test_sgemm_3xtf32_tunable_matches_float64(config: Config, tmp_path: Path) -> None:
    t = load_tunable("sgemm", "tunable_3xtf32.json")
    failures = sgemm_tc_failures(t.source, t.spec["launch"]["default"], config, tmp_path, "tc")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(("old", "new"), [
    ("cp_async_wait<STAGES - 2>();", "cp_async_wait<STAGES - 1>();"),   # reads a slice before it lands
    ("(lane >> 4) * 4);", "(lane >> 4) * 8);"),   # wrong ldmatrix column for a2 / a3
    ("col[4 * BS_LD]", "col[BS_LD]"),   # wrong row for b1
    # plain TF32: the small terms dropped (what tests/adversarial/sgemm_tf32.cu does), too coarse
    ("mma_tf32_1688(acc[i][j], a_big, b_small[j]);\n                    mma_tf32_1688(acc[i][j], a_small, b_big[j]);",
     ""),
])
def test_the_sgemm_3xtf32_emulation_catches_a_pipeline_fragment_or_precision_bug(
    old: str, new: str, tmp_path: Path
) -> None:
    t = load_tunable("sgemm", "tunable_3xtf32.json")
    broken = t.source.replace(old, new)
    assert broken != t.source
    assert sgemm_tc_failures(broken, t.spec["launch"]["default"], t.spec["defaults"], tmp_path, "broken")


# --- attention_fwd --------------------------------------------------------------------------------

# (B, H, S, D, causal): one key, odd S over several key tiles and query blocks, D 32 / 64 / 128
ATTN_CASES = [(1, 1, 1, 64, 0), (1, 1, 1, 128, 1), (1, 2, 33, 64, 1), (2, 1, 100, 128, 0), (1, 1, 77, 32, 1),
              (1, 1, 70, 64, 0)]


# Head dims the tunable kernel does not take (it needs D % 32 == 0); the reference and the naive
# kernel take any D <= 128: the reference's zero-padded chunks past D, over several query blocks
ATTN_ODD_D = [(1, 1, 40, 50, 1), (1, 2, 65, 100, 0), (1, 1, 3, 1, 0)]
#: The emulation asks for these kernels' own accuracy (rtol, atol of RMS(o)), the tolerance this
#: test was written for: tighter than the workload's (atol 0.12, which admits flash-style bf16
#: probabilities on the long causal rows of the H200's cases; reference.py)
EMU_TOL = (1e-2, 1e-2)


def attention_failures(source: str, launch: dict[str, object], directory: Path, tag: str,
                       config: Config | None = None, ptx: str = PTX_EMU, share: float = 0.5,
                       cases: list[tuple[int, int, int, int, int]] = ATTN_CASES) -> list[str]:
    """What failed against float64, within ``share`` of :data:`EMU_TOL`."""
    rtol, atol = EMU_TOL
    exe = build("attention_fwd", source, config or {}, directory, tag, ptx)
    return [f for b, h, s, d, causal in cases for mis in (0, 1)
            if (f := run(exe, launch, {"B": b, "H": h, "S": s, "D": d, "causal": causal}, config or {}, mis,
                         [b, h, s, d, causal, rtol * share, atol * share]))]


def test_attention_reference_and_initial_match_float64(tmp_path: Path) -> None:
    wl = load_workload(REPO / "workloads" / "attention_fwd")
    assert wl.reference_cu and wl.initial_cu and wl.spec.reference.launch and wl.spec.initial
    cases = ATTN_CASES + ATTN_ODD_D
    failures = attention_failures(wl.reference_cu, wl.spec.reference.launch.default.model_dump(), tmp_path, "ref",
                                  cases=cases)
    failures += attention_failures(wl.initial_cu, wl.spec.initial.launch.default.model_dump(), tmp_path, "init",
                                   cases=cases)
    assert not failures, "\n".join(failures)


def test_the_attention_emulation_catches_a_causal_mask_off_by_one(tmp_path: Path) -> None:
    wl = load_workload(REPO / "workloads" / "attention_fwd")
    assert wl.reference_cu and wl.spec.reference.launch
    broken = wl.reference_cu.replace("j0 + jj <= i", "j0 + jj < i + 1 + (i & 1)")
    assert broken != wl.reference_cu
    assert attention_failures(broken, wl.spec.reference.launch.default.model_dump(), tmp_path, "broken")


@pytest.mark.parametrize("config", [
    {"WARPS": 4, "BKV": 64, "QREG": 1, "RPW": 1},
    {"WARPS": 2, "BKV": 16, "QREG": 0, "RPW": 1},
    {"WARPS": 8, "BKV": 32, "QREG": 1, "RPW": 1},
    {"WARPS": 2, "BKV": 16, "QREG": 0, "RPW": 2},   # two 16-row blocks a warp: 64 rows a block
])
def test_attention_tunable_matches_float64(config: Config, tmp_path: Path) -> None:
    t = load_tunable("attention_fwd")
    # P is rounded to bf16 for P @ V, as flash attention does: errors up to ~0.6 of the tolerance
    # where one key dominates a row, so the margin asked here is 3/4 (the CUDA reference's: 1/2)
    failures = attention_failures(t.source, t.spec["launch"]["default"], tmp_path, "tun", config, PTX_EMU_ATTN, 0.75)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(("old", "new"), [
    ("cp_async_wait<1>();", "cp_async_wait<2>();"),   # uses a tile before it lands
    ("ldmatrix_x4_trans(b, vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8)",
     "ldmatrix_x4_trans(b, vs + (kk * 16 + (lane & 7) + ((lane >> 4) & 1) * 8)"),   # wrong v rows
    ("(causal && j > row[r][c >> 1])", "(causal && j > row[r][c >> 1] + 1)"),   # the causal mask off by one
    ("corr[h] = mnew[r][h] == NEG_INF ? 1.f : exp2f(m[r][h] - mnew[r][h]);", "corr[h] = 1.f;"),   # no rescaling
    ("if (corr[0] != 1.f || corr[1] != 1.f) {", "if (corr[0] != 1.f) {"),   # row g + 8's rescale skipped
])
def test_the_attention_tunable_emulation_catches_a_pipeline_fragment_mask_or_softmax_bug(
    old: str, new: str, tmp_path: Path
) -> None:
    t = load_tunable("attention_fwd")
    broken = t.source.replace(old, new)
    assert broken != t.source
    assert attention_failures(broken, t.spec["launch"]["default"], tmp_path, "broken", t.spec["defaults"],
                              PTX_EMU_ATTN, 0.75)
