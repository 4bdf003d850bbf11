"""TMA tensor maps on a real GPU (PROTOCOL.md, "Tensor maps"): vector_add whose tiles move with
cp.async.bulk.tensor over maps the harness encodes on the case's own buffers, through the whole
evaluation path (every case of the bundled workload, odd sizes included: TMA clips the last
tile), and a map that reaches past its buffer refused before any launch, by Python's check and,
with that check out of the way, by the harness's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelopt_mcp import Candidate, EvaluateOptions, HarnessProcess, Session, Settings, Status
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.evaluation import build as build_mod
from kernelopt_mcp.evaluation.device import DeviceInfo
from kernelopt_mcp.evaluation.evaluate import evaluate, prepare
from kernelopt_mcp.launch import LaunchSpec

pytestmark = pytest.mark.gpu

FAST = EvaluateOptions(warmup=2, iterations=10, timeout_s=60)
TILE = 256

# Each block loads one TILE-float tile of a and of b into shared memory with bulk tensor copies
# that complete on an mbarrier, adds them, and stores the tile of c with a bulk tensor store. A
# box is always moved whole: a load past n reads zeros (oob_fill) and still completes TILE * 4
# bytes on the barrier; a store drops the elements past n, but only down to whole 16-byte
# chunks. With -DPLAIN_TAIL=1 a last tile ending inside a chunk is stored with plain stores.
TMA_KERNEL = r"""
struct alignas(64) TensorMap { unsigned long long opaque[16]; };  // CUtensorMap (cuda.h is not NVRTC's)

#define TILE 256

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

extern "C" __global__ void __launch_bounds__(TILE) vector_add(
    const float* a, const float* b, float* c, int n,
    const __grid_constant__ TensorMap tm_a, const __grid_constant__ TensorMap tm_b,
    const __grid_constant__ TensorMap tm_c) {
    __shared__ alignas(128) float sa[TILE];
    __shared__ alignas(128) float sb[TILE];
    __shared__ alignas(128) float sc[TILE];
    __shared__ alignas(8) unsigned long long bar;
    const int x = blockIdx.x * TILE;  // the tile's first element: the maps' coordinate
    const unsigned b_addr = smem_addr(&bar);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b_addr) : "memory");
        // the initialised barrier made visible to the async proxy (the TMA unit)
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        // one arrival (this thread) and both tiles' bytes
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     :: "r"(b_addr), "r"(2 * TILE * 4) : "memory");
        asm volatile(
            "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2}], [%3];"
            :: "r"(smem_addr(sa)), "l"(reinterpret_cast<unsigned long long>(&tm_a)), "r"(x), "r"(b_addr)
            : "memory");
        asm volatile(
            "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2}], [%3];"
            :: "r"(smem_addr(sb)), "l"(reinterpret_cast<unsigned long long>(&tm_b)), "r"(x), "r"(b_addr)
            : "memory");
    }
    // every thread waits for phase 0 of the barrier (the arrival and all the bytes)
    unsigned done = 0;
    while (!done) {
        asm volatile(
            "{\n\t.reg .pred p;\n\t"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
            "selp.u32 %0, 1, 0, p;\n\t}"
            : "=r"(done) : "r"(b_addr), "r"(0) : "memory");
    }
    sc[threadIdx.x] = sa[threadIdx.x] + sb[threadIdx.x];
    // this thread's generic-proxy write to sc, ordered before the async proxy's read of it
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
#if PLAIN_TAIL
    // a TMA store writes whole 16-byte chunks, so a last tile that ends inside one (n % 4 != 0)
    // goes out with plain stores
    if (x + TILE > n && n % 4 != 0) {
        if (x + threadIdx.x < n) c[x + threadIdx.x] = sc[threadIdx.x];
        return;
    }
#endif
    if (threadIdx.x == 0) {
        asm volatile("cp.async.bulk.tensor.1d.global.shared::cta.bulk_group [%0, {%1}], [%2];"
                     :: "l"(reinterpret_cast<unsigned long long>(&tm_c)), "r"(x), "r"(smem_addr(sc)) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        // the store complete (not only its shared-memory reads) before the block exits
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
}
"""


def tma_launch(c_dims: str = "n") -> LaunchSpec:
    maps: list[dict[str, Any]] = [
        {"buffer": name, "dims": [dims], "box": [TILE]} for name, dims in (("a", "n"), ("b", "n"), ("c", c_dims))
    ]
    return LaunchSpec.model_validate({"grid": [f"ceil_div(n, {TILE})"], "block": [TILE], "tensor_maps": maps})


@pytest.fixture
def vector_add(proc: HarnessProcess, device: DeviceInfo, tmp_path: Path) -> Iterator[Session]:
    wl = find_workload("vector_add", Settings())
    with Session(wl, proc, device, workdir=tmp_path, options=FAST) as ev:
        assert "tensor_maps" in ev.features, f"the harness does not list the feature tensor_maps: {sorted(ev.features)}"
        prepare(ev)
        yield ev


def test_a_tma_vector_add_passes_every_case(vector_add: Session) -> None:
    result = evaluate(vector_add, Candidate(TMA_KERNEL, tma_launch(), ["-DPLAIN_TAIL=1"], "tma"))
    assert result.status is Status.ok, result.message
    assert {c.name for c in result.cases} == {"one", "odd_1000003", "n_2e25", "n_2e27"}
    assert all(c.status is Status.ok for c in result.cases), [(c.name, c.status, c.message) for c in result.cases]
    assert all(c.launch is not None and len(c.launch["tensor_maps"]) == 3 for c in result.cases)
    assert result.score_ms and result.score_ms > 0


def test_a_tma_store_ending_inside_a_16_byte_chunk_is_an_out_of_bounds_write(vector_add: Session) -> None:
    # the store of the last tile of n = 1 or 1000003 floats writes its 16-byte chunk whole: the
    # guard bytes after c change (12 and 4 of them), and the message names the map
    result = evaluate(vector_add, Candidate(TMA_KERNEL, tma_launch(), ["-DPLAIN_TAIL=0"], "tma_tail"), benchmark=False)
    status = {c.name: c.status for c in result.cases}
    assert status == {"one": Status.out_of_bounds_write, "odd_1000003": Status.out_of_bounds_write,
                      "n_2e25": Status.ok, "n_2e27": Status.ok}, [(c.name, c.status, c.message) for c in result.cases]
    past = {"one": 12, "odd_1000003": 4}  # the rest of the last chunk: 16 - 4 * (n % 4) bytes
    for c in result.cases:
        if c.name not in past:
            continue
        assert c.guard_violations and c.guard_violations[0]["buffer"] == "c", c.guard_violations
        assert c.guard_violations[0]["side"] == "after" and c.guard_violations[0]["bytes_changed"] == past[c.name]
        assert ("tensor_maps[2] over 'c' has rows of" in (c.message or "")
                and "plain stores" in (c.message or "")), c.message


def test_a_map_past_its_buffer_is_refused_before_any_launch(
    vector_add: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Python's check: an invalid launch, and no request sent for the candidate
    result = evaluate(vector_add, Candidate(TMA_KERNEL, tma_launch("n + 4096"), [], "past"), benchmark=False)
    assert result.status is Status.invalid_launch, result.message
    assert all(c.status is Status.invalid_launch and "tensor_maps[2] (over 'c', float32)" in (c.message or "")
               for c in result.cases), [c.message for c in result.cases]
    sent = [p.parent.name for p in (vector_add.workdir / "requests").rglob("*.json")]
    assert not [name for name in sent if name.endswith("-past")], sent
    # the harness's own rule, with Python's check out of the way: a bad_request before the first
    # launch (a launch would store tiles into c's guard bytes: out_of_bounds_write, not this)
    monkeypatch.setattr(build_mod, "check_tensor_maps", lambda *args: None)
    result = evaluate(vector_add, Candidate(TMA_KERNEL, tma_launch("n + 4096"), [], "past_harness"), benchmark=False)
    assert result.status is Status.invalid_launch, result.message
    assert all(c.status is Status.invalid_launch and "the harness refused a tensor map" in (c.message or "")
               and "tensor_maps[2]" in (c.message or "") for c in result.cases), [c.message for c in result.cases]
