"""Imported PyTorch problems at full strength: parameters drawn for every draw (a kernel that ignores
LayerNorm's weight and bias fails), modules whose forward updates their state (BatchNorm in
training mode) imported and run from a snapshot, randomness still refused, degenerate problems
flagged (import, --json, workload.json, `kernelopt evaluate`), and correctness cases kept where the
odd sizes break a divisibility the problem needs.

Tests that run torch skip where it is not installed (CI); the size search is tested everywhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernelopt_mcp.cli import main
from kernelopt_mcp.evaluation.compare import compare
from kernelopt_mcp.evaluation.inputs import materialize
from kernelopt_mcp.torch_cases import other_sizes, size_variants
from kernelopt_mcp.torch_import import TorchImportOptions, import_torch_problem
from kernelopt_mcp.torch_problem import SizeConstant, TorchProblemError
from kernelopt_mcp.torch_reference import compute_expected, jobs_for
from kernelopt_mcp.workload import Workload, load_workload


def problem(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n" + body)
    return path


def draws(wl: Workload, tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The stored (validation) draw and the hidden draw of every case: case -> its inputs."""
    return materialize(wl, 1, tmp_path / "validation"), materialize(wl, 2, tmp_path / "hidden", redraw=True)




def layer_norm(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None) -> np.ndarray:
    """LayerNorm over the last dimension in NumPy (float64); without weight and bias: the dropped-parameter kernel."""
    x = x.astype(np.float64)
    normed = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    return normed if weight is None or bias is None else normed * weight + bias


def test_layernorm_parameters_are_drawn_and_a_kernel_that_drops_them_mismatches(tmp_path: Path, torch: Any) -> None:
    wl = load_workload(import_torch_problem(Path(__file__).parents[1] / "torch_problems" / "layernorm.py",
                                            tmp_path / "ln").path)
    assert [p.name for p in wl.signature.inputs] == ["x", "ln_weight", "ln_bias"]
    validation, hidden = draws(wl, tmp_path)
    tol = wl.spec.tolerance_for("out")
    # the expected outputs: PyTorch (the workload's reference.torch) run on each draw's inputs
    expected_of: dict[tuple[str, str], np.ndarray] = {}
    for set_name, inputs in (("validation", validation), ("hidden", hidden)):
        jobs = jobs_for(wl, set_name, list(wl.spec.cases), inputs, tmp_path / "expected")
        compute_expected(wl, jobs, device=0, support=None, workdir=tmp_path)
        expected_of.update({(set_name, j.case.name): np.fromfile(o.path, dtype="<f4").reshape(o.shape)
                            for j in jobs for o in j.outputs})
    for case in wl.spec.cases:
        for set_name, data in (("validation", validation[case.name]), ("hidden", hidden[case.name])):
            w, b = data.arrays["ln_weight"], data.arrays["ln_bias"]
            assert len(np.unique(w)) == w.size and w.min() >= 0.5 and w.max() <= 1.5  # around 1, per element
            assert len(np.unique(b)) == b.size and b.min() >= -0.5 and b.max() <= 0.5
            expected = expected_of[(set_name, case.name)]
            full = layer_norm(data.arrays["x"], w, b)
            assert compare("out", expected, full, tol).passed, case.name
            dropped = compare("out", expected, layer_norm(data.arrays["x"], None, None), tol)
            assert not dropped.passed and dropped.mismatches > expected.size // 2, case.name
        # the hidden draw's parameters are other values
        assert not np.array_equal(validation[case.name].arrays["ln_weight"], hidden[case.name].arrays["ln_weight"])
        assert not np.array_equal(validation[case.name].arrays["ln_bias"], hidden[case.name].arrays["ln_bias"])
    assert wl.spec.imported is not None  # workload.json says how they were drawn
    drawn = wl.spec.imported.parameters
    assert drawn["ln_weight"].default == "constant 1" and drawn["ln_bias"].default == "constant 0"
    assert drawn["ln_weight"].drawn_from is not None and drawn["ln_weight"].drawn_from.model_dump() == {
        "generator": "uniform", "low": 0.5, "high": 1.5}
    assert wl.spec.imported.degenerate == [] and wl.spec.imported.state_restored == []


BATCHNORM = """
class Model(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features)

    def forward(self, x):
        return self.bn(x)


batch_size = 8
features = 16
dim1 = 24
dim2 = 24


def get_inputs():
    return [torch.randn(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return [features]
"""


def test_batchnorm_in_training_mode_imports_with_its_state_drawn_and_restored(tmp_path: Path, torch: Any) -> None:
    """KernelBench's level-1 BatchNorm as written (training mode: forward updates the running
    statistics) imports: weight, bias and the running statistics are drawn (the variance positive),
    the integer counter is the module's constant 0, and the statistics are restored after every call."""
    wl = load_workload(import_torch_problem(problem(tmp_path, "batchnorm", BATCHNORM), tmp_path / "bn").path)
    assert wl.spec.imported is not None
    assert wl.spec.imported.state_restored == ["bn_num_batches_tracked", "bn_running_mean", "bn_running_var"]
    assert wl.spec.imported.parameters["bn_num_batches_tracked"].drawn_from is None  # an integer counter: kept
    assert wl.spec.imported.parameters["bn_running_var"].drawn_from is not None
    assert wl.spec.imported.degenerate == []  # the statistics forward only writes are not findings
    assert wl.spec.imported.state == {"bn_weight": "bn.weight", "bn_bias": "bn.bias",
                                      "bn_running_mean": "bn.running_mean", "bn_running_var": "bn.running_var",
                                      "bn_num_batches_tracked": "bn.num_batches_tracked"}
    for case in wl.spec.cases:
        gens = {name: gen.model_dump() for name, gen in case.inputs.items()}
        assert gens["bn_num_batches_tracked"] == {"generator": "constant", "value": 0.0}
        assert gens["bn_running_var"] == {"generator": "uniform", "low": 0.5, "high": 1.5}
        assert gens["x"] == {"generator": "normal", "mean": 0.0, "std": 1.0}


STATE_READ = """
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("shift", torch.zeros(n))

    def forward(self, x):
        self.shift += 1.0  # state that forward both changes and reads
        return x + self.shift


n = 64


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return [n]
"""


def test_state_forward_changes_is_restored_and_drawn(tmp_path: Path, torch: Any) -> None:
    """A forward that changes the state it reads runs from a snapshot (its output depends on the
    inputs only): the buffer is named as restored, and drawn (a constant 0 around its value)."""
    wl = load_workload(import_torch_problem(problem(tmp_path, "state_read", STATE_READ), tmp_path / "s").path)
    assert wl.spec.imported is not None and wl.spec.imported.state_restored == ["shift"]
    assert wl.spec.imported.state == {"shift": "shift"} and wl.spec.imported.forward == ["x"]
    for case in wl.spec.cases:
        assert case.inputs["shift"].model_dump() == {"generator": "uniform", "low": -0.5, "high": 0.5}


@pytest.mark.parametrize("forward", [
    "F.dropout(x, p=0.5, training=self.training)",  # KernelBench runs problems in training mode
    "x + torch.rand(x.shape)",
], ids=["dropout", "rand"])
def test_randomness_in_forward_is_still_refused(forward: str, tmp_path: Path, torch: Any) -> None:
    body = (f"class Model(nn.Module):\n    def forward(self, x):\n        return {forward}\n\n\n"
            "def get_inputs():\n    return [torch.randn(32, 32)]\n")
    with pytest.raises(TorchProblemError, match=r"forward draws random numbers .*no kernel can be checked against it"):
        import_torch_problem(problem(tmp_path, "random", body), tmp_path / "r")


SOFTMAX_MAX = """
class Model(nn.Module):
    def forward(self, x):
        return torch.max(torch.softmax(x, dim=1), dim=1, keepdim=True).values  # softmax over a dim of size 1


batch_size = 16
dim = 128


def get_inputs():
    return [torch.randn(batch_size, 1, dim)]
"""

IGNORED = """
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(n))
        self.unused = nn.Parameter(torch.randn(n))

    def forward(self, x, y):
        return x * self.scale


n = 96


def get_inputs():
    return [torch.randn(n), torch.randn(n)]


def get_init_inputs():
    return [n]
"""


def test_a_constant_output_is_flagged_in_the_json_answer_and_workload_json(
    tmp_path: Path, torch: Any, capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "w"
    assert main(["import-torch", str(problem(tmp_path, "softmax_max", SOFTMAX_MAX)), "-o", str(out), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["status"] == "ok"
    constant = "the output is constant (every element 1) on every case: a kernel may write it without reading any input"
    assert answer["degenerate"][0] == constant and f"degenerate: {constant}" in answer["notes"]
    assert any("input 'x': the output does not change" in f for f in answer["degenerate"])
    assert json.loads((out / "workload.json").read_text())["imported"]["degenerate"] == answer["degenerate"]
    assert load_workload(out).notes[-1].startswith(f"degenerate problem: {constant} (and 1 more")


def test_an_ignored_input_and_parameter_are_flagged_by_name(tmp_path: Path, torch: Any,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    result = import_torch_problem(problem(tmp_path, "ignored", IGNORED), tmp_path / "w")
    assert result.degenerate == [
        "input 'y': the output does not change when it alone is redrawn: a kernel may ignore it",
        "parameter 'unused': the output does not change when it alone is redrawn: a kernel may ignore it",
    ]
    assert result.spec.imported is not None and result.spec.imported.degenerate == result.degenerate
    assert "note: degenerate: input 'y'" in result.text()
    assert main(["import-torch", str(tmp_path / "ignored.py"), "-o", str(tmp_path / "again")]) == 0
    assert "degenerate: input 'y'" in capsys.readouterr().out


@pytest.mark.parametrize(("forward", "inputs", "expected"), [
    ("torch.arange(x.shape[0], dtype=x.dtype)", "torch.randn(n)",  # other inputs, the same output
     ["the output is the same for two draws of every input: a kernel may ignore the inputs",
      "input 'x': the output does not change when it alone is redrawn: a kernel may ignore it"]),
    ("x * 2", "torch.arange(n, dtype=torch.float32)", []),  # the same inputs on both draws: nothing to flag
], ids=["ignores_inputs", "fixed_inputs"])
def test_an_output_the_same_for_other_inputs_is_flagged(forward: str, inputs: str, expected: list[str], tmp_path: Path,
                                                        torch: Any) -> None:
    body = (f"class Model(nn.Module):\n    def forward(self, x):\n        return {forward}\n\n\nn = 64\n\n\n"
            f"def get_inputs():\n    return [{inputs}]\n")
    assert import_torch_problem(problem(tmp_path, "same", body), tmp_path / "w").degenerate == expected


ADD_IGNORING = """
class Model(nn.Module):
    def forward(self, a, b, unused):
        return a + b


n = 1000


def get_inputs():
    return [torch.randn(n), torch.randn(n), torch.randn(n)]
"""


def test_evaluate_notes_a_degenerate_problem(tmp_path: Path, torch: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """`kernelopt evaluate` of an imported problem whose output ignores an input says so, in one line
    (the pretend GPU of tests/fakegpu.py computes c = a + b: the GPU is what CI cannot reach)."""
    from fakegpu import ADD_LAUNCH, write_harness

    options = TorchImportOptions(name="vector_add", output_name="c")
    wl = import_torch_problem(problem(tmp_path, "add", ADD_IGNORING), tmp_path / "add", options).path
    source = tmp_path / "add.cu"
    source.write_text('extern "C" __global__ void vector_add(const float* a, const float* b, const float* unused, '
                      'float* c, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
                      '    if (i < n) c[i] = a[i] + b[i];\n}\n')
    (tmp_path / "launch.json").write_text(json.dumps(ADD_LAUNCH))
    harness = write_harness(tmp_path, "fake")
    capsys.readouterr()
    args = ["evaluate", str(wl), str(source), "--launch", str(tmp_path / "launch.json"), "--harness", str(harness),
            "--warmup", "1", "--iterations", "3"]
    assert main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "ok"
    flagged = [n for n in result["notes"] if n.startswith("degenerate problem")]
    assert flagged == ["degenerate problem: input 'unused': the output does not change when it alone is redrawn: "
                       "a kernel may ignore it"]
    assert main(args) == 0
    assert "degenerate problem: input 'unused'" in capsys.readouterr().out


GROUPNORM = """
class Model(nn.Module):
    def __init__(self, num_features, num_groups):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=num_features)

    def forward(self, x):
        return self.gn(x)


batch_size = 16
features = 64
num_groups = 8
dim1 = 32
dim2 = 32


def get_inputs():
    return [torch.randn(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return [features, num_groups]
"""

GROUPED_CONV = """
class Model(nn.Module):
    def __init__(self, in_channels, out_channels, groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, groups=groups)

    def forward(self, x):
        return self.conv(x)


batch_size = 8
in_channels = 32
out_channels = 64
groups = 4
height = 32
width = 32


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, groups]
"""


@pytest.mark.parametrize(("name", "body"), [("groupnorm", GROUPNORM), ("grouped_conv", GROUPED_CONV)],
                         ids=["groupnorm", "grouped_conv"])
def test_a_divisibility_the_odd_sizes_break_keeps_a_correctness_case(
    name: str, body: str, tmp_path: Path, torch: Any
) -> None:
    """The odd sizes make 7 channels for 8 groups: other sizes are searched instead of dropping the
    case, and the one found is checked like any other."""
    result = import_torch_problem(problem(tmp_path, name, body), tmp_path / name)
    perf = result.spec.case("perf").scalars
    small = [c for c in result.spec.cases if c.kind == "correctness"]
    assert small, result.notes
    for case in small:
        assert case.name != "small_odd" and case.scalars != perf
        assert all(case.scalars[k] <= v for k, v in perf.items())
    assert any("instead of small_odd" in n and "must be divisible by" in n for n in result.notes), result.notes
    wl = load_workload(result.path)
    assert wl.spec.imported is not None
    for case in small:  # the sizes the module is rebuilt at keep the divisibility
        sizes = wl.spec.imported.sizes[case.name]
        groups = sizes.get("num_groups", sizes.get("groups"))
        channels = sizes.get("features", sizes.get("in_channels"))
        assert groups is not None and channels is not None and channels % groups == 0, sizes


FIXED_IMAGE = """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3 * 64 * 64, 10)  # the image size as written, as a classifier head needs it

    def forward(self, x):
        return self.fc(x.flatten(1))


batch_size = 16
height = 64
width = 64


def get_inputs():
    return [torch.randn(batch_size, 3, height, width)]
"""


def test_sizes_a_fixed_layer_needs_are_kept_and_the_others_scaled(tmp_path: Path, torch: Any) -> None:
    result = import_torch_problem(problem(tmp_path, "fixed_image", FIXED_IMAGE), tmp_path / "w")
    assert [(c.name, c.scalars) for c in result.spec.cases if c.kind == "correctness"] == [
        ("small_partial", {"batch_size": 5})]
    assert result.spec.case("perf").scalars == {"batch_size": 16}


def test_the_search_is_bounded_by_bytes_and_time(tmp_path: Path, torch: Any) -> None:
    path = problem(tmp_path, "groupnorm", GROUPNORM)
    # nothing of other sizes fits 1024 bytes: one case up to the performance case's own bytes instead, which costs
    # less on the CPU than running the performance case there (it stays on the meta device)
    result = import_torch_problem(path, tmp_path / "gn", TorchImportOptions(max_correctness_bytes=1024))
    assert [(c.kind, c.name) for c in result.spec.cases] == [("correctness", "small_even"), ("performance", "perf")]
    assert ("one correctness case of up to 8 MiB (more than the usual 0.0009766 MiB): the buffers of every smaller "
            "size take more than that" in result.notes)
    assert not any("ran on the CPU" in n or "more than 1024" in n for n in result.notes), result.notes

    result = import_torch_problem(path, tmp_path / "gn0", TorchImportOptions(search_s=0))
    assert [c.kind for c in result.spec.cases] == ["performance"]
    left_out = next(n for n in result.notes if n.startswith("correctness case small_odd"))
    assert "must be divisible by num_groups (8); the search for other sizes stopped after 0 s" in left_out


MASKED = """
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("mask", torch.tril(torch.ones(n, n)))
        self.register_buffer("index", torch.arange(n))

    def forward(self, x):
        return (x * self.mask)[:, self.index]


n = 24


def get_inputs():
    return [torch.randn(n, n)]


def get_init_inputs():
    return [n]
"""


def test_masks_and_integer_buffers_keep_their_values(tmp_path: Path, torch: Any) -> None:
    """A causal mask (a float buffer of 0 and 1) drawn at random would turn the problem into another
    one; an index table too: both keep the module's values in every draw."""
    wl = load_workload(import_torch_problem(problem(tmp_path, "masked", MASKED), tmp_path / "m").path)
    assert wl.spec.imported is not None
    assert (wl.spec.imported.parameters["mask"].drawn_from is None
            and "kept" in wl.spec.imported.parameters["mask"].default)
    assert wl.spec.imported.parameters["index"].drawn_from is None
    validation, hidden = draws(wl, tmp_path)
    for case in wl.spec.cases:
        size = int(case.scalars["n"])
        for data in (validation[case.name], hidden[case.name]):
            assert np.array_equal(data.arrays["mask"], np.tril(np.ones((size, size), np.float32)))
            assert np.array_equal(data.arrays["index"], np.arange(size))


# --- no torch needed ------------------------------------------------------------------------


def test_other_sizes_keep_what_must_divide_and_stay_below_the_written_sizes() -> None:
    constants = [SizeConstant("batch_size", 16, 1), SizeConstant("channels", 48, 2), SizeConstant("groups", 3, 3),
                 SizeConstant("height", 64, 4)]
    perf = {c.name: c.value for c in constants}
    small = dict(size_variants(constants)[0][2])
    assert small["channels"] % small["groups"]  # the odd primes break it: 7 channels, 3 groups
    tried = other_sizes(constants, "small")
    assert [name for name, _ in tried] == ["small_odd", "small_even", "small_multiple", *["small_scaled"] * 3,
                                           *["small_partial"] * 2, *["small_pair"] * 6]
    partial = [v for name, v in tried if name == "small_partial"]  # the largest back as written first
    assert partial == [{**small, "height": 64}, {**small, "height": 64, "channels": 48}]
    # two as written (the largest pair first), the others small
    pairs = [v for name, v in tried if name == "small_pair"]
    assert pairs[0] == {**small, "height": 64, "channels": 48} and pairs[-1] == {**small, "batch_size": 16, "groups": 3}
    for _, values in tried:
        assert values != perf and all(1 <= values[k] <= v for k, v in perf.items())
    multiple = dict(tried)["small_multiple"]
    for a in constants:  # every constant that divides another's written value divides its size too
        for b in constants:
            if 1 < b.value < a.value and a.value % b.value == 0:
                assert multiple[a.name] % multiple[b.name] == 0, (a.name, b.name, multiple)
    assert any(v["channels"] % v["groups"] == 0 for _, v in tried[:2])  # the odd or even sizes fit already
    assert all(values["groups"] == 3 for _, values in tried)  # a small constant is kept
    assert other_sizes(constants, "mid") == []  # about 1/16 of these is what they are: no mid case to search for
    large = [SizeConstant("batch_size", 256, 1), SizeConstant("channels", 3072, 2), SizeConstant("groups", 6, 3)]
    mid = dict(size_variants(large)[1][2])
    assert mid["channels"] % 6 and mid["channels"] > 61
    found = other_sizes(large, "mid")
    # the pair (channels, batch_size) as written is the performance case itself (groups is small already): left out
    assert [name for name, _ in found] == ["mid_even", "mid_multiple", *["mid_scaled"] * 3, "mid_partial",
                                           *["mid_pair"] * 2]
    assert dict(found)["mid_multiple"]["channels"] % 6 == 0 and dict(found)["mid_multiple"]["channels"] < 3072
    assert other_sizes([], "small") == []


def test_the_size_search_stays_bounded_with_many_constants() -> None:
    """n constants would make n^2/2 pairs: only the largest are paired (a network with 40 widths
    must not make 780 size sets of 40 entries each before the time budget is even looked at)."""
    constants = [SizeConstant(f"w{i}", 64 + i, i) for i in range(40)]
    tried = other_sizes(constants, "small")
    pairs = [v for name, v in tried if name == "small_pair"]
    assert len(pairs) == 66  # 12 largest, paired
    assert all({k for k, v in p.items() if v == 64 + int(k[1:])} <= {f"w{i}" for i in range(28, 40)} for p in pairs)


def test_a_long_literal_list_is_data_not_size_constants() -> None:
    """A tuple or list of at most 8 literals is a shape or a few widths; a longer one (a table of
    values get_init_inputs passes) gives no size constants."""
    from kernelopt_mcp.torch_problem import parse_problem

    table = ", ".join(str(i + 2) for i in range(9))
    text = ("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n"
            "        return x\n"
            f"widths = [16, 32]\ntable = [{table}]\ndef get_inputs():\n    return [torch.rand(widths[0])]\n"
            "def get_init_inputs():\n    return [table]\n")
    assert [c.name for c in parse_problem(text, "p.py").constants] == ["widths_0", "widths_1"]
