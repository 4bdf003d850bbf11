"""Phase 1 in one request (harness feature ``progress``, PROTOCOL.md): every case of a candidate
validated by one harness request, each case still held to its own deadline and a hang or fault
still named by case. Against the fake GPU with and without the feature, side by side."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
from fakegpu import ADD_LAUNCH, kernel, write_harness, write_tiny_workload

from kernelopt_mcp import Candidate, HarnessProcess, LaunchSpec, Session, Settings, Status
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.errors import HarnessError
from kernelopt_mcp.evaluation.candidate import EvaluateOptions
from kernelopt_mcp.evaluation.device import device_info
from kernelopt_mcp.evaluation.evaluate import evaluate
from kernelopt_mcp.evaluation.outcomes import EvaluationResult


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, features: str, *sources: str,
         timeout_s: float = 20) -> tuple[list[EvaluationResult], Path, HarnessProcess]:
    monkeypatch.setenv("KO_FAKE_FEATURES", features)
    tmp_path.mkdir(parents=True, exist_ok=True)
    harness = write_harness(tmp_path, "fake")
    wl = find_workload(write_tiny_workload(tmp_path / "extra") / "tiny_add", Settings())
    opts = EvaluateOptions(warmup=1, iterations=3, timeout_s=timeout_s)
    workdir = tmp_path / "w"
    with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=workdir,
                                                       options=opts) as ev:
        results = [evaluate(ev, Candidate(src, LaunchSpec.model_validate(ADD_LAUNCH), [], f"c{i}"))
                   for i, src in enumerate(sources)]
    return results, workdir, proc


def test_one_request_validates_every_case_with_the_verdicts_of_one_request_each(tmp_path, monkeypatch) -> None:
    (batched,), work_b, _ = _run(tmp_path / "b", monkeypatch, "progress", kernel())
    (single,), work_s, _ = _run(tmp_path / "s", monkeypatch, "", kernel())
    assert batched.ok and single.ok, (batched.message, single.message)
    assert [(c.name, c.status) for c in batched.cases] == [(c.name, c.status) for c in single.cases]
    assert batched.score_ms == single.score_ms
    # the candidate: one validation request for 3 cases + the timed case's, against 3 + 1
    assert batched.phases is not None and single.phases is not None
    assert (batched.phases.requests, single.phases.requests) == (2, 4)
    sent = json.loads(next((work_b / "requests").glob("*-c0/validation.json")).read_text())
    assert sent["progress"] is True and [c["name"] for c in sent["cases"]] == ["one", "odd_1001", "n_4096"]
    assert not list((work_s / "requests").rglob("validation.json"))
    # every case still has its own wall time (the harness's steps for it)
    assert all(c.wall_ms is not None and c.wall_ms >= 0 for c in batched.cases)


def test_each_case_of_a_batch_gets_its_own_deadline(tmp_path, monkeypatch) -> None:
    """0.5 s per case (SLOW), 1.2 s per case allowed: the batch of three takes 1.5 s, longer than
    any one deadline, and passes, because each case's deadline starts at its progress line."""
    (result,), _, _ = _run(tmp_path, monkeypatch, "progress", kernel("SLOW"), timeout_s=1.2)
    assert result.ok, result.message
    assert result.phases is not None and result.phases.validate_ms >= 1500


def test_a_hang_is_named_by_case_within_its_deadline_and_the_cases_before_it_still_get_verdicts(
    tmp_path, monkeypatch,
) -> None:
    start = time.monotonic()
    (hung, after), _, proc = _run(tmp_path, monkeypatch, "progress", kernel("STALL:odd_1001;"), kernel(),
                                  timeout_s=2)
    elapsed = time.monotonic() - start
    statuses = {c.name: c.status for c in hung.cases}
    # "one" ran before the hang: its answer died with the process, so it is run again, alone
    assert statuses == {"one": Status.ok, "odd_1001": Status.timeout, "n_4096": Status.skipped}, hung.message
    timeout = next(c for c in hung.cases if c.name == "odd_1001")
    assert "no answer within 2 s" in (timeout.message or "")
    skipped = next(c for c in hung.cases if c.name == "n_4096")
    assert "'odd_1001' ended the process (timeout)" in (skipped.message or "")
    assert hung.phases is not None and hung.phases.requests == 2  # the batch, then "one" again
    # one deadline (2 s), not the three cases' sum (6 s), plus the preparation and the next candidate
    assert elapsed < 5.5, elapsed
    assert proc.restarts >= 1 and after.ok, after.message


def test_a_fault_ends_the_batch_at_its_case(tmp_path, monkeypatch) -> None:
    (crashed, after), _, proc = _run(tmp_path, monkeypatch, "progress", kernel("CRASH"), kernel())
    statuses = {c.name: c.status for c in crashed.cases}
    assert statuses == {"one": Status.runtime_error, "odd_1001": Status.skipped, "n_4096": Status.skipped}
    assert crashed.phases is not None and crashed.phases.requests == 1
    assert proc.restarts >= 1 and after.ok, after.message


def test_a_source_that_does_not_compile_sends_no_request(tmp_path, monkeypatch) -> None:
    (result, after), _, _ = _run(tmp_path, monkeypatch, "progress", "this is not CUDA", kernel())
    assert result.status is Status.compile_error and result.phases is not None and result.phases.requests == 0
    assert after.ok and after.phases is not None and after.phases.requests == 2


def test_a_malformed_progress_line_is_a_harness_error(tmp_path) -> None:
    """Progress lines come from the harness's own answer stream; one it cannot have written is
    not skipped over but reported."""
    script = tmp_path / "harness"
    script.write_text(
        "#!/usr/bin/env python3\nimport sys\nfor line in sys.stdin:\n"
        "    sys.stdout.write('{\"progress\": {\"case\": 1}}\\n'); sys.stdout.flush()\n"
    )
    script.chmod(0o755)
    with HarnessProcess(script, 0) as proc, pytest.raises(HarnessError, match="malformed progress line"):
        proc.request({"op": "run", "cases": []}, 5, [5])


def test_batch_validation_off_sends_a_request_per_case_to_a_harness_that_could_batch(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KO_FAKE_FEATURES", "progress")
    harness = write_harness(tmp_path, "fake")
    wl = find_workload(write_tiny_workload(tmp_path / "extra") / "tiny_add", Settings())
    opts = EvaluateOptions(warmup=1, iterations=3)
    with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=tmp_path / "w",
                                                       options=opts) as ev:
        cand = Candidate(kernel(), LaunchSpec.model_validate(ADD_LAUNCH), [], "c")
        off = evaluate(ev, cand, replace(opts, batch_validation=False))
        on = evaluate(ev, cand)
    assert off.ok and on.ok and off.score_ms == on.score_ms
    assert off.phases is not None and on.phases is not None and (off.phases.requests, on.phases.requests) == (4, 2)
