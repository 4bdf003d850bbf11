"""gemm_bf16's wgmma kernel (workloads/gemm_bf16/tunable_wgmma.cu, tunable_wgmma.json) executed on the CPU.

The emulator, driver and checks are tests/workloads/test_new_workloads_emulated.py's (the CUDA emulator runs
the kernel source as C++ against float64, its `// PTX-BEGIN` ... `// PTX-END` block swapped for an
emulation); this file adds the emulation of the wgmma instructions the kernel's block wraps
(matrix descriptors, the 128-byte swizzle, wgmma.commit_group / wait_group) on top of the shared
cp.async one. Whether the emulation matches the hardware is checked by
tests/gpu/test_new_workloads_gpu.py on an H200.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_new_workloads_emulated import GEMM_CASES, GXX, PTX_EMU_COPIES, gemm_failures
from test_tunable_kernels import Config, load_tunable

pytestmark = pytest.mark.skipif(GXX is None, reason="needs g++ to build the CUDA emulator")

# gemm_bf16's wgmma kernel (workloads/gemm_bf16/tunable_wgmma.cu), from the PTX ISA's wgmma
# sections: a matrix descriptor holds (address & 0x3FFFF) >> 4 at bits 0-13, the leading byte offset
# >> 4 at 16-29, the stride byte offset >> 4 at 32-45, the swizzle at 62-63 (1: 128 bytes, which
# XORs byte-address bits 4-6 with bits 7-9 of the absolute shared address). Canonical layouts with
# 128-byte swizzle, bf16 (T = 8): A K-major ((8,m),(T,2k)):((8T,SBO),(1,T)) -- element (m, k) at
# (m % 8) * 128 + (m / 8) * SBO + 2k bytes; B N-major ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)) --
# element (k, n) at 2 (n % 64) + (n / 64) * LBO + (k % 8) * 128 + (k / 8) * SBO. Accumulator
# fragment of m64nN f32: d[i] at row 16 * warp + lane / 4 + 8 * ((i / 2) % 2), column
# 8 * (i / 4) + 2 * (lane % 4) + i % 2 (warp and lane within the warpgroup). An mma runs when
# its group is waited for (wgmma.wait_group), reading shared memory then: a kernel that refills a
# stage before the wgmma reading it has completed reads the new slice and fails. Shared addresses
# start at a base that is not 1024-byte aligned, so a kernel that does not align its stages finds
# the swizzle out of step with its own.
# the shared window and the matrix descriptor (with the 128-byte swizzle) both wgmma emulations use
PTX_EMU_DESCRIPTORS = PTX_EMU_COPIES + r"""
static const unsigned KO_SMEM_BASE = 0x230;   // the emulated shared window's address of the buffer
static inline unsigned smem_addr(const void* p) { return (unsigned)((const char*)p - ko_emu_dyn_smem) + KO_SMEM_BASE; }
static inline void fence_proxy_async() {}
static inline void wgmma_fence() {}
static inline void fence_reg(float&) {}
static inline unsigned long long make_desc(const void* p, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((smem_addr(p) & 0x3FFFF) >> 4) | (unsigned long long)((lbo & 0x3FFFF) >> 4) << 16 |
           (unsigned long long)((sbo & 0x3FFFF) >> 4) << 32 | 1ull << 62;
}
"""
# the wgmma emulation both kernels use (A from shared memory or registers, B K-major or N-major, scale-d)
PTX_EMU_WGMMA_CORE = PTX_EMU_DESCRIPTORS + r"""
namespace emu {
struct Mma { float* d; int n; unsigned long long da, db; bool a_regs, trans_b, accumulate; float a[2][16]; };
static std::vector<Mma> open_mmas[1024];
static std::vector<std::vector<Mma>> mma_groups[1024];
static float smem_bf16(unsigned addr) {   // addr: an absolute shared address, before the swizzle
    const unsigned phys = addr ^ (((addr >> 7) & 7u) << 4);
    unsigned short b; std::memcpy(&b, ko_emu_dyn_smem + (phys - KO_SMEM_BASE), 2);
    return bf16_bits_to_float(b);
}
static void run_mma(const Mma& m) {
    if ((!m.a_regs && (m.da >> 62) != 1) || (m.db >> 62) != 1) {
        std::fprintf(stderr, "descriptor without the 128-byte swizzle\n"); std::abort(); }
    const unsigned sa = (unsigned)(m.da & 0x3FFF) << 4, sbo_a = (unsigned)((m.da >> 32) & 0x3FFF) << 4;
    const unsigned sb = (unsigned)(m.db & 0x3FFF) << 4, lbo_b = (unsigned)((m.db >> 16) & 0x3FFF) << 4,
                   sbo_b = (unsigned)((m.db >> 32) & 0x3FFF) << 4;
    const int t = lin() & 127, warp = t >> 5, lane = t & 31;
    for (int i = 0; i < m.n / 2; ++i) {
        const int h = (i >> 1) & 1, row = 16 * warp + (lane >> 2) + 8 * h, col = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
        double s = 0;
        for (int k = 0; k < 16; ++k) {
            const float a = m.a_regs ? m.a[h][k] : smem_bf16(sa + (row % 8) * 128 + (row / 8) * sbo_a + 2 * k);
            const float b = m.trans_b ? smem_bf16(sb + 2 * (col % 64) + (col / 64) * lbo_b + (k % 8) * 128 + (k / 8) * sbo_b)
                                      : smem_bf16(sb + (col % 8) * 128 + (col / 8) * sbo_b + 2 * k);
            s += (double)a * b;   // exact: bf16 products
        }
        m.d[i] = (float)((m.accumulate ? m.d[i] : 0.f) + s);
    }
}
}  // namespace emu
static inline void wgmma_commit() {
    const int me = emu::lin();
    emu::mma_groups[me].push_back(emu::open_mmas[me]);
    emu::open_mmas[me].clear();
}
template <int N> static inline void wgmma_wait() {   // the mma's of older groups run now, not before
    auto& g = emu::mma_groups[emu::lin()];
    while ((int)g.size() > N) {
        for (const auto& m : g.front()) emu::run_mma(m);
        g.erase(g.begin());
    }
}
"""  # noqa: E501
PTX_EMU_WGMMA = PTX_EMU_WGMMA_CORE + r"""
template <int R> static inline void wgmma_queue(float (&d)[R], unsigned long long da, unsigned long long db) {
    emu::open_mmas[emu::lin()].push_back({d, 2 * R, da, db, false, true, true, {}});   // B N-major, d accumulated
}
static inline void wgmma_n64(float (&d)[32], unsigned long long da, unsigned long long db) { wgmma_queue(d, da, db); }
static inline void wgmma_n128(float (&d)[64], unsigned long long da, unsigned long long db) { wgmma_queue(d, da, db); }
static inline void wgmma_n256(float (&d)[128], unsigned long long da, unsigned long long db) { wgmma_queue(d, da, db); }
"""


# the wgmma kernel: the same shapes, and one spanning two blocks each way (BN 256, BM 128) whose
# 9 slices wrap every ring depth of the space
WGMMA_CASES = [*GEMM_CASES, (130, 264, 520)]


def wgmma_failures(source: str, config: Config, directory: Path, tag: str) -> list[str]:
    t = load_tunable("gemm_bf16", "tunable_wgmma.json")
    return gemm_failures(source, t.spec["launch"]["default"], config, directory, tag, PTX_EMU_WGMMA, WGMMA_CASES)


@pytest.mark.parametrize("config", [
    {"BM": 128, "BN": 256, "STAGES": 4},
    {"BM": 64, "BN": 64, "STAGES": 3},
    {"BM": 192, "BN": 128, "STAGES": 3},
    {"BM": 256, "BN": 128, "STAGES": 4},
    {"BM": 64, "BN": 128, "STAGES": 6},
])
def test_gemm_bf16_wgmma_tunable_matches_float64(config: Config, tmp_path: Path) -> None:
    t = load_tunable("gemm_bf16", "tunable_wgmma.json")
    failures = wgmma_failures(t.source, config, tmp_path, "wgmma")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(("old", "new"), [
    ("cp_async_wait<STAGES - 3>();", "cp_async_wait<STAGES - 2>();"),   # reads a slice before it lands
    ("wgmma_wait<1>();", "wgmma_wait<2>();"),   # refills a stage a wgmma still reads
    ("((1024 - (smem_addr(raw) & 1023)) & 1023)", "0"),   # stages off the swizzle's 1024-byte period
    ("(((nc & 7) ^ (r & 7)) << 4)", "((nc & 7) << 4)"),   # B chunks not swizzled
    ("row = m0 + wg * 64 + warp * 16 + (lane >> 2) + h * 8", "row = m0 + wg * 64 + warp * 16 + (lane & 7) + h * 8"),
])
def test_the_wgmma_emulation_catches_a_pipeline_layout_or_fragment_bug(old: str, new: str, tmp_path: Path) -> None:
    t = load_tunable("gemm_bf16", "tunable_wgmma.json")
    broken = t.source.replace(old, new)
    assert broken != t.source
    assert wgmma_failures(broken, {"BM": 128, "BN": 128, "STAGES": 3}, tmp_path, "broken")
