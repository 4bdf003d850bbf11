"""`kernelopt import-torch`: KernelBench-style PyTorch problems (tests/torch_problems/) become
workloads that PyTorch is the reference of: a generator per input, the mapping of buffers to the
module, nothing of full size written; unsupported ones fail clearly. A workload imported in the
earlier format (stored draws, a lookup oracle) still loads and evaluates.

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
from torch_variants import written_for_the_gpu

from kernelopt_mcp.cli import main
from kernelopt_mcp.evaluation.fresh_inputs import case_fresh
from kernelopt_mcp.evaluation.inputs import hidden_seed_checks, materialize
from kernelopt_mcp.evaluation.oracle import run_oracle
from kernelopt_mcp.launch import LaunchSpec
from kernelopt_mcp.torch_import import (
    TorchImportOptions,
    import_torch_problem,
    size_variants,
)
from kernelopt_mcp.torch_problem import TorchProblemError, parse_problem, require_torch
from kernelopt_mcp.workload import Workload, case_shape, load_workload

PROBLEMS = Path(__file__).parents[1] / "torch_problems"
SUPPORTED = ["elementwise_gelu", "reduction_sum", "matmul", "linear_relu", "scale_int_arg", "conv2d_relu_bias",
             "vector_add", "batchnorm_training", "max_with_indices"]


def module_at(problem: Path, wl: Workload, case_name: str, torch: Any) -> tuple[Any, list[Any]]:
    """The problem's Model and get_inputs() built directly (no kernelopt code) at a case's sizes, as the
    PyTorch reference builds it: the size-constant lines rewritten with imported.sizes, torch seeded
    with imported.seed."""
    assert wl.spec.imported is not None
    sizes = wl.spec.imported.sizes[case_name]
    lines = []
    for line in problem.read_text().splitlines():
        names = [n.strip() for n in line.split("=", 1)[0].split(",")] if re.match(r"^[\w, ]+=[^=]", line) else []
        if names and all(n in sizes for n in names):
            line = f"{', '.join(names)} = {', '.join(str(sizes[n]) for n in names)}"
        lines.append(line)
    ns: dict[str, Any] = {"__name__": "problem"}
    exec(compile("\n".join(lines), str(problem), "exec"), ns)  # noqa: S102 - the test's own problem files
    torch.manual_seed(wl.spec.imported.seed)
    model = ns["Model"](*(ns["get_init_inputs"]() if "get_init_inputs" in ns else []))
    return model, list(ns["get_inputs"]())


def check_mapping(problem: Path, wl: Workload, torch: Any) -> None:
    """imported.forward names each forward argument (a buffer of the argument's shape and dtype, or a
    scalar of its value), imported.state each parameter and buffer of the module, at every case."""
    imported = wl.spec.imported
    assert imported is not None and imported.outputs == [p.name for p in wl.signature.outputs]
    for case in wl.spec.cases:
        model, inputs = module_at(problem, wl, case.name, torch)
        assert len(imported.forward) == len(inputs)
        for name, value in zip(imported.forward, inputs, strict=True):
            param = wl.signature.param(name)
            if isinstance(value, torch.Tensor):
                assert case_shape(param, case.scalars) == (tuple(value.shape) or (1,)), (case.name, name)
                assert param.dtype.value == str(value.dtype).removeprefix("torch.").replace("bool", "uint8")
            else:
                assert case.scalars[name] == value
        state = dict([*model.named_parameters(), *model.named_buffers()])
        assert sorted(imported.state.values()) == sorted(state)
        for buffer, dotted in imported.state.items():
            assert case_shape(wl.signature.param(buffer), case.scalars) == (tuple(state[dotted].shape) or (1,))


@pytest.mark.parametrize("problem", SUPPORTED)
def test_supported_problem_becomes_a_workload_of_generators_and_a_mapping(
    problem: str, tmp_path: Path, torch: Any
) -> None:
    """Every input is drawn by a generator (these problems draw their inputs with torch.rand / randn
    and keep no state but BatchNorm's counter, a constant), PyTorch is the reference, and nothing but
    workload.json and the problem is written."""
    path = PROBLEMS / f"{problem}.py"
    result = import_torch_problem(path, tmp_path / problem)
    wl = load_workload(tmp_path / problem)
    assert wl.spec == result.spec and wl.initial_cu is None and wl.reference_cu is None and wl.oracle_path is None
    assert wl.spec.reference.torch == "problem.py" and wl.torch_problem is not None
    assert wl.torch_problem.read_text() == path.read_text()
    assert sorted(p.name for p in (tmp_path / problem).iterdir()) == ["problem.py", "workload.json"]
    assert {c.kind for c in wl.spec.cases} == {"correctness", "performance"}
    for case in wl.spec.cases:
        assert set(case.inputs) == {p.name for p in wl.signature.inputs}
        kinds = {name: gen.generator for name, gen in case.inputs.items()}
        assert "file" not in kinds.values(), kinds
    assert not case_fresh(wl, wl.spec.performance_cases[0]).fixed or problem == "batchnorm_training"
    check_mapping(path, wl, torch)
    assert wl.spec.imported is not None
    assert set(wl.spec.imported.sizes) == {c.name for c in wl.spec.cases}


def test_the_generators_are_the_problems_own(tmp_path: Path, torch: Any) -> None:
    """torch.randn -> normal(0, 1), torch.rand -> uniform [0, 1), torch.randint(lo, hi) -> randint, a
    parameter -> its uniform rule at each case's sizes; a Python int forward argument is a scalar."""
    problem = tmp_path / "gens.py"
    problem.write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
        "        self.fc = torch.nn.Linear(n, n)\n"
        "    def forward(self, x, u, idx, k):\n        return self.fc(x * u)[:, :k] + idx[:, None]\n"
        "batch = 32\nn = 48\ndef get_inputs():\n"
        "    return [torch.randn(batch, n), torch.rand(batch, n), torch.randint(3, 9, (batch,)), 4]\n"
        "def get_init_inputs():\n    return [n]\n"
    )
    wl = load_workload(import_torch_problem(problem, tmp_path / "w").path)
    assert wl.spec.imported is not None
    assert wl.spec.imported.forward == ["x", "u", "idx", "k"]
    assert wl.spec.imported.state == {"fc_weight": "fc.weight", "fc_bias": "fc.bias"}
    for case in wl.spec.cases:
        gens = {name: gen.model_dump() for name, gen in case.inputs.items()}
        assert gens["x"] == {"generator": "normal", "mean": 0.0, "std": 1.0}
        assert gens["u"] == {"generator": "uniform", "low": 0.0, "high": 1.0}
        assert gens["idx"] == {"generator": "randint", "low": 3, "high": 9}
        bound = 1 / (wl.spec.imported.sizes[case.name]["n"] ** 0.5)  # nn.Linear's default: U(-1/sqrt(n), 1/sqrt(n))
        assert gens["fc_weight"]["generator"] == "uniform" and -bound <= gens["fc_weight"]["low"] < -0.9 * bound
    check_mapping(problem, wl, torch)


OLD_ORACLE_INPUTS = ["a", "b"]


def test_a_workload_imported_with_stored_outputs_still_loads_and_evaluates(tmp_path: Path) -> None:
    """The earlier format: inputs as data files (with a hidden draw), outputs under expected/ and the
    lookup oracle reference.py. It loads, and the oracle gives the stored output for the stored inputs."""
    import importlib.util

    from kernelopt_mcp.torch_store import ORACLE_TEMPLATE, le_bytes, sha256_of

    root = tmp_path / "old"
    (root / "data" / "perf" / "hidden").mkdir(parents=True)
    (root / "expected" / "perf" / "hidden").mkdir(parents=True)
    oracle = ORACLE_TEMPLATE.format(name="vadd", problem="vadd.py", torch_version="2.11", inputs=OLD_ORACLE_INPUTS,
                                    scalars={"n": "int"}, output="out", home=str(root))
    (root / "reference.py").write_text(oracle)
    spec_loader = importlib.util.spec_from_file_location("old_oracle", root / "reference.py")
    assert spec_loader is not None and spec_loader.loader is not None
    module = importlib.util.module_from_spec(spec_loader)
    spec_loader.loader.exec_module(module)
    rng = np.random.default_rng(0)
    index, inputs = {}, {}
    for which in ("", "hidden/"):
        arrays = {name: rng.standard_normal(7).astype(np.float32) for name in OLD_ORACLE_INPUTS}
        for name, array in arrays.items():
            (root / "data" / "perf" / f"{which}{name}.bin").write_bytes(le_bytes(array))
        (root / "expected" / "perf" / f"{which}out.bin").write_bytes(le_bytes(arrays["a"] + arrays["b"]))
        index[module.input_key({**arrays, "n": 7})] = {"case": "perf", "set": "hidden" if which else "validation",
                                                       "path": f"expected/perf/{which}out.bin",
                                                       "dtype": "float32", "shape": [7]}
        inputs[which] = arrays
    (root / "expected" / "index.json").write_text(json.dumps(index))
    spec = {
        "name": "vadd", "signature": {"entry": "vadd", "params": [
            {"kind": "buffer", "name": "a", "dtype": "float32", "role": "in", "shape": ["n"]},
            {"kind": "buffer", "name": "b", "dtype": "float32", "role": "in", "shape": ["n"]},
            {"kind": "buffer", "name": "out", "dtype": "float32", "role": "out", "shape": ["n"]},
            {"kind": "scalar", "name": "n", "dtype": "int32"}]},
        "cases": [{"name": "perf", "kind": "performance", "scalars": {"n": 7}, "inputs": {
            name: {"generator": "file", "path": f"data/perf/{name}.bin", "sha256": sha256_of(inputs[""][name]),
                   "hidden_path": f"data/perf/hidden/{name}.bin"} for name in OLD_ORACLE_INPUTS}}],
        "reference": {"python": "reference.py", "cuda": None}, "deterministic": False,
        "cost": {"bytes": "12*n", "floor_from": "bytes"},
    }
    (root / "workload.json").write_text(json.dumps(spec))
    wl = load_workload(root)
    assert wl.oracle_path == root / "reference.py" and wl.torch_problem is None
    for redraw in (False, True):
        ci = materialize(wl, 1, tmp_path / f"in-{redraw}", redraw=redraw)["perf"]
        expected = run_oracle(wl, "perf", ci.arrays, ci.shapes)["out"]
        assert np.array_equal(expected,
                              inputs["hidden/" if redraw else ""]["a"] + inputs["hidden/" if redraw else ""]["b"])


UNSUPPORTED = {
    "tuple_with_number": r"forward's output 1 \(of 2\) is of type int, not a tensor",
    "dropout": "draws random numbers",
    "scalar_output": "forward's output is of type float, not a tensor",
    "string_input": "must be tensors or Python numbers",
    "no_model": "defines no `class Model",
    "autocast_on_the_gpu": r"torch\.autocast makes each op's dtype depend on the device it runs on",
}


@pytest.mark.parametrize("problem", sorted(UNSUPPORTED))
def test_unsupported_problems_fail_with_the_reason(problem: str, tmp_path: Path, torch: Any) -> None:
    with pytest.raises(TorchProblemError, match=UNSUPPORTED[problem]):
        import_torch_problem(PROBLEMS / "unsupported" / f"{problem}.py", tmp_path / problem)
    assert not (tmp_path / problem).exists() and list(tmp_path.iterdir()) == []


def test_a_problem_written_for_the_gpu_imports_as_the_same_workload(tmp_path: Path, torch: Any) -> None:
    """``.cuda()``, ``device="cuda"``, ``.to("cuda")``, ``torch.set_default_device("cuda")`` and
    ``torch.cuda.synchronize()`` in a problem file (as files outside KernelBench's own write them) mean the
    CPU where the import runs the module, and the meta device where it sizes the performance case: the
    workload is the one of the same problem written for the CPU."""
    plain = (PROBLEMS / "linear_relu.py").read_text()
    gpu = written_for_the_gpu(plain, "torch.randn(batch_size, in_features)")
    (tmp_path / "gpu.py").write_text(gpu)
    (tmp_path / "cpu.py").write_text(plain)
    calls = (torch.set_default_device, torch.cuda.synchronize, torch.cuda.set_device, torch.cuda.current_device)
    on_gpu = load_workload(import_torch_problem(tmp_path / "gpu.py", tmp_path / "g").path)
    alone = load_workload(import_torch_problem(tmp_path / "cpu.py", tmp_path / "c").path)
    assert on_gpu.signature.c_prototype() == alone.signature.c_prototype().replace("cpu", "gpu")
    assert [c.model_dump() for c in on_gpu.spec.cases] == [c.model_dump() for c in alone.spec.cases]
    assert on_gpu.spec.imported == alone.spec.imported
    # nothing of it outlives the import: torch's own calls are back and the default device is the CPU
    assert (torch.set_default_device, torch.cuda.synchronize, torch.cuda.set_device, torch.cuda.current_device) == calls
    assert torch.empty(1).device.type == "cpu"


@pytest.mark.parametrize("spelling", ['torch.autocast(device_type="cuda", dtype=torch.float16)',
                                      "torch.amp.autocast('cuda', torch.bfloat16)", "torch.cuda.amp.autocast()",
                                      "torch.autocast('cpu', dtype=torch.bfloat16)"])
def test_autocast_on_the_gpu_is_refused_however_written_and_off_or_on_the_cpu_imports(
        spelling: str, tmp_path: Path, torch: Any) -> None:
    """The dtypes CUDA's autocast gives each op are not the CPU's (softmax stays float32 there), and the
    CPU's autocast does nothing to the GPU's tensors, so a forward under either cannot be imported from
    a run on the CPU; switched off it is plain float32, and torch's own autocast is back after the import."""
    plain = (PROBLEMS / "unsupported" / "autocast_on_the_gpu.py").read_text()
    written = 'torch.autocast("cuda", dtype=torch.float16)'
    assert written in plain
    (tmp_path / "p.py").write_text(plain.replace(written, spelling))
    with pytest.raises(TorchProblemError, match=r"torch\.autocast makes each op's dtype depend on the device"):
        import_torch_problem(tmp_path / "p.py", tmp_path / "w")
    assert torch.autocast.__module__.startswith("torch.") and torch.cuda.amp.autocast.__module__.startswith("torch.")
    for off in ('torch.autocast("cuda", torch.float16, False)', "torch.autocast(device_type='cpu', enabled=False)"):
        (tmp_path / "off.py").write_text(plain.replace(written, off))
        imported = import_torch_problem(tmp_path / "off.py", tmp_path / "off", TorchImportOptions(overwrite=True))
        wl = load_workload(imported.path)
        assert [b.dtype.value for b in wl.signature.outputs] == ["float32"]


@pytest.mark.parametrize("wrap", ["({},)", "[{}]"])
def test_one_output_wrapped_in_a_tuple_or_list_is_the_output(wrap: str, tmp_path: Path, torch: Any) -> None:
    """``return (x,)`` or ``return [x]``: one output however it is wrapped (the expected values are
    the element's, checked against a plain import of the same module)."""
    plain = (PROBLEMS / "elementwise_gelu.py").read_text()
    body = plain.split("def forward", 1)[1]
    returned = body.split("return ", 1)[1].split("\n", 1)[0]
    problem = tmp_path / "wrapped.py"
    problem.write_text(plain.replace(f"return {returned}", f"return {wrap.format(returned)}", 1))
    wrapped = load_workload(import_torch_problem(problem, tmp_path / "w").path)
    (tmp_path / "plain.py").write_text(plain)
    alone = load_workload(import_torch_problem(tmp_path / "plain.py", tmp_path / "p").path)
    assert wrapped.signature.c_prototype() == alone.signature.c_prototype().replace("plain", "wrapped")
    assert [c.model_dump() for c in wrapped.spec.cases] == [c.model_dump() for c in alone.spec.cases]


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
    assert [(n, k) for n, k, _ in variants] == [("small_odd", "correctness"), ("mid_odd", "correctness"),
                                                ("perf", "performance")]
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
    with pytest.raises(TorchProblemError, match=r"install torch .any build.*the GPU machine needs it too"):
        require_torch()
    assert main(["import-torch", str(PROBLEMS / "matmul.py"), "-o", str(tmp_path / "w"), "--in-process"]) == 2
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


def test_inputs_without_randomness_are_constants_or_small_files(tmp_path: Path, torch: Any) -> None:
    """An arange input is the same on every draw: a data file without hidden_path at each case (its
    values, which the hidden-seed check says it cannot change), and a tensor of ones get_inputs makes
    is a constant; the parameter of ones is drawn, the random input drawn by its generator."""
    problem = tmp_path / "fixed_inputs.py"
    problem.write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.scale = torch.nn.Parameter(torch.ones(n))\n"
        "    def forward(self, x, y, w):\n        return x * self.scale + y * w\n"
        "n = 64\ndef get_inputs():\n    return [torch.arange(n, dtype=torch.float32), torch.randn(n), torch.ones(n)]\n"
    )
    wl = load_workload(import_torch_problem(problem, tmp_path / "w").path)
    for case in wl.spec.cases:
        x, y, w, scale = (case.inputs[k] for k in ("x", "y", "w", "scale"))
        size = int(case.scalars["n"])
        assert x.generator == "file" and x.hidden_path is None and x.drawn_from is None
        data = np.fromfile(wl.data_path(x.path), dtype=np.float32)
        assert np.array_equal(data, np.arange(size, dtype=np.float32)), case.name
        assert y.model_dump() == {"generator": "normal", "mean": 0.0, "std": 1.0}
        assert w.model_dump() == {"generator": "constant", "value": 1.0}
        assert scale.model_dump() == {"generator": "uniform", "low": 0.5, "high": 1.5}
    assert sorted(str(p.relative_to(tmp_path / "w")) for p in (tmp_path / "w" / "data").rglob("*.bin")) == sorted(
        f"data/{c.name}/x.bin" for c in wl.spec.cases)
    checks = hidden_seed_checks(wl, {"perf"})
    assert checks[0] == "timed outputs on hidden-seed inputs"
    assert "not possible for data-file inputs x" in checks[1]
