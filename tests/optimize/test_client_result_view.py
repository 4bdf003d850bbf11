"""The client's view of an evaluation's result (kernelopt_mcp.result_view) is tied to what the server
writes (kernelopt_mcp.results.EvaluationOutput): every field of the view, nested ones included, is a
field of the server's model with a type that takes what the server writes there. A rename or a
retyping on the server's side fails here, instead of the client quietly reading a default."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from kernelopt_mcp.compile_report import CompileOutput
from kernelopt_mcp.result_view import UNKNOWN_STATUS, CaseView, CompileView, EvaluationView, TimingView
from kernelopt_mcp.results import CaseOutput, EvaluationOutput, Timing

PAIRS = [(EvaluationView, EvaluationOutput), (CaseView, CaseOutput), (TimingView, Timing), (CompileView, CompileOutput)]


def _types(schema: dict[str, Any], defs: dict[str, Any]) -> set[str]:
    """The JSON types a (sub)schema allows; "any" where it says nothing."""
    if "$ref" in schema:
        return _types(defs[schema["$ref"].split("/")[-1]], defs)
    if "anyOf" in schema:
        return set().union(*(_types(s, defs) for s in schema["anyOf"]))
    kind = schema.get("type")
    if kind is None:
        return {"any"}
    return set(kind) if isinstance(kind, list) else {kind}


def mismatches(view: type[BaseModel], server: type[BaseModel]) -> list[str]:
    """Each field of ``view`` that ``server`` lacks, or whose server-side type the view would refuse."""
    written = server.model_json_schema(mode="serialization")
    read = view.model_json_schema(mode="validation")
    problems = []
    for name in view.model_fields:
        if name not in server.model_fields:
            problems.append(f"{view.__name__}.{name}: no such field in {server.__name__}")
            continue
        wrote = _types(written["properties"][name], written.get("$defs", {}))
        takes = _types(read["properties"][name], read.get("$defs", {}))
        if "number" in takes:
            takes.add("integer")
        if "any" not in takes and not wrote <= takes:
            problems.append(f"{view.__name__}.{name}: the server writes {sorted(wrote)}, the view takes "
                            f"{sorted(takes)}")
    return problems


@pytest.mark.parametrize(("view", "server"), PAIRS, ids=[v.__name__ for v, _ in PAIRS])
def test_every_field_of_the_view_is_the_servers_with_a_type_it_takes(
    view: type[BaseModel], server: type[BaseModel]
) -> None:
    assert mismatches(view, server) == []


def test_the_tie_has_teeth() -> None:
    class Renamed(EvaluationView):
        score: float | None = None  # the server calls it score_ms

    class Retyped(EvaluationView):
        cases_passed: str = ""  # the server writes an integer

    assert mismatches(Renamed, EvaluationOutput) == ["Renamed.score: no such field in EvaluationOutput"]
    assert mismatches(Retyped, EvaluationOutput) == [
        "Retyped.cases_passed: the server writes ['integer'], the view takes ['string']"
    ]


def _timing(median_ms: float) -> dict[str, Any]:
    return {"median_ms": median_ms, "iqr_ms": 0.01, "min_ms": median_ms * 0.9, "max_ms": median_ms * 1.2, "cv": 0.02,
            "noisy": False, "warmup": 10, "iterations": 100}


def test_a_servers_result_reads_back_as_it_was_written() -> None:
    written = EvaluationOutput.model_validate({
        "status": "ok", "message": "every case passed", "mode": "benchmark", "workload": "softmax", "arch": "sm_90",
        "device": "NVIDIA H100", "device_ordinal": 1, "device_uuid": "GPU-1234", "score_ms": 0.5, "speedup": 2.0,
        "cases": [{"name": "small", "kind": "correctness", "status": "ok"},
                  {"name": "big", "kind": "performance", "status": "ok", "timing": _timing(0.5)}],
        "compile": {"status": "ok", "arch": "sm_90", "arch_from": "this GPU", "nvrtc_version": "12.8",
                    "duration_ms": 3.0, "cache_hit": False, "source_hash": "ab" * 8, "options": []},
        "expected_from": "the NumPy oracle", "checks": ["guard_bytes", "fresh_inputs"],
        "phases": {"compile_ms": 3.0, "total_ms": 9.0, "harness_steps_ms": {"timing": 2.0}},
        "torch_baseline": {"eager_ms": 1.0, "compile_ms": 0.75, "speedup_eager": 2.0, "speedup_compile": 1.5},
    }).model_dump(mode="json")
    read = EvaluationView.model_validate(written)
    assert (read.status, read.message, read.score_ms, read.speedup) == ("ok", "every case passed", 0.5, 2.0)
    assert (read.device_ordinal, read.device_uuid, read.expected_from) == (1, "GPU-1234", "the NumPy oracle")
    assert read.checks == ["guard_bytes", "fresh_inputs"]
    assert ([(c.name, c.kind, c.status) for c in read.cases]
            == [("small", "correctness", "ok"), ("big", "performance", "ok")])
    assert read.cases[0].timing is None and read.cases[1].timing is not None and read.cases[1].timing.median_ms == 0.5
    assert read.compile is not None and read.compile.nvrtc_version == "12.8"
    assert read.phases == written["phases"] and read.torch_baseline == written["torch_baseline"]
    # what the view does not name is kept as it came
    assert read.model_extra is not None and read.model_extra["device"] == "NVIDIA H100"
    assert read.model_extra["cases_total"] == written["cases_total"]


def test_an_empty_result_reads_as_the_client_defaults() -> None:
    read = EvaluationView.model_validate({})
    assert (read.status, read.message, read.score_ms, read.speedup) == (UNKNOWN_STATUS, "", None, None)
    assert (read.checks, read.cases, read.phases, read.torch_baseline, read.compile) == ([], [], None, None, None)
    assert (read.device_ordinal, read.expected_from) == (None, "")
    assert CaseView.model_validate({"name": "c"}).status == UNKNOWN_STATUS
