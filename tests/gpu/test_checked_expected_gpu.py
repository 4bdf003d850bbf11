"""Checked launches against expected values given up front (harness feature ``checked_expected``), on a real GPU.

What a PyTorch problem's evaluation will do: torch draws the inputs of the hidden checked launches
with the harness's own fill (kernelopt_mcp/torch_fill.py, under ``draw_key(fresh_seed, draw, arg)``
for the draw PROTOCOL.md's rule gives), computes the expected outputs, and the harness compares each
checked launch with them on the device. An honest kernel passes every check; a kernel that computes
only on its validation launch fails each one. Needs torch on the GPU machine (skipped without it).

Run with --run-gpu.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernelopt_mcp.compiler import compile_kernel
from kernelopt_mcp.evaluation.device import DeviceInfo
from kernelopt_mcp.evaluation.harness import HarnessProcess, harness_features
from kernelopt_mcp.evaluation.protocol import FreshSpec
from kernelopt_mcp.evaluation.support_module import support_module
from kernelopt_mcp.torch_fill import TorchFiller, draw_key

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

SCALE = r"""
extern "C" __global__ void scale(const float* x, float* y, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < n; i += 256ull * gridDim.x) y[i] = 2.0f * x[i];
}
"""
# Computes on its first launch (the validation launch; blocks that start after block 0 counted it
# may skip already), then returns at once: the outputs keep their poison (NaN) on every timed
# launch.
LAZY_SCALE = r"""
__device__ unsigned int launches = 0;
extern "C" __global__ void scale(const float* x, float* y, unsigned long long n) {
  __shared__ unsigned int seen;
  if (threadIdx.x == 0) seen = *(volatile unsigned int*)&launches;
  __syncthreads();
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(&launches, 1u);
  if (seen >= 1) return;
  for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < n; i += 256ull * gridDim.x) y[i] = 2.0f * x[i];
}
"""
N = 1 << 20
SPEC = FreshSpec(kind="normal", mean=0.0, std=1.0)
FRESH_SEED = 0x1234_5678_9ABC
INPUT_SEED = 0x0BAD_CAFE
WARMUP, ITERATIONS, CHECKED = 2, 20, (5, 13)


@pytest.fixture(scope="module")
def files(device: DeviceInfo, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("checked_expected")
    out = {"support": support_module(device.arch, directory / "support")}
    for name, source in {"honest": SCALE, "lazy": LAZY_SCALE}.items():
        compiled = compile_kernel(source, device.arch)
        assert compiled.ok, compiled.summary()
        out[name] = directory / f"{name}.cubin"
        out[name].write_bytes(compiled.cubin or b"")
    return out


def expected_values(filler: TorchFiller, draw: int, dtype: Any) -> bytes:
    """The reference (y = 2 x) on the inputs the harness draws for ``draw`` of argument 0."""
    x = torch.empty(N, dtype=torch.float32, device="cuda")
    filler.fill(x, draw_key(FRESH_SEED, draw, 0), draw, 0, SPEC)
    y = (2.0 * x).to(dtype)
    torch.cuda.synchronize()
    return y.cpu().numpy().tobytes()


def request(files: dict[str, Path], module: Path, tmp: Path, filler: TorchFiller, native: bool) -> dict[str, Any]:
    # events mode, every timed launch redrawn: sample s gets draw WARMUP + s, the confirm launch
    # WARMUP + ITERATIONS (PROTOCOL.md, "Checked launches against expected values")
    launches: list[tuple[dict[str, Any], int]] = [({"sample": s}, WARMUP + s) for s in CHECKED]
    launches.append(({"launch": "confirm"}, WARMUP + ITERATIONS))
    entries = []
    for where, draw in launches:
        file = tmp / f"expected_{draw}.bin"
        file.write_bytes(expected_values(filler, draw, torch.float32 if native else torch.float64))
        entries.append({**where, "draw": draw, "buffer": "y", "expected": str(file)})
    spec = SPEC.model_dump(exclude_none=True)
    y: dict[str, Any] = {"kind": "buffer", "name": "y", "role": "out", "bytes": 4 * N, "output": str(tmp / "y.bin"),
                         "dtype": "float32", "compare": {"abs_tol": 1e-6, "rtol": 1e-6, "rel_floor": 1.0}}
    if native:
        y["expected_dtype"] = "float32"
    args = [
        {"kind": "buffer", "name": "x", "role": "in", "bytes": 4 * N, "dtype": "float32",
         "input_draw": {"seed": INPUT_SEED, **spec}, "fresh": spec},
        y,
        {"kind": "scalar", "name": "n", "dtype": "uint64", "raw": N.to_bytes(8, "little").hex()},
    ]
    case = {"name": "scale", "args": args, "launch": {"grid": [512, 1, 1], "block": [256, 1, 1]},
            "timing": {"warmup": WARMUP, "iterations": ITERATIONS, "blocking": True},
            "fresh_seed": FRESH_SEED, "checked_launches": list(CHECKED), "confirm_launch": True,
            "checked_expected": entries}
    return {"protocol": 2, "device": 0, "module": str(module), "entry": "scale",
            "support_module": str(files["support"]), "guard_bytes": 4096, "flush_l2": True, "cases": [case]}


@pytest.fixture(scope="module")
def filler(files: dict[str, Path]) -> TorchFiller:
    return TorchFiller(torch, files["support"].read_bytes())


def test_the_harness_offers_checked_expected(harness_binary: Path) -> None:
    assert "checked_expected" in harness_features(harness_binary)


@pytest.mark.parametrize("native", [True, False], ids=["float32_values", "float64_values"])
def test_torch_computed_values_check_the_timed_launches(
    proc: HarnessProcess, files: dict[str, Path], filler: TorchFiller, tmp_path: Path, native: bool
) -> None:
    reply = proc.request(request(files, files["honest"], tmp_path, filler, native), timeout_s=120)
    assert reply.answer is not None and reply.answer["status"] == "ok", reply.stderr[-2000:]
    case = reply.answer["cases"][0]
    assert case["status"] == "ok", case
    checks = case["timed_checks"]
    assert [(c["launch"], c["sample"], c["draw"]) for c in checks] == [
        ("measured", 5, 7), ("measured", 13, 15), ("confirm", None, 22)]
    for c in checks:
        assert c["elements"] == N and c["mismatches"] == 0 and c["nonfinite"] == 0 and "error" not in c, c
    # the values were really for other inputs than the validation launch's: not all equal
    assert len({(tmp_path / f"expected_{d}.bin").read_bytes()[:64] for d in (7, 15, 22)}) == 3
    # the values were staged like expected files: hidden from the candidate between compares
    assert reply.answer["staging"]["expected_hidden"] is True, reply.answer["staging"]


def test_a_kernel_honest_only_on_its_validation_launch_fails_every_check(
        proc: HarnessProcess, files: dict[str, Path], filler: TorchFiller, tmp_path: Path) -> None:
    reply = proc.request(request(files, files["lazy"], tmp_path, filler, True), timeout_s=120)
    assert reply.answer is not None and reply.answer["status"] == "ok", reply.stderr[-2000:]
    case = reply.answer["cases"][0]
    checks = case["timed_checks"]
    assert len(checks) == 3
    for c in checks:
        # poison (NaN) everywhere: every element a mismatch, all of them non-finite
        assert c["mismatches"] == N and c["nonfinite"] == N and c["first_mismatch"] == 0, c
