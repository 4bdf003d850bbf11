"""Structured inputs (kernelopt_mcp/input_structure.py): a drawn buffer whose matrices are made
triangular or symmetric after the draw, the same bytes wherever it is drawn. Here, without torch
or a GPU: the schema and its checks against the cases' shapes, the host's draws, the detection an
import uses, what the harness is asked for (only with the feature ``structured_draw``, else the
input is drawn on the host and not redrawn), and the pretend GPU's draws (tests/fakegpu.py), on
which a kernel that relies on the structure passes. The harness's side: native_harness/tests/
e2e_draws.cpp; the device kernel against the host and torch: tests/gpu/test_structured_inputs_gpu.py;
the import: tests/pytorch/test_torch_structure.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakegpu import TINY_SPEC, evaluate_pair, write_harness, write_tiny_workload, written_requests
from pydantic import TypeAdapter, ValidationError

from kernelopt_mcp import HarnessProcess
from kernelopt_mcp.dtypes import DType
from kernelopt_mcp.errors import WorkloadError
from kernelopt_mcp.evaluation.fresh_inputs import STRUCTURED_DRAW, fresh_spec
from kernelopt_mcp.evaluation.inputs import device_draw, generate
from kernelopt_mcp.evaluation.protocol import StructureSpec
from kernelopt_mcp.input_structure import Structure, apply, detect, kept
from kernelopt_mcp.status import Status
from kernelopt_mcp.torch_fit import fit_generator, fitted, fitted_note
from kernelopt_mcp.workload import BufferParam, DataFile, Generator, Uniform

GEN = TypeAdapter(Generator)
FEATURES = "blocking,device_compare,timed_inputs,fresh_inputs,timed_check,confirm_launch,input_draw,expected_dtype"


def _gen(**fields: Any) -> Any:
    return GEN.validate_python({"generator": "uniform", "low": 1.0, "high": 2.0, **fields})


def _param(dtype: str = "float32", rank: int = 2) -> BufferParam:
    return BufferParam(name="x", dtype=DType(dtype), role="in", shape=["n"] * rank)


# --- the schema -----------------------------------------------------------------------------


def test_a_generator_without_structure_reads_and_writes_as_before() -> None:
    plain = _gen()
    assert plain.structure is None
    assert plain.model_dump(mode="json") == {"generator": "uniform", "low": 1.0, "high": 2.0}
    structured = _gen(structure={"kind": "triu"})
    assert structured.model_dump(mode="json")["structure"] == {"kind": "triu", "diagonal": 0}
    assert GEN.validate_python(structured.model_dump(mode="json")) == structured
    for bad in ({"kind": "band"}, {"kind": "symmetric", "diagonal": 1}, {"kind": "triu", "extra": 1}):
        with pytest.raises(ValidationError):
            _gen(structure=bad)
    with pytest.raises(ValidationError):  # arange and constant are not drawn
        GEN.validate_python({"generator": "constant", "value": 1, "structure": {"kind": "triu"}})


def _spec(a_shape: list[Any], structure: dict[str, Any], scalars: dict[str, int] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(json.dumps(TINY_SPEC))
    spec["signature"]["params"][0]["shape"] = a_shape
    spec["signature"]["params"].append({"kind": "scalar", "name": "m", "dtype": "int32"})
    spec["inputs"]["a"] = {"generator": "uniform", "structure": structure}
    for case in spec["cases"]:
        case["scalars"]["m"] = (scalars or {}).get(case["name"], 3)
    return spec


@pytest.mark.parametrize(("shape", "structure", "message"), [
    (["n"], {"kind": "triu"}, "case 'one': inputs.a: structure triu needs matrices: at least two dimensions"),
    (["n", "m"], {"kind": "symmetric"}, "case 'one': inputs.a: structure symmetric needs square matrices; "
                                        "the last two dimensions of shape [1, 3] are 1 x 3"),
])
def test_a_structure_that_does_not_fit_a_case_is_refused_naming_the_case_and_input(
    tmp_path: Path, shape: list[Any], structure: dict[str, Any], message: str,
) -> None:
    from kernelopt_mcp.workload import load_workload

    write_tiny_workload(tmp_path, _spec(shape, structure))
    with pytest.raises(WorkloadError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_workload(tmp_path / "tiny_add")


def test_a_batch_of_square_matrices_is_symmetric_per_matrix(tmp_path: Path) -> None:
    from kernelopt_mcp.workload import load_workload

    write_tiny_workload(tmp_path, _spec(["n", "m", "m"], {"kind": "symmetric"}))
    assert load_workload(tmp_path / "tiny_add").spec.inputs["a"].structure == Structure(kind="symmetric")  # type: ignore[union-attr]


# --- the rule, on the host ------------------------------------------------------------------


def test_the_rule_zeroes_triangles_and_mirrors_bits() -> None:
    m = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    assert apply(m.copy(), Structure(kind="triu", diagonal=1)).tolist() == [[0, 2, 3, 4], [0, 0, 7, 8], [0, 0, 0, 12]]
    assert apply(m.copy(), Structure(kind="tril", diagonal=-1)).tolist() == [[0, 0, 0, 0], [5, 0, 0, 0], [9, 10, 0, 0]]
    assert apply(m.copy(), Structure(kind="triu", diagonal=-5)).tolist() == m.tolist()  # nothing below -2
    s = np.array([[1, -0.0, np.nan], [7, 2, 3], [8, 9, 4]], dtype=np.float32)
    s[0, 2] = np.frombuffer(np.uint32(0x7FC00123).tobytes(), np.float32)[0]  # a NaN with a payload
    out = apply(s.copy(), Structure(kind="symmetric"))
    bits = out.view(np.uint32)
    assert (bits == bits.T).all(), "the mirror copies bits: -0.0 and the NaN's payload too"
    assert bits[2, 0] == 0x7FC00123 and bits[1, 0] == np.float32(-0.0).view(np.uint32)
    assert out[0, 1] == out[1, 0] and out[2, 1] == 3


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32", "int8"])
@pytest.mark.parametrize("structure", [{"kind": "triu"}, {"kind": "tril", "diagonal": 2}, {"kind": "symmetric"}])
def test_a_host_draw_is_the_dense_draw_with_the_structure_applied(dtype: str, structure: dict[str, Any]) -> None:
    """The same stream as the dense draw, then the rule: a device draw structured after its fill
    is the harness's dense draw structured the same way."""
    kind = {"generator": "randint", "low": -50, "high": 50} if dtype.startswith("int") else {"generator": "normal"}
    dense = generate(GEN.validate_python(kind), _param(dtype, 3), (2, 9, 9), seed=5, case="c", base=None)
    ours = generate(GEN.validate_python({**kind, "structure": structure}), _param(dtype, 3), (2, 9, 9), 5, "c", None)
    assert ours.dtype == dense.dtype and ours.shape == (2, 9, 9)
    assert ours.tobytes() == apply(dense.copy(), Structure.model_validate(structure)).tobytes()
    wide = ours.astype(np.float64)
    if structure["kind"] == "symmetric":
        assert (wide == np.swapaxes(wide, -1, -2)).all() and not (wide == np.triu(wide)).all()
    else:
        keep = np.triu(np.ones((9, 9), bool)) if structure["kind"] == "triu" else np.tril(np.ones((9, 9), bool), 2)
        assert (wide[:, ~keep] == 0).all() and (wide[:, keep] != 0).mean() > 0.9
        assert np.array_equal(kept(ours, Structure.model_validate(structure)), ours[:, keep].reshape(-1))


# --- what an import finds -------------------------------------------------------------------


def test_detect_finds_the_structure_every_draw_shows() -> None:
    rng = np.random.default_rng(0)
    dense = [rng.random((9, 9)), rng.random((2, 13, 13))]
    assert detect(dense) is None
    assert detect([np.triu(a) for a in dense]) == Structure(kind="triu")
    assert detect([np.triu(a, 1) for a in dense]) == Structure(kind="triu", diagonal=1)
    assert detect([np.tril(a, -2) for a in dense]) == Structure(kind="tril", diagonal=-2)
    assert detect([(a + np.swapaxes(a, -1, -2)) / 2 for a in dense]) == Structure(kind="symmetric")
    ints = [rng.integers(1, 9, (11, 11)) for _ in range(2)]
    assert detect([np.tril(a) for a in ints]) == Structure(kind="tril")
    # one draw without it is enough to say none
    assert detect([np.triu(dense[0]), dense[1]]) is None
    # a diagonal matrix is none of them; a row vector, a vector, booleans and empty arrays give no evidence
    assert detect([np.diag(rng.random(9))]) is None
    assert detect([np.triu(rng.random((1, 40)))]) is None and detect([rng.random(40)]) is None
    assert detect([np.triu(rng.random((9, 9))) > 0.5]) is None and detect([np.zeros((0, 4))]) is None
    # a few zeros by chance (ReLU'd 3 x 3 matrices: 3 elements below the diagonal) are not a triangle
    relu = [np.maximum(rng.standard_normal((3, 3)), 0) for _ in range(4)]
    for r in relu:
        r[1:, 0] = r[2, 1] = 0
    assert detect(relu) is None
    assert detect([np.triu(rng.random((9, 9)))]) == Structure(kind="triu")  # 36 elements below: enough


def test_an_import_fits_the_generator_to_the_elements_the_structure_keeps() -> None:
    rng = np.random.default_rng(1)
    draws = [np.triu(rng.random((64, 64))) for _ in range(2)]
    gen = fit_generator(draws[0], draws, DType.float32)
    assert gen["structure"] == {"kind": "triu", "diagonal": 0}
    assert (gen["low"], gen["high"]) == pytest.approx((0.0, 1.0), abs=0.03), gen  # the zeros would make it ~(0, 0.8)
    dense = fitted(draws[0], DType.float32)
    assert "structure" not in dense and dense["high"] < 0.85
    ints = [np.tril(rng.integers(3, 9, (20, 20))) for _ in range(2)]
    assert fit_generator(ints[0], ints, DType.int32) == {"generator": "randint", "low": 3, "high": 9,
                                                          "structure": {"kind": "tril", "diagonal": 0}}
    # kept values all equal: no drawn generator carries the structure, the dense fit stands
    ones = [np.triu(np.ones((20, 20)))]
    assert fit_generator(ones[0], ones, DType.float32) == fitted(ones[0], DType.float32)
    assert fit_generator(rng.random((9, 9)), [rng.random((9, 9))], DType.float32)["generator"] == "uniform"
    line = fitted_note("A", "mid_odd", gen)
    assert line.startswith("input 'A' is made by operations on random numbers in get_inputs()")
    assert "as upper triangular matrices (structure triu)" in line and "\n" not in line


# --- what the harness is asked for ------------------------------------------------------------


def test_a_structured_generator_is_drawn_on_the_device_only_by_a_harness_that_applies_it() -> None:
    gen = _gen(structure={"kind": "triu", "diagonal": -1})
    spec, why = fresh_spec(gen, DType.float32, (4, 6, 5))
    assert spec is None and "triu matrices, which this harness cannot draw" in why and "structured_draw" in why
    spec, why = fresh_spec(gen, DType.float32, (4, 6, 5), draw_features={STRUCTURED_DRAW})
    assert spec is not None and why == ""
    assert spec.structure == StructureSpec(kind="triu", diagonal=-1, rows=6, cols=5)
    empty, _ = fresh_spec(gen, DType.float32, (0, 6, 5), draw_features={STRUCTURED_DRAW})
    assert empty is not None and empty.structure is None, "no element to structure"
    with pytest.raises(ValueError, match="needs the buffer's shape"):
        fresh_spec(gen, DType.float32, draw_features={STRUCTURED_DRAW})
    # a frozen run's data file redraws from its recorded generator, structure included
    recorded = DataFile(generator="file", path="x.bin", drawn_from=gen)
    spec, why = fresh_spec(recorded, DType.float32, (6, 5), draw_features={STRUCTURED_DRAW})
    assert spec is not None and spec.structure is not None and why == "drawn_from"
    assert device_draw(gen, _param(), 1, "c", shape=(6, 5)) is None
    drawn = device_draw(gen, _param(), 1, "c", shape=(6, 5), draw_features={STRUCTURED_DRAW})
    assert drawn is not None and drawn.structure == StructureSpec(kind="triu", diagonal=-1, rows=6, cols=5)
    assert device_draw(Uniform(generator="uniform"), _param(), 1, "c") is not None, "a dense draw needs no shape"
    with pytest.raises(ValidationError, match="square"):
        StructureSpec(kind="symmetric", rows=3, cols=4)


def _upper_spec(structure: dict[str, Any] | None) -> dict[str, Any]:
    """tiny_add on n x n matrices, both inputs upper triangular (or dense without ``structure``)."""
    spec: dict[str, Any] = json.loads(json.dumps(TINY_SPEC))
    spec["name"] = "tiny_upper"
    for p in spec["signature"]["params"][:3]:
        p["shape"] = ["n", "n"]
    extra = {"structure": structure} if structure else {}
    spec["inputs"] = {"a": {"generator": "uniform", **extra}, "b": {"generator": "normal", **extra}}
    for case, n in zip(spec["cases"], (5, 33, 64), strict=True):
        case["scalars"]["n"] = n
    return spec


def test_a_kernel_that_relies_on_the_structure_passes_where_the_device_draws_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    upper, dense, checks = evaluate_pair(tmp_path, monkeypatch, FEATURES + ",structured_draw",
                                         _upper_spec({"kind": "triu"}), "UPPER")
    assert upper.status is Status.ok, upper.message
    assert dense.status is Status.ok, dense.message
    assert any("fresh device-drawn inputs" in c and "(buffers a, b)" in c for c in checks), checks
    drawn = fresh = 0
    for request in written_requests(tmp_path / "w"):
        for arg in request["cases"][0]["args"]:
            want = {"kind": "triu", "diagonal": 0, "rows": 64, "cols": 64}
            if "input_draw" in arg:
                drawn += 1
                assert arg["input_draw"]["structure"] == want and request["cases"][0]["name"] == "n_4096"
            if "fresh" in arg:
                fresh += 1
                assert arg["fresh"]["structure"] == want
    assert drawn and fresh
    small = np.fromfile(tmp_path / "w" / "inputs" / "odd_1001" / "a.bin", dtype="<f4").reshape(33, 33)
    assert (small == np.triu(small)).all() and (np.triu(small, 0) != 0).sum() == 33 * 34 // 2


def test_without_the_feature_a_structured_input_is_drawn_on_the_host_and_not_redrawn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fake refuses a ``structure`` without the feature (the real harness would ignore it and
    draw a dense buffer): none is sent, and the kernel still sees upper triangular inputs."""
    upper, _, checks = evaluate_pair(tmp_path, monkeypatch, FEATURES, _upper_spec({"kind": "triu"}), "UPPER")
    assert upper.status is Status.ok, upper.message
    assert not any("structure" in json.dumps(r) for r in written_requests(tmp_path / "w"))
    assert not any("input_draw" in a or "fresh" in a for r in written_requests(tmp_path / "w")
                   for a in r["cases"][0]["args"])
    perf = np.fromfile(tmp_path / "w" / "inputs" / "n_4096" / "b.bin", dtype="<f4").reshape(64, 64)
    assert (perf == np.triu(perf)).all() and (np.triu(perf) != 0).sum() == 64 * 65 // 2
    assert any("no input can be redrawn (a: triu matrices, which this harness cannot draw" in c for c in checks), checks


def test_a_kernel_that_relies_on_a_structure_the_inputs_lack_mismatches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    upper, dense, _ = evaluate_pair(tmp_path, monkeypatch, FEATURES + ",structured_draw", _upper_spec(None), "UPPER")
    assert upper.status is Status.mismatch and dense.status is Status.ok


@pytest.mark.parametrize("kind", ["triu", "tril", "symmetric"])
def test_the_pretend_gpu_draws_the_structure_as_the_host_applies_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str,
) -> None:
    """The pretend GPU's structured draw is its dense draw with the host's rule applied, bit for
    bit (c = a + b of two draws structured alike is the structure of the dense sum)."""
    monkeypatch.setenv("KO_FAKE_FEATURES", "input_draw,structured_draw")
    harness = write_harness(tmp_path, "fake")
    module = tmp_path / "k.cubin"
    module.write_bytes(b"fake module")
    st = {"kind": kind, "rows": 6, "cols": 6, **({"diagonal": 1} if kind != "symmetric" else {})}

    def run(structure: dict[str, Any] | None, out: Path) -> np.ndarray:
        extra = {"structure": structure} if structure else {}
        args = [{"kind": "buffer", "name": n, "role": "in", "bytes": 3 * 36 * 4, "dtype": "float32",
                 "input_draw": {"seed": seed, "kind": "uniform", "low": -1.0, "high": 1.0, **extra}}
                for n, seed in (("a", 11), ("b", 12))]
        args.append({"kind": "buffer", "name": "c", "role": "out", "bytes": 3 * 36 * 4, "output": str(out)})
        request = {"protocol": 2, "module": str(module), "entry": "vector_add", "support_module": str(module),
                   "cases": [{"name": "c", "args": args, "launch": {"grid": [1, 1, 1], "block": [1, 1, 1]}}]}
        with HarnessProcess(harness, 0) as proc:
            reply = proc.request(request, timeout_s=60)
        assert reply.answer is not None and reply.answer["status"] == "ok", reply.answer
        return np.fromfile(out, dtype="<f4").reshape(3, 6, 6)

    dense = run(None, tmp_path / "dense.bin")
    ours = run(st, tmp_path / "ours.bin")
    assert ours.tobytes() == apply(dense.copy(), Structure(kind=kind, diagonal=st.get("diagonal", 0))).tobytes()
    assert ours.tobytes() != dense.tobytes()
