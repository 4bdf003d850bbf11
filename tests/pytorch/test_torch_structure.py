"""`kernelopt import-torch` of problems whose get_inputs() makes structured matrices from random
numbers (KernelBench level 1: #13 symmetric ``(A + A.T) / 2``, #14 ``torch.triu(torch.rand(N, N))``,
#15 ``torch.tril``): the structure every CPU draw shows goes into the input's generator, fitted
to the elements it keeps, and is said in the notes; a dense input gets none. End to end (the
pretend GPU of tests/fakegpu.py, PyTorch on the CPU as the reference): a kernel that relies on
the structure (reads only the upper triangles of A and B) passes ``kernelopt evaluate``, and fails
where the inputs are drawn dense.

Every test needs torch and skips without it (CI); the parts without torch are in
tests/evaluation/test_structured_inputs.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakegpu import evaluate_then_redrawn

from kernelopt_mcp.evaluation.fresh_inputs import STRUCTURED_DRAW
from kernelopt_mcp.evaluation.inputs import materialize
from kernelopt_mcp.input_structure import Structure
from kernelopt_mcp.torch_import import TorchImportOptions, TorchImportResult, import_torch_problem
from kernelopt_mcp.torch_reference import jobs_for
from kernelopt_mcp.workload import load_workload

MATMUL = """
class Model(nn.Module):
    def forward(self, A, B):
        return {forward}


N = 40


def get_inputs():
{inputs}
    return [A, B]


def get_init_inputs():
    return []
"""
PROBLEMS = {
    "triu": ("torch.triu(torch.matmul(A, B))", "    A = torch.triu(torch.rand(N, N))\n"
             "    B = torch.triu(torch.rand(N, N))"),
    "tril": ("torch.tril(torch.matmul(A, B))", "    A = torch.tril(torch.rand(N, N))\n"
             "    B = torch.tril(torch.rand(N, N))"),
    "symmetric": ("torch.matmul(A, B)", "    A = torch.rand(N, N)\n    A = (A + A.T) / 2\n    B = torch.rand(N, N)\n"
                  "    B = (B + B.T) / 2"),
    "dense": ("torch.matmul(A, B)", "    A = torch.rand(N, N) * 2 - 1\n    B = torch.rand(N, N) * 2 - 1"),
    "batched": ("torch.bmm(A, B)", "    A = torch.triu(torch.rand(3, N, N), diagonal=1)\n"
                "    B = torch.tril(torch.randn(3, N, N) + 2)"),
}


def imported(tmp_path: Path, kind: str) -> TorchImportResult:
    forward, inputs = PROBLEMS[kind]
    problem = tmp_path / f"{kind}_matmul.py"
    problem.write_text("import torch\nimport torch.nn as nn\n" + MATMUL.format(forward=forward, inputs=inputs))
    return import_torch_problem(problem, tmp_path / kind, TorchImportOptions(probe_s=2.0, search_s=10.0))


@pytest.mark.parametrize("kind", ["triu", "tril", "symmetric"])
def test_the_structure_of_get_inputs_values_goes_into_every_cases_generator(
    tmp_path: Path, torch: Any, kind: str
) -> None:
    result = imported(tmp_path, kind)
    assert len(result.spec.cases) >= 2
    for case in result.spec.cases:
        for name in ("A", "B"):
            gen = case.inputs[name]
            assert gen.generator == "uniform" and gen.structure == Structure(kind=kind), (case.name, gen)  # type: ignore[union-attr]
            # fitted to the kept elements: with a triangle's zeros the fit would start at 0 (their minimum)
            assert 0 < gen.low < gen.high < 1  # type: ignore[union-attr]
    lines = [n for n in result.notes if "no generator reproduces" in n]
    assert len(lines) == 2, result.notes
    assert all(f"(structure {kind})" in n and "a kernel may rely on it" in n for n in lines), lines
    # drawn on the host, every case's matrices have it
    wl = load_workload(result.path)
    for ci in materialize(wl, 3, tmp_path / "inputs").values():
        a = ci.arrays["A"].astype(np.float64)
        want = {"triu": np.triu(a), "tril": np.tril(a), "symmetric": a.T}[kind]
        assert np.array_equal(a, want) and np.count_nonzero(a) > a.size // 3


def test_a_dense_input_and_a_batch_of_triangles(tmp_path: Path, torch: Any) -> None:
    dense = imported(tmp_path, "dense")
    gen = dense.spec.cases[0].inputs["A"]
    assert gen.structure is None and gen.low < 0 < gen.high  # type: ignore[union-attr]
    assert all("structure" not in n for n in dense.notes)
    batched = imported(tmp_path, "batched")
    a, b = (batched.spec.cases[0].inputs[n] for n in ("A", "B"))
    assert a.structure == Structure(kind="triu", diagonal=1) and b.structure == Structure(kind="tril")  # type: ignore[union-attr]
    assert any("upper triangular matrices from diagonal 1 (structure triu)" in n for n in batched.notes), batched.notes
    # randn + 2 over the kept triangle, not its zeros
    assert b.low > 0 and 1.5 < (b.low + b.high) / 2 < 2.5  # type: ignore[union-attr]


KERNEL = """\
__device__ char ko_fake_mode[] = "KO_FAKE_TRIMATMUL";  // the pretend GPU computes what this kernel does

// out = triu(A @ B) for upper triangular A and B: element (i, j >= i) sums A[i][k] B[k][j] over
// i <= k <= j only (the zero triangles are never read), and the lower triangle is written as zeros.
{prototype} {{
    int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N || j >= N) return;
    float acc = 0.0f;
    for (int k = i; k <= j; ++k) acc += A[i * N + k] * B[k * N + j];
    out[i * N + j] = j >= i ? acc : 0.0f;
}}
"""


def test_a_kernel_relying_on_the_triangles_passes_on_the_imported_inputs_and_fails_on_dense_ones(
    tmp_path: Path, torch: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    result = imported(tmp_path, "triu")
    assert [p.name for p in result.spec.signature.params] == ["A", "B", "out", "N"]

    def dense(spec: dict[str, Any]) -> None:  # the structure taken out, as the inputs were drawn before
        for case in spec["cases"]:
            for gen in case["inputs"].values():
                gen.pop("structure", None)

    passed, failed = evaluate_then_redrawn(tmp_path, result.path, KERNEL.format(prototype=result.c_prototype),
                                           {"grid": ["ceil_div(N, 16)", "ceil_div(N, 16)"],
                                            "block": [16, 16]}, capsys, dense)
    assert passed["status"] == "ok", passed["message"]
    assert failed["status"] == "mismatch", failed["message"]


def test_the_pytorch_reference_draws_the_structure_the_harness_draws(tmp_path: Path, torch: Any) -> None:
    """Where the harness draws the inputs (input_draw, structured_draw), the reference child's jobs
    carry the draw's structure to its filler (torch_fill.py: the harness's own kernels); without
    the feature they name the host's structured files."""
    wl = load_workload(imported(tmp_path, "triu").path)
    cases = list(wl.spec.cases)
    names = {c.name for c in cases}
    for structured in (True, False):
        data = materialize(wl, 3, tmp_path / f"in-{structured}", on_device=names,
                           draw_features={STRUCTURED_DRAW} if structured else ())
        for job in jobs_for(wl, "validation", cases, data, tmp_path / f"expected-{structured}"):
            n = job.case.scalars["N"]
            for name in ("A", "B"):
                entry = job.request["buffers"][name]
                if structured:
                    assert entry["draw"]["spec"]["structure"] == {"kind": "triu", "diagonal": 0, "rows": n, "cols": n}
                else:
                    a = np.fromfile(entry["file"], dtype="<f4").reshape(n, n)
                    assert "draw" not in entry and np.array_equal(a, np.triu(a))
