"""The workloads of issue 16 (histogram, gemm_bf16, attention_fwd), checked without a GPU.

Each: workload.json validates against the exported JSON Schema and loads; `kernelopt workloads`
lists it; its buffers fit the bounds `freeze_workload` (what `kernelopt optimize` calls first)
enforces; its NumPy oracle agrees with an independent formula on small cases drawn by the
library's own generators; its tolerance admits float32-accumulation results and rejects the
cheaper arithmetic it is meant to reject; every CUDA source (reference, initial, tunable) compiles
with NVRTC for sm_90 with the signature's parameters and no spills; every tunable configuration's
launch resolves for every case and covers the output (sgemm's 3xTF32 tunable too).
tests/workloads/test_new_workloads_emulated.py runs the kernels on the CPU;
tests/gpu/test_new_workloads_gpu.py on an H200.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import math
import os
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jsonschema
import ml_dtypes
import numpy as np
import pytest
from test_tunable_kernels import (
    LIMITS,
    REGISTERS_PER_SM,
    Config,
    Tunable,
    load_tunable,
    options_for,
    resolved,
    valid_configs,
)

from kernelopt_mcp import expr
from kernelopt_mcp.cli import main
from kernelopt_mcp.compiler import compile_kernel
from kernelopt_mcp.evaluation.compare import compare
from kernelopt_mcp.evaluation.inputs import MAX_BUFFER_BYTES, generate
from kernelopt_mcp.quota import DEFAULT_WORKLOAD_MAX_BYTES
from kernelopt_mcp.workload import Workload, case_shape, json_schema, load_workload
from kernelopt_mcp.workspace import check_spec_size

REPO = Path(__file__).resolve().parents[2]
NEW = ["histogram", "gemm_bf16", "attention_fwd"]
# tunable kernels: "<workload>" for its tunable.json, "<workload>:<spec>" for another spec beside it
TUNABLE_NEW = ["histogram", "gemm_bf16", "gemm_bf16:tunable_wgmma.json", "gemm_bf16:tunable_tma.json", "attention_fwd",
               "attention_fwd:tunable_wgmma.json", "sgemm:tunable_3xtf32.json"]


def _tunable(key: str) -> Tunable:
    name, _, spec = key.partition(":")
    return load_tunable(name, spec or "tunable.json")


def _workload(name: str) -> Workload:
    return load_workload(REPO / "workloads" / name)


def _oracle(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"oracle_{name}", REPO / "workloads" / name / "reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reference


def _case_inputs(wl: Workload, case_name: str, seed: int = 7) -> dict[str, np.ndarray]:
    case = wl.spec.case(case_name)
    out = {}
    for p in wl.signature.inputs:
        gen = case.inputs.get(p.name) or wl.spec.inputs[p.name]
        out[p.name] = generate(gen, p, case_shape(p, case.scalars), seed, case.name, wl.root)
    return out


# --- format, listing, size ----------------------------------------------------------------------


@pytest.mark.parametrize("name", NEW)
def test_workload_validates_against_the_schema_and_fits_the_freeze_bounds(name: str) -> None:
    raw = json.loads((REPO / "workloads" / name / "workload.json").read_text())
    jsonschema.validate(raw, json_schema())
    wl = _workload(name)
    assert wl.oracle_path and wl.reference_cu and wl.initial_cu and wl.spec.initial
    kinds = [c.kind for c in wl.spec.cases]
    assert kinds.count("correctness") >= 5 and kinds.count("performance") >= 2
    total = check_spec_size(wl.spec, "a frozen workload", DEFAULT_WORKLOAD_MAX_BYTES)
    biggest = max(math.prod(case_shape(p, c.scalars)) * p.dtype.itemsize
                  for c in wl.spec.cases for p in wl.signature.buffers)
    assert total <= DEFAULT_WORKLOAD_MAX_BYTES and biggest <= MAX_BUFFER_BYTES
    # README: histogram 512 MiB over all cases (two 256 MiB inputs); gemm_bf16 ~0.6 GiB; attention_fwd 1.5 GiB
    assert total < {"histogram": 2**30, "gemm_bf16": 2**30, "attention_fwd": 1.6 * 2**30}[name]


def test_kernelopt_workloads_lists_them_with_their_prototypes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["workloads", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert (rows["histogram"]["signature"]
            == 'extern "C" __global__ void histogram(const unsigned char* x, int* hist, int n)')
    assert rows["gemm_bf16"]["signature"].startswith(
        'extern "C" __global__ void gemm_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C')
    assert rows["attention_fwd"]["signature"] == (
        'extern "C" __global__ void attention_fwd(const __nv_bfloat16* q, const __nv_bfloat16* k, '
        "const __nv_bfloat16* v, __nv_bfloat16* o, int B, int H, int S, int D, int causal)")


# --- oracles against independent formulas -------------------------------------------------------


def test_histogram_oracle_counts_like_a_counter_on_every_correctness_case() -> None:
    wl, reference = _workload("histogram"), _oracle("histogram")
    for case in wl.spec.cases:
        if case.kind != "correctness":
            continue
        x = _case_inputs(wl, case.name)["x"]
        assert x.dtype == np.uint8 and x.size == case.scalars["n"]
        hist = reference(x=x, n=case.scalars["n"])["hist"]
        counts = collections.Counter(x.tolist())
        assert hist.shape == (256,) and hist.sum() == x.size
        assert hist.tolist() == [counts.get(b, 0) for b in range(256)], case.name
    one_bin = _case_inputs(wl, "one_bin_255_65537")["x"]
    assert reference(x=one_bin, n=one_bin.size)["hist"][255] == 65537  # the byte 255 is bin 255, not -1


def test_histogram_oracle_matches_np_histogram_on_random_odd_sizes() -> None:
    reference = _oracle("histogram")
    rng = np.random.default_rng(3)
    for n in (1, 7, 1001, 65537):
        x = rng.integers(0, 256, size=n, dtype=np.uint8)
        expected, _ = np.histogram(x, bins=256, range=(0, 256))
        assert np.array_equal(reference(x=x, n=n)["hist"], expected)


def _bf16_to_f64_by_bits(a: np.ndarray) -> np.ndarray:
    """bf16 -> float64 by bit manipulation (independent of ml_dtypes' casts): bf16 is the top
    half of a float32."""
    bits = a.view(np.uint16).astype(np.uint32) << 16
    return bits.view(np.float32).astype(np.float64)


def test_gemm_bf16_oracle_matches_einsum_on_the_small_correctness_cases() -> None:
    wl, reference = _workload("gemm_bf16"), _oracle("gemm_bf16")
    for name in ("one", "odd_17x33x9", "odd_127x129x61", "aligned_ragged_200x136x72", "col_4096x1x256"):
        s = wl.spec.case(name).scalars
        arrays = _case_inputs(wl, name)
        a, b = arrays["A"], arrays["B"]
        assert a.dtype == np.dtype(ml_dtypes.bfloat16) and a.shape == (s["M"], s["K"])
        got = reference(A=a, B=b, M=s["M"], N=s["N"], K=s["K"])["C"]
        want = np.einsum("mk,kn->mn", _bf16_to_f64_by_bits(a), _bf16_to_f64_by_bits(b))
        assert got.shape == (s["M"], s["N"])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_gemm_bf16_tolerance_admits_float32_accumulation_and_rejects_cheaper_arithmetic() -> None:
    wl, reference = _workload("gemm_bf16"), _oracle("gemm_bf16")
    tol = wl.spec.tolerance_for("C")
    s = wl.spec.case("long_k_64x72x8192").scalars
    arrays = _case_inputs(wl, "long_k_64x72x8192")
    expected = reference(A=arrays["A"], B=arrays["B"], **s)["C"]
    a32, b32 = arrays["A"].astype(np.float32), arrays["B"].astype(np.float32)

    def accumulate(dtype: Any, step: int) -> np.ndarray:
        """Sequential accumulation over K in `dtype`, `step` exact-in-float32 products at a time."""
        acc = np.zeros((s["M"], s["N"]), dtype=dtype)
        for k in range(0, s["K"], step):
            acc = (acc.astype(np.float32) + a32[:, k:k + step] @ b32[k:k + step, :]).astype(dtype)
        return acc

    fp32_serial = accumulate(np.float32, 1)          # the naive initial kernel's order
    fp32_mma = accumulate(np.float32, 16)            # one k16 mma step at a time
    assert compare("C", expected, fp32_serial, tol).passed
    assert compare("C", expected, fp32_mma, tol).passed
    assert not compare("C", expected, expected.astype(ml_dtypes.bfloat16), tol).passed  # bf16-rounded C
    assert not compare("C", expected, accumulate(ml_dtypes.bfloat16, 16), tol).passed  # bf16 accumulators
    a8 = arrays["A"].astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    b8 = arrays["B"].astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    assert not compare("C", expected, a8 @ b8, tol).passed  # fp8 inputs


def _attention_by_logsumexp(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: int) -> np.ndarray:
    """Row by row, with the normaliser from np.logaddexp (no max subtraction): an independent formula."""
    b_, h_, s_, d_ = q.shape
    out = np.zeros((b_, h_, s_, d_))
    qf, kf, vf = (_bf16_to_f64_by_bits(np.ascontiguousarray(x)) for x in (q, k, v))
    for b in range(b_):
        for h in range(h_):
            for i in range(s_):
                keys = i + 1 if causal else s_
                scores = np.einsum("d,jd->j", qf[b, h, i], kf[b, h, :keys]) / math.sqrt(d_)
                weights = np.exp(scores - np.logaddexp.reduce(scores))
                out[b, h, i] = weights @ vf[b, h, :keys]
    return out


def test_attention_oracle_matches_logsumexp_rows_and_the_edge_cases() -> None:
    wl, reference = _workload("attention_fwd"), _oracle("attention_fwd")
    for name in ("one_key", "one_key_causal", "odd_1x2x33x64_causal", "small_head_2x2x77x32",
                 "large_scores_1x1x200x64"):
        s = wl.spec.case(name).scalars
        arrays = _case_inputs(wl, name)
        got = reference(**arrays, **s)["o"]
        assert np.isfinite(got).all(), name
        np.testing.assert_allclose(got, _attention_by_logsumexp(arrays["q"], arrays["k"], arrays["v"], s["causal"]),
                                   rtol=1e-9, atol=1e-9, err_msg=name)
        if s["causal"]:  # the first query sees only the first key
            np.testing.assert_array_equal(got[:, :, 0], arrays["v"][:, :, 0].astype(np.float64))


@pytest.mark.parametrize("case", ["odd_1x3x257x128_causal", "long_1x1x1500x64_causal", "odd_2x1x100x128"])
def test_attention_tolerance_admits_bf16_probabilities_and_rejects_wrong_math(case: str) -> None:
    """The causal cases are the hard ones: their first rows average few keys, so they are many
    times RMS(o), and the bf16 rounding of P is relative to them (atol 1e-2 failed on the H200 at
    1x3x257 and 1x1x1500; this test, with that rounding modelled, fails at 1e-2)."""
    wl, reference = _workload("attention_fwd"), _oracle("attention_fwd")
    tol = wl.spec.tolerance_for("o")
    s = dict(wl.spec.case(case).scalars)
    arrays = _case_inputs(wl, case)
    expected = reference(**arrays, **s)["o"]
    q, k, v = (arrays[n].astype(np.float32) for n in "qkv")
    causal_mask = np.triu(np.ones((s["S"], s["S"]), dtype=bool), k=1) if s["causal"] else None

    def attend(scale: float, mask: np.ndarray | None, p_dtype: Any, s_dtype: Any = np.float32) -> np.ndarray:
        scores = (np.einsum("bhid,bhjd->bhij", q, k) * np.float32(scale)).astype(s_dtype).astype(np.float32)
        if mask is not None:
            scores[..., mask] = -np.inf
        p = np.exp(scores - scores.max(axis=-1, keepdims=True))  # float32, as a kernel keeps them
        out = np.einsum("bhij,bhjd->bhid", p.astype(p_dtype).astype(np.float32), v) / p.sum(axis=-1, keepdims=True)
        return out.astype(ml_dtypes.bfloat16)  # o is bf16

    right = 1 / math.sqrt(s["D"])
    flash_like = attend(right, causal_mask, ml_dtypes.bfloat16)  # P rounded to bf16
    # with a 2x margin: other inputs (the hidden seeds) and a kernel's own rounding order move the error
    half = compare("o", expected, flash_like, tol.model_copy(update={"atol": tol.atol / 2}))
    assert half.passed, half.summary()
    assert not compare("o", expected, attend(1 / s["D"], causal_mask, np.float32), tol).passed  # 1/D scale
    if causal_mask is not None:
        off_by_one = np.triu(np.ones_like(causal_mask), k=2)  # key i + 1 visible
        assert not compare("o", expected, attend(right, off_by_one, np.float32), tol).passed


# --- compiling ----------------------------------------------------------------------------------


def _check_compiled(source: str, wl: Workload, options: list[str], what: str, block_threads: int,
                    *, local_ok: bool = False, tensor_maps: int = 0) -> list[str]:
    result = compile_kernel(source, "sm_90", options, filename=f"{what}.cu")
    if not result.ok:
        return [f"{what} {options}: {result.summary()}"]
    sig = wl.signature
    sizes = [8 if p.kind == "buffer" else 4 for p in sig.params] + [128] * tensor_maps  # maps after the params
    if [p.size_bytes for p in result.entries[sig.entry]] != sizes:
        return [f"{what} {options}: parameters {result.entries[sig.entry]}"]
    res = result.resources[sig.entry]
    problems = []
    if res.spill_store_bytes or res.spill_load_bytes or (res.stack_frame_bytes and not local_ok):
        problems.append(f"{what} {options}: spills or local memory: {result.summary()}")
    if res.registers is None or res.registers * block_threads > REGISTERS_PER_SM:
        problems.append(f"{what} {options}: {res.registers} registers x {block_threads} threads")
    return problems


@pytest.mark.parametrize("name", NEW)
def test_reference_and_initial_compile_for_sm_90(name: str) -> None:
    wl = _workload(name)
    assert wl.reference_cu and wl.initial_cu and wl.spec.reference.launch and wl.spec.initial
    ref_threads = math.prod(int(b) for b in wl.spec.reference.launch.for_case("x").block)
    init_threads = math.prod(int(b) for b in wl.spec.initial.launch.for_case("x").block)
    problems = _check_compiled(wl.reference_cu, wl, [], "reference", ref_threads)
    # attention_fwd's naive kernel keeps its D-long accumulator in a local array, on purpose
    problems += _check_compiled(wl.initial_cu, wl, [], "initial", init_threads, local_ok=name == "attention_fwd")
    assert not problems, "\n".join(problems)


def _compile_sample(key: str) -> list[Config]:
    """Every configuration that compiles differently: all of histogram's (GRID is launch-only);
    for the tensor-core GEMMs (108 configurations each, ~5 s a compile) the defaults, two of the
    hungriest (64x64 warp tiles, the deepest slices) and a seeded sample, or all of them with
    KERNELOPT_TUNABLE_ALL=1 (they all compiled without spills when the spaces were set)."""
    t = _tunable(key)
    configs = valid_configs(t.spec)
    if key == "histogram":
        return [c for c in configs if c["GRID"] == t.spec["defaults"]["GRID"]]
    if key == "attention_fwd":  # 24 configurations, each compiling four head-dim instances
        return configs if os.environ.get("KERNELOPT_TUNABLE_ALL") == "1" else [
            t.spec["defaults"], *[c for c in configs if c["BKV"] == 128 or (c["WARPS"] == 8 and c["QREG"] == 1)
                                  or c["RPW"] == 2]]
    if key == "attention_fwd:tunable_wgmma.json":  # 12 (~1.5 s each); deeper rings only move shared offsets
        return configs if os.environ.get("KERNELOPT_TUNABLE_ALL") == "1" else [c for c in configs if c["STAGES"] == 2]
    if os.environ.get("KERNELOPT_TUNABLE_ALL") == "1" or key == "gemm_bf16:tunable_wgmma.json":
        return configs  # the wgmma kernel's 35 compile in ~0.5 s each
    if key == "gemm_bf16:tunable_tma.json":  # GROUP only reorders tiles: one per (BN, STAGES)
        return [c for c in configs if c["GROUP"] == t.spec["defaults"]["GROUP"]]
    deepest = max(t.spec["params"]["BK"])
    hungry = [c for c in configs if c["WM"] == c["WN"] == 64 and c["BK"] == deepest]
    rest = [c for c in configs if c != t.spec["defaults"]]
    return [t.spec["defaults"], *random.Random(key).sample(hungry, 2), *random.Random(f"{key}-rest").sample(rest, 3)]


@pytest.mark.parametrize("name", TUNABLE_NEW)
def test_tunable_configurations_compile_without_spills(name: str) -> None:
    t = _tunable(name)
    configs = _compile_sample(name)
    with ThreadPoolExecutor(max_workers=2) as pool:
        found = pool.map(
            lambda c: _check_compiled(t.source, t.workload, options_for(t.spec, c), "tunable",
                                      (r := resolved(t, c, t.workload.spec.cases[0].name)).threads_per_block,
                                      tensor_maps=len(r.tensor_maps)),
            configs)
        problems = [p for ps in found for p in ps]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", TUNABLE_NEW)
def test_tunable_defaults_are_valid_and_every_launch_resolves_and_covers_the_output(name: str) -> None:
    t = _tunable(name)
    spec = t.spec
    assert (set(spec["defaults"]) == set(spec["params"])
            and all(expr.evaluate(c, spec["defaults"]) for c in spec["constraints"]))
    for param in spec["params"]:
        assert f"#ifndef {param}\n#define {param} {spec['defaults'][param]}\n" in t.source
    configs = valid_configs(spec)
    # the wgmma attention kernel's space is small on purpose (its registers and shared memory bound it)
    assert len(configs) >= {"gemm_bf16:tunable_tma.json": 18, "attention_fwd:tunable_wgmma.json": 12}.get(name, 20)
    for config in configs:
        for case in t.workload.spec.cases:
            r = resolved(t, config, case.name)  # raises beyond the device's limits
            s = case.scalars
            if name == "histogram":
                assert r.block == (config["THREADS"], 1, 1) and 1 <= r.grid[0] <= config["GRID"]
            elif name == "attention_fwd":
                rows = 16 * config["WARPS"] * config["RPW"]
                assert r.block == (32 * config["WARPS"], 1, 1) and r.grid[1] == s["B"] * s["H"]
                assert r.grid[0] * rows >= s["S"] and (r.grid[0] - 1) * rows < s["S"]
                assert r.shared_bytes <= LIMITS.max_shared_bytes_per_block_optin
            elif name == "attention_fwd:tunable_wgmma.json":
                rows = 64 * config["NWG"]  # a warpgroup of 128 threads per 64 query rows
                assert r.block == (128 * config["NWG"], 1, 1) and r.grid[1] == s["B"] * s["H"]
                assert r.grid[0] * rows >= s["S"] and (r.grid[0] - 1) * rows < s["S"]
                assert r.shared_bytes <= LIMITS.max_shared_bytes_per_block_optin
            elif name == "gemm_bf16:tunable_tma.json":
                assert r.block == (384, 1, 1)  # a producer and two consumer warpgroups, 128 rows
                assert r.grid[0] * config["BN"] >= s["N"] and r.grid[1] * 128 >= s["M"]
                assert (r.grid[0] - 1) * config["BN"] < s["N"] and (r.grid[1] - 1) * 128 < s["M"]
                assert r.shared_bytes <= LIMITS.max_shared_bytes_per_block_optin
                assert [m.buffer for m in r.tensor_maps] == ["A", "B"]
            elif name == "gemm_bf16:tunable_wgmma.json":
                assert r.block == (2 * config["BM"], 1, 1)  # BM / 64 warpgroups of 128 threads
                assert r.grid[0] * config["BN"] >= s["N"] and r.grid[1] * config["BM"] >= s["M"]
                assert (r.grid[0] - 1) * config["BN"] < s["N"] and (r.grid[1] - 1) * config["BM"] < s["M"]
                assert r.shared_bytes <= LIMITS.max_shared_bytes_per_block_optin
            else:
                warps = (config["BM"] // config["WM"]) * (config["BN"] // config["WN"])
                assert r.block == (32 * warps, 1, 1) and 4 <= warps <= 8
                assert r.grid[0] * config["BN"] >= s["N"] and r.grid[1] * config["BM"] >= s["M"]
                assert (r.grid[0] - 1) * config["BN"] < s["N"] and (r.grid[1] - 1) * config["BM"] < s["M"]
                assert r.shared_bytes <= LIMITS.max_shared_bytes_per_block_optin
