"""reduce_sum's performance inputs decide whether a kernel that reads only part of x can pass.

A sum is one number compared with a relative tolerance, so a kernel that sums a subset and scales
it up passes whenever the subset's mean is close enough to the whole's. On uniform [0, 1) inputs
(the performance cases' inputs until 2026-12-04) a kernel reading half of 2^26 elements was within
2% of the tolerance: it passed, at up to twice the speed (only the roofline bound limited it).
The cases now draw normal(mean 1, std 1000): the sum stays dominated by its mean (well conditioned,
so correct float32 orders keep their error), while the spread makes any subset's estimate miss.

The kernels are emulated in float32 with their summation orders (sequential per thread, a tree per
block, atomics in an arbitrary order) on the very inputs the workload's generator draws. A workload
whose performance inputs still allow such an estimate is warned of to its author (``estimate_gaps``).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from fakegpu import write_harness

from kernelopt_mcp.evaluation.compare import compare
from kernelopt_mcp.evaluation.device import device_info
from kernelopt_mcp.evaluation.inputs import estimate_gaps, generate
from kernelopt_mcp.evaluation.session import Session
from kernelopt_mcp.freeze import RequestsOnly
from kernelopt_mcp.workload import BufferParam, Tolerance, case_shape, load_workload

WORKLOAD = Path(__file__).resolve().parents[2] / "workloads" / "reduce_sum"
# n_2e28 behaves alike (three draws: the 2% estimate 4.4x over the tolerance at least); 1 GiB is too much for CI
CASE = "n_2e26"


def _atomics(partials: np.ndarray, rng: np.random.Generator) -> np.float32:
    """float32 atomicAdd of each partial into a zeroed total, in an arbitrary (random) order."""
    return np.cumsum(partials[rng.permutation(partials.size)], dtype=np.float32)[-1]


def _block_sums(x: np.ndarray, size: int) -> np.ndarray:
    return x.reshape(-1, size).sum(axis=1, dtype=np.float32)  # NumPy's pairwise sum: a tree


def _reference(x: np.ndarray, rng: np.random.Generator) -> np.float32:
    """reference.cu: 1056 blocks of 256 threads, each thread summing its grid-stride elements
    in turn, a tree per block, one atomic per block."""
    threads = 1056 * 256
    padded = np.zeros(-(-x.size // threads) * threads, dtype=np.float32)
    padded[: x.size] = x
    per_thread = padded.reshape(-1, threads).sum(axis=0, dtype=np.float32)  # across rows: in turn
    return _atomics(_block_sums(per_thread, 256), rng)


@pytest.fixture(scope="module")
def case_inputs() -> tuple[np.ndarray, Tolerance]:
    workload = load_workload(WORKLOAD)
    spec = workload.spec
    case = spec.case(CASE)
    param = spec.signature.param("x")
    assert isinstance(param, BufferParam)
    gen = case.inputs.get("x") or spec.inputs["x"]
    x = generate(gen, param, case_shape(param, case.scalars), 20261204, CASE, workload.root)
    return x, spec.tolerance["out"]


def _passes(expected: np.float32, actual: float, tol: Tolerance) -> bool:
    return compare("out", np.array([expected]), np.array([actual]), tol).passed


def test_a_sum_estimated_from_a_subset_fails_on_the_performance_inputs(
    case_inputs: tuple[np.ndarray, Tolerance]
) -> None:
    x, tol = case_inputs
    rng = np.random.default_rng(0)
    expected = _reference(x, rng)
    blocks = _block_sums(x, 256)
    # tests/adversarial/reduce_sum_sampled.cu: every 50th block of 256 skipped, the rest scaled by 50/49
    kept = np.ones(blocks.size, dtype=bool)
    kept[49::50] = False
    sampled = _atomics(blocks[kept] * np.float32(50 / 49), rng)
    half = _atomics(blocks[::2] * np.float32(2), rng)  # every other block, doubled
    assert not _passes(expected, float(sampled), tol), (expected, sampled)
    assert not _passes(expected, float(half), tol), (expected, half)


def test_correct_summation_orders_pass_on_the_performance_inputs(case_inputs: tuple[np.ndarray, Tolerance]) -> None:
    x, tol = case_inputs
    rng = np.random.default_rng(1)
    expected = _reference(x, rng)
    exact = float(x.sum(dtype=np.float64))
    warp_atomics = _atomics(_block_sums(x, 32), rng)  # tests/adversarial/reduce_sum_atomic_order.cu
    block_atomics = _atomics(_block_sums(x, 8192), rng)  # 1024 threads x 8 elements, one atomic a block
    for name, got in (("exact", exact), ("one atomic per warp", warp_atomics), ("one atomic per block", block_atomics)):
        assert _passes(expected, float(got), tol), (name, expected, got)


def _reduce_sum_with_uniform_performance_inputs(tmp_path: Path) -> Path:
    """reduce_sum as it was until 2026-12-04: uniform [0, 1) inputs on the performance cases too."""
    copy = tmp_path / "reduce_sum"
    shutil.copytree(WORKLOAD, copy)
    spec = json.loads((copy / "workload.json").read_text())
    for case in spec["cases"]:
        if case["kind"] == "performance":
            case.pop("inputs", None)
    (copy / "workload.json").write_text(json.dumps(spec))
    return copy


def test_the_author_is_warned_of_performance_inputs_that_let_an_estimate_pass(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # the bundled workloads have none
    for path in sorted(WORKLOAD.parent.iterdir()):
        if (path / "workload.json").exists():
            wl = load_workload(path)
            assert estimate_gaps(wl, {c.name for c in wl.spec.performance_cases}) == [], path.name
    old = load_workload(_reduce_sum_with_uniform_performance_inputs(tmp_path))
    gaps = estimate_gaps(old, {"n_2e26", "n_2e28"})
    assert [g.split(":")[0] for g in gaps] == ["case n_2e26", "case n_2e28"]
    assert "within ~7e-05 of the truth (tolerance 0.0001)" in gaps[0], gaps[0]
    assert estimate_gaps(old, {"n_2e28"}) == gaps[1:]
    # a session on it warns once per process, on stderr or the server's log: never in a result,
    # whose checks and notes the model reads (the line is a recipe)
    harness = write_harness(tmp_path, "fake")
    with caplog.at_level(logging.WARNING, logger="kernelopt.evaluation"):
        for n in range(2):
            session = Session(old, RequestsOnly(0), device_info(harness, 0), workdir=tmp_path / f"ev{n}",
                              seed=5, arch="sm_90")
    assert [r.getMessage() for r in caplog.records] == [f"workload reduce_sum: {g}" for g in gaps]
    assert not any(g in c for g in gaps for c in session.checks_in_force())
