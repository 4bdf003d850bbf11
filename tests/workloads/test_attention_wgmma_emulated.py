"""attention_fwd's wgmma kernel (workloads/attention_fwd/tunable_wgmma.cu, tunable_wgmma.json) executed on the CPU.

The emulator, driver and float64 checks are tests/workloads/test_new_workloads_emulated.py's (the CUDA
emulator runs the kernel source as C++, its `// PTX-BEGIN` ... `// PTX-END` block swapped for an
emulation); the descriptor and swizzle emulation follows tests/workloads/test_gemm_bf16_wgmma_emulated.py's,
extended with the two operand forms that kernel does not use: B K-major (imm-trans-b 0, the k tile of
S = q k^T) and A from registers (P in o += P v). Whether the emulation matches the hardware only an
H100 / H200 run can tell (tests/gpu).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_gemm_bf16_wgmma_emulated import PTX_EMU_WGMMA_CORE
from test_new_workloads_emulated import GXX, attention_failures
from test_tunable_kernels import Config, load_tunable, options_for

from kernelopt_mcp.compiler import compile_kernel

pytestmark = pytest.mark.skipif(GXX is None, reason="needs g++ to build the CUDA emulator")

# From the PTX ISA's wgmma sections (and test_gemm_bf16_wgmma_emulated.py's header): a descriptor
# holds (address & 0x3FFFF) >> 4 at bits 0-13, the leading byte offset >> 4 at 16-29, the stride
# byte offset >> 4 at 32-45, the swizzle at 62-63 (1: 128 bytes, which XORs byte-address bits 4-6
# with bits 7-9 of the absolute shared address). Canonical 128-byte-swizzle layouts, bf16:
# K-major ((8,m),(8,2k)):((64,SBO),(1,8)) in elements -- element (row, k) at (row % 8) * 128 +
# (row / 8) * SBO + 2k bytes, for A (row = m) and for B without transpose (row = n: the k tile,
# whose rows are the keys); B N-major (imm-trans-b 1) -- element (k, n) at 2 (n % 64) +
# (n / 64) * LBO + (k % 8) * 128 + (k / 8) * SBO (the v tile). Accumulator fragment of m64nN f32:
# d[i] at row 16 * warp + lane / 4 + 8 * ((i / 2) % 2), column 8 * (i / 4) + 2 * (lane % 4) + i % 2.
# A from registers (m64k16 bf16, cute's ALayout_64x16 = its CLayout_64x16): per warp 16 rows,
# register r of lane l holds row 16 * warp + l / 4 + 8 * (r % 2), columns 8 * (r / 2) + 2 * (l % 4)
# + {0, 1} (low half first) -- the accumulator layout of 16 columns. The registers are read when
# the wgmma is issued (captured here through a warp exchange); shared memory and the accumulators
# when its group is waited for (wgmma.wait_group), so a stage refilled, or an accumulator read,
# before that wait is wrong here too. scale-d 0 (the wrappers' scale_d argument) overwrites d.
PTX_EMU_ATTN_WGMMA = PTX_EMU_WGMMA_CORE + r"""
static inline unsigned pack_bf16x2(float lo, float hi) {
    return (unsigned)__float2bfloat16(lo).bits | (unsigned)__float2bfloat16(hi).bits << 16;
}
template <int R> static inline void wgmma_ss(float (&d)[R], unsigned long long da, unsigned long long db, int scale_d) {
    emu::Mma m{d, 2 * R, da, db, false, false, scale_d != 0, {}};
    emu::open_mmas[emu::lin()].push_back(m);
}
template <int R> static inline void wgmma_rs(float (&d)[R], const unsigned (&a)[4], unsigned long long db) {
    unsigned long long mine[8] = {a[0], a[1], a[2], a[3]};
    const auto* all = emu::exchange(mine);   // the warp's 16 rows of A, as issued
    const int lane = emu::lin() & 31;
    emu::Mma m{d, 2 * R, 0, db, true, true, true, {}};
    for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 16; ++k) {
            const int r = (lane >> 2) + 8 * h;   // the warp-local row
            const unsigned long long w = all[4 * (r & 7) + ((k & 7) >> 1)][(r >> 3) + 2 * (k >> 3)];
            m.a[h][k] = bf16_bits_to_float((unsigned short)(w >> (16 * (k & 1))));
        }
    emu::open_mmas[emu::lin()].push_back(m);
}
static inline void wgmma_ss_n64(float (&d)[32], unsigned long long da, unsigned long long db, int sd) { wgmma_ss(d, da, db, sd); }
static inline void wgmma_ss_n128(float (&d)[64], unsigned long long da, unsigned long long db, int sd) { wgmma_ss(d, da, db, sd); }
static inline void wgmma_rs_n64(float (&d)[32], const unsigned (&a)[4], unsigned long long db) { wgmma_rs(d, a, db); }
static inline void wgmma_rs_n128(float (&d)[64], const unsigned (&a)[4], unsigned long long db) { wgmma_rs(d, a, db); }
"""  # noqa: E501

# (B, H, S, D, causal): one key (D 64 and 128), odd S over several key tiles and query blocks
# (33: the second warpgroup's rows all past S), D 32 zero-padded to 64, D 100 (the scalar copies,
# padded to 128), and 300 causal keys wrapping every ring depth with BKV 64
WGMMA_ATTN_CASES = [(1, 1, 1, 64, 0), (1, 1, 1, 128, 1), (1, 2, 33, 64, 1), (2, 1, 100, 128, 0),
                    (1, 1, 77, 32, 1), (1, 1, 130, 100, 1), (1, 1, 300, 64, 1), (1, 1, 257, 128, 0)]
# enough for the mutations below: several tiles and both head dims, causal and not
MUTATION_CASES = [(1, 2, 33, 64, 1), (1, 1, 200, 128, 0), (1, 1, 300, 64, 1)]


def wgmma_attention_failures(source: str, config: Config, directory: Path, tag: str,
                             cases: list[tuple[int, int, int, int, int]] = WGMMA_ATTN_CASES) -> list[str]:
    t = load_tunable("attention_fwd", "tunable_wgmma.json")
    # P is rounded to bf16 for P @ V, as flash attention does: the same margin as the mma.sync kernel's
    return attention_failures(source, t.spec["launch"]["default"], directory, tag, config, PTX_EMU_ATTN_WGMMA,
                              0.75, cases)


@pytest.mark.parametrize("config", [
    {"NWG": 2, "BKV": 128, "STAGES": 2},   # the defaults
    {"NWG": 1, "BKV": 64, "STAGES": 3},
    {"NWG": 2, "BKV": 64, "STAGES": 5},
    {"NWG": 2, "BKV": 128, "STAGES": 3},
])
def test_attention_wgmma_tunable_matches_float64(config: Config, tmp_path: Path) -> None:
    t = load_tunable("attention_fwd", "tunable_wgmma.json")
    failures = wgmma_attention_failures(t.source, config, tmp_path, "wgmma")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(("old", "new", "config"), [
    # uses a tile before it lands
    ("cp_async_wait<STAGES - 2>();", "cp_async_wait<STAGES - 1>();", {"NWG": 1, "BKV": 64, "STAGES": 2}),
    # reads S before its wgmma batch completed
    ("wgmma_wait<0>();\n#pragma unroll\n        for (int i = 0; i < BKV / 2; ++i) fence_reg(s[i]);",
     "wgmma_wait<1>();\n#pragma unroll\n        for (int i = 0; i < BKV / 2; ++i) fence_reg(s[i]);",
     {"NWG": 1, "BKV": 64, "STAGES": 3}),
    # P's A fragment with rows g + 8 and columns 8.. swapped
    ("{p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]}",
     "{p[4 * kk], p[4 * kk + 2], p[4 * kk + 1], p[4 * kk + 3]}", {"NWG": 2, "BKV": 64, "STAGES": 2}),
    # the causal mask off by one
    ("(causal && j > row[h])", "(causal && j > row[h] + 1)", {"NWG": 2, "BKV": 128, "STAGES": 2}),
    # tiles not swizzled
    ("(((c & 7) ^ (r & 7)) << 4)", "((c & 7) << 4)", {"NWG": 1, "BKV": 64, "STAGES": 2}),
    # tiles off the swizzle's 1024-byte period
    ("((1024 - (smem_addr(raw) & 1023)) & 1023)", "0", {"NWG": 1, "BKV": 64, "STAGES": 2}),
    # k's second 64-dim block at q's stride (BQ 128 rows, BKV 64)
    ("ks + (kk >> 2) * BKV * 128", "ks + (kk >> 2) * BQ * 128", {"NWG": 2, "BKV": 64, "STAGES": 2}),
    # the output rows of the accumulator fragment: lane % 8 for lane / 4
    ("const int g = lane >> 2, t = lane & 3;", "const int g = lane & 7, t = lane & 3;",
     {"NWG": 1, "BKV": 64, "STAGES": 2}),
])
def test_the_attention_wgmma_emulation_catches_a_pipeline_fragment_mask_or_layout_bug(
    old: str, new: str, config: Config, tmp_path: Path
) -> None:
    t = load_tunable("attention_fwd", "tunable_wgmma.json")
    assert t.source.count(old) == 1, old
    broken = t.source.replace(old, new)
    assert wgmma_attention_failures(broken, config, tmp_path, "broken", MUTATION_CASES)


# ptxas's C7515 ("wgmma.mma_async instructions are serialized due to non wgmma instructions defining
# accumulator registers ..."): each wgmma then waits for the one before it. Leaving the P v batch in
# flight across the next tile's S batch (FA3's overlap) drew it with nvcc / NVRTC 13.0, so the kernel
# completes each batch in its own tile; the check keeps a change from bringing it back unnoticed
SERIALIZED = "wgmma.mma_async instructions are serialized"
CROSS_TILE = ("        wgmma_wait<0>();\n    }\n    cp_async_wait<0>();",
              "    }\n    wgmma_wait<0>();\n    cp_async_wait<0>();")


def _ptxas_log(source: str, config: Config) -> str:
    t = load_tunable("attention_fwd", "tunable_wgmma.json")
    result = compile_kernel(source, "sm_90", options_for(t.spec, config), filename="tunable_wgmma.cu")
    assert result.ok, result.summary()
    return result.log


@pytest.mark.parametrize("config", [{"NWG": 2, "BKV": 128, "STAGES": 2}, {"NWG": 1, "BKV": 64, "STAGES": 2}])
def test_ptxas_keeps_the_wgmma_batches_pipelined(config: Config) -> None:
    t = load_tunable("attention_fwd", "tunable_wgmma.json")
    assert SERIALIZED not in _ptxas_log(t.source, config)


def test_the_serialization_check_is_real() -> None:
    t = load_tunable("attention_fwd", "tunable_wgmma.json")
    assert t.source.count(CROSS_TILE[0]) == 1
    assert SERIALIZED in _ptxas_log(t.source.replace(*CROSS_TILE), {"NWG": 1, "BKV": 64, "STAGES": 2})
