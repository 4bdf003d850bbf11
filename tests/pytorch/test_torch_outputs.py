"""Modules with several outputs: forward returning a tuple (torch.max's ``(values, indices)``, nested
ones such as an LSTM's ``(out, (h, c))``) imports with one output buffer per tensor, in order, each
with its own dtype and tolerance, and the PyTorch reference child writes every one of them.

The reference child runs here on the CPU, confined as on the GPU machine, on inputs the harness
would read from files; the harness's comparison of several outputs and the checked timed launches
run in tests/gpu/test_torch_import_gpu.py (max_with_indices).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernelopt_agent.prompts import torch_reference_text
from kernelopt_mcp.errors import WorkloadError
from kernelopt_mcp.evaluation.inputs import materialize
from kernelopt_mcp.torch_import import import_torch_problem
from kernelopt_mcp.torch_problem import TorchProblemError
from kernelopt_mcp.torch_reference import compute_expected, jobs_for
from kernelopt_mcp.workload import load_workload

PROBLEMS = Path(__file__).parents[1] / "torch_problems"

NESTED = """\
import torch
import torch.nn as nn

batch = 24
features = 40


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.fc = nn.Linear(features, features)

    def forward(self, x):
        y = self.fc(x)
        return y, (torch.relu(y), y.argmax(dim=1))


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features]
"""


def test_a_nested_tuple_becomes_one_output_buffer_per_tensor_in_order(tmp_path: Path, torch: Any) -> None:
    problem = tmp_path / "nested.py"
    problem.write_text(NESTED)
    result = import_torch_problem(problem, tmp_path / "wl")
    wl = load_workload(result.path)
    assert [(p.name, p.dtype.value) for p in wl.signature.outputs] == [
        ("out0", "float32"), ("out1", "float32"), ("out2", "int64")]
    assert result.c_prototype.endswith("float* out0, float* out1, long long* out2, int batch, int features)")
    assert wl.spec.imported is not None and wl.spec.imported.outputs == ["out0", "out1", "out2"]
    assert sorted(wl.spec.tolerance) == ["out0", "out1"]  # the int64 indices are compared bitwise
    assert wl.spec.bitwise_outputs() == ["out2"]
    assert not wl.spec.imported.degenerate
    # the model is told which buffer holds which element of the tuple
    assert "returns (out0, out1, out2) (a tuple flattened in order" in torch_reference_text(wl)


def test_none_in_the_tuple_is_no_output_and_no_tensor_at_all_is_refused(tmp_path: Path, torch: Any) -> None:
    problem = tmp_path / "with_none.py"
    problem.write_text(NESTED.replace("return y, (torch.relu(y), y.argmax(dim=1))", "return torch.relu(y), None"))
    wl = load_workload(import_torch_problem(problem, tmp_path / "wl").path)
    assert [p.name for p in wl.signature.outputs] == ["out"]
    (tmp_path / "nothing.py").write_text(NESTED.replace("return y, (torch.relu(y), y.argmax(dim=1))", "return None"))
    with pytest.raises(TorchProblemError, match=r"forward returns no tensor \(None, or an empty tuple\)"):
        import_torch_problem(tmp_path / "nothing.py", tmp_path / "none")


def test_a_dict_of_outputs_gives_its_values_in_order(tmp_path: Path, torch: Any) -> None:
    """A forward that returns a dict (a Hugging Face ModelOutput is one): its values in order, a None
    among them no output."""
    problem = tmp_path / "as_dict.py"
    problem.write_text(NESTED.replace("return y, (torch.relu(y), y.argmax(dim=1))",
                                      'return {"logits": y, "loss": None, "best": y.argmax(dim=1)}'))
    wl = load_workload(import_torch_problem(problem, tmp_path / "wl").path)
    assert [(p.name, p.dtype.value) for p in wl.signature.outputs] == [("out0", "float32"), ("out1", "int64")]


def test_each_output_is_checked_for_being_constant_and_inputs_no_output_reads_are_found(tmp_path: Path,
                                                                                       torch: Any) -> None:
    problem = tmp_path / "half_idle.py"
    problem.write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x, y):\n"
        "        return x * 2, torch.zeros_like(x)\n"
        "def get_inputs():\n    return [torch.randn(30, 20), torch.randn(30, 20)]\n"
    )
    imported = load_workload(import_torch_problem(problem, tmp_path / "wl").path).spec.imported
    assert imported is not None
    found = imported.degenerate
    assert any(f.startswith("output 'out1' is all zero on every case") for f in found), found
    assert not any("'out0'" in f for f in found), found
    assert any(f.startswith("input 'y': no output changes when it alone is redrawn") for f in found), found
    assert not any(f.startswith("input 'x'") for f in found), found


def test_the_reference_child_writes_every_output_from_the_inputs_it_was_given(tmp_path: Path, torch: Any) -> None:
    """The child's files: out0 is the Linear on the harness's inputs (checked in float64 with NumPy),
    out1 = relu(out0) and out2 = argmax(out0) of the same run; the figures describe each file, and
    the module's own float error is measured for the float outputs only."""
    problem = tmp_path / "nested.py"
    problem.write_text(NESTED)
    wl = load_workload(import_torch_problem(problem, tmp_path / "wl").path)
    inputs = materialize(wl, 7, tmp_path / "inputs")
    jobs = jobs_for(wl, "validation", list(wl.spec.cases), inputs, tmp_path / "expected")
    for j in jobs:
        j.request["own_error"] = True
    figures, expected_from = compute_expected(wl, jobs, device="cpu", support=None, workdir=tmp_path)
    assert expected_from.startswith(f"PyTorch {torch.__version__} on the CPU")
    for j in jobs:
        ci = inputs[j.case.name]
        out = {o.name: np.fromfile(o.path, dtype=np.float32 if o.dtype == "float32" else np.int64).reshape(o.shape)
               for o in j.outputs}
        x, w, b = (ci.arrays[n].astype(np.float64) for n in ("x", "fc_weight", "fc_bias"))
        linear = x.reshape(out["out0"].shape[0], -1) @ w.reshape(w.shape[0], -1).T + b.reshape(-1)
        assert np.allclose(out["out0"], linear, rtol=1e-4, atol=1e-4), j.case.name
        assert np.array_equal(out["out1"], np.maximum(out["out0"], 0))
        assert np.array_equal(out["out2"], out["out0"].argmax(axis=1))
        answer = figures[("validation", j.case.name)]["outputs"]
        for name, values in out.items():
            f = answer[name]
            assert f["elements"] == values.size and f["finite"] == values.size
            assert f["sum_sq"] == pytest.approx(float((values.astype(np.float64) ** 2).sum()), rel=1e-9)
        assert 0 <= answer["out0"]["own_error"] < 1e-5 and 0 <= answer["out1"]["own_error"] < 1e-5
        assert "own_error" not in answer["out2"] and "own_error_skipped" not in answer["out2"]


def test_imported_output_must_name_every_output_buffer_once(tmp_path: Path, torch: Any) -> None:
    problem = tmp_path / "nested.py"
    problem.write_text(NESTED)
    root = import_torch_problem(problem, tmp_path / "wl").path
    spec = json.loads((root / "workload.json").read_text())
    for output, error in [(["out0", "out1"], "'out2' is named 0 times"), (["out0", "out0", "out1", "out2"],
                                                                           "'out0' is named 2 times"),
                          (["out0", "out1", "x"], "imported.output: 'x' is no input buffer, scalar or output")]:
        spec["imported"]["output"] = output
        (root / "workload.json").write_text(json.dumps(spec))
        with pytest.raises(WorkloadError, match=error):
            load_workload(root)


@pytest.mark.parametrize("source", ["nested", "vector_add"])
def test_every_output_of_a_checked_timed_launch_gets_pytorchs_values(source: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     torch: Any) -> None:
    """The plan of a performance case's timed launches checked against PyTorch (a harness with
    ``checked_expected``; the pretend GPU announces it): every sampled launch and the confirm launch
    has one entry per output buffer, each naming the file the child writes for that output. The
    default redrawn subset (``fresh_launches``, which the harness has too) gives way to it: a
    PyTorch problem's inputs are redrawn before every launch, as the plan's draws assume."""
    from fakegpu import write_harness

    from kernelopt_mcp import HarnessProcess, Session, Settings
    from kernelopt_mcp.config import find_workload
    from kernelopt_mcp.evaluation.dataset import DataSet
    from kernelopt_mcp.evaluation.device import device_info
    from kernelopt_mcp.evaluation.evaluate import _torch_check_plans

    problem = tmp_path / f"{source}.py"
    problem.write_text(NESTED if source == "nested" else (PROBLEMS / "vector_add.py").read_text())
    outputs = ["out0", "out1", "out2"] if source == "nested" else ["out"]
    root = import_torch_problem(problem, tmp_path / "wl").path
    monkeypatch.setenv("KO_FAKE_FEATURES", "checked_expected,expected_dtype,fresh_inputs,timed_check,fresh_launches")
    harness = write_harness(tmp_path, "fake")
    wl = find_workload(root, Settings())
    perf = wl.spec.performance_cases
    with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=tmp_path / "w") as s:
        assert s.options.fresh_launches == 16 and s.uses("fresh_launches") and s.fresh_subset() is None
        data = DataSet("validation", 3, materialize(wl, 3, tmp_path / "inputs"))
        plans = _torch_check_plans(s, data, perf, tmp_path / "expected")
    plan, jobs = plans[perf[0].name]
    assert plan.samples and len(jobs) == len(plan.samples) + 1  # the confirm launch's draw too
    files = {str(o.path.resolve()): (j.request["set"], o.name) for j in jobs for o in j.outputs}
    for sample in plan.samples:
        entries = [e for e in plan.entries if e.sample == sample]
        assert sorted(e.buffer for e in entries) == outputs
        assert {files[e.expected] for e in entries} == {(f"checked-{entries[0].draw}", b) for b in outputs}
    assert sorted(e.buffer for e in plan.confirm) == outputs
    assert {e.launch for e in plan.confirm} == {"confirm"} and len({e.draw for e in plan.confirm}) == 1
