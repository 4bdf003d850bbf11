from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from kernelopt_mcp.dtypes import DType
from kernelopt_mcp.errors import InputError
from kernelopt_mcp.evaluation.inputs import generate, materialize
from kernelopt_mcp.workload import BufferParam, DataFile, load_workload
from kernelopt_mcp.workload_parts import load_parts

GENS = [
    {"generator": "uniform", "low": -2, "high": 3},
    {"generator": "normal", "mean": 1, "std": 0.5},
    {"generator": "randint", "low": -5, "high": 5},
    {"generator": "arange", "start": 1, "step": 2, "modulo": 7},
    {"generator": "constant", "value": 3.5},
]


def _param(dtype: str = "float32") -> BufferParam:
    return BufferParam(name="x", dtype=DType(dtype), role="in", shape=["n"])


@pytest.mark.parametrize("gen", GENS, ids=lambda g: g["generator"])
def test_generators_are_deterministic_for_a_seed(gen: dict) -> None:
    from pydantic import TypeAdapter

    from kernelopt_mcp.workload import Generator

    g = TypeAdapter(Generator).validate_python(gen)
    a = generate(g, _param(), (1000,), seed=42, case="c", base=None)
    b = generate(g, _param(), (1000,), seed=42, case="c", base=None)
    assert a.dtype == np.float32 and a.shape == (1000,)
    assert np.array_equal(a, b)
    if gen["generator"] in ("uniform", "normal", "randint"):
        c = generate(g, _param(), (1000,), seed=43, case="c", base=None)
        assert not np.array_equal(a, c)
        d = generate(g, _param(), (1000,), seed=42, case="other", base=None)
        assert not np.array_equal(a, d), "each case gets its own stream"


def test_generator_values_follow_their_parameters() -> None:
    from pydantic import TypeAdapter

    from kernelopt_mcp.workload import Generator

    ta = TypeAdapter(Generator)
    u = generate(ta.validate_python(GENS[0]), _param("float64"), (10000,), 1, "c", None)
    assert u.min() >= -2 and u.max() < 3 and abs(u.mean() - 0.5) < 0.05
    r = generate(ta.validate_python(GENS[2]), _param("int32"), (10000,), 1, "c", None)
    assert r.dtype == np.int32 and r.min() == -5 and r.max() == 4
    a = generate(ta.validate_python(GENS[3]), _param("float32"), (5,), 1, "c", None)
    assert a.tolist() == [1, 3, 5, 0, 2]
    b = generate(ta.validate_python(GENS[0]), _param("bfloat16"), (8,), 1, "c", None)
    assert b.dtype == ml_dtypes.bfloat16


def test_integer_range_overflow_is_a_clear_error() -> None:
    from pydantic import TypeAdapter

    from kernelopt_mcp.workload import Generator

    g = TypeAdapter(Generator).validate_python({"generator": "randint", "low": 0, "high": 1000})
    with pytest.raises(InputError, match=r"exceed the range of int8"):
        generate(g, _param("int8"), (1000,), 1, "c", None)


def test_data_files_npy_and_bin(tmp_path: Path) -> None:
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(tmp_path / "x.npy", arr)
    arr.tofile(tmp_path / "x.bin")
    p = BufferParam(name="x", dtype=DType.float32, role="in", shape=["r", "c"])
    for name in ("x.npy", "x.bin"):
        got = generate(DataFile(generator="file", path=name), p, (3, 4), 0, "c", tmp_path)
        assert np.array_equal(got, arr)
    with pytest.raises(InputError, match=r"does not hold the 64 bytes the case needs \(4x4 float32\)"):
        generate(DataFile(generator="file", path="x.bin"), p, (4, 4), 0, "c", tmp_path)
    with pytest.raises(InputError, match=r"is not a .npy array of the 96 bytes the case needs \(12 float64\)"):
        generate(DataFile(generator="file", path="x.npy"),
                 BufferParam(name="x", dtype=DType.float64, role="in", shape=["r"]), (12,), 0, "c", tmp_path)
    with pytest.raises(InputError, match="data file not found"):
        generate(DataFile(generator="file", path="nope.bin"), p, (3, 4), 0, "c", tmp_path)
    with pytest.raises(InputError, match="sha256 differs"):
        generate(DataFile(generator="file", path="x.bin", sha256="0" * 64), p, (3, 4), 0, "c", tmp_path)


def test_materialize_writes_bins_and_a_reloadable_manifest(tmp_path: Path, repo: Path) -> None:
    wl = load_workload(repo / "workloads/vector_add")
    # keep it small: only correctness cases
    wl.spec = wl.spec.model_copy(update={"cases": [c for c in wl.spec.cases if c.kind == "correctness"]})
    out = materialize(wl, seed=7, directory=tmp_path / "inputs")
    case = out["odd_1000003"]
    assert case.shapes == {"a": (1000003,), "b": (1000003,), "c": (1000003,)}
    assert set(case.files) == {"a", "b"}
    assert np.array_equal(np.fromfile(case.files["a"], dtype=np.float32), case.arrays["a"])
    manifest = json.loads((tmp_path / "inputs/input_cases.json").read_text())
    assert manifest["seed"] == 7
    again = materialize(wl, seed=7, directory=tmp_path / "again")
    assert np.array_equal(again["odd_1000003"].arrays["b"], case.arrays["b"])

    # the manifest is an input-cases file: a later run can reuse the same inputs
    (tmp_path / "sig.json").write_text(wl.signature.model_dump_json())
    reloaded = load_parts(
        signature=tmp_path / "sig.json", input_cases=tmp_path / "inputs/input_cases.json",
        reference_cu=repo / "workloads/vector_add/reference.cu",
        reference_launch={"grid": ["ceil_div(n, 256)"], "block": [256]},
    )
    re_out = materialize(reloaded, seed=999, directory=tmp_path / "third")
    assert np.array_equal(re_out["odd_1000003"].arrays["a"], case.arrays["a"]), "files, not the seed, decide"


def test_each_seed_name_means_one_seed() -> None:
    """An evaluation's input seed (``new_input_seed``: recorded, 63 bits) and the harness's
    ``fresh_seed`` (``request_seed``: hidden, new for every request, 64 bits) are different seeds
    with different names."""
    from kernelopt_mcp.evaluation import fresh_inputs, inputs
    from kernelopt_mcp.evaluation.protocol import CaseRequest

    assert not hasattr(inputs, "fresh_seed")
    assert {0 <= inputs.new_input_seed() < 2**63 for _ in range(20)} == {True}
    assert len({inputs.new_input_seed() for _ in range(20)}) == 20
    assert {0 <= fresh_inputs.request_seed() < 2**64 for _ in range(20)} == {True}
    assert "fresh_seed" in CaseRequest.model_fields  # the harness protocol's name stays
