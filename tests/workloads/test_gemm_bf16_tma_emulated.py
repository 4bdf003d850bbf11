"""gemm_bf16's warp-specialized TMA kernel (workloads/gemm_bf16/tunable_tma.cu, tunable_tma.json) on the CPU.

The emulator and checks are tests/workloads/test_new_workloads_emulated.py's, the wgmma emulation
tests/workloads/test_gemm_bf16_wgmma_emulated.py's; this file adds what the TMA kernel's PTX block wraps:
mbarriers (init, arrive, arrive.expect_tx, try_wait.parity: a wait that fails yields the fiber),
cp.async.bulk.tensor.2d (the box copied from an emulated tensor map into shared memory in the
128-byte swizzled layout, zeros outside the map's dims, its bytes completed on the barrier),
setmaxnreg and fence.proxy.async as no-ops. The driver builds the two maps from the geometry the
launch spec's `tensor_maps` expressions give for each case (the emulated CUtensorMap holds the
global address, dims, stride and box in its opaque words) and refuses a map reaching past its buffer.

Hazards of the real pipeline: a wgmma reads shared memory when its group is waited for
(wgmma.wait_group), and the warpgroup's 128 threads pass that wait together; a TMA copy into
shared memory that a queued, not yet completed wgmma reads is reported and fails the case (its
data lands, so the wgmma reads the new slice); an mbarrier arrival yields, so a producer released
too early runs before the consumers' pending wgmmas do. Whether the emulation matches the hardware
only an H200 can tell.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_gemm_bf16_wgmma_emulated import PTX_EMU_WGMMA, WGMMA_CASES
from test_new_workloads_emulated import DRIVER, GXX, program
from test_tunable_emulated import run_emulated
from test_tunable_kernels import LIMITS, Config, load_tunable, options_for, valid_configs

from kernelopt_mcp.compiler import compile_kernel
from kernelopt_mcp.evaluation.tensor_maps import check_tensor_maps
from kernelopt_mcp.launch import LaunchSpec, resolve
from kernelopt_mcp.workload import load_workload

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(GXX is None, reason="needs g++ to build the CUDA emulator")

WAIT_OLD = """template <int N> static inline void wgmma_wait() {   // the mma's of older groups run now, not before
    auto& g = emu::mma_groups[emu::lin()];
    while ((int)g.size() > N) {
        for (const auto& m : g.front()) emu::run_mma(m);
        g.erase(g.begin());
    }
}
"""

# wgmma.wait_group as a warpgroup-wide step (every thread's older groups run, then the 128 threads
# meet), the mbarriers, the tensor copies and the hazard check
WAIT_NEW = r"""namespace emu {
static int wg_arrived[8];
static unsigned wg_gen[8];
static void wg_sync() {   // the warpgroup's 128 threads meet (the other fibers run meanwhile)
    const int g = lin() >> 7;
    const unsigned gen = wg_gen[g];
    if (++wg_arrived[g] == 128) { wg_arrived[g] = 0; ++wg_gen[g]; return; }
    while (wg_gen[g] == gen) yield(RUN);
}
static bool hazard = false;
static inline unsigned up128(unsigned x) { return (x + 127u) & ~127u; }
// shared bytes [lo, hi) about to be written by TMA while a queued wgmma (any thread's) reads them
static void check_pending_reads(unsigned lo, unsigned hi) {
    for (int t = 0; t < 1024; ++t) {
        auto reads = [&](const Mma& m) {
            const unsigned sa = (unsigned)(m.da & 0x3FFF) << 4, sbo_a = (unsigned)((m.da >> 32) & 0x3FFF) << 4;
            const unsigned sb = (unsigned)(m.db & 0x3FFF) << 4, lbo_b = (unsigned)((m.db >> 16) & 0x3FFF) << 4,
                           sbo_b = (unsigned)((m.db >> 32) & 0x3FFF) << 4;
            const unsigned alo = sa & ~127u, ahi = up128(sa + 7 * 128 + 7 * sbo_a + 32);
            const unsigned blo = sb & ~127u, bhi = up128(sb + (m.n / 64 - 1) * lbo_b + 7 * 128 + sbo_b + 128);
            return (alo < hi && lo < ahi) || (blo < hi && lo < bhi);
        };
        bool hit = false;
        for (const auto& m : open_mmas[t]) hit = hit || reads(m);
        for (const auto& g : mma_groups[t]) for (const auto& m : g) hit = hit || reads(m);
        if (hit) {
            if (!hazard) std::fprintf(stderr, "TMA wrote shared [0x%x, 0x%x) which a pending wgmma of thread %d reads\n", lo, hi, t);
            hazard = true;
        }
    }
}
struct Bar { int count = 0, pending = 0; long long tx = 0; unsigned done = 0; };   // done: phases completed
static std::map<unsigned, Bar> bars;
static int spins[1024];
static Bar& bar_at(unsigned a) {
    auto it = bars.find(a);
    if (it == bars.end()) { std::fprintf(stderr, "mbarrier at 0x%x used before mbarrier.init\n", a); std::exit(6); }
    return it->second;
}
static void bar_step(Bar& b) {
    if (b.pending == 0 && b.tx == 0) { ++b.done; b.pending = b.count; }
}
static void bar_arrive(unsigned a) {
    Bar& b = bar_at(a);
    if (b.pending <= 0) { std::fprintf(stderr, "mbarrier at 0x%x: more arrivals than its count\n", a); std::exit(6); }
    --b.pending;
    bar_step(b);
}
static size_t smem_bytes;
}  // namespace emu
template <int N> static inline void wgmma_wait() {   // the mma's of older groups run now, the warpgroup's together
    auto& g = emu::mma_groups[emu::lin()];
    while ((int)g.size() > N) {
        for (const auto& m : g.front()) emu::run_mma(m);
        g.erase(g.begin());
    }
    emu::wg_sync();
}
#define __grid_constant__
static inline void setmaxnreg_dec40() {}
static inline void setmaxnreg_inc232() {}
static inline void mbar_init(unsigned a, unsigned count) {
    if (a % 8) { std::fprintf(stderr, "mbarrier at 0x%x not 8-byte aligned\n", a); std::exit(6); }
    emu::Bar b; b.count = b.pending = (int)count;
    emu::bars[a] = b;
}
static inline void mbar_arrive(unsigned a) { emu::bar_arrive(a); emu::yield(emu::RUN); }   // others may run now
static inline void mbar_arrive_expect_tx(unsigned a, unsigned bytes) {
    emu::bar_at(a).tx += bytes;
    emu::bar_arrive(a);
}
static inline bool mbar_try_wait(unsigned a, unsigned parity) {
    const int me = emu::lin();
    if ((emu::bar_at(a).done & 1u) != parity) { emu::spins[me] = 0; return true; }
    if (++emu::spins[me] > 20000) {
        std::fprintf(stderr, "EMU DEADLOCK: mbarrier at 0x%x never completes a phase of parity %u\n", a, parity);
        std::exit(3);
    }
    emu::yield(emu::RUN);
    return false;
}
// The emulated CUtensorMap: opaque[0] global address, [1], [2] dims, [3] the row stride in bytes,
// [4], [5] the box, [6] the swizzle span (128). Rows of the box land 128 bytes apart, 16-byte
// chunks XOR-swizzled by bits 7-9 of the absolute shared address, as wgmma's emulation reads them.
static inline void tma_load_2d(void* dst, const TensorMap* map, int c0, int c1, unsigned bar) {
    const unsigned long long* o = map->opaque;
    const char* base = (const char*)(uintptr_t)o[0];
    const long long d0 = (long long)o[1], d1 = (long long)o[2], stride = (long long)o[3];
    const int b0 = (int)o[4], b1 = (int)o[5];
    const unsigned addr = smem_addr(dst);
    if (o[6] != 128 || b0 * 2 != 128) { std::fprintf(stderr, "tensor map not a 128-byte swizzled bf16 box\n"); std::exit(6); }
    if (addr % 1024) { std::fprintf(stderr, "128B-swizzled box at shared 0x%x, not on a 1024-byte boundary\n", addr); std::exit(6); }
    if (addr - KO_SMEM_BASE + (size_t)b0 * b1 * 2 > emu::smem_bytes) { std::fprintf(stderr, "box past shared memory\n"); std::exit(6); }
    emu::check_pending_reads(addr, addr + b0 * b1 * 2);
    for (int y = 0; y < b1; ++y)
        for (int x = 0; x < b0; ++x) {
            const long long gx = (long long)c0 + x, gy = (long long)c1 + y;
            unsigned short v = 0;
            if (gx >= 0 && gx < d0 && gy >= 0 && gy < d1) std::memcpy(&v, base + gy * stride + gx * 2, 2);
            const unsigned l = addr + y * 128 + x * 2, phys = l ^ (((l >> 7) & 7u) << 4);
            std::memcpy(ko_emu_dyn_smem + (phys - KO_SMEM_BASE), &v, 2);
        }
    emu::Bar& b = emu::bar_at(bar);
    b.tx -= (long long)b0 * b1 * 2;
    emu::bar_step(b);
}
"""  # noqa: E501

assert WAIT_OLD in PTX_EMU_WGMMA
PTX_EMU_TMA = "#include <map>\n" + PTX_EMU_WGMMA.replace(WAIT_OLD, WAIT_NEW)

# argv: the launch, misalign, M N K rtol atol, then per map (A, B): dims[0] dims[1] stride box[0] box[1]
ENCODE = r"""
static bool encode(TensorMap& tm, const void* p, size_t bytes, char** a) {   // false: reaches past the buffer
    tm = TensorMap{};
    tm.opaque[0] = (unsigned long long)(uintptr_t)p;
    for (int i = 0; i < 5; ++i) tm.opaque[1 + i] = strtoull(a[i], nullptr, 10);
    tm.opaque[6] = 128;
    return (tm.opaque[1] - 1) * 2 + (tm.opaque[2] - 1) * tm.opaque[3] + 2 <= bytes;
}

"""


def tma_driver(edits: list[tuple[str, str]]) -> str:
    """test_new_workloads_emulated.DRIVER with ``edits`` (the kernel's maps encoded and passed to it) and
    what every TMA emulation needs wired in: ENCODE, the shared memory size, the hazard flag."""
    text = DRIVER
    for old, new in [
        ("int main(", ENCODE + "int main("),
        ("    ko_emu_dyn_smem = reinterpret_cast<char*>(smem.data());\n",
         "    ko_emu_dyn_smem = reinterpret_cast<char*>(smem.data());\n    emu::smem_bytes = shared;\n"),
        ("    if (fail) { std::fprintf(stderr, \"FAIL\\n\"); return 1; }",
         "    if (emu::hazard) fail = 1;\n    if (fail) { std::fprintf(stderr, \"FAIL\\n\"); return 1; }"),
        *edits,
    ]:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def _tma_driver() -> str:
    """The driver built with -DWL_gemm_bf16, with the two maps encoded over A and B and passed to the kernel."""
    return tma_driver([
        ("    for (size_t i = 0; i < C.n; ++i) C.p()[i] = std::nanf(\"\");\n    std::vector<double> ref((size_t)M "
         "* N);\n", "    for (size_t i = 0; i < C.n; ++i) C.p()[i] = std::nanf(\"\");\n    TensorMap tmA, tmB;\n"
         "    if (!encode(tmA, A.p(), A.n * 2, argv + 14) || !encode(tmB, B.p(), B.n * 2, argv + 19)) {\n"
         "        std::fprintf(stderr, \"a tensor map reaches past its buffer\\n\"); return 1; }\n"
         "    std::vector<double> ref((size_t)M * N);\n"),
        ("gemm_bf16(a, b, c, M, N, K); });", "gemm_bf16(a, b, c, M, N, K, tmA, tmB); });"),
    ])


TMA_DRIVER = _tma_driver()

# the wgmma kernel's shapes (odd ones take the fallback; 200x136x72, 70x64x328 and 130x264x520 the
# TMA path with ragged M / N / K tails, every one also with A misaligned: the fallback), a deep K
# (16 slices: every ring depth wraps several times) over three tile rows, and small analogues of
# the workload's row_1x4096x4096 (one row: A's box taller than its map) and long_k_64x72x8192
TMA_CASES = [*WGMMA_CASES, (300, 128, 1024), (1, 520, 1024), (64, 72, 2048)]


def build_tma(source: str, config: Config, directory: Path, tag: str) -> Path:
    text = program(source, PTX_EMU_TMA)
    cpp, exe = directory / f"{tag}.cpp", directory / tag
    cpp.write_text(text[: text.rindex(DRIVER)] + TMA_DRIVER)
    cmd = [GXX or "g++", "-O1", "-std=c++17", "-w", "-DWL_gemm_bf16", *(f"-D{k}={v}" for k, v in config.items()),
           str(cpp), "-o", str(exe)]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    assert done.returncode == 0, f"{tag}: the emulator build failed:\n{done.stderr[-3000:]}"
    return exe


def tma_failures(source: str, config: Config, directory: Path, tag: str,
                 cases: list[tuple[int, int, int]] = TMA_CASES) -> list[str]:
    t = load_tunable("gemm_bf16", "tunable_tma.json")
    tol = t.workload.spec.tolerance["C"]
    exe = build_tma(source, config, directory, tag)
    spec = LaunchSpec.model_validate(t.spec["launch"]).for_case("x")
    failures = []
    for m, n, k in cases:
        r = resolve(spec, {"M": m, "N": n, "K": k, **config}, LIMITS, "x")
        geometry = [x for tm in r.tensor_maps for x in (*tm.dims, *(tm.strides or ()), *tm.box)]
        assert len(geometry) == 10, r.tensor_maps
        args = [m, n, k, tol.rtol / 10, tol.atol / 10, *geometry]
        failures += [f for mis in (0, 1) if (f := run_emulated(exe, r, mis, args, f"{tag} {config} M={m} N={n} K={k}"))]
    return failures


@pytest.mark.parametrize("config", [
    {"BN": 256, "STAGES": 4, "GROUP": 8},
    {"BN": 128, "STAGES": 3, "GROUP": 1},
    {"BN": 128, "STAGES": 6, "GROUP": 16},
    {"BN": 256, "STAGES": 3, "GROUP": 1},
    {"BN": 128, "STAGES": 5, "GROUP": 8},
])
def test_gemm_bf16_tma_tunable_matches_float64(config: Config, tmp_path: Path) -> None:
    t = load_tunable("gemm_bf16", "tunable_tma.json")
    failures = tma_failures(t.source, config, tmp_path, "tma")
    assert not failures, "\n".join(failures)


def tma_compile_problems(t: Any, maps: int, threads: Callable[[Config], int],
                         more: Callable[[Config, Any, Any], list[str]] = lambda config, result, res: []) -> list[str]:
    """What is wrong with each configuration of the tunable ``t`` compiled by NVRTC as the harness compiles
    it: a failed compile; parameters other than the signature's then ``maps`` 128-byte tensor maps; spills,
    local memory or no register count; more registers than ``threads(config)`` threads may have; ``more``."""
    sig = t.workload.signature
    sizes = [8 if p.kind == "buffer" else 4 for p in sig.params] + [128] * maps
    problems = []
    for config in valid_configs(t.spec):
        result = compile_kernel(t.source, "sm_90", options_for(t.spec, config), filename=t.spec["source"])
        if not result.ok:
            problems.append(f"{config}: {result.summary()}")
            continue
        res = result.resources[sig.entry]
        if [p.size_bytes for p in result.entries[sig.entry]] != sizes:
            problems.append(f"{config}: parameters {result.entries[sig.entry]}")
        if res.spill_store_bytes or res.spill_load_bytes or res.stack_frame_bytes or not res.registers:
            problems.append(f"{config}: spills, local memory or no register count: {result.summary()}")
        elif res.registers * threads(config) > 65536:
            problems.append(f"{config}: {res.registers} registers x {threads(config)} threads")
        else:
            problems += more(config, result, res)
    return problems


def test_every_tma_configuration_compiles_for_sm_90a_without_spills() -> None:
    # the launch bound's register cap (384 threads, 1 block: 168) holds
    problems = tma_compile_problems(load_tunable("gemm_bf16", "tunable_tma.json"), 2, lambda config: 384)
    assert not problems, "\n".join(problems)


def test_the_tma_maps_are_valid_for_every_case_of_the_workload() -> None:
    # the harness's rules that need the element type, and each map's reach within its buffer, for
    # every correctness and performance case (odd K or N: the 1 x 1 view, 16-byte stride)
    t = load_tunable("gemm_bf16", "tunable_tma.json")
    wl = load_workload(REPO / "workloads" / "gemm_bf16")
    spec = LaunchSpec.model_validate(t.spec["launch"])
    for case in wl.spec.cases:
        r = resolve(spec.for_case(case.name), {**dict(case.scalars), **t.spec["defaults"]}, LIMITS, case.name)
        check_tensor_maps(r, wl, case)
        k, n = case.scalars["K"], case.scalars["N"]
        assert (r.tensor_maps[0].dims == (1, 1)) == (k % 8 != 0)
        assert (r.tensor_maps[1].dims == (1, 1)) == (n % 8 != 0)


@pytest.mark.parametrize(("old", "new", "symptom"), [
    # releases stage t itself, whose wgmma batch is still in flight: the TMA refill overwrites it
    ("if (t > 0 && (threadIdx.x & 127) == 0) mbar_arrive(empty0 + 8 * prev);",
     "if ((threadIdx.x & 127) == 0) mbar_arrive(empty0 + 8 * s);", "a pending wgmma"),
    # waits for no wgmma batch before releasing the previous stage
    ("wgmma_wait<1>();", "wgmma_wait<2>();", "a pending wgmma"),
    # the producer waits for the wrong phase of empty[s]: refills stages nobody released, and the
    # barriers' phases drift apart
    ("while (!mbar_try_wait(empty0 + 8 * s, ph ^ 1)) {}\n                    const unsigned full",
     "while (!mbar_try_wait(empty0 + 8 * s, ph)) {}\n                    const unsigned full", "DEADLOCK"),
    # the consumers wait for the wrong phase of full[s]
    ("while (!mbar_try_wait(full0 + 8 * s, ph)) {}", "while (!mbar_try_wait(full0 + 8 * s, ph ^ 1)) {}", "DEADLOCK"),
    # the producer never waits for empty[s]
    ("if (t >= STAGES)\n                        while", "if (false)\n                        while", "DEADLOCK"),
    # B's boxes one 8 KiB block off
    ("bs_base + s * B_STAGE_BYTES + j * 8192, &tmB, n0 + 64 * j", "bs_base + s * B_STAGE_BYTES + j * 8192, &tmB, n0",
     "expected"),
])
def test_the_tma_emulation_catches_a_pipeline_bug(old: str, new: str, symptom: str, tmp_path: Path) -> None:
    t = load_tunable("gemm_bf16", "tunable_tma.json")
    broken = t.source.replace(old, new)
    assert broken != t.source
    # TMA-path shapes only (the fallback does not use those lines); each fails, with A aligned (the
    # TMA path) for the symptom named
    failures = tma_failures(broken, {"BN": 128, "STAGES": 3, "GROUP": 8}, tmp_path, "broken",
                            [(130, 264, 520), (300, 128, 1024)])
    aligned = [f for f in failures if "misalign=0" in f]
    assert aligned and all(symptom in f for f in aligned), failures
