from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kernelopt_mcp.config import Settings, find_workload, list_workloads
from kernelopt_mcp.errors import WorkloadError
from kernelopt_mcp.workload import WorkloadSpec, json_schema, load_workload
from kernelopt_mcp.workload_parts import load_parts

BUNDLED = ["vector_add", "sgemm", "reduce_sum", "softmax", "transpose", "layernorm", "histogram", "gemm_bf16",
           "attention_fwd"]


def _spec(repo: Path) -> dict[str, Any]:
    return json.loads((repo / "workloads/vector_add/workload.json").read_text())


def _write(tmp_path: Path, repo: Path, data: dict[str, Any]) -> Path:
    d = tmp_path / "wl"
    shutil.copytree(repo / "workloads/vector_add", d)
    (d / "workload.json").write_text(json.dumps(data))
    return d


def test_every_bundled_workload_loads_and_meets_the_bar(repo: Path) -> None:
    found = list_workloads(Settings())
    for name in BUNDLED:
        assert name in found, f"bundled workload {name} missing"
        wl = load_workload(found[name])
        kinds = [c.kind for c in wl.spec.cases]
        assert kinds.count("correctness") >= 2, name
        assert kinds.count("performance") >= 2, name
        assert wl.oracle_path is not None and wl.reference_cu and wl.initial_cu, name
        assert wl.spec.cost.bytes, name


def test_find_workload_by_name_and_path(repo: Path) -> None:
    s = Settings()
    assert find_workload("vector_add", s).name == "vector_add"
    assert find_workload(repo / "workloads/vector_add", s).name == "vector_add"
    assert find_workload(repo / "workloads/vector_add/workload.json", s).name == "vector_add"
    with pytest.raises(WorkloadError, match=r"no workload 'nope'.*known:.*vector_add"):
        find_workload("nope", s)


def test_schema_is_exported_and_describes_the_format() -> None:
    schema = json_schema()
    assert schema["title"] == "kernelopt workload"
    assert {"signature", "cases", "tolerance", "reference", "initial", "cost"} <= set(schema["properties"])
    assert "Uniform" in schema["$defs"] and "DataFile" in schema["$defs"]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("signature"), r"workload.json: signature: required field is missing"),
        (lambda d: d["signature"]["params"][0].update(dtype="float128"),
         r"signature.params.0.buffer.dtype: Input should be"),
        (lambda d: d["signature"]["params"][0].update(role="sideways"), r"signature.params.0.buffer.role"),
        (lambda d: d["signature"]["params"][0].update(shape=["m"]),
         r"shape of 'a' uses m, which is not a scalar parameter"),
        (lambda d: d["signature"]["params"][1].update(name="a"), r"parameter names must be unique; repeated: a"),
        (lambda d: d["signature"]["params"][2].update(role="in"), r"at least one buffer with role 'out'"),
        (lambda d: d["signature"].update(entry="bad-name"), r"signature.entry: String should match pattern"),
        (lambda d: d["cases"][0]["scalars"].pop("n"), r"case 'one': scalars n have no value"),
        (lambda d: d["cases"][0]["scalars"].update(m=3), r"case 'one': m not scalar parameters"),
        (lambda d: d["cases"][0]["scalars"].update(n=2**40), r"case 'one': scalar n: .* does not fit in int32"),
        (lambda d: d["cases"][0].update(kind="fast"), r"cases.0.kind: Input should be 'correctness' or 'performance'"),
        (lambda d: d["cases"].append(copy.deepcopy(d["cases"][0])), r"case names must be unique; repeated: one"),
        (lambda d: d["inputs"].pop("a"), r"input buffer 'a' has no generator"),
        (lambda d: d["inputs"].update(c={"generator": "uniform"}), r"inputs.c: not an input buffer"),
        (lambda d: d["inputs"].update(a={"generator": "gaussian"}), r"inputs.a: Input tag 'gaussian' found using "
         r"'generator' does not match"),
        (lambda d: d["tolerance"].update(a={"rtol": 0.1, "atol": 0.1}), r"tolerance.a: not an output buffer"),
        (lambda d: d["tolerance"]["c"].update(rtol=0.9), r"tolerance.c.rtol: Input should be less than 0.5"),
        (lambda d: d.update(colour="blue"), r"colour: unknown field; remove it or check its spelling"),
        (lambda d: d["cost"].update(flops="n.__class__"), r"cost.flops: .*Attribute is not allowed"),
        (lambda d: d["reference"].pop("launch"), r"reference.launch: required when reference.cuda is given"),
        (lambda d: d["reference"].update(cuda="missing.cu"), r"missing.cu: reference.cuda not found"),
        (lambda d: d["reference"].update(python=None, cuda=None), r"give a NumPy oracle .* and/or a CUDA reference"),
        (lambda d: d["initial"]["launch"].update(block=[0]),
         r"initial.launch.default.block: 0 must be an integer >= 1"),
        (lambda d: d["initial"]["launch"].update(grid=["ceil_div(n,"]), r"initial.launch.*cannot parse"),
    ],
)
def test_malformed_workloads_name_file_field_and_fix(tmp_path: Path, repo: Path, mutate: Any, message: str) -> None:
    data = _spec(repo)
    mutate(data)
    d = _write(tmp_path, repo, data)
    with pytest.raises(WorkloadError, match=message) as info:
        load_workload(d)
    assert str(d) in str(info.value)


def test_invalid_json_reports_line_and_column(tmp_path: Path, repo: Path) -> None:
    d = _write(tmp_path, repo, _spec(repo))
    (d / "workload.json").write_text('{\n  "name": "x",\n  oops\n}')
    with pytest.raises(WorkloadError, match=r"workload.json: line 3 column 3: invalid JSON"):
        load_workload(d)


def test_missing_directory_says_what_a_workload_is(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="no workload here"):
        load_workload(tmp_path / "nothing")


def test_all_dtypes_are_accepted(tmp_path: Path, repo: Path) -> None:
    data = _spec(repo)
    for dt in ["float16", "bfloat16", "float64", "int8", "int16", "int64", "uint8", "uint32"]:
        data["signature"]["params"][0]["dtype"] = dt
        WorkloadSpec.model_validate(data)


def test_load_parts_from_the_original_tools_separate_files(tmp_path: Path, repo: Path) -> None:
    spec = _spec(repo)
    src = repo / "workloads/vector_add"
    (tmp_path / "sig").mkdir()
    (tmp_path / "sig/signature.json").write_text(json.dumps(spec["signature"]))
    data_dir = tmp_path / "elsewhere/data"
    data_dir.mkdir(parents=True)
    import numpy as np

    np.arange(5, dtype=np.float32).tofile(data_dir / "a.bin")
    cases = {
        "inputs": {"b": {"generator": "constant", "value": 2}},
        "cases": [
            {"name": "tiny", "kind": "correctness", "scalars": {"n": 5},
             "inputs": {"a": {"generator": "file", "path": "data/a.bin"}}},
        ],
    }
    (tmp_path / "elsewhere/input_cases.json").write_text(json.dumps(cases))
    wl = load_parts(
        signature=tmp_path / "sig/signature.json",
        input_cases=tmp_path / "elsewhere/input_cases.json",
        reference_cu=src / "reference.cu",
        initial_cu=src / "initial.cu",
        reference_launch={"grid": ["ceil_div(n, 256)"], "block": [256]},
        initial_launch={"grid": ["ceil_div(n, 128)"], "block": [128]},
    )
    assert wl.name == "vector_add"
    assert wl.reference_cu and wl.initial_cu
    # data files resolve relative to the input-cases JSON, wherever that lives
    path = wl.spec.cases[0].inputs["a"].path  # type: ignore[union-attr]
    assert Path(path) == (tmp_path / "elsewhere/data/a.bin").resolve()
    assert any("not independently checked" in n for n in wl.notes)


def test_load_parts_errors_name_the_file(tmp_path: Path, repo: Path) -> None:
    (tmp_path / "signature.json").write_text(json.dumps({"entry": "k", "params": []}))
    (tmp_path / "cases.json").write_text(json.dumps({"cases": []}))
    with pytest.raises(WorkloadError, match=r"signature.json: params: List should have at least 1 item"):
        load_parts(signature=tmp_path / "signature.json", input_cases=tmp_path / "cases.json")
