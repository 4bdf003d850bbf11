"""`kernelopt import-torch` of a problem whose get_inputs() makes a float input of a few values from
random numbers (KernelBench level 1 #100 HingeLoss: ``torch.randint(0, 2, (N,)).float() * 2 - 1``,
targets of -1 or +1): the input is drawn as a ``choice`` of those values in every case, and the
notes say so; the others keep their generators. End to end (the pretend GPU of tests/fakegpu.py,
PyTorch on the CPU as the reference): a kernel that relies on the targets being -1 or +1
(``t > 0 ? 1 - p : 1 + p``) passes ``kernelopt evaluate``, and is judged a mismatch where the targets
are drawn from the continuous uniform an import fitted before (their mean and spread: [-1, 1]).

Every test needs torch and skips without it (CI); the parts without torch are in
tests/evaluation/test_choice_inputs.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakegpu import evaluate_then_redrawn

from kernelopt_mcp.dtypes import DType
from kernelopt_mcp.evaluation.fresh_inputs import CHOICE_DRAW
from kernelopt_mcp.evaluation.inputs import materialize
from kernelopt_mcp.evaluation.protocol import FreshSpec
from kernelopt_mcp.input_choice import Choice, table_bits
from kernelopt_mcp.torch_fill import choice_args
from kernelopt_mcp.torch_import import TorchImportOptions, TorchImportResult, import_torch_problem
from kernelopt_mcp.torch_reference import jobs_for
from kernelopt_mcp.workload import load_workload

HINGE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    # a hinge loss per element (KernelBench #100 takes its mean)
    def forward(self, predictions, targets):
        return torch.clamp(1 - predictions * targets, min=0)


batch_size = 4096


def get_inputs():
    return [torch.randn(batch_size), {targets}]


def get_init_inputs():
    return []
"""
TARGETS = {
    "signs": "torch.randint(0, 2, (batch_size,)).float() * 2 - 1",
    "dtype16": "(torch.randint(0, 2, (batch_size,)) * 2 - 1).to(torch.float16).float() * 0.5",
    "continuous": "torch.rand(batch_size) * 2 - 1",
}


def imported(tmp_path: Path, kind: str) -> TorchImportResult:
    problem = tmp_path / f"hinge_{kind}.py"
    problem.write_text(HINGE.replace("{targets}", TARGETS[kind]))
    return import_torch_problem(problem, tmp_path / kind, TorchImportOptions(probe_s=2.0, search_s=10.0))


def test_targets_of_a_few_values_are_drawn_as_a_choice_of_them_in_every_case(tmp_path: Path, torch: Any) -> None:
    result = imported(tmp_path, "signs")
    assert len(result.spec.cases) >= 2
    for case in result.spec.cases:
        assert case.inputs["targets"] == Choice(generator="choice", values=[-1.0, 1.0]), case.name
        assert case.inputs["predictions"].generator == "normal"
    lines = [n for n in result.notes if "no generator reproduces" in n]
    assert lines == ["input 'targets' is made by operations on random numbers in get_inputs(), which no generator "
                     "reproduces: drawn choice of its 2 values [-1, 1], each equally likely: get_inputs' own values "
                     "take only these in every draw, so a kernel may rely on them"], result.notes
    # drawn on the host, every case's targets are -1 or +1, both of them
    wl = load_workload(result.path)
    for ci in materialize(wl, 3, tmp_path / "inputs").values():
        if ci.arrays["targets"].size > 32:
            assert sorted(set(ci.arrays["targets"].tolist())) == [-1.0, 1.0]
    # other values of the set are taken as they are; a continuous input keeps its uniform
    halves = imported(tmp_path, "dtype16").spec.cases[0].inputs["targets"]
    assert halves == Choice(generator="choice", values=[-0.5, 0.5])
    continuous = imported(tmp_path, "continuous")
    assert continuous.spec.cases[0].inputs["targets"].generator == "uniform"
    assert all("choice" not in n for n in continuous.notes)


KERNEL = """\
__device__ char ko_fake_mode[] = "KO_FAKE_HINGE";  // the pretend GPU computes what this kernel does

// max(0, 1 - p * t) for targets t of -1 or +1 only: no multiply, the sign picks the branch
{prototype} {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= batch_size) return;
    float p = predictions[i];
    out[i] = fmaxf(targets[i] > 0.0f ? 1.0f - p : 1.0f + p, 0.0f);
}}
"""


def test_a_kernel_relying_on_the_targets_values_passes_on_the_import_and_fails_on_a_continuous_fit(
    tmp_path: Path, torch: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    result = imported(tmp_path, "signs")
    assert [p.name for p in result.spec.signature.params] == ["predictions", "targets", "out", "batch_size"]

    def continuous(spec: dict[str, Any]) -> None:  # the targets drawn as the continuous fit made them before
        for case in spec["cases"]:
            assert case["inputs"]["targets"] == {"generator": "choice", "values": [-1.0, 1.0]}
            case["inputs"]["targets"] = {"generator": "uniform", "low": -1.0, "high": 1.0}

    passed, failed = evaluate_then_redrawn(tmp_path, result.path, KERNEL.format(prototype=result.c_prototype),
                                           {"grid": ["ceil_div(batch_size, 256)"], "block": [256]}, capsys, continuous)
    assert passed["status"] == "ok", passed["message"]
    assert failed["status"] == "mismatch", failed["message"]


def test_the_pytorch_reference_draws_the_choice_the_harness_draws(tmp_path: Path, torch: Any) -> None:
    """Where the harness draws the inputs (input_draw, choice_draw), the reference child's jobs carry
    the choice to its filler (torch_fill.py: the harness's own kernel, the same table); without the
    feature they name the host's files of -1 and +1."""
    wl = load_workload(imported(tmp_path, "signs").path)
    cases = list(wl.spec.cases)
    names = {c.name for c in cases}
    for drawn in (True, False):
        data = materialize(wl, 3, tmp_path / f"in-{drawn}", on_device=names,
                           draw_features={CHOICE_DRAW} if drawn else ())
        for job in jobs_for(wl, "validation", cases, data, tmp_path / f"expected-{drawn}"):
            entry = job.request["buffers"]["targets"]
            if drawn:
                spec = FreshSpec.model_validate(entry["draw"]["spec"])
                assert spec == FreshSpec(kind="choice", values=[-1.0, 1.0])
                assert choice_args(spec, DType.float32).bits == tuple(table_bits([-1.0, 1.0], DType.float32))
            else:
                values = np.fromfile(entry["file"], dtype="<f4")
                assert "draw" not in entry and set(values.tolist()) <= {-1.0, 1.0}
    # the values an import takes from torch's tensors are the dtype's own: the table keeps their bits
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        t = (torch.randint(0, 2, (64,)) * 2 - 1).to(dtype) * 0.375
        values = sorted({float(v) for v in t.float().tolist()})
        ours = table_bits(values, DType(str(dtype).removeprefix("torch.")))
        theirs = sorted({int(b) for b in t.view(torch.int16 if t.element_size() == 2 else torch.int32).tolist()})
        assert sorted(b if b >= 0 else b + (1 << (8 * t.element_size())) for b in theirs) == sorted(ours)
