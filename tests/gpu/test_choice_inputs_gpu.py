"""Choice draws on a real GPU (kernelopt_mcp/input_choice.py; PROTOCOL.md "Inputs drawn on the device:
a choice of values"): the harness's ``ko_choice_<bytes>`` gives, bit for bit, the host's table of
the values in the buffer's dtype (``input_choice.table``) looked up at the harness's own randint over
[0, k) of the same key, for every element size, float and integer dtypes, a tail that is not a whole
Philox block, a table of 16 values and a structure after the choice; the same for a ``fresh``
redraw before a timed launch (its bytes from ``checked_dump``); and torch's filler (torch_fill.py,
the PyTorch reference's draws) gives the same bytes (skipped without torch).

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
from kernelopt_mcp.input_choice import exact_values, table
from kernelopt_mcp.input_structure import Structure, apply
from kernelopt_mcp.torch_fill import draw_key

pytestmark = pytest.mark.gpu

COPY = r"""
extern "C" __global__ void copy_bytes(const unsigned char* in, unsigned char* out, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < n; i += 256ull * gridDim.x) out[i] = in[i];
}
"""
ELEMENTS = 100_003  # odd: the last Philox block feeds one element
# one dtype per element size (1, 2, 4, 8 bytes), floats and integers; values exactly of each dtype
VALUES: dict[str, list[float]] = {
    "uint8": [0.0, 1.0, 255.0],
    "int8": [-128.0, -1.0, 0.0, 127.0],
    "bfloat16": [-1.0, 1.0],
    "float16": [-1.0, 0.0999755859375, 2.0**-24, 65504.0, -0.0],
    "float32": [float(v) for v in range(-8, 8)],  # 16 values: a whole table
    "int32": [-1.0, 1.0],
    "float64": [-1.0, 0.1, 1e300],
    "int64": [-(2.0**62), 2.0**62],
}
SEED = 0x9E3779B97F4A7C15


@pytest.fixture(scope="module")
def files(device: DeviceInfo, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("choice")
    compiled = compile_kernel(COPY, device.arch)
    assert compiled.ok, compiled.summary()
    module = directory / "copy.cubin"
    module.write_bytes(compiled.cubin or b"")
    return {"module": module, "support": support_module(device.arch, directory / "support")}


def _request(files: dict[str, Path], dtype: DType, draw: dict[str, Any], out: Path, elements: int = ELEMENTS,
             **case: Any) -> dict[str, Any]:
    """copy_bytes of a buffer of ``elements`` of ``dtype`` drawn as ``draw`` under SEED."""
    return copy_request(files, dtype.value, elements * dtype.itemsize, draw, SEED, out, **case)


def _choice(name: str) -> dict[str, Any]:
    return {"kind": "choice", "values": VALUES[name]}


def _indices(proc: HarnessProcess, files: dict[str, Path], tmp_path: Path, count: int,
             elements: int = ELEMENTS) -> np.ndarray:
    """The harness's randint over [0, count) under SEED (int64 elements): the indices a choice of
    ``count`` values takes (its Philox words do not depend on the dtype)."""
    out = tmp_path / f"index-{count}-{elements}.bin"
    ok_answer(proc, _request(files, DType.int64, {"kind": "randint", "low": 0, "high": count}, out, elements))
    return np.fromfile(out, dtype="<i8")


@pytest.mark.parametrize("name", list(VALUES))
def test_a_device_choice_is_the_hosts_table_at_the_harness_randint(
    proc: HarnessProcess, files: dict[str, Path], tmp_path: Path, name: str,
) -> None:
    dtype = DType(name)
    assert exact_values(VALUES[name], dtype) == VALUES[name]  # the numbers Python would send
    ok_answer(proc, _request(files, dtype, _choice(name), tmp_path / "ours.bin"))
    ours = (tmp_path / "ours.bin").read_bytes()
    index = _indices(proc, files, tmp_path, len(VALUES[name]))
    want = table(VALUES[name], dtype)[index]
    assert ours == want.astype(dtype.numpy.newbyteorder("<")).tobytes(), (
        "the device's choice differs from the host's table")
    counts = np.bincount(index, minlength=len(VALUES[name])) / ELEMENTS
    assert (abs(counts - 1 / len(VALUES[name])) < 0.01).all(), counts  # each value equally likely


def test_a_structured_device_choice_is_the_hosts_rule_on_the_choice(
    proc: HarnessProcess, files: dict[str, Path], tmp_path: Path,
) -> None:
    dtype, rows, cols = DType.float32, 67, 45
    draw = _choice("float32")
    ok_answer(proc, _request(files, dtype, draw, tmp_path / "dense.bin", 3 * rows * cols))
    shaped = {**draw, "structure": {"kind": "tril", "diagonal": -1, "rows": rows, "cols": cols}}
    ok_answer(proc, _request(files, dtype, shaped, tmp_path / "tril.bin", 3 * rows * cols))
    dense = np.fromfile(tmp_path / "dense.bin", dtype="<f4").reshape(3, rows, cols)
    want = apply(dense.copy(), Structure(kind="tril", diagonal=-1))
    assert (tmp_path / "tril.bin").read_bytes() == want.tobytes()


def test_a_fresh_choice_before_a_timed_launch_is_the_table_at_the_fresh_randint(
    proc: HarnessProcess, files: dict[str, Path], tmp_path: Path,
) -> None:
    dumps: dict[str, bytes] = {}
    for dtype, fresh in ((DType.int64, {"kind": "randint", "low": 0, "high": 5}),
                         (DType.float16, {"kind": "choice", "values": [-2.0, -1.0, 0.0, 1.0, 2.0]})):
        directory = tmp_path / f"dump-{dtype.value}"
        directory.mkdir()
        request = _request(files, dtype, fresh, tmp_path / f"y-{dtype.value}.bin",
                           timing={"warmup": 1, "iterations": 4}, fresh_seed=12345, checked_launches=[2],
                           checked_dump=str(directory))
        x = request["cases"][0]["args"][0]
        x["fresh"] = fresh
        del x["input_draw"]  # checked_dump reads the inputs not redrawn from files
        x["input"] = str(tmp_path / f"zeros-{dtype.value}.bin")
        (tmp_path / f"zeros-{dtype.value}.bin").write_bytes(bytes(x["bytes"]))
        answer = ok_answer(proc, request)
        [dump] = answer["cases"][0]["timed_dumps"]
        dumps[dtype.value] = Path(dump["files"]["inputs"]["x"]).read_bytes()
    index = np.frombuffer(dumps["int64"], dtype="<i8")
    want = table([-2.0, -1.0, 0.0, 1.0, 2.0], DType.float16)[index]
    assert dumps["float16"] == want.astype("<f2").tobytes()


@pytest.mark.parametrize("name", ["uint8", "bfloat16", "float16", "float32", "float64", "int64"])
def test_torch_draws_the_harness_choice_bytes(proc: HarnessProcess, files: dict[str, Path], tmp_path: Path,
                                              name: str) -> None:
    torch = pytest.importorskip("torch")
    from kernelopt_mcp.torch_fill import TorchFiller

    filler = TorchFiller(torch, files["support"].read_bytes())
    dtype = DType(name)
    draw = _choice(name)
    ok_answer(proc, _request(files, dtype, draw, tmp_path / f"{name}.bin"))
    tensor = torch.empty(ELEMENTS, dtype=getattr(torch, name), device="cuda")
    filler.fill(tensor, draw_key(SEED, 0, 0), 0, 0, FreshSpec.model_validate(draw))
    torch.cuda.synchronize()
    ours = tensor.cpu().view(torch.uint8).numpy().tobytes()
    assert ours == (tmp_path / f"{name}.bin").read_bytes(), name
