"""Issue 14, item 2: inside `kernelopt optimize` the hidden-seed check must check something.

`freeze` writes the run's inputs as data files, and a data file ignores the seed, so the hidden
("timed") data set used to be the very bytes the kernel was timed on. A frozen file now records
the generator it was drawn from (`drawn_from`): hidden data sets (`materialize(..., redraw=True)`)
draw again from it with their own seed, while validation keeps reading the recorded bytes. A
user's data file has no generator: the hidden seed cannot change it, and the checks say so.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from fakegpu import TINY_SPEC, write_harness, write_tiny_workload

from kernelopt_mcp.evaluation.device import device_info
from kernelopt_mcp.evaluation.evaluate import prepare
from kernelopt_mcp.evaluation.inputs import hidden_seed_checks, materialize, seed_independent_inputs
from kernelopt_mcp.evaluation.session import Session
from kernelopt_mcp.freeze import RequestsOnly
from kernelopt_mcp.workload import DataFile, Workload, load_workload


@pytest.fixture
def frozen(tmp_path: Path) -> tuple[Workload, int]:
    """The frozen workload of a run of the tiny c = a + b workload (what the server checks), frozen
    as the server's freeze_workload tool freezes it."""
    from kernelopt_mcp.app import freeze_workload
    from kernelopt_mcp.config import Settings

    harness = write_harness(tmp_path, "fake")
    src = write_tiny_workload(tmp_path / "wl") / "tiny_add"
    spec = json.loads((src / "workload.json").read_text())
    fw = freeze_workload(
        Settings(), spec, (src / "reference.cu").read_text(), (src / "initial.cu").read_text(), tmp_path / "run",
        oracle=src / "reference.py", data_path=Path, seed=1234, device=device_info(harness, 0), arch="sm_90",
    )
    return load_workload(tmp_path / "run" / "workload" / "tiny_add"), fw.seed


def _arrays(wl: Workload, seed: int, where: Path, **kw: bool) -> dict[tuple[str, str], np.ndarray]:
    out = materialize(wl, seed, where, **kw)
    return {(c, b): a for c, ci in out.items() for b, a in ci.arrays.items()}


def test_hidden_sets_of_a_frozen_run_redraw_its_inputs(frozen: tuple[Workload, int], tmp_path: Path) -> None:
    wl, seed = frozen
    for case in wl.spec.cases:
        for name, gen in case.inputs.items():
            assert isinstance(gen, DataFile) and gen.drawn_from is not None, (case.name, name)
    assert {g.drawn_from.generator for c in wl.spec.cases for g in c.inputs.values()} == {"uniform", "normal"}  # type: ignore[union-attr]

    # the repro: two hidden seeds used to give the same arrays (the frozen files)
    one = _arrays(wl, 11, tmp_path / "h1", redraw=True)
    two = _arrays(wl, 22, tmp_path / "h2", redraw=True)
    for key in one:
        assert one[key].shape == two[key].shape
        assert not np.array_equal(one[key], two[key]), key

    # validation reads the recorded bytes, whatever the seed; a redraw with the run's own seed gives them back
    recorded = _arrays(wl, 11, tmp_path / "v1")
    assert all(np.array_equal(recorded[k], v) for k, v in _arrays(wl, 22, tmp_path / "v2").items())
    assert all(np.array_equal(recorded[k], v) for k, v in _arrays(wl, seed, tmp_path / "h0", redraw=True).items())
    assert any(not np.array_equal(recorded[k], one[k]) for k in recorded)

    perf = {c.name for c in wl.spec.performance_cases}
    assert seed_independent_inputs(wl) == {}
    assert hidden_seed_checks(wl, perf) == ["timed outputs on hidden-seed inputs"]


def test_the_evaluators_hidden_set_differs_from_the_frozen_inputs(frozen: tuple[Workload, int], tmp_path: Path) -> None:
    wl, _ = frozen
    harness = write_harness(tmp_path, "fake")
    # no CUDA reference: nothing runs on the (fake) GPU; the oracle gives both data sets' expected outputs
    ev = Session(dataclasses.replace(wl, reference_cu=None), RequestsOnly(0), device_info(harness, 0),
                 workdir=tmp_path / "ev", seed=5, arch="sm_90", features=frozenset({"timed_inputs"}))
    prepare(ev, time_reference=False)
    assert ev.timed is not None and ev.timed.seed != ev.seed
    for case, ci in ev.timed.inputs.items():
        for name, array in ci.arrays.items():
            assert not np.array_equal(array, ev.inputs[case].arrays[name]), (case, name)
        np.testing.assert_allclose(ev.timed.expected[case]["c"], ci.arrays["a"].astype(np.float64) + ci.arrays["b"])
    assert "timed outputs on hidden-seed inputs" in ev.checks
    assert not any(c.startswith("hidden-seed check: not possible") for c in ev.checks)


def _user_files(tmp_path: Path, hidden: bool) -> Workload:
    """The tiny workload with a user's data files for `a` (and optionally a second, hidden set)."""
    spec = json.loads(json.dumps(TINY_SPEC))
    spec["name"] = "tiny_files"
    parent = tmp_path / ("hidden" if hidden else "plain")
    for case in spec["cases"]:
        case["inputs"] = {"a": {"generator": "file", "path": f"a_{case['name']}.bin"}}
        if hidden:
            case["inputs"]["a"]["hidden_path"] = f"a2_{case['name']}.bin"
    write_tiny_workload(parent, spec)
    rng = np.random.default_rng(0)
    for case in spec["cases"]:
        n = case["scalars"]["n"]
        rng.standard_normal(n).astype("<f4").tofile(parent / "tiny_files" / f"a_{case['name']}.bin")
        rng.standard_normal(n).astype("<f4").tofile(parent / "tiny_files" / f"a2_{case['name']}.bin")
    return load_workload(parent / "tiny_files")


def test_a_users_data_files_stay_and_the_checks_say_so(tmp_path: Path) -> None:
    wl = _user_files(tmp_path, hidden=False)
    one = _arrays(wl, 11, tmp_path / "h1", redraw=True)
    two = _arrays(wl, 22, tmp_path / "h2", redraw=True)
    for (case, name), array in one.items():
        assert np.array_equal(array, two[case, name]) == (name == "a"), (case, name)  # b is drawn: it changes
    perf = {c.name for c in wl.spec.performance_cases}
    assert seed_independent_inputs(wl, perf) == {"n_4096.a": "data-file"}
    assert hidden_seed_checks(wl, perf) == [
        "timed outputs on hidden-seed inputs",
        "hidden-seed check: not possible for data-file inputs a (the same values on every seed)",
    ]
    # with every input a data file there is nothing hidden to check: the check is not listed as run
    only_files = dataclasses.replace(wl, spec=wl.spec.model_copy(update={"cases": [
        c.model_copy(update={"inputs": {**c.inputs, "b": c.inputs["a"]}}) for c in wl.spec.cases]}))
    assert hidden_seed_checks(only_files, perf) == [
        "hidden-seed check: not possible for data-file inputs a, b (the same values on every seed)"]


def test_a_second_supplied_data_set_is_the_hidden_one(tmp_path: Path) -> None:
    wl = _user_files(tmp_path, hidden=True)
    validation = _arrays(wl, 11, tmp_path / "v")
    hidden = _arrays(wl, 11, tmp_path / "h", redraw=True)
    for case in wl.spec.cases:
        second = np.fromfile(wl.root / f"a2_{case.name}.bin", dtype="<f4")  # type: ignore[operator]
        assert np.array_equal(hidden[case.name, "a"], second)
        assert not np.array_equal(validation[case.name, "a"], second)
    assert hidden_seed_checks(wl, {"n_4096"}) == ["timed outputs on hidden-seed inputs"]
    # the manifest of the validation set keeps the second set, so a run's input_cases.json does too
    manifest = json.loads((tmp_path / "v" / "input_cases.json").read_text())
    assert manifest["cases"][0]["inputs"]["a"]["hidden_path"] == str(wl.root / "a2_one.bin")  # type: ignore[operator]
