"""`kernelopt import-torch` at KernelBench's real sizes: the performance case is drawn on torch's
meta device (nothing of its size is computed or written), with only what no generator makes built
on the CPU, bounded; a problem the meta device cannot run falls back to the CPU where it is small
enough and is refused, with the reason, where it is not.

Every test needs torch and skips without it (CI).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernelopt_mcp.torch_import import TorchImportOptions, import_torch_problem
from kernelopt_mcp.torch_problem import TorchProblemError
from kernelopt_mcp.workload import load_workload


def problem(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text("import torch\nimport torch.nn as nn\n\n" + body)
    return path


def written_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


BIG_MATMUL = """
class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)


N = 32768


def get_inputs():
    return [torch.rand(N, N), torch.rand(N, N)]
"""


def test_gigabytes_of_inputs_import_in_seconds_and_write_kilobytes(tmp_path: Path, torch: Any) -> None:
    """Two 32768 x 32768 float32 inputs (4 GiB each) and their product: the CPU would need 12 GiB
    and hours; the meta device gives the shapes, generators and FLOPs at once."""
    began = time.monotonic()
    result = import_torch_problem(problem(tmp_path, "big_matmul", BIG_MATMUL), tmp_path / "w")
    assert time.monotonic() - began < 60
    assert written_bytes(tmp_path / "w") < 1 << 20 and not (tmp_path / "w" / "data").exists()
    wl = load_workload(result.path)
    perf = wl.spec.case("perf")
    assert perf.scalars == {"N": 32768}
    assert {k: g.model_dump() for k, g in perf.inputs.items()} == {
        "A": {"generator": "uniform", "low": 0.0, "high": 1.0}, "B": {"generator": "uniform", "low": 0.0, "high": 1.0}}
    assert wl.spec.cost.flops == "2*N*N*N"
    assert wl.spec.imported is not None and wl.spec.imported.sizes["perf"] == {"N": 32768}
    assert wl.spec.imported.forward == ["A", "B"] and wl.spec.imported.output == "out"


ITEM = """
class Model(nn.Module):
    def forward(self, x):
        return x * x.abs().max().item()  # a Python number from the data: nothing to compute on the meta device


n = {n}


def get_inputs():
    return [torch.randn(n, n)]
"""


def test_a_forward_calling_item_runs_on_the_cpu_where_small_and_is_refused_where_not(
    tmp_path: Path, torch: Any
) -> None:
    small = import_torch_problem(problem(tmp_path, "item_small", ITEM.format(n=512)), tmp_path / "small")
    ran = [n for n in small.notes if n.startswith("the performance case ran on the CPU")]
    assert ran and "fails on the meta device" in ran[0] and ".item() cannot be called on meta tensors" in ran[0]
    assert small.spec.case("perf").inputs["x"].model_dump() == {"generator": "normal", "mean": 0.0, "std": 1.0}

    path = problem(tmp_path, "item_big", ITEM.format(n=4096))  # 64 MiB of input and output: more than allowed here
    with pytest.raises(TorchProblemError, match=r"needs the CPU \(it fails on the meta device .*\.item\(\).*\), but "
                       r"its buffers take about 0\.125 GiB \(more than 0\.0312 GiB\)"):
        import_torch_problem(path, tmp_path / "big", TorchImportOptions(max_cpu_bytes=32 << 20))
    assert not (tmp_path / "big").exists()


CAUSAL = """
class Model(nn.Module):
    def __init__(self, seq):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq)).view(1, seq, seq))

    def forward(self, x):
        att = (self.proj(x) @ x.transpose(-2, -1)).masked_fill(self.bias[:, :x.size(1), :x.size(1)] == 0, float("-inf"))
        return torch.softmax(att, dim=-1) @ x


batch = 4
seq = 256
dim = 64


def get_inputs():
    return [torch.rand(batch, seq, dim)]


def get_init_inputs():
    return [seq]
"""


def test_a_causal_mask_keeps_the_modules_values_at_every_size(tmp_path: Path, torch: Any) -> None:
    """The mask is not random and not constant: the module alone is built on the CPU at the performance
    sizes for it (no inputs, no forward), and each case stores it as a small data file."""
    wl = load_workload(import_torch_problem(problem(tmp_path, "causal", CAUSAL), tmp_path / "w").path)
    assert wl.spec.imported is not None
    assert wl.spec.imported.parameters["bias"].drawn_from is None
    assert wl.spec.imported.state == {"proj_weight": "proj.weight", "proj_bias": "proj.bias", "bias": "bias"}
    for case in wl.spec.cases:
        gen = case.inputs["bias"]
        seq = int(case.scalars["seq"])
        assert gen.generator == "file" and gen.hidden_path is None
        mask = np.fromfile(wl.data_path(gen.path), dtype=np.float32).reshape(seq, seq)
        assert np.array_equal(mask, np.tril(np.ones((seq, seq), np.float32))), case.name
        assert case.inputs["proj_weight"].generator == "uniform" and case.inputs["x"].generator == "uniform"


HINGE = """
class Model(nn.Module):
    def forward(self, predictions, targets):
        return torch.clamp(1 - predictions * targets, min=0)


batch = 4096


def get_inputs():
    return [torch.rand(batch), torch.randint(0, 2, (batch,)).float() * 2 - 1]
"""


def test_an_input_made_by_operations_on_random_numbers_gets_a_generator_of_its_range(
    tmp_path: Path, torch: Any
) -> None:
    """KernelBench's hinge loss draws its targets as randint(0, 2) * 2 - 1: no generator makes exactly
    that, so they are drawn as a choice of the two values they take (the note says so), never stored
    (tests/pytorch/test_torch_choice.py has more)."""
    result = import_torch_problem(problem(tmp_path, "hinge", HINGE), tmp_path / "w")
    assert not (tmp_path / "w" / "data").exists()
    for case in result.spec.cases:
        assert case.inputs["targets"].model_dump(mode="json") == {"generator": "choice", "values": [-1.0, 1.0]}
    assert any(n.startswith("input 'targets' is made by operations on random numbers") for n in result.notes)


FIXED_BIG = """
class Model(nn.Module):
    def forward(self, x, positions):
        return x + positions


n = 1 << 27


def get_inputs():
    return [torch.rand(n), torch.arange(n, dtype=torch.float32)]
"""


def test_a_large_input_no_generator_makes_is_refused_with_the_reason(tmp_path: Path, torch: Any) -> None:
    with pytest.raises(TorchProblemError, match=r"argument 'positions' is made without random numbers and is not "
                       r"constant.*takes 512 MiB \(more than 256 MiB\)"):
        import_torch_problem(problem(tmp_path, "fixed_big", FIXED_BIG), tmp_path / "w")
    assert not (tmp_path / "w").exists()


def test_a_shape_written_as_a_tuple_is_scaled_like_a_size_constant(tmp_path: Path) -> None:
    """``input_shape = (32768,)`` (KernelBench's loss and scan problems): each element above 1 is a
    size constant of its own (``input_shape_0``), so the correctness cases run at small sizes and
    the performance case as written; a 1 (a broadcast dimension) stays."""
    pytest.importorskip("torch", reason="torch is not installed (pip install torch): PyTorch problems cannot be run")
    from kernelopt_mcp.torch_import import import_torch_problem
    from kernelopt_mcp.torch_problem import parse_problem

    text = (
        "import torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n    def forward(self, x, y):\n        return (x * y).sum(dim=1)\n\n"
        "batch_size = 64\ninput_shape = (4096, 1)\n\n"
        "def get_inputs():\n    return [torch.rand(batch_size, *input_shape), torch.rand(batch_size, *input_shape)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    assert ([(c.name, c.value) for c in parse_problem(text, "p.py").constants]
            == [("batch_size", 64), ("input_shape_0", 4096)])
    path = tmp_path / "p.py"
    path.write_text(text)
    result = import_torch_problem(path, tmp_path / "wl")
    sizes = result.spec.imported.sizes  # type: ignore[union-attr]
    assert sizes["perf"] == {"batch_size": 64, "input_shape_0": 4096}
    assert all(s["input_shape_0"] < 4096 for case, s in sizes.items() if case != "perf"), sizes


def test_running_out_of_memory_on_the_cpu_is_a_refusal_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's allocator reports an exhausted CPU as a RuntimeError: the import says so in one line
    (a TorchProblemError, as the suite and the MCP tool report refusals), not an importer crash."""
    pytest.importorskip("torch", reason="torch is not installed (pip install torch): PyTorch problems cannot be run")
    from kernelopt_mcp import torch_import
    from kernelopt_mcp.torch_problem import TorchProblemError

    def exhausted(*args: object, **kwargs: object) -> None:
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you tried "
                           "to allocate 4294967296 bytes")

    monkeypatch.setattr(torch_import, "draw_cases", exhausted)
    path = tmp_path / "p.py"
    path.write_text("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n"
                    "        return x\n"
                    "def get_inputs():\n    return [torch.rand(8)]\n")
    with pytest.raises(TorchProblemError,
                       match=r"the CPU ran out of memory building or running the module .*can't allocate memory"):
        torch_import.import_torch_problem(path, tmp_path / "wl")


WIDE_STATE = """
batch_size = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2048, 2048)

    def forward(self, x):
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.rand(batch_size, 2048)]


def get_init_inputs():
    return []
"""


def test_a_module_whose_state_exceeds_the_case_bound_at_every_size_still_gets_a_smaller_case(
    tmp_path: Path, torch: Any
) -> None:
    """16 MiB of weights at every batch size, correctness cases capped at 8 MiB: one smaller batch is still a
    correctness case (cheaper on the CPU than the performance case, which stays on the meta device), and the
    notes say the cap was raised for it."""
    path = problem(tmp_path, "wide", WIDE_STATE)
    capped = TorchImportOptions(max_correctness_bytes=8 << 20)
    imported = import_torch_problem(path, tmp_path / "wl", capped)
    cases = load_workload(imported.path).spec.cases
    assert [c.kind for c in cases] == ["correctness", "performance"]
    assert all(c.scalars.get("batch_size", 64) < 64 for c in cases if c.kind == "correctness")
    notes = " ".join(imported.notes)
    assert "one correctness case of up to" in notes and "performance case ran on the CPU" not in notes, notes
    # a cap the state fits under changes nothing of the kind
    plain = import_torch_problem(path, tmp_path / "plain").notes
    assert not any("correctness case of up to" in n for n in plain), plain
