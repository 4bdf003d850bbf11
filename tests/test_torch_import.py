"""`kernelopt import-torch`: KernelBench-style PyTorch problems (tests/torch_problems/) become
workloads whose stored expected outputs equal the module's, and unsupported ones fail clearly.

Tests that run torch skip with a reason where it is not installed; the parsing of the size
constants and the message for a missing torch are tested everywhere.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernelopt_mcp.cli import main
from kernelopt_mcp.errors import WorkloadError
from kernelopt_mcp.evaluation.fresh_inputs import case_fresh, fresh_checks
from kernelopt_mcp.evaluation.inputs import (
    hidden_seed_checks,
    materialize,
    seed_independent_inputs,
)
from kernelopt_mcp.evaluation.oracle import run_oracle
from kernelopt_mcp.launch import LaunchSpec
from kernelopt_mcp.torch_import import (
    TorchImportOptions,
    import_torch_problem,
    size_variants,
)
from kernelopt_mcp.torch_problem import TorchProblemError, parse_problem, require_torch
from kernelopt_mcp.workload import Workload, load_workload

PROBLEMS = Path(__file__).parent / "torch_problems"
SUPPORTED = ["elementwise_gelu", "reduction_sum", "matmul", "linear_relu", "scale_int_arg", "conv2d_relu_bias", "vector_add",
             "batchnorm_training"]


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch", reason="torch is not installed (pip install torch): PyTorch problems cannot be run")


def module_output(problem: Path, wl: Workload, case_name: str, arrays: dict[str, np.ndarray], torch: Any) -> np.ndarray:
    """The problem's Model run directly (no kernelopt code) on a case's input arrays: the source's
    size-constant lines rewritten with the case's scalars, parameters loaded from the weight buffers."""
    case = wl.spec.case(case_name)
    lines = []
    for line in problem.read_text().splitlines():
        names = [n.strip() for n in line.split("=", 1)[0].split(",")] if re.match(r"^[\w, ]+=[^=]", line) else []
        if names and all(n in case.scalars for n in names):
            line = f"{', '.join(names)} = {', '.join(str(case.scalars[n]) for n in names)}"
        lines.append(line)
    ns: dict[str, Any] = {"__name__": "problem"}
    exec(compile("\n".join(lines), str(problem), "exec"), ns)  # noqa: S102 - the test's own problem files
    init = ns["get_init_inputs"]() if "get_init_inputs" in ns else []
    model = ns["Model"](*init)
    state = {name: torch.from_numpy(arrays[name.replace(".", "_")].copy()) for name in model.state_dict()}
    model.load_state_dict(state)
    names = [p.name for p in wl.signature.params]
    forward_args = []
    for arg in ns["get_inputs"]():
        name = names.pop(0) if isinstance(arg, torch.Tensor) else None
        forward_args.append(torch.from_numpy(arrays[name].copy()) if name else arg)
    with torch.no_grad():
        return model(*forward_args).numpy()


@pytest.mark.parametrize("problem", SUPPORTED)
def test_supported_problem_becomes_a_workload_with_the_modules_outputs(problem: str, tmp_path: Path, torch: Any) -> None:
    path = PROBLEMS / f"{problem}.py"
    result = import_torch_problem(path, tmp_path / problem)
    wl = load_workload(tmp_path / problem)
    assert wl.spec == result.spec and wl.initial_cu is None and wl.reference_cu is None
    assert {c.kind for c in wl.spec.cases} == {"correctness", "performance"}
    for redraw, seed in ((False, 1), (True, 2)):  # the validation draw, then the hidden draw (hidden_path)
        data = materialize(wl, seed, tmp_path / f"inputs-{redraw}", redraw=redraw)
        for case in wl.spec.cases:
            ci = data[case.name]
            expected = run_oracle(wl, case.name, ci.arrays, ci.shapes)["out"]
            direct = module_output(path, wl, case.name, ci.arrays, torch)
            assert np.array_equal(expected.reshape(direct.shape), direct), (problem, case.name, redraw)
    first = materialize(wl, 1, tmp_path / "a")
    hidden = materialize(wl, 2, tmp_path / "b", redraw=True)
    for case in wl.spec.cases:  # the hidden draw really differs
        some_input = wl.signature.inputs[0].name
        assert not np.array_equal(first[case.name].arrays[some_input], hidden[case.name].arrays[some_input])


def test_signature_cases_cost_and_tolerance(tmp_path: Path, torch: Any) -> None:
    wl = import_torch_problem(PROBLEMS / "matmul.py", tmp_path / "mm").spec
    assert wl.signature.c_prototype() == (
        'extern "C" __global__ void matmul(const float* A, const float* B, float* out, int M, int K, int N)'
    )
    assert [p.shape for p in wl.signature.buffers] == [["M", "K"], ["K", "N"], ["M", "N"]]
    scalars = {c.name: c.scalars for c in wl.cases}
    assert scalars == {"small_odd": {"M": 5, "K": 7, "N": 11}, "mid_odd": {"M": 61, "K": 63, "N": 65},
                       "perf": {"M": 256, "K": 512, "N": 384}}
    assert [c.kind for c in wl.cases] == ["correctness", "correctness", "performance"]
    assert wl.cost.flops == "2*M*K*N" and wl.cost.bytes == "4*M*K + 4*K*N + 4*M*N"
    assert wl.tolerance["out"].rtol == pytest.approx(1e-4)  # float32: reductions reorder sums

    linear = import_torch_problem(PROBLEMS / "linear_relu.py", tmp_path / "lin").spec
    assert [(p.name, p.role, p.shape) for p in linear.signature.buffers] == [
        ("x", "in", ["batch_size", "in_features"]), ("fc_weight", "in", ["out_features", "in_features"]),
        ("fc_bias", "in", ["out_features"]), ("out", "out", ["batch_size", "out_features"]),
    ]

    conv = import_torch_problem(PROBLEMS / "conv2d_relu_bias.py", tmp_path / "conv").spec
    assert [(p.name, p.shape) for p in conv.signature.buffers] == [
        ("x", ["batch_size", 3, "height", "width"]), ("bias", ["out_channels", 1, 1]),
        ("conv_weight", ["out_channels", 3, 3, 3]), ("conv_bias", ["out_channels"]),
        ("out", ["batch_size", "out_channels", "height - 2", "width - 2"]),
    ]
    assert conv.cost.flops == "54*batch_size*out_channels*(height - 2)*(width - 2)"
    assert conv.cases[0].scalars == {"batch_size": 5, "height": 13, "width": 17, "out_channels": 11}

    scaled = import_torch_problem(PROBLEMS / "scale_int_arg.py", tmp_path / "int").spec
    assert scaled.signature.c_prototype().endswith("(const __half* x, __half* out, int factor, int n)")
    assert scaled.tolerance["out"].rtol == pytest.approx(1e-2)
    assert [c.scalars for c in scaled.cases] == [{"factor": 3, "n": 5}, {"factor": 3, "n": 65537}, {"factor": 3, "n": 1 << 20}]

    fixed = tmp_path / "fixed.py"  # no size constant: the same shape again, drawn with another seed
    fixed.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x.T.contiguous()\n"
                     "def get_inputs():\n    return [torch.randn(8, 3)]\n")
    spec = import_torch_problem(fixed, tmp_path / "fixed_wl").spec
    assert [(c.name, c.kind) for c in spec.cases] == [("check", "correctness"), ("perf", "performance")]
    assert [p.shape for p in spec.signature.buffers] == [[8, 3], [3, 8]] and not spec.signature.scalars


def test_files_are_not_redrawn_but_the_hidden_draw_is_checked(tmp_path: Path, torch: Any) -> None:
    wl = load_workload(import_torch_problem(PROBLEMS / "linear_relu.py", tmp_path / "w").path)
    perf = wl.spec.performance_cases
    assert seed_independent_inputs(wl) == {}  # every file names a hidden draw
    assert hidden_seed_checks(wl, {c.name for c in perf}) == ["timed outputs on hidden-seed inputs"]
    assert set(case_fresh(wl, perf[0]).fixed) == {"x", "fc_weight", "fc_bias"}
    lines = fresh_checks(wl, perf, redraw=True, reference=False, checked=0, consistency=False)
    assert lines and lines[0].startswith("fresh inputs: not possible")


def test_the_stored_oracle_refuses_inputs_it_has_not_stored(tmp_path: Path, torch: Any) -> None:
    wl = load_workload(import_torch_problem(PROBLEMS / "elementwise_gelu.py", tmp_path / "w").path)
    ci = materialize(wl, 1, tmp_path / "in")["small_odd"]
    other = {"x": ci.arrays["x"] + 1}
    with pytest.raises(WorkloadError, match="not among those stored"):
        run_oracle(wl, "small_odd", other, ci.shapes)


def test_a_copy_of_the_oracle_finds_the_store_and_a_moved_workload_its_own(tmp_path: Path, torch: Any) -> None:
    """`kernelopt optimize` copies reference.py into its run directory: the copy reads the store where the
    workload was imported (its confined worker may read that expected/, as the copy is kernelopt's own
    template); a workload directory moved elsewhere reads its own."""
    import shutil

    from kernelopt_mcp.evaluation.oracle_sandbox import call_oracle

    wl = load_workload(import_torch_problem(PROBLEMS / "matmul.py", tmp_path / "w").path)
    ci = materialize(wl, 1, tmp_path / "in")["mid_odd"]
    expected = run_oracle(wl, "mid_odd", ci.arrays, ci.shapes)["out"]
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(wl.oracle_path, run / "reference.py")
    scalars = wl.spec.case("mid_odd").scalars
    copied = call_oracle(run / "reference.py", ci.arrays, scalars, {"out": ci.shapes["out"]}, case="mid_odd")["out"]
    assert np.array_equal(copied, expected)

    moved = load_workload(shutil.move(tmp_path / "w", tmp_path / "elsewhere"))
    assert np.array_equal(run_oracle(moved, "mid_odd", ci.arrays, ci.shapes)["out"], expected)
    (run / "reference.py").rename(run / "again.py")  # a fresh worker: the copy now finds no store
    with pytest.raises(WorkloadError, match=r"LookupError: the stored outputs .* are neither beside this oracle"):
        call_oracle(run / "again.py", ci.arrays, scalars, {"out": ci.shapes["out"]}, case="mid_odd")
    edited = (run / "again.py").read_text().replace("    root = store()", "    root = store()  # edited")
    (tmp_path / "run2").mkdir()
    (tmp_path / "run2" / "reference.py").write_text(edited.replace(repr(str(tmp_path / "w")), repr(str(tmp_path / "elsewhere"))))
    with pytest.raises(WorkloadError, match="Permission denied"):  # not the template: only its own directory
        call_oracle(tmp_path / "run2" / "reference.py", ci.arrays, scalars, {"out": ci.shapes["out"]}, case="mid_odd")


UNSUPPORTED = {
    "two_outputs": "returns 2 outputs",
    "dropout": "draws random numbers",
    "scalar_output": "returns a float, not a tensor",
    "string_input": "must be tensors or Python numbers",
    "no_model": "defines no `class Model",
}


@pytest.mark.parametrize("problem", sorted(UNSUPPORTED))
def test_unsupported_problems_fail_with_the_reason(problem: str, tmp_path: Path, torch: Any) -> None:
    with pytest.raises(TorchProblemError, match=UNSUPPORTED[problem]):
        import_torch_problem(PROBLEMS / "unsupported" / f"{problem}.py", tmp_path / problem)
    assert not (tmp_path / problem).exists() and list(tmp_path.iterdir()) == []


def test_initial_kernel(tmp_path: Path, torch: Any) -> None:
    source = 'extern "C" __global__ void matmul(const float* A, const float* B, float* out, int M, int K, int N) {}'
    launch = LaunchSpec.model_validate({"grid": ["ceil_div(N, 16)", "ceil_div(M, 16)"], "block": [16, 16]})
    options = TorchImportOptions(initial_cu=source, initial_launch=launch)
    wl = load_workload(import_torch_problem(PROBLEMS / "matmul.py", tmp_path / "w", options).path)
    assert wl.initial_cu == source and wl.spec.initial is not None
    with pytest.raises(TorchProblemError, match=r"defines no 'matmul'.*void matmul\(const float\* A"):
        import_torch_problem(PROBLEMS / "matmul.py", tmp_path / "x",
                             TorchImportOptions(initial_cu=source.replace("matmul", "mm"), initial_launch=launch))


def test_existing_directory_is_kept_unless_overwrite(tmp_path: Path, torch: Any) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "mine.txt").write_text("keep")
    with pytest.raises(TorchProblemError, match="not empty"):
        import_torch_problem(PROBLEMS / "elementwise_gelu.py", tmp_path / "w")
    assert (tmp_path / "w" / "mine.txt").read_text() == "keep"
    import_torch_problem(PROBLEMS / "elementwise_gelu.py", tmp_path / "w", TorchImportOptions(overwrite=True))
    assert not (tmp_path / "w" / "mine.txt").exists() and (tmp_path / "w" / "workload.json").is_file()


def test_cli_import_torch(tmp_path: Path, torch: Any, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "gelu"
    assert main(["import-torch", str(PROBLEMS / "elementwise_gelu.py"), "-o", str(out), "--name", "gelu"]) == 0
    text = capsys.readouterr().out
    assert 'void gelu(const float* x, float* out, int batch_size, int dim)' in text and "small_odd" in text
    assert load_workload(out).name == "gelu"
    code = main(["import-torch", str(PROBLEMS / "unsupported" / "dropout.py"), "-o", str(tmp_path / "d"), "--json"])
    answer = json.loads(capsys.readouterr().out)
    assert code == 2 and answer["status"] == "error" and "random numbers" in answer["message"]


# --- no torch needed ------------------------------------------------------------------------


def test_size_constants_are_the_literals_get_inputs_reaches() -> None:
    src = parse_problem(
        "import torch\nclass Model: pass\n"
        "batch = 16\nN = 1 << 12\nM = 2 * N\nunused = 99\nname = 'x'\nK: int = 64\nH, W = 8, 9\n"
        "def get_inputs():\n    return [torch.randn(batch, M, K, H)]\n",
        "p.py",
    )
    assert [(c.name, c.value) for c in src.constants] == [("batch", 16), ("N", 4096), ("K", 64), ("H", 8)]
    variants = size_variants(src.constants)
    assert [(n, k) for n, k, _ in variants] == [("small_odd", "correctness"), ("mid_odd", "correctness"), ("perf", "performance")]
    small, mid, perf = (v for _, _, v in variants)
    assert small == {"batch": 5, "N": 7, "K": 11, "H": 8} and perf == {"batch": 16, "N": 4096, "K": 64, "H": 8}
    assert mid == {"batch": 16, "N": 259, "K": 64, "H": 8}  # 4096 // 16 | 1, + 2 per position: distinct


def test_problem_file_errors_without_torch() -> None:
    with pytest.raises(TorchProblemError, match="line 1: not valid Python"):
        parse_problem("def (:\n", "bad.py")
    with pytest.raises(TorchProblemError, match="defines no `get_inputs"):
        parse_problem("class Model: pass\n", "p.py")


def test_missing_torch_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    with pytest.raises(TorchProblemError, match=r"install torch .any build.*the GPU machine does not need it afterwards"):
        require_torch()
    assert main(["import-torch", str(PROBLEMS / "matmul.py"), "-o", str(tmp_path / "w")]) == 2
    assert "install torch" in capsys.readouterr().err and not (tmp_path / "w").exists()


def test_names_a_kernel_cannot_take_get_a_suffix(tmp_path: Path, torch: Any) -> None:
    problem = tmp_path / "keywords.py"
    problem.write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, new, float):\n        return new * float\n"
        "threadIdx = 33\ndef get_inputs():\n    return [torch.randn(threadIdx), 2.5]\n"
    )
    spec = import_torch_problem(problem, tmp_path / "w").spec
    assert spec.signature.c_prototype() == (
        'extern "C" __global__ void keywords(const float* new_, float* out, float float_, int threadIdx_)'
    )
    assert [c.scalars for c in spec.cases] == [{"float_": 2.5, "threadIdx_": 5}, {"float_": 2.5, "threadIdx_": 33}]


def test_inputs_without_randomness_are_said_to_be_fixed(tmp_path: Path, torch: Any) -> None:
    """An arange input is the same on the hidden draw: no hidden_path, and the hidden-seed check says it
    cannot change it instead of claiming a check. A parameter of ones is drawn afresh for each draw."""
    problem = tmp_path / "fixed_inputs.py"
    problem.write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.scale = torch.nn.Parameter(torch.ones(n))\n"
        "    def forward(self, x, y):\n        return x * self.scale + y\n"
        "n = 64\ndef get_inputs():\n    return [torch.arange(n, dtype=torch.float32), torch.randn(n)]\n"
    )
    wl = load_workload(import_torch_problem(problem, tmp_path / "w").path)
    perf = wl.spec.case("perf")
    assert [name for name, gen in perf.inputs.items() if gen.hidden_path] == ["y", "scale"]
    checks = hidden_seed_checks(wl, {"perf"})
    assert checks[0] == "timed outputs on hidden-seed inputs"
    assert checks[1].startswith("hidden-seed check: not possible for data-file inputs x")
