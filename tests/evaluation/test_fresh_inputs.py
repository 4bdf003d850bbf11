"""Fresh inputs for every timed launch (kernelopt_mcp/evaluation/fresh_inputs.py): what is redrawn and how,
which timed launches are checked, the timing-consistency rule, and what a result's checks say."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakegpu import TINY_SPEC, write_tiny_workload

from kernelopt_mcp.dtypes import DType
from kernelopt_mcp.evaluation.fresh_inputs import (
    case_fresh,
    consistency_limit_ms,
    consistency_problem,
    fresh_checks,
    fresh_spec,
    pick_checked_launches,
)
from kernelopt_mcp.evaluation.protocol import FreshSpec
from kernelopt_mcp.evaluation.stats import summarize
from kernelopt_mcp.workload import Arange, Constant, DataFile, Normal, RandInt, Uniform, load_workload


def _wire(spec: FreshSpec | None) -> dict:
    """The ``fresh`` object as the harness reads it."""
    assert spec is not None
    return spec.model_dump(mode="json", exclude_none=True)


def test_random_generators_map_to_device_draws() -> None:
    assert fresh_spec(Uniform(generator="uniform", low=-2, high=3), DType.float16) == (
        FreshSpec(kind="uniform", low=-2.0, high=3.0), "")
    assert fresh_spec(Normal(generator="normal", mean=1, std=0.5), DType.float32)[0] == FreshSpec(
        kind="normal", mean=1.0, std=0.5)
    randint = fresh_spec(RandInt(generator="randint", low=-5, high=9), DType.int8)[0]
    assert randint == FreshSpec(kind="randint", low=-5, high=9)
    # what the harness reads: floats stay floats, randint's bounds stay integers (PROTOCOL.md)
    assert _wire(randint) == {"kind": "randint", "low": -5, "high": 9}
    uniform = fresh_spec(Uniform(generator="uniform", low=-2, high=3), DType.float16)[0]
    assert uniform is not None and _wire(uniform) == {"kind": "uniform", "low": -2.0, "high": 3.0}
    assert isinstance(_wire(uniform)["low"], float) and isinstance(_wire(randint)["low"], int)


@pytest.mark.parametrize("gen", [Arange(generator="arange"), Constant(generator="constant", value=2.0)])
def test_deterministic_generators_are_not_redrawn_and_say_why(gen: object) -> None:
    spec, why = fresh_spec(gen, DType.float32)
    assert spec is None and "deterministic" in why and gen.generator in why  # type: ignore[attr-defined]


def test_a_data_file_is_redrawn_only_from_its_drawn_from_generator() -> None:
    plain = DataFile(generator="file", path="a.bin")
    assert fresh_spec(plain, DType.float32) == (None, "data file (the user's bytes)")
    if "drawn_from" not in DataFile.model_fields:
        pytest.skip("DataFile.drawn_from not in this tree yet")
    frozen = DataFile(generator="file", path="a.bin", drawn_from={"generator": "normal", "std": 2.0})
    assert fresh_spec(frozen, DType.float32) == (FreshSpec(kind="normal", mean=0.0, std=2.0), "drawn_from")
    frozen_arange = DataFile(generator="file", path="a.bin", drawn_from={"generator": "arange"})
    assert fresh_spec(frozen_arange, DType.float32)[0] is None


def test_case_fresh_and_the_checks_it_implies(tmp_path: Path) -> None:
    spec = {**TINY_SPEC, "inputs": {"a": {"generator": "uniform"}, "b": {"generator": "arange"}}}
    wl = load_workload(write_tiny_workload(tmp_path, spec) / "tiny_add")
    case = wl.spec.case("n_4096")
    cf = case_fresh(wl, case)
    assert list(cf.specs) == ["a"] and "arange" in cf.fixed["b"]
    lines = fresh_checks(wl, [case], redraw=True, reference=True, checked=3, consistency=True)
    assert lines[0] == "fresh device-drawn inputs for every timed launch (buffers a)"
    assert lines[1].startswith("fresh inputs: buffer b not redrawn (arange")
    assert "outputs of 3 hidden timed launches per case checked against the CUDA reference" in lines[2]
    assert lines[3].startswith("fresh-input timing consistency")
    # no CUDA reference: the timed launches' outputs are not checked on fresh inputs, and it says so
    no_ref = fresh_checks(wl, [case], redraw=True, reference=False, checked=3, consistency=False)
    assert not any("against the CUDA reference" in x for x in no_ref)
    assert any("checked only by the launch after timing" in x for x in no_ref)
    # graph mode: the launches inside one replay share their inputs, and the line says so
    graph = fresh_checks(wl, [case], redraw=True, reference=True, checked=3, consistency=False, graph=True)
    assert graph[0].startswith("fresh device-drawn inputs for every CUDA-graph replay (buffers a)")
    assert "memoization within a replay is not excluded" in graph[0]
    # nothing drawn: no claim of fresh inputs
    off = fresh_checks(wl, [case], redraw=False, reference=True, checked=0, consistency=False)
    assert not any(x.startswith("fresh device-drawn") for x in off)


def test_nothing_redrawable_is_said_plainly(tmp_path: Path) -> None:
    spec = {**TINY_SPEC, "inputs": {"a": {"generator": "arange"}, "b": {"generator": "constant", "value": 1}}}
    wl = load_workload(write_tiny_workload(tmp_path, spec) / "tiny_add")
    lines = fresh_checks(wl, [wl.spec.case("n_4096")], redraw=True, reference=True, checked=3, consistency=True)
    assert lines[0].startswith("fresh inputs: not possible") and "same bytes" in lines[0]
    assert "not possible" in lines[-1]


def test_checked_launches_are_distinct_sorted_and_one_is_late() -> None:
    for _ in range(200):
        picked = pick_checked_launches(100, 3)
        assert len(set(picked)) == 3 and picked == sorted(picked)
        assert all(0 <= i < 100 for i in picked) and max(picked) >= 75
    assert pick_checked_launches(2, 5) == [0, 1]
    assert pick_checked_launches(100, 0) == [] and pick_checked_launches(0, 3) == []
    # hidden: not the same choice every time
    assert len({tuple(pick_checked_launches(100, 3)) for _ in range(20)}) > 1


def test_a_large_output_is_checked_by_fewer_launches_never_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyTorch's expected outputs of checked launches are written to disk and staged on the device
    together: past CHECKED_SHARE of either, fewer launches are checked (at least one)."""
    import shutil
    from types import SimpleNamespace

    from kernelopt_mcp.evaluation import evaluate

    gib = 2**30
    h100 = SimpleNamespace(workdir=tmp_path, device=SimpleNamespace(total_memory_bytes=80 * gib))
    disk = SimpleNamespace(total=1000 * gib, used=0, free=1000 * gib)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: disk)
    assert evaluate._checked_count(h100, 3, 2**20, confirm=True) == 3
    assert evaluate._checked_count(h100, 3, 3 * gib, confirm=True) == 3  # 4 x 3 GiB fit 12 GiB
    assert evaluate._checked_count(h100, 3, 4 * gib, confirm=True) == 2
    assert evaluate._checked_count(h100, 3, 4 * gib, confirm=False) == 3
    assert evaluate._checked_count(h100, 3, 6 * gib, confirm=True) == 1  # a 6 GiB output: one and the confirm
    assert evaluate._checked_count(h100, 3, 40 * gib, confirm=True) == 1
    disk.free = 10 * gib  # the disk is the tighter bound
    assert evaluate._checked_count(h100, 3, 100 * 2**20, confirm=True) == 3
    assert evaluate._checked_count(h100, 3, 512 * 2**20, confirm=True) == 2  # 1.5 GiB: two and the confirm
    assert evaluate._checked_count(h100, 3, 768 * 2**20, confirm=True) == 1
    assert evaluate._checked_count(SimpleNamespace(workdir=tmp_path, device=None), 3, 2**20, confirm=True) == 3


def _stats(times: list[float], mode: str = "events"):  # noqa: ANN202
    return summarize(times, warmup=10, mode=mode)


def test_consistency_flags_only_two_slow_launches_beyond_noise() -> None:
    steady = _stats([18.0 + 0.01 * (i % 5) for i in range(100)])
    limit = consistency_limit_ms(steady)
    assert limit == pytest.approx(steady.median_ms * 1.25)
    # the memoizing sgemm: 28.3 ms on fresh inputs against a timed median of 18.1 ms
    assert "28.3 ms" in (consistency_problem(steady, 28.3, 27.9) or "")
    assert consistency_problem(steady, 28.3, 18.1) is None  # one slow launch alone: a hiccup
    assert consistency_problem(steady, 19.0, 19.5) is None  # within 25%
    assert consistency_problem(steady, 28.3, None) is None  # no second launch: not judged
    assert consistency_problem(_stats([18.0] * 100, mode="graph"), 40.0, 40.0) is None
    # a short kernel: 20 us of launch latency is not a finding
    short = _stats([0.004] * 100)
    assert consistency_problem(short, 0.020, 0.022) is None
    # noise widens the limit: CV 0.2 -> 100%
    noisy = _stats([10.0, 14.0] * 50)
    assert consistency_limit_ms(noisy) > noisy.median_ms * 1.8


def test_the_tool_output_says_how_many_timed_launches_were_checked() -> None:
    from kernelopt_mcp.evaluation.outcomes import CaseResult, EvaluationResult, Status
    from kernelopt_mcp.results import CheckedEvaluation, evaluation_output

    case = CaseResult(name="n_4096", kind="performance", status=Status.ok, timing=_stats([0.1] * 20),
                      checked_launches=4, fresh_inputs=["a", "b"])
    result = EvaluationResult(status=Status.ok, message="all pass", workload="tiny_add", candidate="add", seed=1,
                              arch="sm_90", cases=[case],
                              checks=["fresh device-drawn inputs for every timed launch (buffers a, b)"])
    out = evaluation_output(CheckedEvaluation(result=result), "benchmark")
    assert out.cases[0].checked_launches == 4 and out.cases[0].fresh_inputs == ["a", "b"]
    assert "4 timed launches checked" in out.text() and "fresh device-drawn inputs" in out.text()
