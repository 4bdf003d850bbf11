"""PyTorch as the reference of an imported problem (``reference.torch``): the expected outputs are
the module's own, computed by torch in a confined child on the inputs the harness saw.

On the CPU the harness is the pretend GPU of tests/fakegpu.py (c = a + b, inputs read from files:
it has no device draws), so the child reads the same files and runs the module on the CPU; the
device draws (the harness's fill kernel in torch) run in tests/gpu/test_torch_reference_gpu.py.
The problem computes ``a + self.b``: ``b`` is a parameter of the module, drawn per case like the
import draws it, so the mapping of buffers to forward arguments and to module state is exercised.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fakegpu import ADD_LAUNCH, TINY_SPEC, kernel, write_harness

from kernelopt_mcp import Candidate, HarnessProcess, LaunchSpec, Session, Settings
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.errors import WorkloadError
from kernelopt_mcp.evaluation.device import device_info
from kernelopt_mcp.evaluation.evaluate import evaluate
from kernelopt_mcp.evaluation.outcomes import EvaluationResult
from kernelopt_mcp.status import Status
from kernelopt_mcp.workload import load_workload

torch = pytest.importorskip("torch",
                            reason="torch is not installed (pip install torch): PyTorch problems cannot be run")

PROBLEM = """\
import torch
import torch.nn as nn

n = 4096


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.b = nn.Parameter(torch.ones(n))

    def forward(self, a):
        return a + self.b{twist}


def get_inputs():
    return [torch.rand(n)]


def get_init_inputs():
    return [n]
"""


def write_problem(parent: Path, *, twist: str = "", drop: str | None = None) -> Path:
    """A workload in the format `kernelopt import-torch` writes for PROBLEM (``twist`` changes the
    module's forward; ``drop`` removes a key of ``imported`` to break the mapping)."""
    spec: dict[str, Any] = json.loads(json.dumps(TINY_SPEC))
    spec["name"] = "torch_add"
    spec["inputs"] = {"a": {"generator": "uniform"}, "b": {"generator": "uniform", "low": 0.5, "high": 1.5}}
    spec["reference"] = {"python": None, "cuda": None, "torch": "problem.py"}
    spec["deterministic"] = False
    spec["imported"] = {
        "forward": ["a"], "state": {"b": "b"}, "output": "c", "seed": 0,
        "sizes": {c["name"]: {"n": c["scalars"]["n"]} for c in spec["cases"]},
        "parameters": {"b": {"default": "constant 1", "drawn_from": {"generator": "uniform", "low": 0.5, "high": 1.5}}},
    }
    if drop:
        del spec["imported"][drop]
    wl = parent / spec["name"]
    wl.mkdir(parents=True)
    (wl / "workload.json").write_text(json.dumps(spec))
    (wl / "problem.py").write_text(PROBLEM.format(twist=twist))
    (wl / "initial.cu").write_text(kernel())
    return wl


def run(tmp_path: Path, wl: Path, *modes: str) -> tuple[list[EvaluationResult], Session]:
    harness = write_harness(tmp_path, "fake")
    workload = find_workload(wl, Settings())
    launch = LaunchSpec.model_validate(ADD_LAUNCH)
    with HarnessProcess(harness, 0) as proc, Session(workload, proc, device_info(harness, 0),
                                                     workdir=tmp_path / "w") as ev:
        return [evaluate(ev, Candidate(kernel(m), launch, [], m or "honest")) for m in modes], ev


def test_the_module_is_the_reference_an_honest_kernel_passes_a_wrong_one_mismatches(tmp_path: Path) -> None:
    (honest, wrong), session = run(tmp_path, write_problem(tmp_path / "wl"), "", "WRONG")
    assert honest.status is Status.ok, honest.message
    assert [c.status for c in honest.cases] == [Status.ok] * 3
    assert wrong.status is Status.mismatch
    assert session.record.expected_from.startswith(f"PyTorch {torch.__version__} on the CPU")
    # one file of expected values per case (float64: this harness compares nothing else; the H200's
    # harness takes the output's own dtype, tests/gpu/test_torch_reference_gpu.py)
    files = sorted(p.name for p in (tmp_path / "w").rglob("c.*"))
    assert files == ["c.f64"] * 3, files


def test_a_module_whose_one_output_is_wrapped_in_a_tuple_is_its_reference(tmp_path: Path) -> None:
    """``return a + self.b,`` (a tuple of one, as modules written for tracing return): the element
    is the expected output, and a kernel that computes something else still mismatches."""
    (honest, wrong), _ = run(tmp_path, write_problem(tmp_path / "wl", twist=","), "", "WRONG")
    assert honest.status is Status.ok, honest.message
    assert wrong.status is Status.mismatch


def test_a_module_written_for_the_gpu_is_the_reference_where_the_child_runs_on_the_cpu(tmp_path: Path) -> None:
    """``a + self.b.cuda()``: CUDA means the CPU where the child has no GPU (this machine)."""
    (honest, wrong), _ = run(tmp_path, write_problem(tmp_path / "wl", twist=".cuda()"), "", "WRONG")
    assert honest.status is Status.ok, honest.message
    assert wrong.status is Status.mismatch


def test_a_module_that_computes_something_else_fails_the_honest_kernel(tmp_path: Path) -> None:
    """The expected values really come from the module: change forward and c = a + b is wrong."""
    (honest,), _ = run(tmp_path, write_problem(tmp_path / "wl", twist=" * 2"), "")
    assert honest.status is Status.mismatch


def test_a_module_that_fails_names_the_case_and_the_error(tmp_path: Path) -> None:
    (wl := write_problem(tmp_path / "wl", twist=".reshape(2, -1)"))
    with pytest.raises(WorkloadError, match=r"the module fails on case 'one'.*RuntimeError"):
        run(tmp_path, wl, "")


@pytest.mark.parametrize("twist", [".double()", " if False else (a + self.b).half()"])
def test_an_output_of_another_dtype_than_imported_is_an_error_not_a_conversion(twist: str, tmp_path: Path) -> None:
    """The module returns another dtype than it did where it was imported (torch.autocast on the GPU
    does that): converting it would check the kernel against values the module never computed in that
    dtype, so the evaluation stops and says why."""
    with pytest.raises(WorkloadError, match=r"the module fails on case 'one'.*output 0 is float(64|16) on cpu, "
                                            r"but float32 where the problem was imported.*torch.autocast"):
        run(tmp_path, write_problem(tmp_path / "wl", twist=twist), "")


def test_reference_torch_without_the_mapping_is_refused_on_load(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match=r"reference.torch needs imported.forward"):
        load_workload(write_problem(tmp_path / "wl", drop="output"))
    with pytest.raises(WorkloadError, match=r"imported.sizes: no size constants for case\(s\) one, odd_1001, n_4096"):
        load_workload(write_problem(tmp_path / "wl2", drop="sizes"))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "bool"])
def test_an_output_written_a_chunk_at_a_time_has_the_bytes_and_figures_of_the_whole(
    torch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: str
) -> None:
    """The reference child writes an output and sums its squares a chunk at a time (a whole float64
    copy of a 7 GiB output ran an 80 GB GPU out of memory): the same bytes as the tensor's own and
    the same figures, non-finite values left out of them, with a chunk that does not divide the size."""
    from kernelopt_mcp import _torch_reference_child as child

    values = torch.linspace(-3, 3, 1001)
    values[[5, 500]] = float("nan")
    values[7] = float("inf")
    out = values.to(getattr(torch, dtype)) if dtype != "int32" else (values.nan_to_num(0, 9, -9) * 100).to(torch.int32)
    monkeypatch.setattr(child, "WRITE_CHUNK", 64)
    figures = child._write_output(torch, out.reshape(7, 11, 13), str(tmp_path / "chunked.bin"))
    host = out.view(torch.int16) if dtype == "bfloat16" else out.to(torch.uint8) if dtype == "bool" else out
    assert (tmp_path / "chunked.bin").read_bytes() == host.numpy().tobytes()
    wide = out.double()
    kept = wide[torch.isfinite(wide)]
    assert figures["elements"] == 1001
    assert figures["finite"] == kept.numel() == (998 if out.is_floating_point() else 1001)
    assert figures["sum_sq"] == pytest.approx(float((kept * kept).sum()), rel=1e-12)
    empty = child._write_output(torch, out[:0], str(tmp_path / "empty.bin"))
    assert empty == {"elements": 0, "finite": 0, "sum_sq": 0.0}
    assert (tmp_path / "empty.bin").read_bytes() == b""


def test_the_tolerance_widens_where_the_module_rounds_more_than_it_allows(tmp_path: Path) -> None:
    """The import sizes a tolerance at scaled-down cases; at a real size a long float32 reduction
    rounds more (a GEMM with K = 8192 made correct kernels mismatch). The reference child measures the
    module's own error against its float64 run on every case and the session widens the tolerance to
    ten times it: an exact kernel passes a module that rounds to 1/64 (3e5 added and taken away), a
    kernel off by 1.0 in one element still mismatches, and the result says by what it was judged."""
    (honest, wrong), session = run(tmp_path, write_problem(tmp_path / "wl", twist=" + 3e5 - 3e5"), "", "WRONG")
    assert honest.status is Status.ok, honest.message
    assert wrong.status is Status.mismatch, wrong.message
    tol = honest.tolerances["c"]
    assert tol.source == "widened" and 0.02 <= tol.rtol <= 0.25 and tol.atol == tol.rtol, tol
    assert session.workload.spec.tolerance_for("c") == tol
    assert f"c's tolerance widened to {tol.rtol:.3g} (was 1e-05, dtype)" in session.record.expected_from
    assert "differs from its float64 result by up to" in session.record.expected_from


def test_an_exact_module_and_a_hand_written_tolerance_are_not_widened(tmp_path: Path) -> None:
    (honest,), session = run(tmp_path, write_problem(tmp_path / "wl"), "")
    assert honest.tolerances["c"].source == "dtype" and honest.tolerances["c"].rtol == 1e-5
    assert "widened" not in session.record.expected_from
    # the measure is said all the same: a float32 add is within one rounding of the float64 one
    own = re.search(r"own result differs from its float64 result by up to (\S+) of", session.record.expected_from)
    assert own is not None and 0 <= float(own.group(1)) < 1e-6, session.record.expected_from
    wl = write_problem(tmp_path / "hand", twist=" + 3e5 - 3e5")
    spec = json.loads((wl / "workload.json").read_text())
    spec["tolerance"] = {"c": {"rtol": 1e-5, "atol": 1e-5}}  # the user's own: judged by it, rounding and all
    (wl / "workload.json").write_text(json.dumps(spec))
    (tmp_path / "2").mkdir()
    (honest,), _ = run(tmp_path / "2", wl, "")
    assert honest.status is Status.mismatch
    assert honest.tolerances["c"].source == "workload"


def test_the_module_s_own_error_leaves_out_what_cannot_size_a_tolerance(torch: Any) -> None:
    """A float32 overflow (inf where float64 is finite) is the kernel's to match, not a reason to
    widen; a float64 result with non-finite values sizes nothing; the figure is a chunk at a time."""
    from kernelopt_mcp import _torch_reference_child as child

    exact = torch.linspace(1, 2, 301, dtype=torch.float64)
    out = exact.float()
    out[10] = float("inf")
    out[20] += 0.01
    figure = child._largest_error(torch, out, exact)["own_error"]
    rms = float(exact.square().mean().sqrt())
    assert figure == pytest.approx(abs(float(out[20]) - float(exact[20])) / (rms + float(exact[20])), rel=1e-9)
    nan = exact.clone()
    nan[3] = float("nan")
    assert child._largest_error(torch, out, nan) == {"own_error_skipped": "the float64 result has non-finite values"}


@pytest.mark.anyio
async def test_the_server_keeps_a_session_whose_tolerance_was_widened(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The server reuses a workload's prepared session while its files are unchanged; a session that
    judges by a widened tolerance is still that workload's: the second call does not run PyTorch's
    reference again (comparing the widened workload with the loaded one prepared it afresh every call)."""
    from fakegpu import in_memory_server

    from kernelopt_mcp import torch_reference
    from kernelopt_mcp.server_config import ServerConfig

    write_problem(tmp_path / "extra", twist=" + 3e5 - 3e5")
    runs: list[int] = []
    real = torch_reference.compute_expected

    def counted(*args: Any, **kwargs: Any) -> Any:
        runs.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch_reference, "compute_expected", counted)
    settings = Settings(harness=write_harness(tmp_path, "fake"), workload_dirs=(tmp_path / "extra",), timeout_s=60)
    args = {"workload": "torch_add", "source": kernel(), "launch": ADD_LAUNCH}
    async with in_memory_server(ServerConfig(settings=settings, workspace=tmp_path / "ws")) as (client, _):
        for _ in range(2):
            result = await client.call_tool("validate", args)
            assert result.structured_content["status"] == "ok", result.structured_content
    assert len(runs) == 1
