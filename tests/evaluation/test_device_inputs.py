"""Issue 17: performance cases' inputs drawn on the device (``input_draw``), not on the host.

The harness side (the fill, the cache, the checks on drawn inputs) is tested in native_harness/
tests/e2e_draws.cpp against the fake driver and in tests/gpu/test_device_inputs_gpu.py on a GPU;
here: which buffers are left to the device, what the requests say, and what a result records,
against the fake GPU (tests/fakegpu.py), which draws a buffer as a pure function of its seed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakegpu import ADD_LAUNCH, TINY_SPEC, kernel, write_harness, write_tiny_workload

from kernelopt_mcp import Candidate, HarnessProcess, LaunchSpec, Session, Settings
from kernelopt_mcp.app import evaluate_options
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.dtypes import DType
from kernelopt_mcp.evaluation.candidate import EvaluateOptions
from kernelopt_mcp.evaluation.device import device_info
from kernelopt_mcp.evaluation.evaluate import case_request, evaluate, prepare
from kernelopt_mcp.evaluation.inputs import device_draw, materialize
from kernelopt_mcp.evaluation.protocol import request_json
from kernelopt_mcp.workload import Arange, BufferParam, DataFile, InputCasesFile, Uniform, Workload, load_workload

FEATURES = "blocking,device_compare,timed_inputs,fresh_inputs,timed_check,confirm_launch,input_draw,expected_dtype"


def _tiny(tmp_path: Path, **changes: object) -> Workload:
    spec = {**TINY_SPEC, **changes}
    return load_workload(write_tiny_workload(tmp_path / "wl", spec) / spec["name"])  # type: ignore[operator]


def _requests(workdir: Path) -> list[tuple[str, dict]]:
    return [(p.parent.name, json.loads(p.read_text())) for p in sorted((workdir / "requests").rglob("*.json"))]


def _args(request: dict) -> dict[str, dict]:
    return {a["name"]: a for a in request["cases"][0]["args"] if a["kind"] == "buffer"}


def test_materialize_leaves_the_drawable_buffers_of_the_named_cases_to_the_device(tmp_path: Path) -> None:
    cases = [dict(c) for c in TINY_SPEC["cases"]]
    cases[2] = {**cases[2], "inputs": {"b": {"generator": "arange", "start": 0, "step": 1}}}
    wl = _tiny(tmp_path, cases=cases)
    data = materialize(wl, 7, tmp_path / "in", on_device={"n_4096"})
    perf = data["n_4096"]
    assert set(perf.draws) == {"a"} and perf.draws["a"].kind == "uniform"
    assert "a" not in perf.files and "a" not in perf.arrays and not (tmp_path / "in" / "n_4096" / "a.bin").exists()
    assert perf.files["b"].exists(), "arange is exact values: made on the host"
    assert perf.shapes["a"] == (4096,)
    assert all(not ci.draws and set(ci.files) == {"a", "b"} for name, ci in data.items() if name != "n_4096")
    # the manifest keeps the generator of a drawn buffer (still loadable as input cases)
    manifest = json.loads((tmp_path / "in" / "input_cases.json").read_text())
    InputCasesFile.model_validate(manifest)
    [entry] = [c for c in manifest["cases"] if c["name"] == "n_4096"]
    assert entry["inputs"]["a"]["generator"] == "uniform" and "path" not in entry["inputs"]["a"]
    # the same seed draws the same keys; another seed, case or buffer others
    again = materialize(wl, 7, tmp_path / "again", on_device={"n_4096"})["n_4096"].draws["a"]
    other = materialize(wl, 8, tmp_path / "other", on_device={"n_4096"})["n_4096"].draws["a"]
    assert again == perf.draws["a"] and other.seed != perf.draws["a"].seed
    param = wl.signature.buffers[0]
    gen = Uniform(generator="uniform", low=-1, high=1)
    assert device_draw(gen, param, 7, "n_4096") != device_draw(gen, param, 7, "n_8192")
    b_param = BufferParam(name="b", dtype=DType("float32"), role="in", shape=["n"])
    assert device_draw(gen, param, 7, "c").seed != device_draw(gen, b_param, 7, "c").seed  # type: ignore[union-attr]


def test_data_files_give_their_bytes_unless_a_hidden_set_redraws_one_that_records_its_generator() -> None:
    param = BufferParam(name="a", dtype=DType("float32"), role="in", shape=["n"])
    recorded = DataFile(generator="file", path="a.bin", drawn_from=Uniform(generator="uniform", low=0, high=2))
    assert device_draw(recorded, param, 1, "c") is None, "the validation set sees the recorded bytes"
    drawn = device_draw(recorded, param, 1, "c", redraw=True)
    assert drawn is not None and (drawn.low, drawn.high) == (0.0, 2.0)
    assert device_draw(DataFile(generator="file", path="a.bin"), param, 1, "c", redraw=True) is None
    assert device_draw(Arange(generator="arange", start=0, step=1), param, 1, "c") is None


def _session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, features: str = FEATURES, **options: object):  # noqa: ANN202
    monkeypatch.setenv("KO_FAKE_FEATURES", features)
    harness = write_harness(tmp_path, "fake")
    wl = find_workload(write_tiny_workload(tmp_path / "extra") / "tiny_add", Settings())
    proc = HarnessProcess(harness, 0)
    session = Session(wl, proc, device_info(harness, 0), workdir=tmp_path / "w",
                      options=EvaluateOptions(warmup=1, iterations=20, **options))  # type: ignore[arg-type]
    return proc, session


def test_performance_inputs_are_drawn_on_the_device_and_the_reference_gives_their_expected_outputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    proc, ev = _session(tmp_path, monkeypatch)
    with proc, ev:
        good = evaluate(ev, Candidate(kernel(), LaunchSpec.model_validate(ADD_LAUNCH), [], "add"))
        wrong = evaluate(ev, Candidate(kernel("WRONG"), LaunchSpec.model_validate(ADD_LAUNCH), [], "wrong"))
        replay = case_request(ev, Candidate(kernel(), LaunchSpec.model_validate(ADD_LAUNCH), [], "r"), "n_4096",
                              tmp_path / "replay")
        assert ev.record.device_cases == {"n_4096"} and ev.needs_support()
    assert good.ok, good.message
    assert good.inputs_from.startswith("drawn on the device (Philox, from the seed) in 1 performance case(s) (a, b)")
    # the performance case was checked against the reference's outputs on the drawn inputs
    assert {c.name: c.status.value for c in wrong.cases}["n_4096"] != "ok"
    assert (not (tmp_path / "w" / "inputs" / "n_4096").exists()
            or not list((tmp_path / "w" / "inputs" / "n_4096").iterdir()))
    seeds: dict[str, set[int]] = {"input": set(), "timed": set()}
    for who, request in _requests(tmp_path / "w"):
        args = _args(request)
        if request["cases"][0]["name"] != "n_4096":
            assert all("input" in args[b] and "input_draw" not in args[b] for b in ("a", "b")), who
            continue
        assert "support_module" in request
        for b in ("a", "b"):
            assert "input" not in args[b] and args[b]["dtype"] == "float32"
            if who.endswith("-add"):
                seeds["input"].add(args[b]["input_draw"]["seed"])
                if "timed_input_draw" in args[b]:
                    seeds["timed"].add(args[b]["timed_input_draw"]["seed"])
        assert args["a"]["input_draw"]["kind"] == "uniform" and args["b"]["input_draw"]["kind"] == "normal"
    # a candidate's requests draw the validation inputs (two buffers); its hidden set is another draw
    assert len(seeds["input"]) == 2 and len(seeds["timed"]) == 2 and not seeds["input"] & seeds["timed"]
    # a replay request (profile, sanitize) carries the draws and the module that makes them
    wire = request_json(replay.request)  # type: ignore[arg-type]
    assert "support_module" in wire and "input_draw" in _args(wire)["a"]


@pytest.mark.parametrize("how", ["no feature", "option off", "oracle on every case"])
def test_every_input_is_made_on_the_host_without_the_feature_or_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str,
) -> None:
    features = FEATURES.replace(",input_draw,expected_dtype", "") if how == "no feature" else FEATURES
    proc, ev = _session(tmp_path, monkeypatch, features, device_inputs=how != "option off")
    with proc, ev:
        prepare(ev, oracle_on_all_cases=how == "oracle on every case")
        assert ev.record.device_cases == frozenset() and ev.record.inputs_from == "NumPy on the host, every case"
        assert (tmp_path / "w" / "inputs" / "n_4096" / "a.bin").exists()
    assert all("input_draw" not in a for _, r in _requests(tmp_path / "w") for a in _args(r).values())


def test_kernelopt_device_inputs_0_turns_the_draws_off() -> None:
    assert evaluate_options(Settings.from_env({})).device_inputs is True
    assert evaluate_options(Settings.from_env({"KERNELOPT_DEVICE_INPUTS": "0"})).device_inputs is False


def test_the_references_expected_outputs_are_stored_as_it_wrote_them_where_the_harness_reads_that(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No float64 copy of a performance case's expected outputs: the reference wrote float32, the
    file holds those bytes and the request says so; the oracle's expected values stay float64."""
    proc, ev = _session(tmp_path, monkeypatch)
    with proc, ev:
        prepare(ev)
        assert ev.record.native_expected == {"n_4096"}
        perf, small = ev.data.refs["n_4096"]["c"], ev.data.refs["odd_1001"]["c"]
        timed = ev.timed.refs["n_4096"]["c"]  # type: ignore[union-attr]
        assert (perf.dtype, timed.dtype, small.dtype) == ("float32", "float32", "float64")
        assert perf.path.read_bytes() == ev.data.expected["n_4096"]["c"].astype("<f4").tobytes()
        assert small.path.stat().st_size == 1001 * 8
        evaluate(ev, Candidate(kernel(), LaunchSpec.model_validate(ADD_LAUNCH), [], "add"))
    for who, request in _requests(tmp_path / "w"):
        c = _args(request)["c"]
        if "expected" in c:
            want = "float32" if request["cases"][0]["name"] == "n_4096" else None
            assert c.get("expected_dtype") == want, (who, c)


def test_a_drawn_buffer_keeps_the_size_limit_of_a_host_one(tmp_path: Path) -> None:
    """No host memory is spent on a drawn buffer, but a case asking for more than 8 GiB is still
    refused before the harness is asked to allocate it."""
    from kernelopt_mcp.errors import InputError

    cases = [*TINY_SPEC["cases"], {"name": "huge", "kind": "performance", "scalars": {"n": 2**31 - 1}}]
    wl = _tiny(tmp_path, cases=cases, signature={**TINY_SPEC["signature"], "params": [
        {**p, "dtype": "float64"} if p["kind"] == "buffer" else p for p in TINY_SPEC["signature"]["params"]]})
    with pytest.raises(InputError, match="would be 17179869176 bytes; the limit is 8589934592"):
        materialize(wl, 1, tmp_path / "in", cases={"huge"}, on_device={"huge"})
