"""The harness's device draws made again by torch (kernelopt_mcp/torch_fill.py), on a real GPU.

For each dtype and distribution, the harness draws an input with ``input_draw`` and a copy
kernel writes its bytes out; torch fills a tensor of its own with the same support module under
the key :func:`draw_key` gives: the bytes are the same, so PyTorch can run a problem's module on
exactly the inputs a candidate saw with nothing copied between the processes. Another seed gives
other bytes. Needs torch on the GPU machine (skipped without it).

Run with --run-gpu.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernelopt_mcp.compiler import compile_kernel
from kernelopt_mcp.dtypes import DType
from kernelopt_mcp.evaluation.device import DeviceInfo
from kernelopt_mcp.evaluation.harness import HarnessProcess
from kernelopt_mcp.evaluation.protocol import FreshSpec
from kernelopt_mcp.evaluation.support_module import support_module
from kernelopt_mcp.torch_fill import TorchFiller, draw_key

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

COPY = r"""
extern "C" __global__ void copy_bytes(const unsigned char* in, unsigned char* out, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < n; i += 256ull * gridDim.x) out[i] = in[i];
}
"""
N = 1_000_003  # odd: the fills' tails and unaligned vector stores
SPECS = {
    "uniform": FreshSpec(kind="uniform", low=-2.0, high=3.0),
    "normal": FreshSpec(kind="normal", mean=0.5, std=2.0),
    "randint": FreshSpec(kind="randint", low=-7, high=100),
}
DTYPES = {"float32": DType.float32, "float16": DType.float16, "bfloat16": DType.bfloat16, "float64": DType.float64,
          "int32": DType.int32, "int64": DType.int64, "uint8": DType.uint8}


@pytest.fixture(scope="module")
def files(device: DeviceInfo, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("torch_fill")
    compiled = compile_kernel(COPY, device.arch)
    assert compiled.ok, compiled.summary()
    module = directory / "copy.cubin"
    module.write_bytes(compiled.cubin or b"")
    return {"module": module, "support": support_module(device.arch, directory / "support")}


@pytest.fixture(scope="module")
def filler(files: dict[str, Path]) -> TorchFiller:
    return TorchFiller(torch, files["support"].read_bytes())


def harness_draw(proc: HarnessProcess, files: dict[str, Path], out: Path, dtype: DType, spec: FreshSpec,
                 seed: int) -> bytes:
    nbytes = N * dtype.itemsize
    args: list[dict[str, Any]] = [
        {"kind": "buffer", "name": "x", "role": "in", "bytes": nbytes, "dtype": dtype.value,
         "input_draw": {"seed": seed, **spec.model_dump(exclude_none=True)}},
        {"kind": "buffer", "name": "y", "role": "out", "bytes": nbytes, "output": str(out)},
        {"kind": "scalar", "name": "n", "dtype": "uint64", "raw": nbytes.to_bytes(8, "little").hex()},
    ]
    request = {"protocol": 2, "device": 0, "module": str(files["module"]), "entry": "copy_bytes",
               "support_module": str(files["support"]), "guard_bytes": 4096, "flush_l2": False,
               "cases": [{"name": "c", "args": args, "launch": {"grid": [1024, 1, 1], "block": [256, 1, 1]}}]}
    reply = proc.request(request, timeout_s=120)
    assert reply.answer is not None and reply.answer["status"] == "ok", reply.stderr[-2000:]
    return out.read_bytes()


def torch_draw(filler: TorchFiller, dtype: DType, spec: FreshSpec, seed: int) -> bytes:
    tensor = torch.empty(N, dtype=getattr(torch, dtype.value), device="cuda")
    filler.fill(tensor, draw_key(seed, 0, 0), 0, 0, spec)
    torch.cuda.synchronize()
    return tensor.cpu().view(torch.uint8).numpy().tobytes()


@pytest.mark.parametrize("kind", list(SPECS))
@pytest.mark.parametrize("name", list(DTYPES))
def test_torch_draws_the_harness_bytes(proc: HarnessProcess, files: dict[str, Path], filler: TorchFiller,
                                       tmp_path: Path, name: str, kind: str) -> None:
    dtype, spec = DTYPES[name], SPECS[kind]
    seed = 0x9E3779B97F4A7C15
    theirs = harness_draw(proc, files, tmp_path / "y.bin", dtype, spec, seed)
    ours = torch_draw(filler, dtype, spec, seed)
    assert len(ours) == len(theirs) == N * dtype.itemsize
    assert ours == theirs, ("first differing byte at "
                            f"{next(i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b)}")
    values = np.frombuffer(ours, dtype=dtype.numpy).astype(np.float64)
    # really drawn: continuous draws into a float type take many values; integers (randint, or any
    # draw into an integer type) a few in their range
    assert np.unique(values).size > (1000 if dtype.is_float and kind != "randint" else 3)
    assert torch_draw(filler, dtype, spec, seed + 1) != ours  # another seed, other bytes
