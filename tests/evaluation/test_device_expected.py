"""Issue 17: the CUDA reference's outputs stay on the device as the expected values (feature
``device_expected``): the performance cases' expected values are never written, read or stored
again on the host, and a harness that lost them (a new process after a fault) gets them back.

The harness side (keeping, the compare against a kept copy, ``expected_missing``) is tested in
native_harness/tests/e2e_kept.cpp against the fake driver; here, against the fake GPU
(tests/fakegpu.py, which keeps a buffer in its process like the harness's device cache): what
the requests say, the tolerances built on the harness's figures, verdicts, and the restart.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fakegpu import ADD_LAUNCH, kernel, write_harness, write_tiny_workload

from kernelopt_mcp import Candidate, HarnessProcess, LaunchSpec, Session, Settings
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.evaluation.candidate import EvaluateOptions
from kernelopt_mcp.evaluation.compare import thresholds
from kernelopt_mcp.evaluation.device import device_info
from kernelopt_mcp.evaluation.evaluate import case_request, evaluate, prepare
from kernelopt_mcp.evaluation.harness import ExpectedMissing, raise_for_request_error
from kernelopt_mcp.evaluation.outcomes import Status
from kernelopt_mcp.evaluation.protocol import AnswerEnvelope

BASE = ("blocking,device_compare,timed_inputs,fresh_inputs,timed_check,confirm_launch,input_draw,expected_dtype,"
        "input_cache")
FEATURES = BASE + ",device_expected"


def _session(  # noqa: ANN202
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, features: str = FEATURES, seed: int | None = None,
    **options: object,
):
    monkeypatch.setenv("KO_FAKE_FEATURES", features)
    tmp_path.mkdir(parents=True, exist_ok=True)
    harness = write_harness(tmp_path, "fake")
    wl = find_workload(write_tiny_workload(tmp_path / "extra") / "tiny_add", Settings())
    proc = HarnessProcess(harness, 0)
    session = Session(wl, proc, device_info(harness, 0), workdir=tmp_path / "w", seed=seed,
                      options=EvaluateOptions(warmup=1, iterations=20, **options))  # type: ignore[arg-type]
    return proc, session


def _requests(workdir: Path) -> list[tuple[str, str, dict]]:
    """(candidate tag, case file, request) in the order they were sent."""
    files = sorted((workdir / "requests").rglob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    return [(p.parent.name, p.name, json.loads(p.read_text())) for p in files]


def _c(request: dict) -> dict:
    return next(a for a in request["cases"][0]["args"] if a["name"] == "c")


def _add(mode: str = "", name: str = "add") -> Candidate:
    return Candidate(kernel(mode), LaunchSpec.model_validate(ADD_LAUNCH), [], name)


def test_the_reference_keeps_its_outputs_on_the_device_and_candidates_are_compared_with_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    proc, ev = _session(tmp_path, monkeypatch)
    with proc, ev:
        prepare(ev)
        assert ev.record.device_kept == {"n_4096"}
        ref, timed = ev.data.refs["n_4096"]["c"], ev.timed.refs["n_4096"]["c"]  # type: ignore[union-attr]
        # nothing on the host: no array, no file; the key names the data set and its seed
        assert ref.kept and ref.path is None and ref.location == f"kept:{ref.kept}"
        assert ref.kept.startswith(f"validation.{ev.data.nonce}.") and timed.kept and timed.kept.startswith("timed.")
        # never a seed: the hidden set's is never reported, and requests are kept on disk
        assert all(f"{seed:x}" not in k for seed in (ev.seed, ev.timed.seed) for k in (ref.kept, timed.kept))  # type: ignore[union-attr]
        assert "n_4096" not in ev.data.expected and "n_4096" not in ev.timed.expected  # type: ignore[union-attr]
        assert not list((tmp_path / "w" / "expected").rglob("n_4096/*"))
        # the correctness cases keep the oracle's float64 files
        assert ev.data.refs["odd_1001"]["c"].kept is None and ev.data.refs["odd_1001"]["c"].path is not None
        good = evaluate(ev, _add())
        wrong = evaluate(ev, _add("WRONG", "wrong"))
        nan = evaluate(ev, _add("NAN", "nan"))
    assert good.ok, good.message
    perf = {c.name: c for c in wrong.cases}["n_4096"]
    assert perf.status is Status.mismatch and perf.outputs[0].mismatches == 1
    assert perf.outputs[0].max_abs_error == pytest.approx(1.0, rel=1e-6)
    # the first mismatching element, with the values the harness read at it (no host copy)
    [first] = perf.outputs[0].first_mismatches
    assert first.index == [2048] and first.actual == pytest.approx(first.expected + 1.0, rel=1e-6)
    assert "first at [2048]" in perf.message
    nan_out = {c.name: c for c in nan.cases}["n_4096"].outputs[0]
    assert nan_out.nonfinite == 4096 and nan_out.first_mismatches[0].index == [0]
    assert np.isnan(nan_out.first_mismatches[0].actual)
    sent = _requests(tmp_path / "w")
    keeps = [(tag, _c(r)) for tag, _, r in sent if "keep_expected" in _c(r)]
    # the reference kept the performance case of each data set once: validation and hidden
    assert sorted(c["keep_expected"] for _, c in keeps) == sorted([ref.kept, timed.kept])
    assert all(tag.endswith("-reference") and "expected" not in c for tag, c in keeps)
    add = [_c(r) for tag, name, r in sent if tag.endswith("-add") and name.startswith("n_4096")]
    assert add and all(c["expected"] == f"kept:{ref.kept}" and c["expected_dtype"] == "float32" for c in add)
    assert any(c.get("timed_expected") == f"kept:{timed.kept}" for c in add)


def test_tolerances_from_the_harness_figures_equal_those_numpy_computes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kept values' RMS comes from the harness (sum of squares, finite count): the same
    thresholds as NumPy's on the reference's outputs written to a file by the old path."""
    proc, ev = _session(tmp_path / "kept", monkeypatch, seed=1234)
    with proc, ev:
        prepare(ev)
        kept = ev.data.refs["n_4096"]["c"].thresholds
    proc2, old = _session(tmp_path / "files", monkeypatch, BASE, seed=1234)
    with proc2, old:
        prepare(old)
        on_host = old.data.expected["n_4096"]["c"]
        want = thresholds(on_host, old.workload.spec.tolerance_for("c"))
        assert old.record.device_kept == frozenset() and old.data.refs["n_4096"]["c"].path is not None
    assert kept.scale == pytest.approx(want.scale, rel=1e-12) and kept.abs_tol == pytest.approx(want.abs_tol, rel=1e-12)
    assert (kept.norm == pytest.approx(want.norm, rel=1e-12)
            and kept.rel_floor == pytest.approx(want.rel_floor, rel=1e-12))
    assert np.isfinite(kept.scale) and kept.scale > 0


@pytest.mark.parametrize("how", ["no feature", "no input cache", "option off"])
def test_files_as_before_without_the_feature_the_cache_or_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str,
) -> None:
    features = {"no feature": BASE, "no input cache": FEATURES.replace(",input_cache", "")}.get(how, FEATURES)
    proc, ev = _session(tmp_path, monkeypatch, features, device_inputs=how != "option off")
    with proc, ev:
        result = evaluate(ev, _add())
        assert ev.record.device_kept == frozenset()
        assert all(r.kept is None for refs in ev.data.refs.values() for r in refs.values())
    assert result.ok, result.message
    assert not any("keep_expected" in _c(r) or "kept:" in str(_c(r).get("expected"))
                   for _, _, r in _requests(tmp_path / "w"))


@pytest.mark.parametrize("batch", ["", ",progress"], ids=["request per case", "validation batch"])
def test_after_a_fault_the_new_harness_gets_the_expected_values_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: str,
) -> None:
    """A candidate that faults ends the harness process, and the device copies with it: the next
    candidate's first request is answered expected_missing, the reference keeps its outputs
    again (on the new process) and the request is sent once more; verdicts are unchanged. The
    same when a candidate's cases are validated in one request."""
    proc, ev = _session(tmp_path, monkeypatch, FEATURES + batch)
    with proc, ev:
        prepare(ev)
        crash = evaluate(ev, _add("CRASH", "crash"))
        after = evaluate(ev, _add())
        wrong = evaluate(ev, _add("WRONG", "wrong"))
    assert crash.status is Status.runtime_error
    assert after.ok, after.message
    assert {c.name: c.status for c in wrong.cases}["n_4096"] is Status.mismatch
    tags = [tag for tag, _, r in _requests(tmp_path / "w") for case in r["cases"]
            if "keep_expected" in next(a for a in case["args"] if a["name"] == "c")]
    assert any(name == "validation.json" for _, name, _ in _requests(tmp_path / "w")) is bool(batch)
    # once in prepare per data set, then again after the crash: the validation set before "add"
    # compared with it, and the hidden set before its timing request
    assert len(tags) == 4 and len(set(tags)) == 4, tags


def test_a_replay_request_needs_nothing_kept_and_runs_in_another_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Profiling, sanitizing and replays send ``case_request``'s request to another process
    (ncu, compute-sanitizer, ``kernelopt-harness run``), which holds none of this one's kept
    copies: the request names none, and a new harness answers it."""
    proc, ev = _session(tmp_path, monkeypatch)
    with proc, ev:
        prepare(ev)
        assert ev.record.device_kept == {"n_4096"}
        replay = case_request(ev, _add(), "n_4096", tmp_path / "replay", timing=True)
    assert replay.request is not None, replay.problem
    assert "kept:" not in replay.request.model_dump_json()
    (tmp_path / "other").mkdir()
    with HarnessProcess(write_harness(tmp_path / "other", "fake"), 0) as other:
        reply = other.request(replay.request, 60)
    assert reply.answer is not None, reply.stderr
    (case,) = reply.answer["cases"]
    assert case["status"] == "ok" and case["timing"]["iterations"] == 20, case
    assert (tmp_path / "replay" / "c.bin").stat().st_size == 4096 * 4


def test_expected_missing_is_its_own_error_naming_the_keys() -> None:
    envelope = AnswerEnvelope.model_validate({"protocol": 2, "status": "error", "error": {
        "kind": "expected_missing", "message": "no kept expected values under k1", "missing": ["k1"]}})
    with pytest.raises(ExpectedMissing, match="no kept expected values under k1") as info:
        raise_for_request_error(envelope, 4)
    assert info.value.keys == ["k1"]


def test_an_evaluation_without_device_compare_still_checks_the_kept_cases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Values kept on the device can be compared nowhere else: an evaluation that turns the
    device-side compare off still sends them for its performance case (and is not waved through)."""
    proc, ev = _session(tmp_path, monkeypatch)
    with proc, ev:
        prepare(ev)
        off = EvaluateOptions(warmup=1, iterations=20, device_compare=False)
        good = evaluate(ev, _add(), off)
        wrong = evaluate(ev, _add("WRONG", "wrong"), off)
    assert good.ok, good.message
    assert {c.name: c.status for c in wrong.cases}["n_4096"] is Status.mismatch
    sent = [(tag, name, _c(r)) for tag, name, r in _requests(tmp_path / "w") if tag.endswith("-wrong")]
    assert any(name.startswith("n_4096") and c.get("expected", "").startswith("kept:") for _, name, c in sent)
    assert all("expected" not in c for _, name, c in sent if name.startswith("odd_1001")), "files: compared on the host"


def test_no_kept_values_without_the_device_compare_feature(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc, ev = _session(tmp_path, monkeypatch, FEATURES.replace("device_compare,", ""))
    with proc, ev:
        result = evaluate(ev, _add())
        assert ev.record.device_kept == frozenset() and "n_4096" in ev.data.expected
    assert result.ok, result.message


def test_a_case_too_large_for_the_cache_keeps_its_expected_values_in_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A kept copy must fit the harness's input cache beside the other data set's and the inputs:
    on a device with little memory the performance case's expected values go through files."""
    from kernelopt_mcp.evaluation import evaluate as evaluate_module

    proc, ev = _session(tmp_path, monkeypatch)
    assert ev.device is not None
    # n_4096's output is 16 KiB: kept while the share of the device's memory allows it, not below
    monkeypatch.setattr(evaluate_module, "KEPT_SHARE", 4096 * 4 / ev.device.total_memory_bytes * 0.99)
    with proc, ev:
        result = evaluate(ev, _add())
        assert ev.record.device_kept == frozenset() and ev.data.refs["n_4096"]["c"].path is not None
    assert result.ok, result.message
