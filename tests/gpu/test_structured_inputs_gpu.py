"""Structured draws on a real GPU (kernelopt_mcp/input_structure.py; PROTOCOL.md "Inputs drawn on
the device: structured matrices"): the harness's ``ko_structure_<bytes>`` after the fill gives, bit
for bit, the host's rule applied to the dense draw of the same key, for every element size, kind
and a batch of non-square (or square) matrices; the same for a ``fresh`` redraw before a timed
launch (its bytes from ``checked_dump``); and torch's filler (torch_fill.py, the PyTorch
reference's draws) gives the same bytes (skipped without torch).

Run with --run-gpu.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gpu_kernels import copy_request, ok_answer

from kernelopt_mcp.compiler import compile_kernel
from kernelopt_mcp.dtypes import DType
from kernelopt_mcp.evaluation.device import DeviceInfo
from kernelopt_mcp.evaluation.harness import HarnessProcess
from kernelopt_mcp.evaluation.protocol import FreshSpec
from kernelopt_mcp.evaluation.support_module import support_module
from kernelopt_mcp.input_structure import Structure, apply
from kernelopt_mcp.torch_fill import draw_key

pytestmark = pytest.mark.gpu

COPY = r"""
extern "C" __global__ void copy_bytes(const unsigned char* in, unsigned char* out, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < n; i += 256ull * gridDim.x) out[i] = in[i];
}
"""
BATCH = 3
SHAPES = {"triu": (67, 45), "tril": (45, 67), "symmetric": (67, 67)}
STRUCTURES: dict[str, dict[str, Any]] = {"triu": {"kind": "triu", "diagonal": 2},
                                         "tril": {"kind": "tril", "diagonal": -1}, "symmetric": {"kind": "symmetric"}}
# one dtype per element size (1, 2, 4, 8 bytes), floats and integers
DTYPES = {"uint8": DType.uint8, "bfloat16": DType.bfloat16, "float16": DType.float16, "float32": DType.float32,
          "int32": DType.int32, "float64": DType.float64}
SEED = 0x9E3779B97F4A7C15


@pytest.fixture(scope="module")
def files(device: DeviceInfo, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("structured")
    compiled = compile_kernel(COPY, device.arch)
    assert compiled.ok, compiled.summary()
    module = directory / "copy.cubin"
    module.write_bytes(compiled.cubin or b"")
    return {"module": module, "support": support_module(device.arch, directory / "support")}


def _spec(dtype: DType, kind: str, structured: bool) -> dict[str, Any]:
    rows, cols = SHAPES[kind]
    draw: dict[str, Any] = ({"kind": "randint", "low": -100, "high": 100} if not dtype.is_float
                            else {"kind": "normal", "mean": 0.5, "std": 2.0})
    if structured:
        draw["structure"] = {**STRUCTURES[kind], "rows": rows, "cols": cols}
    return draw


def _request(files: dict[str, Path], dtype: DType, kind: str, draw: dict[str, Any], out: Path,
             **case: Any) -> dict[str, Any]:
    """copy_bytes of a buffer of BATCH matrices of SHAPES[kind] drawn as ``draw`` under SEED."""
    rows, cols = SHAPES[kind]
    return copy_request(files, dtype.value, BATCH * rows * cols * dtype.itemsize, draw, SEED, out, **case)


def _array(raw: bytes, dtype: DType, kind: str) -> np.ndarray:
    return np.frombuffer(raw, dtype=dtype.numpy).reshape(BATCH, *SHAPES[kind]).copy()


@pytest.mark.parametrize("kind", list(STRUCTURES))
@pytest.mark.parametrize("name", list(DTYPES))
def test_a_structured_device_draw_is_the_hosts_rule_on_the_dense_draw(
    proc: HarnessProcess, files: dict[str, Path], tmp_path: Path, name: str, kind: str,
) -> None:
    dtype = DTYPES[name]
    ok_answer(proc, _request(files, dtype, kind, _spec(dtype, kind, False), tmp_path / "dense.bin"))
    ok_answer(proc, _request(files, dtype, kind, _spec(dtype, kind, True), tmp_path / "ours.bin"))
    dense = _array((tmp_path / "dense.bin").read_bytes(), dtype, kind)
    ours = (tmp_path / "ours.bin").read_bytes()
    want = apply(dense.copy(), Structure.model_validate(STRUCTURES[kind]))
    assert ours == want.tobytes(), "the device's structure differs from the host's rule on the same draw"
    assert ours != dense.tobytes()


def test_a_fresh_redraw_before_a_timed_launch_is_structured_too(
    proc: HarnessProcess, files: dict[str, Path], tmp_path: Path,
) -> None:
    dtype, kind = DType.float32, "symmetric"
    dumps: dict[bool, bytes] = {}
    for structured in (False, True):
        directory = tmp_path / f"dump-{structured}"
        directory.mkdir()
        request = _request(files, dtype, kind, _spec(dtype, kind, False), tmp_path / f"y-{structured}.bin",
                           timing={"warmup": 1, "iterations": 4}, fresh_seed=12345, checked_launches=[2],
                           checked_dump=str(directory))
        x = request["cases"][0]["args"][0]
        x["fresh"] = _spec(dtype, kind, structured)
        del x["input_draw"]  # checked_dump reads the inputs not redrawn from files
        x["input"] = str(tmp_path / "zeros.bin")
        (tmp_path / "zeros.bin").write_bytes(bytes(x["bytes"]))
        answer = ok_answer(proc, request)
        [dump] = answer["cases"][0]["timed_dumps"]
        dumps[structured] = Path(dump["files"]["inputs"]["x"]).read_bytes()
    dense = _array(dumps[False], dtype, kind)
    assert dumps[True] == apply(dense.copy(), Structure(kind="symmetric")).tobytes()


@pytest.mark.parametrize("kind", list(STRUCTURES))
def test_torch_draws_the_harness_structured_bytes(proc: HarnessProcess, files: dict[str, Path], tmp_path: Path,
                                                  kind: str) -> None:
    torch = pytest.importorskip("torch")
    from kernelopt_mcp.torch_fill import TorchFiller

    filler = TorchFiller(torch, files["support"].read_bytes())
    for name in ("uint8", "bfloat16", "float32", "float64"):
        dtype = DTYPES[name]
        draw = _spec(dtype, kind, True)
        ok_answer(proc, _request(files, dtype, kind, draw, tmp_path / f"{name}.bin"))
        tensor = torch.empty((BATCH, *SHAPES[kind]), dtype=getattr(torch, name), device="cuda")
        filler.fill(tensor, draw_key(SEED, 0, 0), 0, 0, FreshSpec.model_validate(draw))
        torch.cuda.synchronize()
        ours = tensor.cpu().view(torch.uint8).numpy().tobytes()
        assert ours == (tmp_path / f"{name}.bin").read_bytes(), (name, kind)
