"""The optimizer's run state is one dataclass (kernelopt_agent.state.RunState) that finalize takes:
summary.json and the final records come from the state alone, with no loop, server or model behind
it. And the orchestrator's classes stay small enough to read (no class over 300 lines)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from kernelopt_agent.finalize import finalize, summary
from kernelopt_agent.options import OptimizeOptions
from kernelopt_agent.records import CandidateRecord, DuplicateEvent, StepEvent
from kernelopt_agent.rundir import RunDir
from kernelopt_agent.state import RunState

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "kernelopt_agent"
MAX_CLASS_LINES = 300


def long_classes(source: str, limit: int = MAX_CLASS_LINES) -> list[tuple[str, int]]:
    """(name, lines) of each class in ``source`` longer than ``limit`` lines, decorators and docstring included."""
    return [(node.name, node.end_lineno - min([node.lineno, *(d.lineno for d in node.decorator_list)]) + 1)
            for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ClassDef) and node.end_lineno is not None
            and node.end_lineno - min([node.lineno, *(d.lineno for d in node.decorator_list)]) + 1 > limit]


def test_no_class_of_the_orchestrator_is_over_300_lines() -> None:
    over = {path.name: found for path in sorted(CLIENT.rglob("*.py")) if (found := long_classes(path.read_text()))}
    assert over == {}, f"split these classes by concern (as loop.Optimizer and evaluator.Evaluator are): {over}"


def test_the_class_size_rule_has_teeth() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_CLASS_LINES))
    assert long_classes(f"class Big:\n{body}\n") == [("Big", MAX_CLASS_LINES + 1)]
    assert long_classes(f"class Small:\n{body}\n", limit=MAX_CLASS_LINES + 1) == []


def _record(index: int, kind: str, score_ms: float | None, *, status: str = "ok", iteration: int | None = None,
            pytorch: dict[str, object] | None = None) -> CandidateRecord:
    label = f"{index:03d}-{kind if iteration is None else f'it{iteration}'}"
    return CandidateRecord(index, label, kind, iteration, f"// {label}", {"grid": [1], "block": [32]}, status=status,
                           score_ms=score_ms, case_ms={"big": score_ms} if score_ms else {}, pytorch=pytorch,
                           device="0 GPU-1" if status == "ok" else None)


def _state(tmp_path: Path) -> RunState:
    state = RunState(OptimizeOptions(max_iterations=3, model="gpt-test"), RunDir.create(tmp_path / "results"))
    state.records = [
        _record(0, "reference", 2.0),
        _record(1, "initial", 1.6),
        _record(2, "proposal", 0.8, iteration=1,
                pytorch={"speedup_eager": 3.0, "speedup_compile": 1.25, "eager_ms": 2.4}),
        _record(3, "proposal", None, status="mismatch", iteration=2),
    ]
    state.duplicates = [DuplicateEvent(iteration=3, slot=None, same_as="002-it1", model_calls=[])]
    state.iterations_used, state.stop_reason = 3, "--max-iterations 3 done"
    state.notes = ["a note of the run"]
    return state


def test_summary_comes_from_the_run_state_alone(tmp_path: Path) -> None:
    state = _state(tmp_path)
    data = summary(state, "running")
    assert (data["status"], data["stop_reason"], data["run"]) == ("running", "--max-iterations 3 done", state.run.name)
    assert data["iterations"] == {"max": 3, "used": 3, "candidates_per_iteration": 1}
    assert data["candidates"] == {"total": 4, "valid": 3, "invalid": ["003-it2: mismatch"],
                                  "duplicates": ["iteration 3: the same kernel as 002-it1"]}
    best = data["best"]
    assert (best["label"], best["score_ms"], best["speedup_vs_reference"], best["speedup_vs_initial"]) == (
        "002-it1", 0.8, 2.0 / 0.8, 1.6 / 0.8)
    assert (best["speedup_vs_eager"], best["speedup_vs_compile"]) == (3.0, 1.25)
    assert best["pytorch"] == {"speedup_eager": 3.0, "speedup_compile": 1.25, "eager_ms": 2.4}
    assert data["reference"]["label"] == "000-reference" and data["initial"]["label"] == "001-initial"
    assert data["devices"]["used"] == 1 and data["model"] is None and data["notes"] == ["a note of the run"]


def test_finalize_takes_the_run_state(tmp_path: Path) -> None:
    state = _state(tmp_path)
    state.record(StepEvent(node="load", came_from="begin"))
    data = finalize(state, "completed")
    run = state.run.path
    assert (run / "best.cu").read_text() == "// 002-it1"
    assert json.loads((run / "summary.json").read_text())["best"]["label"] == "002-it1" == data["best"]["label"]
    assert [e["node"] for e in json.loads((run / "history.json").read_text())] == ["load"]
    assert data["files"]["best"] == "best.cu" and data["status"] == "completed"
