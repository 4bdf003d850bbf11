"""The bundled tunable kernels executed on the CPU by a small CUDA emulator, against float64.

Nobody can run the kernels in CI (no GPU), and compiling them proves nothing about their
indexing. So each kernel source is compiled as C++ with a shim (CUDA_EMU below) that runs every
block's threads as fibers (ucontext) scheduled cooperatively: __syncthreads is a block barrier,
a warp shuffle is a warp barrier with a double-buffered exchange, atomics are plain updates
(fibers never preempt), shared memory is static storage (blocks run one at a time). The driver
(DRIVER) fills inputs, poisons outputs with NaN, surrounds every buffer with guard words, runs
the launch that the tunable.json expressions give for the case, and compares with a float64
CPU reference under the workload's tolerance. Every correctness case runs, plus small cases that
reach the vectorised paths the workload only reaches at its performance sizes, each with 16-byte
aligned and deliberately misaligned inputs (the scalar fallbacks).

A test double for the GPU, not a proof of speed or of memory-model subtleties (no reordering,
no preemption): tests/gpu/test_tunable_gpu.py is the real check. Needs g++; skipped without it.
KERNELOPT_TUNABLE_ALL=1 emulates every valid configuration instead of a sample (tens of minutes:
add --timeout=0).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from test_tunable_kernels import (
    LIMITS,
    TUNABLE,
    Config,
    Tunable,
    load_tunable,
    valid_configs,
)

from kernelopt_mcp.launch import LaunchSpec, resolve

GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(GXX is None, reason="needs g++ to build the CUDA emulator")

# besides the defaults, one configuration per workload that takes the other code paths
EMULATED: dict[str, list[Config]] = {
    "sgemm": [{"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8, "MINB": 2}],
    "softmax": [{"TPR": 64, "RPB": 2, "VPT": 4, "SMEM": 0}, {"TPR": 128, "RPB": 2, "VPT": 0, "SMEM": 1},
                {"TPR": 32, "RPB": 2, "VPT": 2, "SMEM": 1}],
    "reduce_sum": [{"THREADS": 128, "BPS": 2, "UNROLL": 4, "TWO_PASS": 1}],
    "transpose": [{"TILE": 64, "ROWS": 16, "STCS": 0, "ALIGN": 0, "VEC": 0},
                  {"TILE": 64, "ROWS": 16, "STCS": 0, "ALIGN": 8, "VEC": 0},
                  {"TILE": 16, "ROWS": 4, "STCS": 1, "ALIGN": 8, "VEC": 0},
                  {"TILE": 64, "ROWS": 8, "STCS": 1, "ALIGN": 32, "VEC": 0},
                  {"TILE": 32, "ROWS": 8, "STCS": 0, "ALIGN": 16, "VEC": 0},
                  # 16-byte loads shifted into the tile (ALIGN's interior tiles; misaligned runs: scalar loads)
                  {"TILE": 64, "ROWS": 8, "STCS": 1, "ALIGN": 8, "VEC": 1},
                  {"TILE": 16, "ROWS": 4, "STCS": 0, "ALIGN": 32, "VEC": 1},
                  {"TILE": 32, "ROWS": 8, "STCS": 1, "ALIGN": 16, "VEC": 1}],
    # WR: rows of <= 128 * VPT columns a warp each (1024 and 4 columns below, and the correctness
    # cases up to 1000), longer ones TPR threads (4096: registers; 20000 and 4099: streaming)
    "layernorm": [{"TPR": 32, "RPB": 4, "VPT": 8, "WR": 0}, {"TPR": 128, "RPB": 2, "VPT": 8, "WR": 1},
                  {"TPR": 256, "RPB": 1, "VPT": 2, "WR": 1}],
}

# cases the workloads only reach at performance sizes: the float4 paths, with ragged edges
EXTRA_CASES: dict[str, list[dict[str, int | float]]] = {
    "sgemm": [{"M": 132, "N": 68, "K": 36}, {"M": 65, "N": 260, "K": 20}, {"M": 4, "N": 8, "K": 4}],
    # (with SMEM: 8192 and 20000 columns kept in shared memory at RPB 2, 60000 too long for it: read twice)
    "softmax": [{"rows": 9, "cols": 1024}, {"rows": 3, "cols": 8192}, {"rows": 2, "cols": 20000},
                {"rows": 3, "cols": 4}, {"rows": 3, "cols": 60000}],
    "layernorm": [{"rows": 9, "cols": 1024, "eps": 1e-5}, {"rows": 3, "cols": 4096, "eps": 1e-5},
                  {"rows": 2, "cols": 20000, "eps": 1e-5}, {"rows": 3, "cols": 4, "eps": 1e-5}],
    "reduce_sum": [{"n": 300000}, {"n": 8}],
    # (rows % ALIGN != 0: ALIGN's shifted windows; 64: its plain path)
    "transpose": [{"rows": 64, "cols": 128}, {"rows": 130, "cols": 70}, {"rows": 37, "cols": 45},
                  {"rows": 5, "cols": 3}, {"rows": 301, "cols": 70}, {"rows": 301, "cols": 140}],
}


def emulator_program(kernel_source: str) -> str:
    """One C++ translation unit: the shim, the kernel (dynamic shared memory rebound), the driver."""
    kernel = re.sub(r"extern __shared__ (\w+) (\w+)\[\];", r"\1* \2 = reinterpret_cast<\1*>(ko_emu_dyn_smem);",
                    kernel_source)
    return (CUDA_EMU + "static char* ko_emu_dyn_smem;\n#line 1 \"tunable.cu\"\n" + kernel
            + "\n#line 1 \"driver.cpp\"\n" + DRIVER)


def build(name: str, source: str, config: Config, directory: Path) -> Path:
    tag = "_".join(f"{k}{v}" for k, v in config.items())
    cpp, exe = directory / f"{name}_{tag}.cpp", directory / f"{name}_{tag}"
    cpp.write_text(emulator_program(source))
    cmd = [GXX or "g++", "-O1", "-std=c++17", "-w", f"-DWL_{name}", *(f"-D{k}={v}" for k, v in config.items()),
           str(cpp), "-o", str(exe)]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    assert done.returncode == 0, f"{name} {config}: the emulator build failed:\n{done.stderr[-3000:]}"
    return exe


def driver_args(name: str, scalars: dict[str, Any], inputs: dict[str, Any]) -> list[Any]:
    """The driver's size and input-distribution arguments for one case."""
    if name == "sgemm":
        return [scalars["M"], scalars["N"], scalars["K"]]
    if name == "transpose":
        return [scalars["rows"], scalars["cols"]]
    gen = inputs.get("x")
    if name == "reduce_sum":
        lo, hi = (gen.low, gen.high) if gen is not None else (0, 1)
        return [scalars["n"], lo, hi, 3]  # three launches: the two-pass ticket must reset
    if gen is None:
        mean, sd = (1, 2) if name == "layernorm" else (0, 2)
    elif gen.generator == "uniform":
        mean, sd = (gen.low + gen.high) / 2, (gen.high - gen.low) / 12**0.5
    else:
        mean, sd = gen.mean, gen.std
    return [scalars["rows"], scalars["cols"], mean, sd]


def run_emulated(exe: Path, r: Any, misalign: int, args: list[object], label: str) -> str:
    """Run the emulator binary ``exe`` with the resolved launch ``r`` (grid, block, shared bytes),
    the misalignment flag and the driver's ``args``: '' when it printed OK, else what went wrong."""
    cmd = [str(exe), *map(str, r.grid), *map(str, r.block), str(r.shared_bytes), str(misalign), *map(str, args)]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)
    if done.returncode == 0 and done.stdout.strip() == "OK":
        return ""
    return f"{label} misalign={misalign}: {done.stderr[-1500:]}"


def emulate(t: Tunable, config: Config, directory: Path) -> list[str]:
    """Build and run one configuration on every case; the failures, as messages."""
    name = t.workload.name
    exe = build(name, t.source, config, directory)
    launch = LaunchSpec.model_validate(t.spec["launch"])
    cases = [(c.name, dict(c.scalars), dict(c.inputs or {})) for c in t.workload.spec.cases if c.kind == "correctness"]
    cases += [(f"extra_{i}", s, {}) for i, s in enumerate(EXTRA_CASES[name])]
    failures = []
    for case_name, scalars, inputs in cases:
        r = resolve(launch.for_case(case_name), {**scalars, **config}, LIMITS, case_name)
        label = f"{name} {config} case {case_name} {scalars}"
        failures += [f for misalign in (0, 1)
                     if (f := run_emulated(exe, r, misalign, driver_args(name, scalars, inputs), label))]
    return failures


def configs_to_emulate(t: Tunable) -> list[Config]:
    if os.environ.get("KERNELOPT_TUNABLE_ALL") == "1":
        return valid_configs(t.spec)
    return [t.spec["defaults"], *EMULATED[t.workload.name]]


@pytest.mark.parametrize("name", TUNABLE)
def test_emulated_kernel_matches_float64_on_every_correctness_case(name: str, tmp_path: Path) -> None:
    t = load_tunable(name)
    configs = configs_to_emulate(t)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda c: emulate(t, c, tmp_path), configs))
    failures = [f for r in results for f in r]
    assert not failures, "\n".join(failures[:20])


def without_barrier(t: Tunable, after: str) -> Tunable:
    """``t`` without the first ``__syncthreads();`` after the text ``after``."""
    first = t.source.index("__syncthreads();", t.source.index(after))
    return Tunable(t.workload, t.spec, t.source[:first] + t.source[first + len("__syncthreads();"):])


def test_the_emulator_catches_a_missing_barrier_and_a_wrong_index(tmp_path: Path) -> None:
    t = load_tunable("transpose")
    config = t.spec["defaults"]
    # the barrier between the loads and the stores of the path the defaults take (ALIGN = 0, interior tiles)
    assert emulate(without_barrier(t, "// interior tile: no checks"), config, tmp_path)
    aligned = {**config, "ALIGN": 8}  # and the ALIGN path's (130 x 70 takes it)
    (tmp_path / "aligned").mkdir()
    assert emulate(without_barrier(t, "// interior: every staged row"), aligned, tmp_path / "aligned")
    off_by_one = Tunable(t.workload, t.spec,
                         t.source.replace("if (oc < cols && r < rows)", "if (oc < cols && r <= rows)"))
    failures = emulate(off_by_one, config, tmp_path)
    assert failures and all("guard words overwritten" in f for f in failures)


CUDA_EMU = r"""// A tiny CUDA execution emulator for testing kernels on a CPU: each block's threads are
// fibers (ucontext) scheduled cooperatively; __syncthreads and warp shuffles are barriers.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <ucontext.h>
#include <vector>

struct dim3 { unsigned x = 1, y = 1, z = 1; };
static dim3 threadIdx, blockIdx, blockDim, gridDim;

struct alignas(16) float4 { float x, y, z, w; };
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static

template <class T> static inline T __ldg(const T* p) { return *p; }
template <class T> static inline T __ldcs(const T* p) { return *p; }
template <class T> static inline T __ldcg(const T* p) { return *p; }
template <class T> static inline void __stcs(T* p, T v) { *p = v; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
static inline void __threadfence() {}
static inline float atomicAdd(float* p, float v) { float o = *p; *p = o + v; return o; }
static inline unsigned atomicAdd(unsigned* p, unsigned v) { unsigned o = *p; *p = o + v; return o; }

namespace emu {
enum State { RUN, AT_BLOCK, AT_WARP, DONE };
struct Fiber {
    ucontext_t ctx;
    char* stack = nullptr;
    State state = RUN;
    dim3 tid;
    int lin = 0;
    unsigned shfl_count = 0;
};
static ucontext_t sched_ctx;
static std::vector<Fiber> fibers;
static std::vector<char*> stacks;
static const size_t STACK = 128 * 1024;
static int current = -1;
static std::function<void()> body;
static float shfl_slot[2][32 * 32];   // [parity][thread] (at most 32 warps)
static unsigned long long shfl_slot_u[2][32 * 32];

static void trampoline() {
    body();
    fibers[current].state = DONE;
    swapcontext(&fibers[current].ctx, &sched_ctx);
}
static void yield(State s) {
    fibers[current].state = s;
    swapcontext(&fibers[current].ctx, &sched_ctx);
}

// Run one block to completion. Fails loudly on a deadlock (a barrier not all threads reach).
static void run_block(int nthreads) {
    fibers.assign(nthreads, Fiber());
    for (int i = 0; i < nthreads; ++i) {
        Fiber& f = fibers[i];
        f.lin = i;
        f.tid.x = i % blockDim.x;
        f.tid.y = (i / blockDim.x) % blockDim.y;
        f.tid.z = i / (blockDim.x * blockDim.y);
        while ((int)stacks.size() <= i) stacks.push_back(new char[STACK]);
        f.stack = stacks[i];
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = STACK;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, trampoline, 0);
    }
    for (;;) {
        bool progress = false;
        for (int i = 0; i < nthreads; ++i) {
            if (fibers[i].state != RUN) continue;
            current = i;
            threadIdx = fibers[i].tid;
            swapcontext(&sched_ctx, &fibers[i].ctx);
            progress = true;
        }
        // release barriers
        bool all_done = true, any_block = false;
        for (auto& f : fibers) {
            if (f.state != DONE) all_done = false;
            if (f.state == AT_BLOCK) any_block = true;
        }
        if (all_done) break;
        bool released = false;
        // warp barriers: every live lane of the warp waits at a warp barrier
        for (int w = 0; w * 32 < nthreads; ++w) {
            bool all = true, some = false;
            for (int l = w * 32; l < nthreads && l < w * 32 + 32; ++l) {
                if (fibers[l].state == AT_WARP) some = true;
                else if (fibers[l].state != DONE) all = false;
            }
            if (some && all) {
                for (int l = w * 32; l < nthreads && l < w * 32 + 32; ++l)
                    if (fibers[l].state == AT_WARP) fibers[l].state = RUN;
                released = true;
            }
        }
        if (!released && any_block) {
            bool all = true;
            for (auto& f : fibers)
                if (f.state != AT_BLOCK && f.state != DONE) all = false;
            if (all) {
                for (auto& f : fibers)
                    if (f.state == AT_BLOCK) f.state = RUN;
                released = true;
            }
        }
        if (!released && !progress) {
            std::fprintf(stderr, "EMU DEADLOCK in block (%u,%u)\n", blockIdx.x, blockIdx.y);
            std::exit(3);
        }
        if (!released) {
            bool any_run = false;
            for (auto& f : fibers) if (f.state == RUN) any_run = true;
            if (!any_run) {
                std::fprintf(stderr, "EMU DEADLOCK (mixed barriers) in block (%u,%u)\n", blockIdx.x, blockIdx.y);
                std::exit(3);
            }
        }
    }
}

template <class F> static void launch(dim3 grid, dim3 block, F kernel) {
    gridDim = grid;
    blockDim = block;
    int nthreads = block.x * block.y * block.z;
    if (nthreads > 1024) { std::fprintf(stderr, "too many threads\n"); std::exit(4); }
    body = kernel;
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                blockIdx.x = x; blockIdx.y = y; blockIdx.z = z;
                run_block(nthreads);
            }
}
}  // namespace emu

static inline void __syncthreads() { emu::yield(emu::AT_BLOCK); }

static inline float __shfl_xor_sync(unsigned, float v, int o) {
    emu::Fiber& f = emu::fibers[emu::current];
    const int p = f.shfl_count++ & 1;
    emu::shfl_slot[p][f.lin] = v;
    emu::yield(emu::AT_WARP);
    return emu::shfl_slot[p][(f.lin & ~31) | ((f.lin & 31) ^ o)];
}
static inline float __shfl_down_sync(unsigned, float v, int o) {
    emu::Fiber& f = emu::fibers[emu::current];
    const int p = f.shfl_count++ & 1;
    emu::shfl_slot[p][f.lin] = v;
    emu::yield(emu::AT_WARP);
    const int src = (f.lin & 31) + o;
    return src < 32 ? emu::shfl_slot[p][(f.lin & ~31) | src] : v;
}
"""

DRIVER = r"""// argv: grid.x grid.y grid.z block.x block.y block.z shared_bytes misalign <sizes...>
#include <vector>

static uint64_t rng = 88172645463325252ull;
static double urand() { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (rng >> 11) * (1.0 / 9007199254740992.0); }
static double nrand() { double u = urand() + 1e-12, v = urand(); return std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * v); }

// a buffer of n floats, with `off` floats before it (to misalign it) and guards on both sides
struct Buf {
    std::vector<float> mem; size_t off, n;
    Buf(size_t n_, size_t misalign) : n(n_) {
        off = 64 + misalign;  // 64 floats of guard before (256 B, so aligned when misalign == 0)
        mem.assign(off + n + 64 + 4, 12345.0f);
        // make &mem[off] 16-byte aligned when misalign == 0: vector<float> storage is 16-aligned on glibc
    }
    float* p() { return mem.data() + off; }
    bool guards_ok() const {
        for (size_t i = 0; i < off; ++i) if (mem[i] != 12345.0f) return false;
        for (size_t i = off + n; i < mem.size(); ++i) if (mem[i] != 12345.0f) return false;
        return true;
    }
};

static int check(const float* got, const std::vector<double>& ref, double rtol, double atol, const char* what) {
    size_t bad = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        double g = got[i];
        if (!(std::fabs(g - ref[i]) <= atol + rtol * std::fabs(ref[i]))) {
            if (bad < 5) std::fprintf(stderr, "%s[%zu] = %.9g, expected %.9g\n", what, i, g, ref[i]);
            ++bad;
        }
    }
    if (bad) { std::fprintf(stderr, "%zu of %zu mismatches in %s\n", bad, ref.size(), what); return 1; }
    return 0;
}

int main(int argc, char** argv) {
    dim3 grid{(unsigned)atoi(argv[1]), (unsigned)atoi(argv[2]), (unsigned)atoi(argv[3])};
    dim3 block{(unsigned)atoi(argv[4]), (unsigned)atoi(argv[5]), (unsigned)atoi(argv[6])};
    size_t shared = atol(argv[7]);
    size_t mis = atoi(argv[8]);
    std::vector<float4> smem(shared / 16 + 1);
    ko_emu_dyn_smem = reinterpret_cast<char*>(smem.data());
    const float NaN = std::nanf("");
    int fail = 0;
#if defined(WL_sgemm)
    int M = atoi(argv[9]), N = atoi(argv[10]), K = atoi(argv[11]);
    Buf A((size_t)M * K, mis), B((size_t)K * N, 0), C((size_t)M * N, 0);
    for (size_t i = 0; i < A.n; ++i) A.p()[i] = (float)(2 * urand() - 1);
    for (size_t i = 0; i < B.n; ++i) B.p()[i] = (float)(2 * urand() - 1);
    for (size_t i = 0; i < C.n; ++i) C.p()[i] = NaN;
    std::vector<double> ref((size_t)M * N);
    for (int m = 0; m < M; ++m) for (int n = 0; n < N; ++n) {
        double s = 0; for (int k = 0; k < K; ++k) s += (double)A.p()[(size_t)m * K + k] * B.p()[(size_t)k * N + n];
        ref[(size_t)m * N + n] = s; }
    float *a = A.p(), *b = B.p(), *c = C.p();
    emu::launch(grid, block, [&] { sgemm(a, b, c, M, N, K); });
    fail |= check(c, ref, 1e-4, 1e-4, "C");
    if (!(A.guards_ok() && B.guards_ok() && C.guards_ok())) { std::fprintf(stderr, "guard words overwritten\n"); fail = 1; }
#elif defined(WL_softmax) || defined(WL_layernorm)
    int rows = atoi(argv[9]), cols = atoi(argv[10]);
    double mean = atof(argv[11]), sd = atof(argv[12]);
    Buf X((size_t)rows * cols, mis), Y((size_t)rows * cols, 0), G(cols, 0), Bb(cols, 0);
    for (size_t i = 0; i < X.n; ++i) X.p()[i] = (float)(mean + sd * nrand());
    for (int i = 0; i < cols; ++i) { G.p()[i] = (float)(0.5 + urand()); Bb.p()[i] = (float)(2 * urand() - 1); }
    for (size_t i = 0; i < Y.n; ++i) Y.p()[i] = NaN;
    std::vector<double> ref((size_t)rows * cols);
    for (int r = 0; r < rows; ++r) {
        const float* xr = X.p() + (size_t)r * cols;
#if defined(WL_softmax)
        double mx = -INFINITY, s = 0;
        for (int c = 0; c < cols; ++c) mx = std::max(mx, (double)xr[c]);
        for (int c = 0; c < cols; ++c) s += std::exp(xr[c] - mx);
        for (int c = 0; c < cols; ++c) ref[(size_t)r * cols + c] = std::exp(xr[c] - mx) / s;
#else
        double mu = 0, v = 0;
        for (int c = 0; c < cols; ++c) mu += xr[c];
        mu /= cols;
        for (int c = 0; c < cols; ++c) v += (xr[c] - mu) * (xr[c] - mu);
        v /= cols;
        for (int c = 0; c < cols; ++c) ref[(size_t)r * cols + c] = (xr[c] - mu) / std::sqrt(v + 1e-5) * G.p()[c] + Bb.p()[c];
#endif
    }
    float *x = X.p(), *y = Y.p(), *g = G.p(), *bb = Bb.p();
#if defined(WL_softmax)
    emu::launch(grid, block, [&] { softmax(x, y, rows, cols); });
    fail |= check(y, ref, 1e-4, 1e-5, "y");
#else
    emu::launch(grid, block, [&] { layernorm(x, g, bb, y, rows, cols, 1e-5f); });
    fail |= check(y, ref, 1e-4, 1e-4, "y");
#endif
    if (!(X.guards_ok() && Y.guards_ok() && G.guards_ok() && Bb.guards_ok())) { std::fprintf(stderr, "guard words overwritten\n"); fail = 1; }
#elif defined(WL_reduce_sum)
    int n = atoi(argv[9]);
    double lo = atof(argv[10]), hi = atof(argv[11]);
    int launches = atoi(argv[12]);
    Buf X(n, mis), O(1, 0);
    for (int i = 0; i < n; ++i) X.p()[i] = (float)(lo + (hi - lo) * urand());
    double s = 0; for (int i = 0; i < n; ++i) s += X.p()[i];
    std::vector<double> ref{s};
    float *x = X.p(), *o = O.p();
    for (int l = 0; l < launches; ++l) {   // repeated launches: the two-pass ticket must reset
        o[0] = 0.f;
        emu::launch(grid, block, [&] { reduce_sum(x, o, n); });
        fail |= check(o, ref, 1e-4, 1e-6, "out");
    }
    if (!(X.guards_ok() && O.guards_ok())) { std::fprintf(stderr, "guard words overwritten\n"); fail = 1; }
#elif defined(WL_transpose)
    int rows = atoi(argv[9]), cols = atoi(argv[10]);
    Buf I((size_t)rows * cols, mis), O((size_t)rows * cols, 0);
    for (size_t i = 0; i < I.n; ++i) I.p()[i] = (float)i;
    for (size_t i = 0; i < O.n; ++i) O.p()[i] = NaN;
    std::vector<double> ref((size_t)rows * cols);
    for (int r = 0; r < rows; ++r) for (int c = 0; c < cols; ++c) ref[(size_t)c * rows + r] = I.p()[(size_t)r * cols + c];
    float *in = I.p(), *out = O.p();
    emu::launch(grid, block, [&] { transpose(in, out, rows, cols); });
    fail |= check(out, ref, 0, 0, "out");
    if (!(I.guards_ok() && O.guards_ok())) { std::fprintf(stderr, "guard words overwritten\n"); fail = 1; }
#endif
    if (fail) { std::fprintf(stderr, "FAIL\n"); return 1; }
    std::printf("OK\n");
    return 0;
}
"""  # noqa: E501
