"""One case through the harness: the protocol-2 request fields and what their answers mean.

The answers here are shaped like the harness's (native_harness/PROTOCOL.md); the GPU tests
check that the real harness produces them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakegpu import TINY_SPEC, write_tiny_workload

from kernelopt_mcp.evaluation.compare import compare
from kernelopt_mcp.evaluation.dataset import DataSet
from kernelopt_mcp.evaluation.harness import HarnessReply
from kernelopt_mcp.evaluation.harness_case import CaseJob, build_request, interpret
from kernelopt_mcp.evaluation.inputs import materialize
from kernelopt_mcp.evaluation.outcomes import Status
from kernelopt_mcp.evaluation.protocol import FreshSpec, LaunchRequest, TimingRequest, request_json
from kernelopt_mcp.launch import DeviceLimits, resolve
from kernelopt_mcp.workload import Workload, load_workload


def _wire(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """build_request's request as the harness reads it (JSON)."""
    return request_json(build_request(*args, **kwargs))


def _workload(tmp_path: Path, **changes: object) -> Workload:
    spec = {**TINY_SPEC, **changes}
    return load_workload(write_tiny_workload(tmp_path / "wl", spec) / spec["name"])  # type: ignore[operator]


def _job(tmp_path: Path, wl: Workload, case_name: str = "odd_1001", **kw: object) -> CaseJob:
    data = DataSet("validation", 7, materialize(wl, 7, tmp_path / "inputs"))
    case = wl.spec.case(case_name)
    ci = data.inputs[case_name]
    data.expected[case_name] = {"c": ci.arrays["a"].astype(np.float64) + ci.arrays["b"]}
    data.store_expected(wl, tmp_path / "expected")
    launch = resolve(wl.spec.initial.launch.for_case(case_name), case.scalars, DeviceLimits(), case_name)  # type: ignore[union-attr]
    out_dir = tmp_path / "out"
    out_dir.mkdir(exist_ok=True)
    return CaseJob(case, launch, data, out_dir, **kw)  # type: ignore[arg-type]


def _device_stats(expected: np.ndarray, actual: np.ndarray, ref_abs_tol: float, rtol: float, rel_floor: float) -> dict:
    """What the harness's ko_compare reports (computed here the documented way)."""
    e, a = expected.astype(np.float64).ravel(), actual.astype(np.float64).ravel()
    with np.errstate(invalid="ignore"):
        diff = np.abs(a - e)
        ok = diff <= ref_abs_tol + rtol * np.abs(e)
    finite = np.isfinite(diff)
    d = np.where(finite, diff, 0.0)
    bad = np.flatnonzero(~ok)
    return {
        "elements": e.size, "mismatches": int(bad.size), "nonfinite": int((~np.isfinite(a)).sum()),
        "max_abs_error": float(d.max()), "max_rel_error": float((d / np.maximum(np.abs(e), rel_floor)).max()),
        "err_sq": float(np.dot(d, d)), "first_mismatch": int(bad[0]) if bad.size else None,
    }


def _answer(case: str, *, compares: list | None = None, **extra: object) -> HarnessReply:
    ca = {"name": case, "status": "ok", "error": None, "guard_violations": [], "modified_inputs": [], **extra}
    if compares is not None:
        ca["compares"] = compares
    return HarnessReply({"protocol": 2, "status": "ok", "error": None, "cases": [ca]}, exit_code=0)


def test_request_carries_expected_files_tolerances_and_checks(tmp_path: Path) -> None:
    wl = _workload(tmp_path)
    job = _job(tmp_path, wl, repeat=True, device_compare=True)
    timed = DataSet("timed", 8, materialize(wl, 8, tmp_path / "timed", cases={"odd_1001"}))
    timed.expected["odd_1001"] = {"c": np.zeros(1001)}
    timed.store_expected(wl, tmp_path / "expected")
    job.timed, job.timing = timed, TimingRequest(warmup=1, iterations=3)
    support = tmp_path / "support.cubin"
    req = _wire(
        job, wl, device=0, module=tmp_path / "k.cubin", guard_bytes=256, flush_l2=True,
        support=support, input_cache=True,
    )
    assert req["support_module"] == str(support.resolve()) and req["input_cache"] is True
    entry = req["cases"][0]
    assert entry["repeat_validation"] is True and entry["timing"] == {"warmup": 1, "iterations": 3}
    a, _, c, _ = entry["args"]
    assert a["timed_input"].endswith("timed/odd_1001/a.bin") and a["input"] != a["timed_input"]
    ref = job.data.refs["odd_1001"]["c"]
    assert c["dtype"] == "float32" and c["expected"] == str(ref.path)
    assert c["compare"] == {"abs_tol": ref.thresholds.abs_tol, "rtol": 1e-5, "rel_floor": ref.thresholds.rel_floor}
    assert c["timed_expected"] == str(timed.refs["odd_1001"]["c"].path)
    # the expected file is float64, one value per element, equal to the expected array
    stored = np.fromfile(ref.path, dtype="<f8")
    assert np.array_equal(stored, job.data.expected["odd_1001"]["c"])
    assert ref.scale == pytest.approx(math.sqrt(np.mean(stored**2)))


def test_plain_request_has_no_protocol_2_fields(tmp_path: Path) -> None:
    wl = _workload(tmp_path)
    req = _wire(_job(tmp_path, wl), wl, device=0, module=tmp_path / "k.cubin", guard_bytes=256, flush_l2=True)
    assert "support_module" not in req and "input_cache" not in req
    c = req["cases"][0]["args"][2]
    assert set(c) == {"kind", "name", "role", "bytes", "output", "init", "poison_byte"}


def test_device_pass_needs_no_output_file(tmp_path: Path) -> None:
    wl = _workload(tmp_path)
    job = _job(tmp_path, wl, device_compare=True)
    exp = job.data.expected["odd_1001"]["c"]
    ref = job.data.refs["odd_1001"]["c"]
    actual = (exp + 1e-9).astype(np.float32)
    stats = _device_stats(exp, actual, ref.thresholds.abs_tol, 1e-5, ref.thresholds.rel_floor)
    reply = _answer("odd_1001", compares=[{"buffer": "c", "launch": "validation", **stats, "output_written": False}])
    cr, outputs = interpret(job, reply, wl, 10)
    assert cr.status is Status.ok and outputs is None
    cpu = compare("c", exp, actual, wl.spec.tolerance_for("c"))
    dev = cr.outputs[0]
    assert dev.passed and dev.elements == 1001 and dev.mismatches == 0
    assert dev.max_abs_error == pytest.approx(cpu.max_abs_error, rel=1e-12)
    assert dev.rel_l2_error == pytest.approx(cpu.rel_l2_error, rel=1e-9)
    assert dev.scale == pytest.approx(cpu.scale, rel=1e-12)


def test_device_mismatch_reads_the_written_output_for_the_report(tmp_path: Path) -> None:
    wl = _workload(tmp_path)
    job = _job(tmp_path, wl, device_compare=True)
    exp = job.data.expected["odd_1001"]["c"]
    actual = exp.astype(np.float32)
    actual[17] = 123.0
    actual.astype("<f4").tofile(job.out_dir / "c.bin")
    ref = job.data.refs["odd_1001"]["c"]
    stats = _device_stats(exp, actual, ref.thresholds.abs_tol, 1e-5, ref.thresholds.rel_floor)
    reply = _answer("odd_1001", compares=[{"buffer": "c", "launch": "validation", **stats, "output_written": True}])
    cr, _ = interpret(job, reply, wl, 10)
    assert cr.status is Status.mismatch
    assert cr.outputs[0].first_mismatches[0].index == [17] and "1/1001 elements mismatch" in cr.message
    assert not (job.out_dir / "c.bin").exists()  # read once, then removed


def test_old_harness_answer_falls_back_to_comparing_the_file(tmp_path: Path) -> None:
    wl = _workload(tmp_path)
    job = _job(tmp_path, wl)
    exp = job.data.expected["odd_1001"]["c"]
    exp.astype("<f4").tofile(job.out_dir / "c.bin")
    cr, _ = interpret(job, _answer("odd_1001"), wl, 10)
    assert cr.status is Status.ok and cr.outputs[0].passed and cr.outputs[0].elements == 1001


def _repeat_answer(job: CaseJob, *, repeat_bad: int, bytes_differ: int) -> HarnessReply:
    exp = job.data.expected["odd_1001"]["c"]
    ref = job.data.refs["odd_1001"]["c"]
    good = _device_stats(exp, exp.astype(np.float32), ref.thresholds.abs_tol, 1e-5, ref.thresholds.rel_floor)
    repeat = {**good, "mismatches": repeat_bad, "first_mismatch": 3 if repeat_bad else None}
    return _answer(
        "odd_1001",
        compares=[{"buffer": "c", "launch": "validation", **good}, {"buffer": "c", "launch": "repeat", **repeat}],
        determinism=[{"buffer": "c", "bytes_differ": bytes_differ, "first_offset": 12 if bytes_differ else None}],
    )


def test_repeat_outside_tolerance_is_nondeterministic(tmp_path: Path) -> None:
    wl = _workload(tmp_path, deterministic=False)
    job = _job(tmp_path, wl, device_compare=True, repeat=True)
    cr, _ = interpret(job, _repeat_answer(job, repeat_bad=2, bytes_differ=8), wl, 10)
    assert cr.status is Status.nondeterministic and "second launch" in cr.message


def test_bitwise_difference_matters_only_for_deterministic_workloads(tmp_path: Path) -> None:
    loose = _workload(tmp_path / "a", deterministic=False)
    job = _job(tmp_path / "a", loose, device_compare=True, repeat=True)
    cr, _ = interpret(job, _repeat_answer(job, repeat_bad=0, bytes_differ=8), loose, 10)
    assert cr.status is Status.ok and cr.determinism[0]["bytes_differ"] == 8
    strict = _workload(tmp_path / "b", deterministic=True)
    job = _job(tmp_path / "b", strict, device_compare=True, repeat=True)
    cr, _ = interpret(job, _repeat_answer(job, repeat_bad=0, bytes_differ=8), strict, 10)
    assert cr.status is Status.nondeterministic and "8 bytes" in cr.message and "bitwise" in cr.message


def test_timed_check_failure_is_timed_mismatch(tmp_path: Path) -> None:
    wl = _workload(tmp_path)
    job = _job(tmp_path, wl, device_compare=True, timing=TimingRequest(warmup=1, iterations=3))
    timed = DataSet("timed", 8, materialize(wl, 8, tmp_path / "timed", cases={"odd_1001"}))
    tci = timed.inputs["odd_1001"]
    timed.expected["odd_1001"] = {"c": tci.arrays["a"].astype(np.float64) + tci.arrays["b"]}
    timed.store_expected(wl, tmp_path / "expected")
    job.timed = timed
    exp = job.data.expected["odd_1001"]["c"]
    ref, tref = job.data.refs["odd_1001"]["c"], timed.refs["odd_1001"]["c"]
    stale = exp.astype(np.float32)  # the validation answer, replayed on the new inputs
    stale.astype("<f4").tofile(job.out_dir / "c.bin")
    good = _device_stats(exp, stale, ref.thresholds.abs_tol, 1e-5, ref.thresholds.rel_floor)
    bad = _device_stats(timed.expected["odd_1001"]["c"], stale, tref.thresholds.abs_tol, 1e-5,
                        tref.thresholds.rel_floor)
    timing = {"warmup": 1, "iterations": 3, "flush_l2": True, "times_ms": [0.01, 0.011, 0.012], "check_launch_ms": 0.01}
    reply = _answer(
        "odd_1001", timing=timing,
        compares=[{"buffer": "c", "launch": "validation", **good},
                  {"buffer": "c", "launch": "timed", **bad, "output_written": True}],
    )
    cr, _ = interpret(job, reply, wl, 10)
    assert cr.status is Status.timed_mismatch
    assert "not seen before" in cr.message and "elements mismatch" in cr.message
    assert cr.timing is not None and cr.timing.iterations == 3
    assert cr.timing.check_launch_ms == 0.01
    assert not cr.timed_check[0].passed


def test_request_carries_fresh_specs_checked_launches_and_the_reference(tmp_path: Path) -> None:
    wl = _workload(tmp_path)
    job = _job(tmp_path, wl, timing=TimingRequest(warmup=10, iterations=100))
    job.fresh = {"a": FreshSpec(kind="uniform", low=-1.0, high=1.0), "b": FreshSpec(kind="normal", mean=0.0, std=1.0)}
    job.draw_seed, job.checked, job.confirm = 2**64 - 5, [3, 40, 97], True
    job.check_launch = LaunchRequest(grid=[8, 1, 1], block=[128, 1, 1], shared_bytes=0)
    ref = tmp_path / "reference.cubin"
    req = _wire(job, wl, device=0, module=tmp_path / "k.cubin", guard_bytes=256, flush_l2=True,
                        support=tmp_path / "s.cubin", check_module=ref)
    entry = req["cases"][0]
    a, b, c, _ = entry["args"]
    assert a["fresh"] == {"kind": "uniform", "low": -1.0, "high": 1.0} and a["dtype"] == "float32"
    assert b["fresh"] == {"kind": "normal", "mean": 0.0, "std": 1.0}
    assert entry["fresh_seed"] == 2**64 - 5 and entry["fresh_timed"] is True
    assert entry["checked_launches"] == [3, 40, 97] and entry["check_launch"] == job.check_launch.model_dump()
    assert entry["confirm_launch"] is True
    assert req["check_module"] == str(ref.resolve()) and req["check_entry"] == "vector_add"
    # the reference's outputs are compared with the validation's tolerances, even without device compare
    assert c["dtype"] == "float32" and set(c["compare"]) == {"abs_tol", "rtol", "rel_floor"}
    assert "expected" not in c
    # a validation-only request draws nothing and checks nothing
    plain = _wire(_job(tmp_path, wl), wl, device=0, module=tmp_path / "k.cubin", guard_bytes=256,
                          flush_l2=True, check_module=ref)
    assert "fresh" not in plain["cases"][0]["args"][0] and "check_module" not in plain
    assert not {"fresh_seed", "checked_launches", "confirm_launch"} & set(plain["cases"][0])


def _timing_answer(times: list[float], **timing: object) -> dict:
    return {"warmup": 1, "iterations": len(times), "flush_l2": True, "times_ms": times, "mode": "events", **timing}


def _check(sample: int | None, mismatches: int = 0, **kw: object) -> dict:
    return {"launch": "measured" if sample is not None else "confirm", "sample": sample, "draw": 7, "time_ms": 1.0,
            "buffer": "c", "elements": 1001, "mismatches": mismatches, "nonfinite": 0, "max_abs_error": 0.5
            if mismatches else 0.0, "max_rel_error": 0.1, "first_mismatch": 12 if mismatches else None, **kw}


def test_a_wrong_checked_launch_is_timed_mismatch_naming_the_launch(tmp_path: Path) -> None:
    wl = _workload(tmp_path)
    job = _job(tmp_path, wl, timing=TimingRequest(warmup=1, iterations=8))
    ci = job.data.inputs["odd_1001"]
    (job.out_dir / "c.bin").write_bytes((ci.arrays["a"] + ci.arrays["b"]).astype("<f4").tobytes())
    reply = _answer("odd_1001", timing=_timing_answer([1.0] * 8, fresh_buffers=["a", "b"], confirm_launch_ms=1.0),
                    timed_checks=[_check(2), _check(6, mismatches=1001), _check(None)])
    cr, _ = interpret(job, reply, wl, 10.0)
    assert cr.status is Status.timed_mismatch
    assert "timed launch 6 of 8 measured, on fresh inputs drawn on the device" in cr.message
    assert ("1001 of 1001 elements differ from the CUDA reference" in cr.message
            and "first at flat index 12" in cr.message)
    assert cr.checked_launches == 3 and cr.fresh_inputs == ["a", "b"] and len(cr.reference_checks) == 3
    # the same answer with every check passing is ok and says how many launches were checked
    (job.out_dir / "c.bin").write_bytes((ci.arrays["a"] + ci.arrays["b"]).astype("<f4").tobytes())
    good = _answer("odd_1001", timing=_timing_answer([1.0] * 8), timed_checks=[_check(2), _check(6), _check(None)])
    cr, _ = interpret(job, good, wl, 10.0)
    assert cr.status is Status.ok and cr.checked_launches == 3


def test_two_slow_launches_on_unseen_inputs_are_inconsistent_timing(tmp_path: Path) -> None:
    wl = _workload(tmp_path)
    ci_sum = None
    for check_ms, confirm_ms, expected in [(28.3, 27.9, Status.inconsistent_timing), (28.3, 18.2, Status.ok),
                                           (18.5, 18.4, Status.ok)]:
        job = _job(tmp_path, wl, timing=TimingRequest(warmup=1, iterations=100), consistency=True)
        ci = job.data.inputs["odd_1001"]
        ci_sum = (ci.arrays["a"] + ci.arrays["b"]).astype("<f4").tobytes()
        (job.out_dir / "c.bin").write_bytes(ci_sum)
        times = [18.1 + 0.01 * (i % 3) for i in range(100)]
        reply = _answer("odd_1001",
                        timing=_timing_answer(times, check_launch_ms=check_ms, confirm_launch_ms=confirm_ms))
        cr, _ = interpret(job, reply, wl, 10.0)
        assert cr.status is expected, (check_ms, confirm_ms, cr.message)
        if expected is Status.inconsistent_timing:
            assert "28.3 ms" in cr.message and "27.9 ms" in cr.message and "median of 18.1" in cr.message
    # without the consistency check asked for, the same times pass
    job = _job(tmp_path, wl, timing=TimingRequest(warmup=1, iterations=100))
    (job.out_dir / "c.bin").write_bytes(ci_sum or b"")
    reply = _answer("odd_1001", timing=_timing_answer([18.1] * 100, check_launch_ms=28.3, confirm_launch_ms=27.9))
    assert interpret(job, reply, wl, 10.0)[0].status is Status.ok


def test_checked_launch_files_go_through_the_oracle_without_a_cuda_reference(tmp_path: Path) -> None:
    """checked_dump: the harness writes a checked launch's redrawn inputs and its outputs; the
    NumPy oracle decides. A kernel that replayed an old result is timed_mismatch naming the launch."""
    wl = _workload(tmp_path)
    job = _job(tmp_path, wl, timing=TimingRequest(warmup=1, iterations=8))
    job.checked, job.dump_dir = [6], tmp_path / "dumps"
    req = _wire(job, wl, device=0, module=tmp_path / "k.cubin", guard_bytes=256, flush_l2=True)
    entry = req["cases"][0]
    assert entry["checked_launches"] == [6] and entry["checked_dump"] == str(job.dump_dir.resolve())
    assert "check_launch" not in entry and "check_module" not in req and job.dump_dir.is_dir()
    ci = job.data.inputs["odd_1001"]
    rng = np.random.default_rng(5)
    drawn_a = rng.uniform(-1, 1, 1001).astype(np.float32)
    for replayed in (False, True):
        (job.out_dir / "c.bin").write_bytes((ci.arrays["a"] + ci.arrays["b"]).astype("<f4").tobytes())
        files = {"inputs": {"a": str(job.dump_dir / "s6_in_a.bin")},
                 "outputs": {"c": str(job.dump_dir / "s6_out_c.bin")}}
        Path(files["inputs"]["a"]).write_bytes(drawn_a.astype("<f4").tobytes())
        out = (ci.arrays["a"] if replayed else drawn_a) + ci.arrays["b"]  # b was not redrawn
        Path(files["outputs"]["c"]).write_bytes(out.astype("<f4").tobytes())
        reply = _answer("odd_1001", timing=_timing_answer([1.0] * 8),
                        timed_dumps=[{"sample": 6, "draw": 7, "time_ms": 1.0, "files": files}])
        cr, _ = interpret(job, reply, wl, 10.0)
        assert cr.checked_launches == 1 and cr.reference_checks[0]["checked_by"] == "NumPy oracle"
        assert not any(job.dump_dir.iterdir()), "the files are removed once read"
        if replayed:
            assert cr.status is Status.timed_mismatch
            assert "timed launch 6 of 8 measured, on fresh inputs drawn on the device" in cr.message
            assert "against the NumPy oracle" in cr.message
        else:
            assert cr.status is Status.ok, cr.message


@pytest.mark.parametrize("native", [False, True])
def test_a_reference_whose_outputs_are_kept_asks_for_them_even_when_they_match(tmp_path: Path, native: bool) -> None:
    """The CUDA reference's outputs define the expected values: with an expected file to compare
    with (the oracle's, float64 or the reference's own dtype) the harness writes its outputs only
    when asked, so a kept request must ask (write_output) whatever the expected file's dtype."""
    wl = _workload(tmp_path)
    job = _job(tmp_path, wl, device_compare=True, keep_outputs=True)
    job.data.refs.clear()
    if native:  # the reference's outputs, as it wrote them
        job.data.expected["odd_1001"]["c"] = job.data.expected["odd_1001"]["c"].astype(np.float32)
    job.data.store_expected(wl, tmp_path / "expected", native=frozenset({"odd_1001"} if native else ()))
    c = _wire(job, wl, device=0, module=tmp_path / "k.cubin", guard_bytes=256, flush_l2=True)["cases"][0]["args"][2]
    assert c["write_output"] is True and c["expected"] == str(job.data.refs["odd_1001"]["c"].path)
    assert c.get("expected_dtype") == ("float32" if native else None)
    assert job.data.refs["odd_1001"]["c"].path.stat().st_size == 1001 * (4 if native else 8)


def test_checked_expected_entries_go_with_the_compare_thresholds_and_the_outputs_dtype(tmp_path: Path) -> None:
    """PyTorch as the reference: the checked launches carry their expected files (in the output's
    dtype), and the output buffer the tolerances of the validation's expected values."""
    from kernelopt_mcp.evaluation.protocol import CheckedExpected

    wl = _workload(tmp_path)
    entries = [CheckedExpected(sample=2, draw=3, buffer="c", expected="/x/s2.float32"),
               CheckedExpected(launch="confirm", draw=5, buffer="c", expected="/x/confirm.float32")]
    job = _job(tmp_path, wl, timing=TimingRequest(warmup=1, iterations=4),
               fresh={"a": FreshSpec(kind="uniform", low=0, high=1)}, draw_seed=11, checked=[2],
               checked_expected=entries, confirm=True)
    entry = _wire(job, wl, device=0, module=tmp_path / "k.cubin", guard_bytes=256, flush_l2=True,
                  support=tmp_path / "s")["cases"][0]
    assert entry["checked_launches"] == [2] and entry["fresh_seed"] == 11 and entry["confirm_launch"] is True
    assert entry["checked_expected"] == [
        {"sample": 2, "draw": 3, "buffer": "c", "expected": "/x/s2.float32"},
        {"launch": "confirm", "draw": 5, "buffer": "c", "expected": "/x/confirm.float32"},
    ]
    assert "check_launch" not in entry  # nothing for the harness to run: the values are given
    c = entry["args"][2]
    ref = job.data.refs["odd_1001"]["c"]
    assert c["compare"] == {"abs_tol": ref.thresholds.abs_tol, "rtol": 1e-5, "rel_floor": ref.thresholds.rel_floor}
    assert c["expected_dtype"] == "float32" and c["dtype"] == "float32"
