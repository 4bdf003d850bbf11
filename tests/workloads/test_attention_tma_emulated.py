"""attention_fwd's warp-specialized TMA kernel (workloads/attention_fwd/tunable_tma.cu, tunable_tma.json) on the CPU.

The emulator, driver and float64 checks are tests/workloads/test_new_workloads_emulated.py's; the
wgmma emulation (A from shared memory or registers, B K-major or N-major) is
tests/workloads/test_attention_wgmma_emulated.py's; the mbarriers, cp.async.bulk.tensor.2d (box
copied from an emulated tensor map into the 128-byte swizzled layout, zeros outside the map's
dims), setmaxnreg and the hazard check (a TMA copy into shared memory a queued wgmma still reads
fails the case) are tests/workloads/test_gemm_bf16_tma_emulated.py's, the hazard check extended to
the attention kernel's operand forms. The driver encodes the three maps (q, k, v) from the geometry
the launch spec's `tensor_maps` expressions give for each case; k is misaligned by one element in
the second run of each case, which takes the kernel's scalar fallback. Whether the emulation
matches the hardware only an H100 / H200 run can tell (tests/gpu/test_tunable_gpu.py).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_attention_wgmma_emulated import PTX_EMU_ATTN_WGMMA
from test_gemm_bf16_tma_emulated import WAIT_NEW, WAIT_OLD, tma_compile_problems, tma_driver
from test_new_workloads_emulated import DRIVER, EMU_TOL, GXX, program
from test_tunable_emulated import run_emulated
from test_tunable_kernels import LIMITS, Config, load_tunable, options_for, valid_configs

from kernelopt_mcp.compiler import compile_kernel
from kernelopt_mcp.evaluation.tensor_maps import check_tensor_maps
from kernelopt_mcp.launch import LaunchSpec, resolve
from kernelopt_mcp.workload import load_workload

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(GXX is None, reason="needs g++ to build the CUDA emulator")

# the shared bytes a queued wgmma reads: A from shared memory only (P comes from registers); B
# N-major (the v tile: n / 64 column blocks LBO apart, 16 k rows) or K-major (the k tile: n rows in
# 8-row groups SBO apart, 16 elements = 32 bytes of each)
READS = r"""        auto reads = [&](const Mma& m) {
            const unsigned sa = (unsigned)(m.da & 0x3FFF) << 4, sbo_a = (unsigned)((m.da >> 32) & 0x3FFF) << 4;
            const unsigned sb = (unsigned)(m.db & 0x3FFF) << 4, lbo_b = (unsigned)((m.db >> 16) & 0x3FFF) << 4,
                           sbo_b = (unsigned)((m.db >> 32) & 0x3FFF) << 4;
            const unsigned alo = sa & ~127u, ahi = up128(sa + 7 * 128 + 7 * sbo_a + 32);
            const unsigned blo = sb & ~127u,
                           bhi = m.trans_b ? up128(sb + (m.n / 64 - 1) * lbo_b + 7 * 128 + sbo_b + 128)
                                           : up128(sb + 7 * 128 + (m.n / 8 - 1) * sbo_b + 32);
            return (!m.a_regs && alo < hi && lo < ahi) || (blo < hi && lo < bhi);
        };
"""
_GEMM_READS = re.compile(r"        auto reads = \[&\]\(const Mma& m\) \{\n.*?\n        \};\n", re.DOTALL)
assert len(_GEMM_READS.findall(WAIT_NEW)) == 1

# A tensor copy is checked against the queued wgmmas when issued (it may land from then on) and
# lands when a thread next waits on its mbarrier (checked again then): a consumer that reads a stage
# without waiting for its barrier finds the old contents, as it may on the hardware. The gemm's
# emulation copies at issue, which the producer's thread reaches before any consumer runs.
TRY_WAIT = "static inline bool mbar_try_wait(unsigned a, unsigned parity) {\n"
DEFERRED = r"""namespace emu {
struct TmaCopy { unsigned addr; unsigned long long map[6]; int c0, c1; };   // the map by value (a parameter)
static std::map<unsigned, std::vector<TmaCopy>> in_flight;   // by barrier
static void land(unsigned a) {
    auto it = in_flight.find(a);
    if (it == in_flight.end() || it->second.empty()) return;
    std::vector<TmaCopy> copies;
    copies.swap(it->second);
    for (const TmaCopy& c : copies) {
        const char* base = (const char*)(uintptr_t)c.map[0];
        const long long d0 = (long long)c.map[1], d1 = (long long)c.map[2], stride = (long long)c.map[3];
        const int b0 = (int)c.map[4], b1 = (int)c.map[5];
        check_pending_reads(c.addr, c.addr + b0 * b1 * 2);
        for (int y = 0; y < b1; ++y)
            for (int x = 0; x < b0; ++x) {
                const long long gx = (long long)c.c0 + x, gy = (long long)c.c1 + y;
                unsigned short v = 0;
                if (gx >= 0 && gx < d0 && gy >= 0 && gy < d1) std::memcpy(&v, base + gy * stride + gx * 2, 2);
                const unsigned l = c.addr + y * 128 + x * 2, phys = l ^ (((l >> 7) & 7u) << 4);
                std::memcpy(ko_emu_dyn_smem + (phys - KO_SMEM_BASE), &v, 2);
            }
        Bar& b = bar_at(a);
        b.tx -= (long long)b0 * b1 * 2;
        bar_step(b);
    }
}
}  // namespace emu
static inline bool mbar_try_wait(unsigned a, unsigned parity) {
    emu::land(a);
"""
TMA_LOAD = r"""static inline void tma_load_2d(void* dst, const TensorMap* map, int c0, int c1, unsigned bar) {
    const unsigned long long* o = map->opaque;
    const unsigned addr = smem_addr(dst);
    if (o[6] != 128 || o[4] * 2 != 128) { std::fprintf(stderr, "tensor map not a 128-byte swizzled bf16 box\n"); std::exit(6); }
    if (addr % 1024) { std::fprintf(stderr, "128B-swizzled box at shared 0x%x, not on a 1024-byte boundary\n", addr); std::exit(6); }
    if (addr - KO_SMEM_BASE + (size_t)o[4] * o[5] * 2 > emu::smem_bytes) { std::fprintf(stderr, "box past shared memory\n"); std::exit(6); }
    emu::bar_at(bar);
    emu::check_pending_reads(addr, addr + (unsigned)(o[4] * o[5] * 2));
    emu::TmaCopy c{addr, {o[0], o[1], o[2], o[3], o[4], o[5]}, c0, c1};
    emu::in_flight[bar].push_back(c);
}
"""  # noqa: E501


def _attention_tma_emulation() -> str:
    wait = _GEMM_READS.sub(lambda _: READS, WAIT_NEW)
    assert wait.count(TRY_WAIT) == 1 and wait.count("static inline void tma_load_2d(") == 1
    head, tail = wait.split("static inline void tma_load_2d(")
    wait = head[: head.rindex("// The emulated CUtensorMap")] + TMA_LOAD
    assert "}\n" in tail
    assert WAIT_OLD in PTX_EMU_ATTN_WGMMA
    return ("#include <map>\n" + PTX_EMU_ATTN_WGMMA.replace(WAIT_OLD, wait.replace(TRY_WAIT, DEFERRED))
            + ATTN_TMA_EXTRA)


# the kernel's wrappers the gemm's and the wgmma attention's emulations lack: S = q k^T at BKV64 192,
# setmaxnreg by count (no-ops, as the gemm's) and the lane-0 broadcast of a warp-uniform value
ATTN_TMA_EXTRA = r"""static inline void wgmma_ss_n192(float (&d)[96], unsigned long long da, unsigned long long db,
                                 int sd) { wgmma_ss(d, da, db, sd); }
template <int R> static inline void setmaxnreg_dec() {}
template <int R> static inline void setmaxnreg_inc() {}
static inline int warp_uniform(int v) { return v; }
"""


PTX_EMU_ATTN_TMA = _attention_tma_emulation()


def _tma_driver() -> str:
    """The emulator's driver (built with -DWL_attention_fwd) with the maps over q, k and v encoded from
    argv[16..30] (per map: dims[0] dims[1] stride box[0] box[1]) and passed to the kernel."""
    launch = "    __nv_bfloat16 *q = Q.p(), *k = Kb.p(), *v = V.p(), *o = O.p();\n"
    return tma_driver([
        (launch, launch + "    TensorMap tmQ, tmK, tmV;\n"
         "    if (!encode(tmQ, q, n * 2, argv + 16) || !encode(tmK, k, n * 2, argv + 21) ||\n"
         "        !encode(tmV, v, n * 2, argv + 26)) {\n"
         "        std::fprintf(stderr, \"a tensor map reaches past its buffer\\n\"); return 1; }\n"),
        ("attention_fwd(q, k, v, o, Bn, Hn, S, D, causal); });",
         "attention_fwd(q, k, v, o, Bn, Hn, S, D, causal, tmQ, tmK, tmV); });"),
    ])


TMA_DRIVER = _tma_driver()

# (B, H, S, D, causal): one key (D 64 and 128); 33 causal keys over two heads (the second
# warpgroup's rows all past S, the key tile running into the next head's rows); 100 keys over two
# batches (a BKV 128 tile across the head boundary, not causal); D 32 (a 64-column box over a
# 32-column map: zero fill) and D 100 (no map: the scalar fallback, padded to 128); 300 causal keys
# wrapping every ring depth with BKV 64; 200 keys over four heads
TMA_ATTN_CASES = [(1, 1, 1, 64, 0), (1, 1, 1, 128, 1), (1, 2, 33, 64, 1), (2, 1, 100, 128, 0),
                  (1, 1, 77, 32, 1), (1, 1, 130, 100, 1), (1, 1, 300, 64, 1), (2, 2, 200, 64, 0),
                  (1, 1, 257, 128, 0)]
# enough for the mutations below: tiles across a head boundary, several tiles, both head dims
MUTATION_CASES = [(1, 2, 33, 64, 1), (2, 1, 100, 128, 0), (1, 1, 300, 64, 1)]
# the head-dim-64 shapes (NWG64 3: 192-row query blocks; BKV64 192) over several query blocks and key
# tiles, none a multiple of them: 450 causal keys (3 query blocks of 192 rows, the last 66; 3 key
# tiles, the last partial) and 400 keys over two heads (a 192-key tile into the next head's rows)
D64_CASES = [(1, 1, 450, 64, 1), (1, 2, 400, 64, 0), (2, 1, 250, 48, 1)]
Case = tuple[int, int, int, int, int]


def build_tma(source: str, config: Config, directory: Path, tag: str) -> Path:
    text = program(source, PTX_EMU_ATTN_TMA)
    cpp, exe = directory / f"{tag}.cpp", directory / tag
    cpp.write_text(text[: text.rindex(DRIVER)] + TMA_DRIVER)
    cmd = [GXX or "g++", "-O1", "-std=c++17", "-w", "-DWL_attention_fwd",
           *(f"-D{k}={v}" for k, v in config.items()), str(cpp), "-o", str(exe)]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    assert done.returncode == 0, f"{tag}: the emulator build failed:\n{done.stderr[-3000:]}"
    return exe


def tma_attention_failures(source: str, config: Config, directory: Path, tag: str,
                           cases: list[Case] = TMA_ATTN_CASES, misaligned: tuple[int, ...] = (0, 1),
                           tol: tuple[float, float] = EMU_TOL) -> list[str]:
    """What failed against float64, within 0.75 of ``tol`` (P rounded to bf16, as the wgmma kernel); the
    parameters ``config`` leaves out at their defaults."""
    t = load_tunable("attention_fwd", "tunable_tma.json")
    config = {**t.spec["defaults"], **config}
    exe = build_tma(source, config, directory, tag)
    spec = LaunchSpec.model_validate(t.spec["launch"]).for_case("x")
    rtol, atol = tol
    failures = []
    for b, h, s, d, causal in cases:
        scalars = {"B": b, "H": h, "S": s, "D": d, "causal": causal}
        r = resolve(spec, {**scalars, **config}, LIMITS, "x")
        geometry = [x for tm in r.tensor_maps for x in (*tm.dims, *(tm.strides or ()), *tm.box)]
        assert len(geometry) == 15, r.tensor_maps
        args = [b, h, s, d, causal, rtol * 0.75, atol * 0.75, *geometry]
        failures += [f for mis in misaligned if (f := run_emulated(exe, r, mis, args, f"{tag} {config} {scalars}"))]
    return failures


@pytest.mark.parametrize("config", [
    {"NWG": 2, "BKV": 128, "STAGES": 2},   # the defaults
    {"NWG": 1, "BKV": 64, "STAGES": 2},
    {"NWG": 2, "BKV": 64, "STAGES": 4},
    {"NWG": 1, "BKV": 128, "STAGES": 3},
    {"NWG": 2, "BKV": 128, "STAGES": 2, "OVERLAP": 1},
    {"NWG": 1, "BKV": 64, "STAGES": 3, "OVERLAP": 1},
])
def test_attention_tma_tunable_matches_float64(config: Config, tmp_path: Path) -> None:
    t = load_tunable("attention_fwd", "tunable_tma.json")
    failures = tma_attention_failures(t.source, config, tmp_path, "tma")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("config", [
    # three consumer warpgroups at D 64 (the head-dim-128 blocks then launch an idle fourth warpgroup)
    {"NWG": 2, "BKV": 128, "STAGES": 2, "NWG64": 3, "BKV64": 128},
    {"NWG": 2, "BKV": 128, "STAGES": 3, "OVERLAP": 1, "NWG64": 3, "BKV64": 128},
    {"NWG": 1, "BKV": 64, "STAGES": 4, "OVERLAP": 1, "NWG64": 3, "BKV64": 128},
    # 192-key tiles at D 64
    {"NWG": 2, "BKV": 64, "STAGES": 4, "NWG64": 2, "BKV64": 192},
    {"NWG": 2, "BKV": 128, "STAGES": 2, "OVERLAP": 1, "NWG64": 2, "BKV64": 192},
])
def test_attention_tma_head_dim_64_shapes_match_float64(config: Config, tmp_path: Path) -> None:
    t = load_tunable("attention_fwd", "tunable_tma.json")
    failures = tma_attention_failures(t.source, config, tmp_path, "tma64", [*TMA_ATTN_CASES, *D64_CASES])
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("config", [{"NWG": 2, "BKV": 64, "STAGES": 3},
                                    {"NWG": 2, "BKV": 128, "STAGES": 2, "OVERLAP": 1}])
def test_attention_tma_tunable_passes_the_workloads_correctness_shapes(config: Config, tmp_path: Path) -> None:
    # the workload's own correctness cases' shapes (the driver's normal inputs; k aligned: the TMA
    # path where D % 8 == 0) at the workload's tolerance: on the long causal rows (1500 and 257 keys)
    # the bf16 probabilities of P v pass EMU_TOL's margin, by the same amounts as tunable_wgmma.cu's
    # (bit-identical outputs there)
    wl = load_workload(REPO / "workloads" / "attention_fwd")
    cases: list[Case] = [(c.scalars["B"], c.scalars["H"], c.scalars["S"], c.scalars["D"], c.scalars["causal"])
                         for c in wl.spec.cases if c.kind == "correctness"]
    assert len(cases) >= 8
    tol = wl.spec.tolerance["o"]
    t = load_tunable("attention_fwd", "tunable_tma.json")
    failures = tma_attention_failures(t.source, config, tmp_path, "wl", cases, (0,), (tol.rtol, tol.atol))
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(("old", "new", "config", "symptom"), [
    # keys past S not masked: a tile's keys from the next head's rows (TMA) or zeros (fallback) count
    ("if (edge && (j >= S || (causal && j > row[h])))", "if (edge && causal && j > row[h])",
     {"NWG": 2, "BKV": 128, "STAGES": 2}, "expected"),
    # the causal mask off by one
    ("(causal && j > row[h])", "(causal && j > row[h] + 1)", {"NWG": 1, "BKV": 64, "STAGES": 2}, "expected"),
    # the consumers do not wait for a stage to land (TMA path: the copies land only when waited for)
    ("while (!mbar_try_wait(fullk0 + 8 * s, ph)) {}   // tile `tile`'s k has landed",
     "{}   // tile `tile`'s k has landed",
     {"NWG": 2, "BKV": 64, "STAGES": 2}, "misalign=0"),
    ("while (!mbar_try_wait(fullv0 + 8 * s, ph)) {}   // tile `tile`'s v", "{}   // tile `tile`'s v",
     {"NWG": 2, "BKV": 64, "STAGES": 2}, "misalign=0"),
    ("while (!mbar_try_wait(fullk0 + 8 * s, ph)) {}      // tile `tile`'s k, in", "{}   // tile `tile`'s k, in",
     {"NWG": 2, "BKV": 64, "STAGES": 2, "OVERLAP": 1}, "misalign=0"),
    ("while (!mbar_try_wait(fullv0 + 8 * prev, php)) {}  // tile - 1's v", "{}   // tile - 1's v",
     {"NWG": 2, "BKV": 64, "STAGES": 2, "OVERLAP": 1}, "misalign=0"),
    # nor for q
    ("while (!mbar_try_wait(qbar, 0)) {}", "", {"NWG": 2, "BKV": 64, "STAGES": 2}, "misalign=0"),
    # the producer does not wait for a stage's release (TMA path): it refills a stage still being read
    ("if (t >= STAGES)\n                        while (!mbar_try_wait(emptyk0",
     "if (false)\n                        while (!mbar_try_wait(emptyk0",
     {"NWG": 1, "BKV": 64, "STAGES": 2}, "more arrivals than its count"),
    ("if (t >= STAGES)\n                        while (!mbar_try_wait(emptyv0",
     "if (false)\n                        while (!mbar_try_wait(emptyv0",
     {"NWG": 1, "BKV": 64, "STAGES": 2}, "more arrivals than its count"),
    # one release per consumer warpgroup where the barrier counts warps: the ring stalls
    ("mbar_init(emptyk0 + 8 * s, 4 * NW);", "mbar_init(emptyk0 + 8 * s, NW);", {"NWG": 2, "BKV": 64, "STAGES": 2},
     "DEADLOCK"),
    # a stage released before the wgmma reading it completed
    ("wgmma_wait<0>();   // this warp's", "wgmma_wait<1>();   // this warp's", {"NWG": 1, "BKV": 64, "STAGES": 2},
     "a pending wgmma"),
    # the fallback's tiles not swizzled (TMA swizzles by the map: fails only with k misaligned)
    ("(((c & 7) ^ (r & 7)) << 4)", "((c & 7) << 4)", {"NWG": 1, "BKV": 64, "STAGES": 2}, "misalign=1"),
    # tiles off the swizzle's 1024-byte period
    ("((1024 - (smem_addr(raw) & 1023)) & 1023)", "0", {"NWG": 1, "BKV": 64, "STAGES": 2}, "1024-byte"),
    # v's box from k's map
    ("tma_load_2d(ks + TILE + b * BN * 128, tmV,", "tma_load_2d(ks + TILE + b * BN * 128, tmK,",
     {"NWG": 2, "BKV": 64, "STAGES": 2}, "misalign=0"),
    # OVERLAP: o rescaled while tile - 1's P v still accumulates into it
    ("        softmax_tile<BN>(sc, m, l, corr, tile * BN, S, causal, w0, row, t, scale);\n"
     "        wgmma_wait<0>();   // tile - 1's P v has completed: its v stage may be refilled\n",
     "        softmax_tile<BN>(sc, m, l, corr, tile * BN, S, causal, w0, row, t, scale);\n"
     "        for (int i = 0; i < HD / 2; ++i) acc[i] *= corr[(i >> 1) & 1];\n"
     "        wgmma_wait<0>();   // tile - 1's P v has completed: its v stage may be refilled\n"
     "        for (int i = 0; i < HD / 2; ++i) acc[i] /= corr[(i >> 1) & 1];\n",
     {"NWG": 1, "BKV": 64, "STAGES": 2, "OVERLAP": 1}, "expected"),
    # OVERLAP: tile - 1's stage released before its P v completed
    ("        wgmma_wait<0>();   // tile - 1's P v has completed: its v stage may be refilled\n"
     "#pragma unroll\n        for (int i = 0; i < HD / 2; ++i) fence_reg(acc[i]);\n"
     "#pragma unroll\n        for (int i = 0; i < HD / 2; ++i) acc[i] *= corr[(i >> 1) & 1];\n"
     "        pack_p<BN>(sc, p);\n        if (lane == 0) mbar_arrive(emptyv0 + 8 * prev);\n",
     "        if (lane == 0) mbar_arrive(emptyv0 + 8 * prev);\n"
     "        wgmma_wait<0>();   // tile - 1's P v has completed: its v stage may be refilled\n"
     "#pragma unroll\n        for (int i = 0; i < HD / 2; ++i) fence_reg(acc[i]);\n"
     "#pragma unroll\n        for (int i = 0; i < HD / 2; ++i) acc[i] *= corr[(i >> 1) & 1];\n"
     "        pack_p<BN>(sc, p);\n",
     {"NWG": 1, "BKV": 64, "STAGES": 2, "OVERLAP": 1}, "a pending wgmma"),
    # k's stage released before S completed (the producer, past v's wait, refills it at once)
    ("        qk_issue<HD, BN, BQ>(sc, qs + cw * 64 * 128, ks);\n        wgmma_wait<0>();\n"
     "#pragma unroll\n        for (int i = 0; i < BN / 2; ++i) fence_reg(sc[i]);\n"
     "#pragma unroll\n        for (int i = 0; i < HD / 2; ++i) fence_reg(acc[i]);\n"
     "        if (lane == 0) mbar_arrive(emptyk0 + 8 * s);   // this warp's reads of k are done\n",
     "        qk_issue<HD, BN, BQ>(sc, qs + cw * 64 * 128, ks);\n        if (lane == 0) mbar_arrive(emptyk0 + 8 * s);\n"
     "        wgmma_wait<0>();\n",
     {"NWG": 1, "BKV": 64, "STAGES": 2}, "a pending wgmma"),
    # the second 64-column box of k at the first's columns (D 128)
    ("tma_load_2d(ks + b * BN * 128, tmK, 64 * b,", "tma_load_2d(ks + b * BN * 128, tmK, 0,",
     {"NWG": 2, "BKV": 64, "STAGES": 2}, "misalign=0"),
])
def test_the_attention_tma_emulation_catches_a_mask_pipeline_or_layout_bug(
    old: str, new: str, config: Config, symptom: str, tmp_path: Path
) -> None:
    t = load_tunable("attention_fwd", "tunable_tma.json")
    assert t.source.count(old) == 1, old
    broken = t.source.replace(old, new)
    failures = tma_attention_failures(broken, config, tmp_path, "broken", MUTATION_CASES)
    assert failures and any(symptom in f for f in failures), failures


# ptxas's C7515 ("wgmma.mma_async instructions are serialized ..."): each wgmma then waits for the
# one before it (test_attention_wgmma_emulated.py)
SERIALIZED = "wgmma.mma_async instructions are serialized"


def block_threads(config: Config) -> int:
    """Every block launches the larger head-dim instance's warpgroups (the kernel's launch bound)."""
    return (max(config["NWG"], config["NWG64"]) + 1) * 128


def register_split(config: Config, nw: int) -> tuple[int, int]:
    """The kernel's setmaxnreg counts (producer and idle warpgroups, consumers) for an instance of ``nw``
    consumer warpgroups: its CREG / PREG."""
    return (40 if block_threads(config) == 384 else 32 if nw == 3 else 24), (160 if nw == 3 else 232)


def test_every_tma_configuration_compiles_for_sm_90a_without_spills_or_serialized_wgmma() -> None:
    # the signature's parameters then the three maps, no spills (tma_compile_problems); no C7513 / C7515 /
    # C7520. For each head-dim instance, the setmaxnreg.inc of its consumers and the .dec of the producer
    # and the idle warpgroups must fit the registers the block launches with (its threads x the count
    # reported: the CTA's pool), and neither may move against that count
    def more(config: Config, result: Any, res: Any) -> list[str]:
        found = []
        threads = block_threads(config)
        for nw in {config["NWG"], config["NWG64"]}:
            dec, inc = register_split(config, nw)
            if res.registers * threads < 128 * (dec * (threads // 128 - nw) + inc * nw):
                found.append(f"{config}: {res.registers} registers: setmaxnreg.inc {inc} would wait forever")
            if not dec <= res.registers <= inc:
                found.append(f"{config}: {res.registers} registers against setmaxnreg {dec} / {inc}")
        found += [f"{config}: ptxas serialized the wgmma ({code})" for code in ("C7513", "C7515", "C7520")
                  if code in result.log]
        if SERIALIZED in result.log:
            found.append(f"{config}: ptxas serialized the wgmma")
        return found

    problems = tma_compile_problems(load_tunable("attention_fwd", "tunable_tma.json"), 3, block_threads, more)
    assert not problems, "\n".join(problems)


def test_the_serialization_check_is_real() -> None:
    # the P v batch left in flight across the next tile's S batch draws C7515 with this kernel too
    t = load_tunable("attention_fwd", "tunable_tma.json")
    old = "wgmma_wait<0>();   // this warp's"
    assert t.source.count(old) == 1
    config = {"NWG": 1, "BKV": 64, "STAGES": 2}
    broken = t.source.replace(old, "wgmma_wait<1>();   // this warp's")
    result = compile_kernel(broken, "sm_90", options_for(t.spec, config), filename="tunable_tma.cu")
    assert result.ok, result.summary()
    assert SERIALIZED in result.log


def test_the_tma_maps_are_valid_for_every_case_of_the_workload() -> None:
    # the harness's rules that need the element type, and each map's reach within its buffer, for
    # every case (D % 8 != 0: the 1 x 1 view with a 16-byte stride), at every configuration's boxes
    t = load_tunable("attention_fwd", "tunable_tma.json")
    wl = load_workload(REPO / "workloads" / "attention_fwd")
    spec = LaunchSpec.model_validate(t.spec["launch"])
    for config in valid_configs(t.spec):
        for case in wl.spec.cases:
            r = resolve(spec.for_case(case.name), {**dict(case.scalars), **config}, LIMITS, case.name)
            check_tensor_maps(r, wl, case)
            d = case.scalars["D"]
            assert all((tm.dims == (1, 1)) == (d % 8 != 0) for tm in r.tensor_maps)
            nwg, bkv = (config["NWG64"], config["BKV64"]) if d <= 64 else (config["NWG"], config["BKV"])
            assert [tm.box for tm in r.tensor_maps] == [(64, 64 * nwg), (64, bkv), (64, bkv)]
            assert r.block == (block_threads(config), 1, 1) and r.grid[1] == -(-case.scalars["S"] // (64 * nwg))
