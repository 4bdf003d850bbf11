"""The Session's requests against a harness that offers protocol-2 features (the fake GPU)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakegpu import ADD_LAUNCH, kernel, write_harness, write_tiny_workload

from kernelopt_mcp import Candidate, HarnessProcess, LaunchSpec, Session, Settings
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.evaluation.candidate import EvaluateOptions
from kernelopt_mcp.evaluation.device import device_info
from kernelopt_mcp.evaluation.evaluate import evaluate


@pytest.mark.parametrize("blocking", [True, False])
def test_blocking_timing_sends_the_support_module_even_with_every_check_off(tmp_path, monkeypatch, blocking) -> None:
    """Blocking timing launches the support module's ko_spin: a harness refuses it without the
    module, so the Session must load it even when no comparison or determinism check needs it."""
    monkeypatch.setenv("KO_FAKE_FEATURES", "blocking")
    harness = write_harness(tmp_path, "fake")
    wl = find_workload(write_tiny_workload(tmp_path / "extra") / "tiny_add", Settings())
    opts = EvaluateOptions(warmup=1, iterations=3, blocking=blocking, device_compare=False,
                           check_determinism=False, check_timed_outputs=False)
    workdir = tmp_path / "w"
    with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=workdir,
                                                       options=opts) as ev:
        result = evaluate(ev, Candidate(kernel(), LaunchSpec.model_validate(ADD_LAUNCH), [], "add"))
    assert result.ok, result.message
    requests = [json.loads(p.read_text()) for p in sorted((workdir / "requests").rglob("*.json"))]
    timed = [r for r in requests if r["cases"][0].get("timing")]
    assert timed and all(r["cases"][0]["timing"]["blocking"] is blocking for r in timed)
    # once loaded, every request names the module (a request without it would unload it)
    assert all(("support_module" in r) is blocking for r in requests)


def test_a_timeout_says_how_much_the_kernel_printed(tmp_path) -> None:
    """A kernel that printf's from every thread and runs past the deadline: the timeout names the
    printing as a likely cause, with its size and last line (the log itself is capped)."""
    harness = write_harness(tmp_path, "fake")
    wl = find_workload(write_tiny_workload(tmp_path / "extra") / "tiny_add", Settings())
    source = kernel("PRINT") + '__device__ char ko_fake_also[] = "KO_FAKE_HANG";\n'
    opts = EvaluateOptions(warmup=1, iterations=3, timeout_s=3)
    with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=tmp_path / "w",
                                                       options=opts) as ev:
        result = evaluate(ev, Candidate(source, LaunchSpec.model_validate(ADD_LAUNCH), [], "printer"), benchmark=False)
        quiet = evaluate(ev, Candidate(kernel("HANG"), LaunchSpec.model_validate(ADD_LAUNCH), [], "hang"),
                         benchmark=False)
    assert result.status.value == "timeout"
    assert "it printed 379.8 KiB before the deadline" in result.message, result.message  # 20000 lines, 388890 bytes
    assert "last line: 'thread 19999: hello'" in result.message
    assert quiet.status.value == "timeout" and "printed" not in quiet.message


FRESH_FEATURES = "blocking,timed_inputs,fresh_inputs,timed_check,confirm_launch"


def _requests(workdir) -> list[tuple[str, dict]]:  # noqa: ANN001
    return [(p.parent.name, json.loads(p.read_text())) for p in sorted((workdir / "requests").rglob("*.json"))]


def test_precision_stopping_asks_for_a_first_round_and_checks_launches_inside_it(tmp_path, monkeypatch) -> None:
    """Issue 17: with stop="precision" a timed case asks the harness for 20 launches and rounds
    up to `iterations` until the median's rse reaches 0.3%; three hidden checked launches are
    chosen among the 20 every case is sure to get, and one in each later round (a kernel honest
    only until the noise rule asks for more is checked there too)."""
    monkeypatch.setenv("KO_FAKE_FEATURES", FRESH_FEATURES + ",adaptive")
    harness = write_harness(tmp_path, "fake")
    wl = find_workload(write_tiny_workload(tmp_path / "extra") / "tiny_add", Settings())
    opts = EvaluateOptions(warmup=2, iterations=100, stop="precision")
    workdir = tmp_path / "w"
    with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=workdir,
                                                       options=opts) as ev:
        result = evaluate(ev, Candidate(kernel(), LaunchSpec.model_validate(ADD_LAUNCH), [], "add"))
        in_force = ev.checks
    assert result.ok, result.message
    timed = [(who, r["cases"][0]) for who, r in _requests(workdir) if r["cases"][0].get("timing")]
    assert {who.rsplit("-", 1)[-1] for who, _ in timed} >= {"reference", "add"}
    for _, case in timed:  # the reference is timed the same way
        assert case["timing"]["iterations"] == 20
        assert case["timing"]["adaptive"] == {"target_rse": 0.003, "max_ms": 2000.0, "max_iterations": 100}
    [checked] = [c["checked_launches"] for who, c in timed if who.endswith("add")]
    assert len([i for i in checked if i < 20]) == 3
    assert [len([i for i in checked if lo <= i < lo + 20]) for lo in (20, 40, 60, 80)] == [1, 1, 1, 1]
    assert any("3 hidden timed launches per case in the first round, and 1 in each later round" in line
               for line in in_force), in_force
    # what was asked for and what was taken, in the tools' output
    from kernelopt_mcp.results import CheckedEvaluation, evaluation_output

    out = evaluation_output(CheckedEvaluation(result=result), "benchmark")
    assert {(c.timing.iterations, c.timing.samples) for c in out.cases if c.timing} == {(20, 20)}


def test_precision_rounds_redraw_half_of_each_round_at_most(tmp_path, monkeypatch) -> None:
    """The default redrawn subset (fresh_launches 16) under search's precision rule: a round of 20
    launches gets 10 redraws, not 16, so the launches reusing a draw are as many and the first round
    stays 20 launches long; every later round gets its own hidden half."""
    monkeypatch.setenv("KO_FAKE_FEATURES", FRESH_FEATURES + ",adaptive,fresh_launches")
    harness = write_harness(tmp_path, "fake")
    wl = find_workload(write_tiny_workload(tmp_path / "extra") / "tiny_add", Settings())
    opts = EvaluateOptions(warmup=2, iterations=100, stop="precision")
    assert opts.fresh_launches == 16
    workdir = tmp_path / "w"
    with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=workdir,
                                                       options=opts) as ev:
        result = evaluate(ev, Candidate(kernel(), LaunchSpec.model_validate(ADD_LAUNCH), [], "add"))
    assert result.ok, result.message
    timed = [c for _, r in _requests(workdir) if (c := r["cases"][0]).get("timing")]
    assert timed
    for case in timed:
        assert case["timing"]["iterations"] == 20
        fresh = case["fresh_launches"]
        assert [len([i for i in fresh if lo <= i < lo + 20]) for lo in range(0, 100, 20)] == [10] * 5
    assert any("before a hidden 10 of the 20 measured launches of each round" in c for c in result.checks), \
        result.checks


def test_timing_requests_redraw_inputs_and_check_hidden_launches_against_the_reference(tmp_path, monkeypatch) -> None:
    """Issue 14: every timed launch gets fresh device-drawn inputs, a hidden subset of a candidate's
    measured launches is checked against the CUDA reference, and the result's checks say so."""
    monkeypatch.setenv("KO_FAKE_FEATURES", FRESH_FEATURES)
    harness = write_harness(tmp_path, "fake")
    wl = find_workload(write_tiny_workload(tmp_path / "extra") / "tiny_add", Settings())
    opts = EvaluateOptions(warmup=2, iterations=40)
    workdir = tmp_path / "w"
    with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=workdir,
                                                       options=opts) as ev:
        result = evaluate(ev, Candidate(kernel(), LaunchSpec.model_validate(ADD_LAUNCH), [], "add"))
    assert result.ok, result.message
    requests = _requests(workdir)
    timed = [(who, r) for who, r in requests if r["cases"][0].get("timing")]
    ref_timed = [r for who, r in timed if who.endswith("reference")]
    cand_timed = [r for who, r in timed if who.endswith("add")]
    assert ref_timed and cand_timed
    seeds = set()
    for r in ref_timed + cand_timed:
        case = r["cases"][0]
        a, b, _, _ = case["args"]
        assert a["fresh"] == {"kind": "uniform", "low": -1.0, "high": 1.0} and b["fresh"]["kind"] == "normal"
        assert case["fresh_timed"] is True and 0 <= case["fresh_seed"] < 2**64
        seeds.add(case["fresh_seed"])
    # the reference is timed on fresh inputs too, but checks nothing
    assert not {"checked_launches", "confirm_launch", "check_launch"} & set(ref_timed[0]["cases"][0])
    cand = cand_timed[0]
    case = cand["cases"][0]
    assert len(case["checked_launches"]) == 3 and max(case["checked_launches"]) >= 30
    assert case["check_launch"]["block"] == [128, 1, 1]  # the reference's launch, not the candidate's
    assert case["confirm_launch"] is True
    assert Path(cand["check_module"]).is_file() and cand["check_entry"] == "vector_add"
    assert len(seeds) == len(ref_timed) + len(cand_timed)  # a new hidden seed for every request
    # validation requests draw nothing
    assert all("fresh" not in r["cases"][0]["args"][0] for who, r in requests if not r["cases"][0].get("timing"))
    assert "fresh device-drawn inputs for every timed launch (buffers a, b)" in result.checks
    # the pretend GPU answers no timed_checks: the result must not claim that the reference checked any
    assert not any("checked against the CUDA reference" in c for c in result.checks), result.checks
    assert all(c.checked_launches == 0 for c in result.cases)
    # a validation-only evaluation lists no check of timed launches
    with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=tmp_path / "v",
                                                       options=opts) as ev:
        validated = evaluate(ev, Candidate(kernel(), LaunchSpec.model_validate(ADD_LAUNCH), [], "add"), benchmark=False)
    assert validated.ok and not any("fresh device" in c or "hidden" in c for c in validated.checks), validated.checks
    # the seeds are never reported
    dumped = result.model_dump_json()
    assert not any(str(s) in dumped for s in seeds)


def test_an_older_harness_or_switched_off_checks_send_and_claim_nothing(tmp_path, monkeypatch) -> None:
    wl = find_workload(write_tiny_workload(tmp_path / "extra") / "tiny_add", Settings())
    harness = write_harness(tmp_path, "fake")
    for features, opts in [("blocking", EvaluateOptions(warmup=1, iterations=8)),
                           (FRESH_FEATURES, EvaluateOptions(warmup=1, iterations=8, fresh_inputs=False,
                                                            checked_launches=0, check_consistency=False))]:
        monkeypatch.setenv("KO_FAKE_FEATURES", features)
        workdir = tmp_path / f"w{len(features)}"
        with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=workdir,
                                                           options=opts) as ev:
            result = evaluate(ev, Candidate(kernel(), LaunchSpec.model_validate(ADD_LAUNCH), [], "add"))
        assert result.ok, result.message
        for _, r in _requests(workdir):
            case = r["cases"][0]
            assert "fresh" not in case["args"][0] and "checked_launches" not in case and "check_module" not in r
        claims = [c for c in result.checks if c != "fresh inputs per session"]
        assert not any("fresh" in c or "CUDA reference" in c for c in claims), result.checks


def test_without_a_cuda_reference_checked_launches_are_written_for_the_oracle(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KO_FAKE_FEATURES", FRESH_FEATURES + ",checked_dump")
    harness = write_harness(tmp_path, "fake")
    root = write_tiny_workload(tmp_path / "extra") / "tiny_add"
    spec = json.loads((root / "workload.json").read_text())
    spec["reference"] = {"python": "reference.py", "cuda": None}
    (root / "workload.json").write_text(json.dumps(spec))
    (root / "reference.cu").unlink()
    wl = find_workload(root, Settings())
    workdir = tmp_path / "w"
    with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=workdir,
                                                       options=EvaluateOptions(warmup=1, iterations=20)) as ev:
        assert any("checked against the NumPy oracle" in c for c in ev.checks)
        result = evaluate(ev, Candidate(kernel(), LaunchSpec.model_validate(ADD_LAUNCH), [], "add"))
    assert result.ok, result.message
    timed = [r for _, r in _requests(workdir) if r["cases"][0].get("timing")]
    assert timed and "check_module" not in timed[0]
    case = timed[0]["cases"][0]
    assert (len(case["checked_launches"]) == 1 and case["checked_launches"][0] >= 15
            and Path(case["checked_dump"]).is_dir())
    # the pretend GPU writes no files: the result does not claim the oracle checked a timed launch
    assert not any("NumPy oracle" in c for c in result.checks), result.checks


def test_fresh_launches_redraw_a_hidden_subset_and_catch_a_cache_on_the_others(tmp_path, monkeypatch) -> None:
    """EvaluateOptions.fresh_launches (issue 14's cost): the harness redraws before a hidden subset
    of the measured launches only (the reference's timing too); a kernel faster on the launches
    that reuse inputs it has seen is inconsistent_timing; an honest one is ok and its checks say
    what ran. Without the harness feature nothing is sent or claimed."""
    monkeypatch.setenv("KO_FAKE_FEATURES", FRESH_FEATURES + ",fresh_launches")
    harness = write_harness(tmp_path, "fake")
    wl = find_workload(write_tiny_workload(tmp_path / "extra") / "tiny_add", Settings())
    opts = EvaluateOptions(warmup=2, iterations=60, fresh_launches=12)
    launch = LaunchSpec.model_validate(ADD_LAUNCH)
    results = {}
    for mode in ("", "MEMO"):
        workdir = tmp_path / f"w{mode}"
        with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=workdir,
                                                           options=opts) as ev:
            results[mode] = evaluate(ev, Candidate(kernel(mode), launch, [], "add"))
        timed = [r["cases"][0] for _, r in _requests(workdir) if r["cases"][0].get("timing")]
        assert timed and all(len(c["fresh_launches"]) == 12 for c in timed)
        assert all(c["fresh_launches"] == sorted(set(c["fresh_launches"])) for c in timed)
        assert len({tuple(c["fresh_launches"]) for c in timed}) > 1  # hidden: a new subset every request
    honest, memo = results[""], results["MEMO"]
    assert honest.ok, honest.message
    assert any("before a hidden 12 of the 60 measured launches" in c for c in honest.checks), honest.checks
    assert not any("for every timed launch" in c for c in honest.checks)
    assert memo.status.value == "inconsistent_timing", memo.message
    assert "inputs it has seen" in memo.message
    # a harness without the feature gets no fresh_launches, and the result claims every-launch draws
    monkeypatch.setenv("KO_FAKE_FEATURES", FRESH_FEATURES)
    (tmp_path / "old").mkdir()
    harness = write_harness(tmp_path / "old", "fake")  # a new binary path: features are cached per binary
    workdir = tmp_path / "old" / "w"
    with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=workdir,
                                                       options=opts) as ev:
        old = evaluate(ev, Candidate(kernel(), launch, [], "add"))
    assert old.ok and "fresh device-drawn inputs for every timed launch (buffers a, b)" in old.checks
    assert not any("fresh_launches" in r["cases"][0] for _, r in _requests(workdir))


def test_poison_subset_is_asked_for_only_when_on_with_the_subset_and_the_feature(tmp_path, monkeypatch) -> None:
    """EvaluateOptions.poison_subset: sent with the requests that carry fresh_launches (the candidate's
    and the reference's timing), and the result's checks say the poison follows the subset; on by
    default, and never sent when off, to a harness without the feature or without a redrawn subset."""
    harness_features = FRESH_FEATURES + ",fresh_launches"
    wl = find_workload(write_tiny_workload(tmp_path / "extra") / "tiny_add", Settings())
    launch = LaunchSpec.model_validate(ADD_LAUNCH)

    def run(name: str, features: str, **options) -> tuple[Any, list[dict]]:
        monkeypatch.setenv("KO_FAKE_FEATURES", features)
        (tmp_path / name).mkdir()
        harness = write_harness(tmp_path / name, "fake")  # features are cached per binary path
        opts = EvaluateOptions(warmup=2, iterations=60, **options)
        workdir = tmp_path / name / "w"
        with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=workdir,
                                                           options=opts) as ev:
            result = evaluate(ev, Candidate(kernel(), launch, [], "add"))
        return result, [r["cases"][0] for _, r in _requests(workdir) if r["cases"][0].get("timing")]

    for name, options in (("on", {"poison_subset": True}), ("default", {})):
        on, timed = run(name, harness_features + ",poison_subset", fresh_launches=12, **options)
        assert on.ok and timed and all(c["poison_subset"] is True and len(c["fresh_launches"]) == 12 for c in timed)
        assert any(c.startswith("outputs poisoned before those launches and the checked ones only")
                   for c in on.checks), on.checks
    for name, features, options in (
        ("off", harness_features + ",poison_subset", {"fresh_launches": 12, "poison_subset": False}),
        ("no-feature", harness_features, {"fresh_launches": 12, "poison_subset": True}),
        ("every-launch", harness_features + ",poison_subset", {"fresh_launches": None, "poison_subset": True}),
    ):
        result, timed = run(name, features, **options)
        assert result.ok and timed and not any("poison_subset" in c for c in timed), name
        assert not any(c.startswith("outputs poisoned before those") for c in result.checks), (name, result.checks)


def test_a_result_says_where_its_host_time_went(tmp_path) -> None:
    """Every harness request of this kernel takes 0.5 s (KO_FAKE_SLOW): the phases and the cases'
    wall times must add those up where they happened, and the MCP text must say it."""
    from kernelopt_mcp.results import CheckedEvaluation, evaluation_output

    harness = write_harness(tmp_path, "fake")
    wl = find_workload(write_tiny_workload(tmp_path / "extra") / "tiny_add", Settings())
    opts = EvaluateOptions(warmup=1, iterations=3)
    with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=tmp_path / "w",
                                                       options=opts) as ev:
        result = evaluate(ev, Candidate(kernel("SLOW"), LaunchSpec.model_validate(ADD_LAUNCH), [], "slow"))
        prepared = dict(ev.prepare_ms)
    assert result.ok, result.message
    # once per session: where the preparation went (the reference's requests are quick here)
    assert ({"inputs", "oracle", "reference", "reference_validation", "reference_timing", "total"}
            <= set(prepared)), prepared
    assert prepared["total"] >= sum(v for k, v in prepared.items() if k != "total") - 1
    assert prepared["reference"] > 0 and prepared["inputs"] > 0
    from kernelopt_mcp.evaluation.evaluate import preparation_text

    line = preparation_text(prepared)
    assert line.startswith(f"prepared once in {prepared['total'] / 1e3:.3g} s: inputs ") and "reference" in line
    assert preparation_text({}) == ""
    p = result.phases
    assert p is not None
    assert p.validate_ms >= 3 * 500 and p.timing_ms >= 500, p  # 3 validation requests, 1 timed
    assert p.timing_ms < p.validate_ms and p.compile_ms < p.total_ms
    assert p.total_ms >= p.compile_ms + p.validate_ms + p.timing_ms
    walls = {c.name: c.wall_ms for c in result.cases}
    assert walls["one"] >= 500 and walls["odd_1001"] >= 500 and walls["n_4096"] >= 1000, walls  # validated + timed
    assert sum(walls.values()) <= p.validate_ms + p.timing_ms + 1
    # the requests' round trips hold the fake's 0.5 s sleeps; Python's share is the rest of _submit
    assert p.requests == 4 and p.harness_ms >= 4 * 500 and 0 < p.python_ms < 500, p
    assert p.total_ms >= p.compile_ms + p.harness_ms + p.python_ms - 1
    assert {"read_files", "setup", "validation_launch", "teardown"} <= set(p.harness_steps_ms), p.harness_steps_ms
    assert "cases" not in p.harness_steps_ms and p.harness_steps_ms["read_files"] >= 4 * 500  # the sleep is there
    text = evaluation_output(CheckedEvaluation(result=result), "benchmark").text()
    assert f"host time {p.total_ms / 1e3:.3g} s: compile" in text, text
    assert f"4 harness requests, {p.harness_ms:.0f} ms in the harness" in text, text


def test_phase_times_add_only_the_steps_an_answer_reports() -> None:
    from kernelopt_mcp.evaluation.outcomes import PhaseTimes

    p = PhaseTimes()
    p.add_request(10.0, 1.0, None)  # no answer (a hang): counted, no steps
    p.add_request(5.0, 0.5, {"steps_ms": None, "cases": [{"steps_ms": {"setup": 2, "timing": 1.5}}]})
    p.add_request(4.0, 0.5, {"steps_ms": {"module_load": 1.0, "cases": 3.0, "odd": True, "bad": "x"},
                             "cases": [{"steps_ms": {"setup": 1.0}}, "not a case"]})
    assert p.requests == 3 and p.harness_ms == 19.0 and p.python_ms == 2.0
    assert p.harness_steps_ms == {"setup": 3.0, "timing": 1.5, "module_load": 1.0}


def _three_case_workload(tmp_path) -> object:  # noqa: ANN001
    """tiny_add with three performance cases whose cost model puts each roofline floor at ~10 ms
    (4.9e10 bytes at the fake device's 4.9 TB/s), so medians of 20 ms pass the impossible-time check."""
    import copy

    from fakegpu import TINY_SPEC

    spec = copy.deepcopy(TINY_SPEC)
    spec["name"] = "tiny_three"
    spec["cases"] = [{"name": "one", "kind": "correctness", "scalars": {"n": 1}},
                     *({"name": f"p{k}", "kind": "performance", "scalars": {"n": 4096}} for k in "abc")]
    spec["cost"] = {"flops": "n", "bytes": "12 * n * 1000000"}
    root = write_tiny_workload(tmp_path / "extra", spec) / "tiny_three"
    (root / "reference.cu").write_text(kernel("MS:pa=40;pb=40;pc=40;"))  # above the floors too
    return find_workload(root, Settings())


def test_timing_stops_once_a_candidate_provably_cannot_beat_the_best(tmp_path) -> None:
    """Sound: the untimed cases are bounded by their roofline floors over the impossible-time
    margin, so a candidate stopped early could never have been ranked below the score to beat;
    one that could is timed in full."""
    from kernelopt_mcp.evaluation.roofline import IMPOSSIBLE_MARGIN

    harness = write_harness(tmp_path, "fake")
    wl = _three_case_workload(tmp_path)
    opts = EvaluateOptions(warmup=1, iterations=5)

    def slow(ms_a: float) -> Candidate:
        return Candidate(kernel(f"MS:pa={ms_a};pb=20;pc=20;"), LaunchSpec.model_validate(ADD_LAUNCH), [], f"a{ms_a}")

    with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=tmp_path / "w",
                                                       options=opts) as ev:
        best = evaluate(ev, slow(20))
        assert best.ok and best.score_ms and best.stopped_early is None
        floor = 12 * 4096 * 1e6 / ev.peaks.floor_bytes_per_s * 1e3 / IMPOSSIBLE_MARGIN
        # 200 ms on the first case: even at the floor on the other two the score is above the best
        hopeless = evaluate(ev, slow(200), beat_ms=best.score_ms)
        # 30 ms: (30 * floor * floor)^(1/3) is below the best, so the rest must be timed (and it loses)
        close = evaluate(ev, slow(30), beat_ms=best.score_ms)
        unbounded = evaluate(ev, slow(200))
    assert hopeless.ok and hopeless.score_ms is None and hopeless.stopped_early
    assert hopeless.score_bound_ms == pytest.approx((200 * 1.01 * floor * floor) ** (1 / 3), rel=0.02)
    assert hopeless.score_bound_ms >= best.score_ms
    assert "timing stopped after 1 of 3 performance cases" in hopeless.message
    timed = [c.name for c in hopeless.cases if c.timing is not None]
    assert timed == ["pa"] and all(c.status.value == "ok" for c in hopeless.cases)
    assert close.stopped_early is None and close.score_ms and close.score_ms > best.score_ms
    assert unbounded.stopped_early is None and unbounded.score_ms  # no score to beat: timed in full
    assert unbounded.score_ms >= hopeless.score_bound_ms  # the bound held


def test_tuning_stops_hopeless_configurations_early_and_finds_the_same_best(tmp_path) -> None:
    """MS sets case pa's median (pb, pc: 20 ms). After the untuned 40 (score 25.2) and 20 (the
    best, 20), 300 is stopped after one case; 21 cannot be excluded by the bound and is timed in
    full. With early_stop off every row has a score, and the best is the same."""
    from kernelopt_mcp.tune.cache import TuneCache
    from kernelopt_mcp.tune.spec import parse_tunable
    from kernelopt_mcp.tune.tuner import tune

    source = ('#ifndef MS\n#define MS 40\n#endif\n#define KO_STR2(x) #x\n#define KO_STR(x) KO_STR2(x)\n'
              '__device__ char ko_fake_mode[] = "KO_FAKE_MS:pa=" KO_STR(MS) ";pb=20;pc=20;";\n' + kernel())
    spec = {"source": "t.cu", "params": {"MS": [40, 20, 300, 21]}, "defaults": {"MS": 40},
            "launch": ADD_LAUNCH, "compile_options": []}
    harness = write_harness(tmp_path, "fake")
    wl = _three_case_workload(tmp_path)
    runs = {}
    for early in (True, False):
        with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0),
                                                           workdir=tmp_path / f"w{early}",
                                                           options=EvaluateOptions(warmup=1, iterations=5)) as ev:
            runs[early] = tune(ev, parse_tunable(spec, source, "t", wl), strategy="exhaustive", early_stop=early,
                               cache=TuneCache(tmp_path / f"cache{early}"))
    stopped, full = runs[True], runs[False]
    rows = {r.params["MS"]: r for r in stopped.table}
    assert (rows[300].status == "stopped_early"
            and rows[300].score_ms is None), {k: (r.status, r.message) for k, r in rows.items()}
    assert rows[300].score_bound_ms and rows[300].score_bound_ms >= rows[20].score_ms
    assert all(rows[ms].status == "ok" and rows[ms].score_ms for ms in (40, 20, 21))
    assert stopped.counts.stopped_early == 1 and stopped.counts.ok == 3
    assert full.counts.stopped_early == 0 and all(r.status == "ok" and r.score_ms for r in full.table)
    assert stopped.best_params == full.best_params == {"MS": 20}
    full_300 = next(r for r in full.table if r.params["MS"] == 300)
    assert full_300.score_ms and full_300.score_ms >= rows[300].score_bound_ms  # the bound held


def test_without_a_floor_for_every_untimed_case_there_is_no_bound(tmp_path) -> None:
    """No cost model (or L2 not flushed): nothing bounds an untimed case, so nothing stops early;
    with every case timed the bound is the score itself."""
    import copy

    from fakegpu import TINY_SPEC

    from kernelopt_mcp.evaluation.compare import geometric_mean
    from kernelopt_mcp.evaluation.runner import score_bound_ms

    spec = copy.deepcopy(TINY_SPEC)
    spec["name"] = "tiny_nocost"
    del spec["cost"]
    harness = write_harness(tmp_path, "fake")
    costless = find_workload(write_tiny_workload(tmp_path / "a", spec) / "tiny_nocost", Settings())
    costed = _three_case_workload(tmp_path / "b")
    with HarnessProcess(harness, 0) as proc:
        with Session(costless, proc, device_info(harness, 0), workdir=tmp_path / "w1") as ev:
            assert score_bound_ms(ev, [], costless.spec.performance_cases, True) is None
        with Session(costed, proc, device_info(harness, 0), workdir=tmp_path / "w2") as ev:
            perf = costed.spec.performance_cases
            assert score_bound_ms(ev, [30.0], perf[1:], False) is None  # L2 kept: the floor is no bound
            with_floors = score_bound_ms(ev, [30.0], perf[1:], True)
            assert with_floors is not None and 0 < with_floors < 30.0
            assert score_bound_ms(ev, [30.0, 20.0, 10.0], [], True) == pytest.approx(geometric_mean([30.0, 20.0, 10.0]))


def test_the_reference_compiles_and_the_harness_starts_while_the_oracle_runs(
    tmp_path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """prepare() starts the CUDA reference's compile and the harness (one empty launch of the
    support module) before the NumPy oracle runs: the reference's own run then finds the CUBIN in
    the session's compile cache, and a harness already running."""
    import threading

    from kernelopt_mcp import compiler
    from kernelopt_mcp.compiler import CompileCache
    from kernelopt_mcp.evaluation import evaluate as evaluate_module
    from kernelopt_mcp.evaluation.evaluate import prepare

    compiling: list[str] = []  # the thread of each compile of the reference's source
    real = compiler.compile_kernel

    def spy(source: str, *args: object, **kwargs: object) -> object:
        if source == wl.reference_cu:
            compiling.append(threading.current_thread().name)
        return real(source, *args, **kwargs)  # type: ignore[arg-type]

    oracle_ran: list[int] = []
    real_oracle = evaluate_module._oracle

    def oracle(*args: object) -> object:
        oracle_ran.append(len(compiling))  # how many compiles had started when the oracle began
        return real_oracle(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(evaluate_module, "compile_kernel", spy)
    monkeypatch.setattr("kernelopt_mcp.evaluation.build.compile_kernel", spy)
    monkeypatch.setattr(evaluate_module, "_oracle", oracle)
    harness = write_harness(tmp_path, "fake")
    wl = find_workload(write_tiny_workload(tmp_path / "extra") / "tiny_add", Settings())
    assert wl.reference_cu
    monkeypatch.setenv("KO_FAKE_FEATURES", "blocking,device_compare,timed_inputs,input_draw,expected_dtype,input_cache")
    sent: list[tuple[str, str]] = []  # (entry, thread) of each harness request, in order
    with HarnessProcess(harness, 0) as proc, Session(
        wl, proc, device_info(harness, 0), workdir=tmp_path / "w", compile_cache=CompileCache(tmp_path / "cc"),
        options=EvaluateOptions(warmup=1, iterations=3),
    ) as ev:
        real_request = proc.request

        def request(payload: object, timeout_s: float) -> object:
            sent.append((payload.entry, threading.current_thread().name))  # type: ignore[attr-defined]
            return real_request(payload, timeout_s)  # type: ignore[arg-type]

        monkeypatch.setattr(proc, "request", request)
        prepare(ev)
        result = ev.reference_result
        restarts = proc.restarts
    assert result is not None and result.ok, result
    assert oracle_ran == [1] and compiling[0].startswith("prepare-ahead"), (oracle_ran, compiling)
    assert sent[0][0] == "ko_empty" and sent[0][1].startswith("prepare-ahead"), sent
    assert {e for e, _ in sent[1:]} == {wl.signature.entry} and {t for _, t in sent[1:]} == {"MainThread"}, sent
    assert restarts == 0  # the warm-up was answered; the reference's requests went to the same process
    # the reference's run (and its checked launches' module) only hit the cache
    assert result.compile is not None and result.compile.cache_hit
