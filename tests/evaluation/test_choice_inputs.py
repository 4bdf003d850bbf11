"""Choice inputs (kernelopt_mcp/input_choice.py): a drawn buffer whose every element is one of a few
values, the same rule wherever it is drawn. Here, without torch or a GPU: the schema and its
refusals (at the generator and against each case's dtype), the table of values in a dtype, the
host's draws (the table at the randint of the same stream), what the harness is asked for (only
with the feature ``choice_draw``, else the input is drawn on the host and not redrawn), the
harness's conversion of the numbers to bits (native_harness/src/choice_bits.hpp, compiled here)
against Python's table, TorchFiller's arguments, the pretend GPU's draws (tests/fakegpu.py), on
which a kernel that relies on the values passes and mismatches on a continuous draw, and the fit
an import makes. The harness's side: native_harness/tests/e2e_choice.cpp (every byte of a draw,
on the fake driver); the device kernel against the harness's randint and torch:
tests/gpu/test_choice_inputs_gpu.py; the import of a problem: tests/pytorch/test_torch_choice.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakegpu import TINY_SPEC, evaluate_pair, write_harness, write_tiny_workload, written_requests
from pydantic import TypeAdapter, ValidationError

from kernelopt_mcp import HarnessProcess
from kernelopt_mcp.dtypes import DType
from kernelopt_mcp.errors import WorkloadError
from kernelopt_mcp.evaluation.fresh_inputs import CHOICE_DRAW, STRUCTURED_DRAW, fresh_spec
from kernelopt_mcp.evaluation.inputs import device_draw, generate, seed_independent_inputs
from kernelopt_mcp.evaluation.protocol import FreshSpec, InputDraw, StructureSpec
from kernelopt_mcp.input_choice import MAX_VALUES, Choice, detect, exact_values, moments, table, table_bits
from kernelopt_mcp.input_structure import Structure, apply
from kernelopt_mcp.status import Status
from kernelopt_mcp.torch_fill import ChoiceArgs, choice_args
from kernelopt_mcp.torch_fit import fit_generator, fitted_note
from kernelopt_mcp.workload import BufferParam, DataFile, Generator, load_workload

REPO = Path(__file__).resolve().parents[2]
GEN = TypeAdapter(Generator)
FEATURES = "blocking,device_compare,timed_inputs,fresh_inputs,timed_check,confirm_launch,input_draw,expected_dtype"


def _param(dtype: str = "float32", name: str = "x", rank: int = 1) -> BufferParam:
    return BufferParam(name=name, dtype=DType(dtype), role="in", shape=["n"] * rank)


# --- the schema -----------------------------------------------------------------------------


def test_a_choice_reads_and_writes_its_values() -> None:
    gen = GEN.validate_python({"generator": "choice", "values": [-1, 1]})
    assert isinstance(gen, Choice) and gen.values == [-1.0, 1.0] and gen.structure is None
    assert gen.model_dump(mode="json") == {"generator": "choice", "values": [-1.0, 1.0]}
    shaped = GEN.validate_python({"generator": "choice", "values": [0, 1], "structure": {"kind": "tril"}})
    assert shaped.model_dump(mode="json")["structure"] == {"kind": "tril", "diagonal": 0}
    assert GEN.validate_python(shaped.model_dump(mode="json")) == shaped
    # a frozen run's data file records it, and hidden sets redraw from it
    recorded = GEN.validate_python({"generator": "file", "path": "x.bin", "drawn_from": gen.model_dump(mode="json")})
    assert isinstance(recorded, DataFile) and recorded.drawn_from == gen
    assert "choice" in json.dumps(TypeAdapter(Generator).json_schema())


@pytest.mark.parametrize(("values", "message"), [
    ([], "choice needs values to choose from, got none"),
    ([float(v) for v in range(MAX_VALUES + 1)], "choice takes at most 16 values, got 17 (a wider set is a randint"),
    ([0.0, float("nan")], "values[1] is nan: every value of a choice must be finite"),
    ([float("-inf"), 1.0], "values[0] is -inf: every value of a choice must be finite"),
    ([2.0, 2.0], 'choice needs at least two distinct values, got only 2 (one value is a constant: {"generator": '
                 '"constant", "value": 2})'),
])
def test_a_choice_it_cannot_draw_from_is_refused(values: list[float], message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        GEN.validate_python({"generator": "choice", "values": values})
    with pytest.raises(ValidationError):  # extra fields are refused as for every generator
        GEN.validate_python({"generator": "choice", "values": [0, 1], "weights": [1, 2]})


def _spec(dtype: str, gen: dict[str, Any], where: str = "inputs") -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(json.dumps(TINY_SPEC))
    spec["signature"]["params"][0]["dtype"] = dtype
    if where == "inputs":
        spec["inputs"]["a"] = gen
    else:
        spec["cases"][1]["inputs"] = {"a": gen}
    return spec


@pytest.mark.parametrize(("dtype", "values", "where", "message"), [
    ("float16", [0.0, 1e5], "inputs", "case 'one': inputs.a: values[1] = 100000 overflows float16 (whose "
                                      "largest value is 65504)"),
    ("bfloat16", [0.0, 1e39], "inputs", "case 'one': inputs.a: values[1] = 1e+39 overflows bfloat16"),
    ("int32", [0.5, 1.0], "inputs", "case 'one': inputs.a: values[0] = 0.5 is not an integer, and the buffer is int32"),
    ("uint8", [-1.0, 1.0], "inputs", "case 'one': inputs.a: values[0] = -1 is outside uint8's range 0..255"),
    ("uint8", [0.0, 256.0], "case", "case 'odd_1001': inputs.a: values[1] = 256 is outside uint8's range 0..255"),
])
def test_values_that_do_not_fit_the_buffers_dtype_are_refused_naming_the_case_and_input(
    tmp_path: Path, dtype: str, values: list[float], where: str, message: str,
) -> None:
    write_tiny_workload(tmp_path, _spec(dtype, {"generator": "choice", "values": values}, where))
    with pytest.raises(WorkloadError, match=re.escape(message)):
        load_workload(tmp_path / "tiny_add")


def test_values_between_two_of_the_dtype_are_rounded_to_it(tmp_path: Path) -> None:
    write_tiny_workload(tmp_path, _spec("float16", {"generator": "choice", "values": [0.1, 65519.0, 1e-9]}))
    wl = load_workload(tmp_path / "tiny_add")
    gen = wl.spec.inputs["a"]
    assert isinstance(gen, Choice)
    assert table(gen.values, DType.float16).tolist() == [np.float16(0.1), 65504.0, 0.0]  # nearest even, as NumPy casts


# --- the table and the host's draws ---------------------------------------------------------


def test_the_table_is_the_values_in_the_dtype_and_its_bits() -> None:
    assert table_bits([-1.0, 1.0, -0.0], DType.bfloat16) == [0xBF80, 0x3F80, 0x8000]
    assert table_bits([-1.0, 2**-24], DType.float16) == [0xBC00, 0x0001]
    assert table_bits([-1.0, 255.0], DType.int16) == [0xFFFF, 0x00FF]
    assert table_bits([-128.0, 127.0], DType.int8) == [0x80, 0x7F]
    assert table_bits([0.0, 2.0**63], DType.uint64) == [0, 1 << 63]
    assert exact_values([0.1, 1.0], DType.float32) == [float(np.float32(0.1)), 1.0]
    assert exact_values([0.1, 1.0], DType.float64) == [0.1, 1.0]
    assert moments([-1.0, 1.0]) == (0.0, 1.0) and moments([0.0, 1.0, 1.0, 1.0]) == (0.75, pytest.approx(0.4330127))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32", "int8", "uint8"])
def test_a_host_draw_is_the_table_at_the_randint_of_the_same_stream(dtype: str) -> None:
    """The host's choice of k values is its randint over [0, k) of the buffer's stream looked up in
    the table, as the device's is its own randint's: every draw applies the one rule."""
    values = ([0.0, 1.0, 3.0] if dtype.startswith("uint") else [-1.0, 0.5, 3.0] if dtype.startswith("float")
              else [-1.0, 2.0, 3.0])
    shape = (3000,)
    ours = generate(Choice(generator="choice", values=values), _param(dtype), shape, seed=5, case="c", base=None)
    index = generate(GEN.validate_python({"generator": "randint", "low": 0, "high": 3}), _param("int64"),
                     shape, 5, "c", None)
    want = table(values, DType(dtype))[index]
    assert ours.dtype == want.dtype and ours.tobytes() == want.tobytes()
    counts = np.unique(ours.astype(np.float64), return_counts=True)
    assert counts[0].tolist() == sorted(float(v) for v in table(values, DType(dtype)).astype(np.float64))
    assert (abs(counts[1] / shape[0] - 1 / 3) < 0.05).all(), counts  # each equally likely
    # another seed, other bytes; the same seed, the same bytes
    assert (generate(Choice(generator="choice", values=values), _param(dtype), shape, 6, "c", None).tobytes()
            != ours.tobytes())
    assert (generate(Choice(generator="choice", values=values), _param(dtype), shape, 5, "c", None).tobytes()
            == ours.tobytes())


def test_a_structured_choice_is_the_choice_with_the_structure_applied() -> None:
    gen = {"generator": "choice", "values": [-1.0, 1.0]}
    dense = generate(GEN.validate_python(gen), _param(rank=3), (2, 9, 9), 5, "c", None)
    ours = generate(GEN.validate_python({**gen, "structure": {"kind": "triu"}}), _param(rank=3),
                    (2, 9, 9), 5, "c", None)
    assert ours.tobytes() == apply(dense.copy(), Structure(kind="triu")).tobytes()
    assert set(np.unique(ours).tolist()) == {-1.0, 0.0, 1.0}


def test_a_hidden_seed_redraws_a_choice(tmp_path: Path) -> None:
    write_tiny_workload(tmp_path, _spec("float32", {"generator": "choice", "values": [-1.0, 1.0]}))
    wl = load_workload(tmp_path / "tiny_add")
    assert seed_independent_inputs(wl) == {}  # a hidden seed redraws it


# --- what the harness is asked for ------------------------------------------------------------


def test_a_choice_is_drawn_on_the_device_only_by_a_harness_that_draws_it() -> None:
    gen = Choice(generator="choice", values=[0.1, 1.0])
    spec, why = fresh_spec(gen, DType.float16)
    assert spec is None and why == ("a choice of values, which this harness cannot draw (it lacks the feature "
                                    "'choice_draw'; rebuild it with `pip install .`)")
    spec, why = fresh_spec(gen, DType.float16, draw_features={CHOICE_DRAW})
    assert why == "" and spec == FreshSpec(kind="choice", values=[float(np.float16(0.1)), 1.0])  # exact float16 values
    # a structured choice needs both features, and the shape
    shaped = Choice(generator="choice", values=[0.0, 1.0], structure=Structure(kind="triu"))
    spec, why = fresh_spec(shaped, DType.float32, (4, 4), draw_features={CHOICE_DRAW})
    assert spec is None and "triu matrices, which this harness cannot draw" in why
    spec, _ = fresh_spec(shaped, DType.float32, (4, 4), draw_features={CHOICE_DRAW, STRUCTURED_DRAW})
    assert spec is not None and spec.kind == "choice" and spec.structure == StructureSpec(kind="triu", rows=4, cols=4)
    # a frozen run's data file redraws from its recorded choice
    spec, why = fresh_spec(DataFile(generator="file", path="x.bin", drawn_from=gen), DType.float32,
                           draw_features={CHOICE_DRAW})
    assert spec is not None and spec.values == [float(np.float32(0.1)), 1.0] and why == "drawn_from"
    assert device_draw(gen, _param(), 1, "c") is None
    drawn = device_draw(gen, _param(), 1, "c", draw_features={CHOICE_DRAW})
    assert drawn is not None and drawn.kind == "choice" and drawn.values == [float(np.float32(0.1)), 1.0]
    assert InputDraw.model_validate_json(drawn.model_dump_json()) == drawn
    assert "values" not in json.dumps(FreshSpec(kind="uniform", low=0, high=1).model_dump(exclude_none=True))


# --- the harness's bits against Python's table ------------------------------------------------


CHECK = r"""
#include <cstdio>
#include <cstring>
#include "choice_bits.hpp"
using kernelopt::ScalarType;
int main() {
  const struct { const char* name; ScalarType type; } types[] = {
      {"int8", ScalarType::int8},       {"int16", ScalarType::int16},     {"int32", ScalarType::int32},
      {"int64", ScalarType::int64},     {"uint8", ScalarType::uint8},     {"uint16", ScalarType::uint16},
      {"uint32", ScalarType::uint32},   {"uint64", ScalarType::uint64},   {"float16", ScalarType::float16},
      {"bfloat16", ScalarType::bfloat16}, {"float32", ScalarType::float32}, {"float64", ScalarType::float64}};
  // lines of "<dtype> <value as %a>": its bits in the dtype, or "none"
  char dtype[16];
  double v;
  while (std::scanf("%15s %la", dtype, &v) == 2) {
    for (const auto& t : types) {
      if (std::strcmp(t.name, dtype) != 0) continue;
      const auto bits = kernelopt::choice_bits(v, t.type);
      if (bits) std::printf("%llu\n", static_cast<unsigned long long>(*bits)); else std::printf("none\n");
    }
  }
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")
def test_the_harness_turns_the_numbers_python_sends_into_pythons_bits(tmp_path: Path) -> None:
    """The harness converts exactly (choice_bits.hpp) what Python sends (exact_values): the bits of
    every value in every dtype are those of Python's table, and a number that is not exactly of the
    dtype is refused, never rounded."""
    program = tmp_path / "bits.cpp"
    program.write_text(CHECK)
    binary = tmp_path / "bits"
    src = REPO / "native_harness" / "src"
    subprocess.run(["g++", "-std=c++17", "-I", str(src), "-I", str(REPO / "native_harness" / "third_party"),
                    str(program), "-o", str(binary)], check=True, timeout=300)
    rng = np.random.default_rng(3)
    # magnitudes across every float dtype's normal and subnormal ranges, signs, zeros, integers
    wild = np.concatenate([rng.standard_normal(40) * 10.0 ** rng.integers(-9, 6, 40),
                           [0.0, -0.0, 2**-24, 2**-14, 65504]])
    cases: list[tuple[DType, float, int | None]] = []
    for dtype in DType:
        if dtype.is_float:
            finfo_max = 65504 if dtype is DType.float16 else 3e38
            values = [float(v) for v in wild if abs(v) <= finfo_max]
        else:
            info = np.iinfo(dtype.numpy)
            values = [float(info.min), float(info.max) if dtype.itemsize < 8 else float(2**62), 0.0,
                      -0.0 if info.min else 1.0]
            values += [float(v) for v in rng.integers(max(info.min, -1000), min(info.max, 1000), 10)]
        for at in range(0, len(values), MAX_VALUES):  # a choice's worth at a time
            chunk = values[at:at + MAX_VALUES]
            cases += [(dtype, e, b) for e, b in zip(exact_values(chunk, dtype), table_bits(chunk, dtype), strict=True)]
    # numbers not exactly of the dtype: the harness refuses them
    for dtype, v in ((DType.float32, 0.1), (DType.float16, 1e5), (DType.float16, 2**-25), (DType.float16, 1 + 2**-11),
                     (DType.bfloat16, 1.001), (DType.int32, 1.5), (DType.uint8, 256.0), (DType.uint8, -1.0),
                     (DType.int64, 2.0**63), (DType.uint64, 2.0**64), (DType.int8, -129.0)):
        cases.append((dtype, v, None))
    stdin = "".join(f"{d.value} {float(v).hex()}\n" for d, v, _ in cases)
    out = subprocess.run([str(binary)], input=stdin, capture_output=True, text=True, check=True,
                         timeout=60).stdout.split()
    theirs = [None if line == "none" else int(line) for line in out]
    assert len(theirs) == len(cases)
    wrong = [(d.value, v, b, t) for (d, v, b), t in zip(cases, theirs, strict=True) if b != t]
    assert not wrong, wrong[:10]


def test_the_torch_filler_takes_the_harness_table() -> None:
    values = exact_values([-1.0, 0.1, 3.0], DType.float16)
    spec = FreshSpec(kind="choice", values=values)
    assert choice_args(spec, DType.float16) == ChoiceArgs(3, tuple(table_bits(values, DType.float16)))
    assert choice_args(spec, DType.float32).bits == tuple(table_bits(values, DType.float32))  # float16 values fit
    with pytest.raises(ValueError, match=re.escape("values[0] = 0.1 is not exactly a float32 value")):
        choice_args(FreshSpec(kind="choice", values=[0.1, 1.0]), DType.float32)
    for bad in ([], [0.0] * 17, None):
        with pytest.raises(ValueError):
            choice_args(FreshSpec(kind="choice", values=bad), DType.float32)


# --- the pretend GPU --------------------------------------------------------------------------


def test_the_pretend_gpu_draws_a_choice_as_the_table_at_its_randint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "k.cubin"
    module.write_bytes(b"fake module")
    zeros = tmp_path / "zeros.bin"
    zeros.write_bytes(bytes(4 * 300))

    def run(draw: dict[str, Any], features: str) -> tuple[dict[str, Any], np.ndarray]:
        """c = a + b with a drawn as ``draw`` and b zeros: a's bytes."""
        monkeypatch.setenv("KO_FAKE_FEATURES", features)
        harness = write_harness(tmp_path, "fake")
        out = tmp_path / "c.bin"
        args = [{"kind": "buffer", "name": "a", "role": "in", "bytes": 4 * 300, "dtype": "float32",
                 "input_draw": {"seed": 11, **draw}},
                {"kind": "buffer", "name": "b", "role": "in", "bytes": 4 * 300, "input": str(zeros)},
                {"kind": "buffer", "name": "c", "role": "out", "bytes": 4 * 300, "output": str(out)}]
        request = {"protocol": 2, "module": str(module), "entry": "vector_add", "support_module": str(module),
                   "cases": [{"name": "c", "args": args, "launch": {"grid": [1, 1, 1], "block": [1, 1, 1]}}]}
        with HarnessProcess(harness, 0) as proc:
            reply = proc.request(request, timeout_s=60)
        assert reply.answer is not None
        return reply.answer, (np.fromfile(out, dtype="<f4") if reply.answer["status"] == "ok" else np.zeros(0))

    values = exact_values([-1.0, 0.5, 2.0], DType.float32)
    answer, ours = run({"kind": "choice", "values": values}, "input_draw,choice_draw")
    assert answer["status"] == "ok", answer
    _, index = run({"kind": "randint", "low": 0, "high": 3}, "input_draw,choice_draw")
    assert ours.tobytes() == table(values, DType.float32)[index.astype(np.int64)].tobytes()
    assert sorted(set(ours.tolist())) == [-1.0, 0.5, 2.0]
    refused, _ = run({"kind": "choice", "values": values}, "input_draw")
    assert refused["status"] == "error" and "needs the choice_draw feature" in refused["error"]["message"]


def _sign_spec(b: dict[str, Any]) -> dict[str, Any]:
    """tiny_add with ``b`` drawn by ``b``."""
    spec: dict[str, Any] = json.loads(json.dumps(TINY_SPEC))
    spec["name"] = "tiny_sign"
    spec["inputs"]["b"] = b
    return spec


CHOICE = {"generator": "choice", "values": [-1.0, 1.0]}


def test_a_kernel_that_relies_on_the_values_passes_where_the_device_draws_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    sign, plain, checks = evaluate_pair(tmp_path, monkeypatch, FEATURES + ",choice_draw", _sign_spec(CHOICE), "SIGN")
    assert sign.status is Status.ok, sign.message
    assert plain.status is Status.ok, plain.message
    assert any("fresh device-drawn inputs" in c and "(buffers a, b)" in c for c in checks), checks
    drawn = fresh = 0
    for request in written_requests(tmp_path / "w"):
        for arg in request["cases"][0]["args"]:
            if arg["name"] != "b":
                continue
            if "input_draw" in arg:
                drawn += 1
                assert arg["input_draw"]["kind"] == "choice" and arg["input_draw"]["values"] == [-1.0, 1.0]
            if "fresh" in arg:
                fresh += 1
                assert arg["fresh"] == {"kind": "choice", "values": [-1.0, 1.0]}
    assert drawn and fresh
    small = np.fromfile(tmp_path / "w" / "inputs" / "odd_1001" / "b.bin", dtype="<f4")
    assert sorted(set(small.tolist())) == [-1.0, 1.0]


def test_without_the_feature_a_choice_is_drawn_on_the_host_and_not_redrawn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fake refuses a choice without the feature (so would the real harness: an unknown kind):
    none is sent, the kernel still sees -1 and +1, and the checks say b is not redrawn."""
    sign, _, checks = evaluate_pair(tmp_path, monkeypatch, FEATURES, _sign_spec(CHOICE), "SIGN")
    assert sign.status is Status.ok, sign.message
    assert not any('"choice"' in json.dumps(r) for r in written_requests(tmp_path / "w"))
    perf = np.fromfile(tmp_path / "w" / "inputs" / "n_4096" / "b.bin", dtype="<f4")
    assert sorted(set(perf.tolist())) == [-1.0, 1.0]
    assert any("buffer b not redrawn (a choice of values, which this harness cannot draw" in c for c in checks), checks


def test_a_kernel_that_relies_on_the_values_mismatches_on_a_continuous_draw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a continuous fit of -1/+1 targets (uniform [-1, 1]: their mean and spread) does to it."""
    sign, plain, _ = evaluate_pair(tmp_path, monkeypatch, FEATURES + ",choice_draw",
                               _sign_spec({"generator": "uniform", "low": -1.0, "high": 1.0}), "SIGN")
    assert sign.status is Status.mismatch and plain.status is Status.ok


# --- what an import finds ---------------------------------------------------------------------


def test_an_import_fits_a_choice_to_a_float_input_of_a_few_values() -> None:
    rng = np.random.default_rng(2)
    signs = [(rng.integers(0, 2, n) * 2 - 1).astype(np.float32) for n in (5, 5, 37, 37)]
    gen = fit_generator(signs[2], signs, DType.float32)
    assert gen == {"generator": "choice", "values": [-1.0, 1.0]}
    line = fitted_note("targets", "mid_odd", gen)
    assert line == ("input 'targets' is made by operations on random numbers in get_inputs(), which no generator "
                    "reproduces: drawn choice of its 2 values [-1, 1], each equally likely: get_inputs' own values "
                    "take only these in every draw, so a kernel may rely on them")
    # a 0/1 mask, one-hot rows, -0.0 taken for 0.0, and the values of all draws together
    mask = [(rng.random((9, 9)) > 0.5).astype(np.float32) * -1.0 for _ in range(2)]
    assert detect(mask) == [-1.0, 0.0] and all(str(v) != "-0.0" for v in detect(mask) or [])
    one_hot = [np.eye(8, dtype=np.float32)[rng.integers(0, 8, 40)] for _ in range(2)]
    assert fit_generator(one_hot[0], one_hot, DType.float16)["values"] == [0.0, 1.0]
    thirds = [np.full(40, 1.0, np.float32), np.full(40, 2.0, np.float32), rng.integers(1, 4, 40).astype(np.float32)]
    assert detect(thirds) == [1.0, 2.0, 3.0]


def test_an_import_keeps_its_continuous_fit_where_a_choice_is_not_shown() -> None:
    rng = np.random.default_rng(4)
    continuous = [rng.random(200).astype(np.float32) for _ in range(2)]
    assert fit_generator(continuous[0], continuous, DType.float32)["generator"] == "uniform"
    # too few elements to tell a few values from a continuous input (16 per value at the least)
    few = [np.array([-1, 1, 1, -1, 1, 1, -1, 1, -1, -1], np.float32)]
    assert fit_generator(few[0], few, DType.float32)["generator"] == "uniform"
    assert detect([np.tile(np.arange(17, dtype=np.float32), 20)]) is None  # 17 values: too many
    assert detect([np.array([np.inf, 1.0] * 40, np.float32)]) is None
    ints = [(rng.integers(0, 2, 100) * 2 - 1).astype(np.int32)]
    assert fit_generator(ints[0], ints, DType.int32) == {"generator": "randint", "low": -1, "high": 2}


def test_an_import_fits_a_structured_choice() -> None:
    rng = np.random.default_rng(5)
    upper = [np.triu(rng.integers(0, 2, (2, 12, 12)) * 2.0 - 1).astype(np.float32) for _ in range(2)]
    gen = fit_generator(upper[0], upper, DType.float32)
    assert gen == {"generator": "choice", "values": [-1.0, 1.0], "structure": {"kind": "triu", "diagonal": 0}}
    line = fitted_note("A", "mid_odd", gen)
    assert "drawn choice of the 2 values [-1, 1] of the elements the structure keeps, each equally likely, as upper " \
           "triangular matrices (structure triu)" in line and "\n" not in line
