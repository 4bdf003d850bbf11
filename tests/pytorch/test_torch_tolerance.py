"""How an imported PyTorch problem is judged, without torch: on workloads shaped like the ones
``kernelopt import-torch`` writes (its own :func:`judged_as_imported` and :func:`choose_tolerance`
applied to the pretend GPU's c = a + b), evaluated by the pretend GPU of tests/fakegpu.py.

- tolerances: strict by dtype, KernelBench's 1e-2 on request, and every result says which;
- float outputs may differ between two launches within the tolerance (a float atomicAdd
  reduction is correct), integer outputs never, and a difference beyond the tolerance fails;
- the roofline floor is built from the bytes only: a GEMM + sum shortcut that beats torch's FLOP
  count is not impossible, a kernel faster than its bytes allow still is.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakegpu import ADD_LAUNCH, TINY_SPEC, kernel, write_harness, write_tiny_workload

from kernelopt_mcp import Candidate, HarnessProcess, LaunchSpec, Session, Settings
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.dtypes import DType
from kernelopt_mcp.evaluation.compare import compare
from kernelopt_mcp.evaluation.device import device_info
from kernelopt_mcp.evaluation.evaluate import evaluate
from kernelopt_mcp.evaluation.harness_case import _check_repeat
from kernelopt_mcp.evaluation.outcomes import CaseResult, EvaluationResult, Status
from kernelopt_mcp.evaluation.protocol import DeterminismEntry
from kernelopt_mcp.torch_import import KERNELBENCH_TOLERANCE, choose_tolerance, judged_as_imported
from kernelopt_mcp.workload import Tolerance, Workload, parse_spec

#: torch's FlopCounterMode on a "GEMM then sum" module counts the product it never needs: at
#: n = 4096 this puts a FLOP floor of ~64 ms over a kernel that takes 0.05 ms
GEMM_FLOPS = "1000*n*n*n"


def imported_style(tolerance: str = "strict", *, name: str = "imported_add", flops: str = GEMM_FLOPS,
                   as_imported: bool = True) -> dict[str, Any]:
    """TINY_SPEC as the importer would judge it (``as_imported`` False: a bundled workload's rules)."""
    spec: dict[str, Any] = json.loads(json.dumps(TINY_SPEC))
    spec["name"] = name
    spec["tolerance"] = {"c": choose_tolerance(DType.float32, 0.0, tolerance, [])}
    spec["cost"] = {"bytes": "12 * n", "flops": flops}
    spec["reference"] = {"cuda": None}  # the stored outputs (here the NumPy oracle) are the reference
    return judged_as_imported(spec) if as_imported else spec


def run(tmp_path: Path, spec: dict[str, Any], *modes: str) -> list[EvaluationResult]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    harness = write_harness(tmp_path, "fake")
    wl = find_workload(write_tiny_workload(tmp_path / "extra", spec) / spec["name"], Settings())
    launch = LaunchSpec.model_validate(ADD_LAUNCH)
    with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=tmp_path / "w") as ev:
        return [evaluate(ev, Candidate(kernel(m), launch, [], m or "honest")) for m in modes]


@pytest.fixture
def repeat_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pretend harness offers the determinism re-run (the evaluator asks for it then)."""
    monkeypatch.setenv("KO_FAKE_FEATURES", "determinism")


# --- tolerance -----------------------------------------------------------------------------


def test_tolerance_is_strict_by_dtype_kernelbench_on_request_and_widened_where_needed() -> None:
    notes: list[str] = []
    assert choose_tolerance(DType.float32, 0.0, "strict", notes) == {"rtol": 1e-4, "atol": 1e-4, "source": "dtype"}
    assert choose_tolerance(DType.float16, 0.0, "strict", notes) == {"rtol": 1e-2, "atol": 1e-2, "source": "dtype"}
    assert choose_tolerance(DType.float32, 0.0, "kernelbench", notes) == {
        "rtol": 1e-2, "atol": 1e-2, "source": "kernelbench", "absolute": True}
    assert choose_tolerance(DType.bfloat16, 0.0, "kernelbench", notes)["rtol"] == 1e-2
    assert not notes
    # the module's own float32 result is 3e-4 off its float64 one: 10x that
    assert choose_tolerance(DType.float32, 3e-4, "strict", notes) == {"rtol": 3e-3, "atol": 3e-3, "source": "widened"}
    assert choose_tolerance(DType.float32, 3e-4, "kernelbench", notes)["source"] == "kernelbench"
    assert (choose_tolerance(DType.float32, 3e-3, "kernelbench", notes)
            == {"rtol": 0.03, "atol": 0.03, "source": "widened"})
    assert len(notes) == 2 and "widened to 0.003" in notes[0] and "kernelbench one is 0.01" in notes[1]


def test_the_session_widens_by_the_largest_own_error_at_the_real_sizes_and_says_so() -> None:
    """What the reference child measured per case (``own_error``, or why not) becomes the session's
    tolerance (10x the largest, the import's rule) and one line of the result; a hand-written
    tolerance, or one that is enough, stays."""
    from kernelopt_mcp.evaluation.evaluate import _real_size_tolerance

    strict = Tolerance(rtol=1e-4, atol=1e-4, source="dtype")
    wider, said = _real_size_tolerance("out", strict, [
        ("small", {"own_error": 1e-6}), ("perf", {"own_error": 3.3e-5}),
        ("big", {"own_error_skipped": "the float32 forward took 0.7 s"}),
    ])
    assert wider == Tolerance(rtol=3.3e-4, atol=3.3e-4, source="widened")
    assert "differs from its float64 result by up to 3.3e-05 of the output's scale (case 'perf')" in said
    assert "out's tolerance widened to 0.00033 (was 0.0001, dtype)" in said
    assert "its own error not measured on case 'big' (the float32 forward took 0.7 s)" in said
    enough, said = _real_size_tolerance("out", strict, [("perf", {"own_error": 5e-6})])
    assert enough is None and "up to 5e-06" in said and "widened" not in said
    hand = Tolerance(rtol=1e-5, atol=1e-5, source="workload")
    assert _real_size_tolerance("out", hand, [("perf", {"own_error": 1e-3})])[0] is None
    assert _real_size_tolerance("out", strict, []) == (None, "")


def test_every_result_records_the_tolerance_it_was_judged_by(tmp_path: Path) -> None:
    from kernelopt_mcp.results import CheckedEvaluation, evaluation_output

    [kb] = run(tmp_path / "kb", imported_style("kernelbench"), "")
    assert kb.ok and kb.tolerances["c"].model_dump() == {"rtol": 1e-2, "atol": 1e-2, "absolute": True,
                                                         "source": "kernelbench"}
    assert all(o.tolerance_from == "kernelbench" and o.rtol == 1e-2 for c in kb.cases for o in c.outputs)
    text = evaluation_output(CheckedEvaluation(result=kb), "benchmark").text()
    assert "judged within c: rtol 0.01, atol 0.01 (kernelbench)" in text
    # a bundled-style workload without a tolerance: its dtype's default, and it says so
    [plain] = run(tmp_path / "plain", TINY_SPEC, "")
    assert plain.tolerances["c"].model_dump() == {"rtol": 1e-5, "atol": 1e-5, "absolute": False, "source": "dtype"}
    assert plain.cases[0].outputs[0].tolerance_from == "dtype"


def test_a_tolerance_the_author_set_is_the_workloads() -> None:
    spec = parse_spec({**TINY_SPEC, "tolerance": {"c": {"rtol": 1e-3, "atol": 1e-3}}}, "x")
    assert spec.tolerance_for("c").source == "workload" and spec.tolerance_for("c").rtol == 1e-3


# --- determinism ---------------------------------------------------------------------------


@pytest.mark.usefixtures("repeat_launch")
def test_a_float_atomic_reduction_passes_on_an_imported_problem(tmp_path: Path) -> None:
    """The re-run's bytes differ within the tolerance: legal on an imported problem (its float
    outputs are tolerance-deterministic), still a failure where the workload demands bitwise."""
    [atomic] = run(tmp_path / "imported", imported_style(), "JITTER")
    assert atomic.ok, atomic.message
    assert "repeat launch (tolerance)" in atomic.checks
    assert atomic.cases[0].determinism and atomic.cases[0].determinism[0]["bytes_differ"] == 8
    [strict] = run(tmp_path / "bundled", imported_style(as_imported=False), "JITTER")
    assert strict.status is Status.nondeterministic and "bitwise reproducible" in strict.message


@pytest.mark.usefixtures("repeat_launch")
def test_a_race_beyond_the_tolerance_still_fails_on_an_imported_problem(tmp_path: Path) -> None:
    [race] = run(tmp_path, imported_style("kernelbench"), "RACE")
    assert race.status is Status.nondeterministic and "outside the tolerance" in race.message


def _int_workload(deterministic: bool) -> Workload:
    spec = json.loads(json.dumps(TINY_SPEC))
    spec["signature"]["params"].append({"kind": "buffer", "name": "hist", "dtype": "int32", "role": "out",
                                        "shape": [16]})
    return Workload(spec=parse_spec({**spec, "deterministic": deterministic}, "x"))


def test_an_integer_output_that_differs_stays_nondeterministic() -> None:
    """Integer sums do not depend on order: two launches that disagree raced, tolerance or not."""
    wl = _int_workload(deterministic=False)
    assert wl.spec.bitwise_outputs() == ["hist"]
    float_only = CaseResult(name="one", kind="correctness", status=Status.ok)
    _check_repeat(float_only, wl, {}, [DeterminismEntry(buffer="c", bytes_differ=8, first_offset=0)])
    assert float_only.status is Status.ok
    both = CaseResult(name="one", kind="correctness", status=Status.ok)
    _check_repeat(both, wl, {}, [DeterminismEntry(buffer="c", bytes_differ=8, first_offset=0),
                                 DeterminismEntry(buffer="hist", bytes_differ=4, first_offset=12)])
    assert both.status is Status.nondeterministic
    assert both.message.startswith("hist:") and "an integer output must be bitwise reproducible" in both.message
    assert _int_workload(deterministic=True).spec.bitwise_outputs() == ["c", "hist"]


# --- roofline floor ------------------------------------------------------------------------


def test_a_gemm_sum_shortcut_is_not_impossible_on_an_imported_problem(tmp_path: Path) -> None:
    fast, skipped = run(tmp_path / "imported", imported_style(), "FAST", "MS:n_4096=0.000001;")
    assert fast.ok, fast.message
    perf = next(c for c in fast.cases if c.kind == "performance")
    assert perf.roofline is not None and perf.roofline.bound == "memory" and not perf.roofline.impossible
    assert perf.flops_per_s == pytest.approx(1000 * 4096**3 / (perf.timing.median_ms * 1e-3))  # still reported
    # faster than reading a and b and writing c once allows: skipped work
    assert skipped.status is Status.impossible_time and "memory roofline floor" in skipped.message
    # the same FLOP count bounding the floor (a bundled workload's rule) rejects the shortcut
    [bounded] = run(tmp_path / "bundled", imported_style(as_imported=False), "FAST")
    assert bounded.status is Status.impossible_time and "compute roofline floor" in bounded.message


# --- the two ways in -----------------------------------------------------------------------


def test_import_torch_takes_the_tolerance_option(capsys: pytest.CaptureFixture[str]) -> None:
    from kernelopt_mcp.cli import main

    with pytest.raises(SystemExit):
        main(["import-torch", "p.py", "--tolerance", "loose"])
    assert "invalid choice: 'loose'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["import-torch", "--help"])
    assert "kernelbench" in capsys.readouterr().out


def test_create_workload_torch_problem_refuses_an_unknown_tolerance(tmp_path: Path) -> None:
    from test_torch_workspace import FakeWorkspace

    from kernelopt_mcp.torch_workspace import create_torch_workload
    from kernelopt_mcp.workspace import RequestError

    with pytest.raises(RequestError, match=r"spec.tolerance: .*'strict', 'kernelbench'"):
        create_torch_workload(FakeWorkspace(tmp_path), "p", "class Model: pass\n", allowed=True, tolerance="loose")


ARGV_PROBE = (
    "import sys, json\nimport torch\n\nclass Model:\n    pass\n\ndef get_inputs():\n    return []\n\n"
    "raise RuntimeError('ARGV' + json.dumps(sys.argv))\n"
)


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_create_workload_passes_the_tolerance_to_the_importer(tmp_path: Path) -> None:
    from test_torch_child import needs_landlock, stand_in_torch
    from test_torch_workspace import FakeWorkspace

    from kernelopt_mcp.torch_workspace import create_torch_workload
    from kernelopt_mcp.workspace import RequestError

    if needs_landlock.args[0]:
        pytest.skip("this kernel has no Landlock")
    site = stand_in_torch(tmp_path / "site")
    with pytest.raises(RequestError, match="ARGV") as caught:
        create_torch_workload(FakeWorkspace(tmp_path), "p", ARGV_PROBE, allowed=True, python_path=[str(site)],
                              timeout_s=120, tolerance="kernelbench")
    # the import wraps it in its own words
    argv, _ = json.JSONDecoder().raw_decode(str(caught.value).split("ARGV", 1)[1])
    assert argv[argv.index("--tolerance") + 1] == "kernelbench"


def test_kernelbench_atol_is_absolute_like_torch_allclose() -> None:
    """KernelBench judges by torch.allclose: |a - e| <= atol + rtol |e|, atol absolute. An error of
    0.5 on an element whose expected value is 0 passes an RMS-relative atol of 1e-2 on an output of
    scale ~100, and fails KernelBench's rule."""
    expected = np.array([0.0, 100.0, -100.0, 100.0], dtype=np.float32)
    actual = expected.copy()
    actual[0] = 0.5
    relative = Tolerance(rtol=1e-2, atol=1e-2, source="workload")
    assert compare("c", expected, actual, relative).passed
    kernelbench = compare("c", expected, actual, KERNELBENCH_TOLERANCE)
    assert not kernelbench.passed and kernelbench.mismatches == 1
    actual[0] = 0.005  # within atol = 1e-2
    assert compare("c", expected, actual, KERNELBENCH_TOLERANCE).passed


def test_a_session_judges_by_its_records_tolerances_and_keeps_the_workload_it_was_given(tmp_path: Path) -> None:
    """Session.adopt: every later check reads the record's tolerances through ``session.workload``,
    while ``session.loaded`` stays the workload as given (what the server compares to reuse it)."""
    from kernelopt_mcp.evaluation.dataset import DataSet
    from kernelopt_mcp.evaluation.prepared import Prepared

    wl = find_workload(write_tiny_workload(tmp_path / "extra") / TINY_SPEC["name"], Settings())
    harness = write_harness(tmp_path, "fake")
    wider = Tolerance(rtol=0.01, atol=0.01, source="widened")
    with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=tmp_path / "w") as s:
        s.adopt(Prepared(DataSet("validation", 1, {}), tolerances={"c": wider}))
        assert s.workload.spec.tolerance_for("c") == wider and s.workload != wl
        assert s.loaded is wl and wl.spec.tolerance_for("c").source == "dtype"
