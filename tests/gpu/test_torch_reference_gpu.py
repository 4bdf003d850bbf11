"""PyTorch as the reference on the GPU (``reference.torch``): the harness draws every input on the
device, the confined torch child draws the same bytes with the harness's fill kernel
(torch_fill.TorchFiller), runs the module there and hands the outputs, in their dtype, to the
harness's comparison. The problem is tests/pytorch/test_torch_reference.py's ``a + self.b`` (``b`` a drawn
parameter of the module) with the performance case at 2^26 elements (256 MiB per buffer). Its
timed launches are checked against PyTorch on the very draws they got (``checked_expected``): a
kernel that stops computing once warmed up is a ``timed_mismatch`` naming PyTorch.

Run with --run-gpu (scripts/device_gpu_tests.sh tests/gpu/test_torch_reference_gpu.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakegpu import ADD_LAUNCH, kernel
from test_torch_reference import write_problem

from kernelopt_mcp import Candidate, LaunchSpec, Session, Settings
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.evaluation.device import DeviceInfo
from kernelopt_mcp.evaluation.evaluate import evaluate
from kernelopt_mcp.evaluation.harness import HarnessProcess
from kernelopt_mcp.status import Status

pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]

IGNORES_B = """extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + 1.0f;  // b's default value: the dropped-parameter hack
}
"""


# computes c for the first few launches (validation, its repeat, the warm-up), then leaves c as it was
LAZY = """__device__ unsigned ko_calls;
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (ko_calls > 8u * gridDim.x) return;
    if (i < n) c[i] = a[i] + b[i];
    if (threadIdx.x == 0) atomicAdd(&ko_calls, 1u);
}
"""


def _large(wl: Path) -> None:
    spec = json.loads((wl / "workload.json").read_text())
    spec["cases"][-1]["scalars"]["n"] = 1 << 26
    spec["imported"]["sizes"][spec["cases"][-1]["name"]] = {"n": 1 << 26}
    (wl / "workload.json").write_text(json.dumps(spec))


def test_the_module_on_the_gpu_is_the_reference_of_device_drawn_inputs(
    tmp_path: Path, proc: HarnessProcess, device: DeviceInfo,
) -> None:
    wl = write_problem(tmp_path / "wl")
    _large(wl)
    workload = find_workload(wl, Settings())
    launch = LaunchSpec.model_validate(ADD_LAUNCH)
    with Session(workload, proc, device, workdir=tmp_path / "w") as ev:
        honest = evaluate(ev, Candidate(kernel(), launch, [], "honest"))
        dropped = evaluate(ev, Candidate(IGNORES_B, launch, [], "ignores b"), benchmark=False)
        lazy = evaluate(ev, Candidate(LAZY, launch, [], "lazy"))
        assert ev.record.device_cases == {"one", "odd_1001", "n_4096"}  # every input drawn by the harness
        assert ev.record.expected_from.startswith("PyTorch ") and device.name in ev.record.expected_from
        assert "differs from its float64 result" in ev.record.expected_from  # measured at 2^26 too
        assert "not measured" not in ev.record.expected_from, ev.record.expected_from
    assert honest.status is Status.ok, honest.message
    assert dropped.status is Status.mismatch, dropped.message
    # the timed launches checked against PyTorch on the draws they got: 3 samples and the confirm launch
    perf = honest.cases[-1]
    assert perf.checked_launches == 4 and all(r["mismatches"] == 0
                                              for r in perf.reference_checks), perf.reference_checks
    assert any("checked against PyTorch on their inputs" in line for line in honest.checks), honest.checks
    assert lazy.status is Status.timed_mismatch and "PyTorch" in (lazy.message or ""), lazy.message
    # expected values in the output's dtype (no float64 copy); no input bytes on the disk
    files = sorted(p.name for p in (tmp_path / "w").rglob("c.*"))
    assert files and set(files) == {"c.float32"}, files
    assert not list((tmp_path / "w").rglob("a.bin")), "the inputs were written to the disk"
    assert not [line for line in honest.checks if "not possible" in line], honest.checks
    print("checks:", *honest.checks, sep="\n  ")
    print("prepare:", ev.prepare_ms)


def test_the_tolerance_widens_for_the_modules_own_rounding_measured_on_the_gpu(
    tmp_path: Path, proc: HarnessProcess, device: DeviceInfo,
) -> None:
    """The module's own float32 error against its float64 run, measured by the reference child on the
    GPU at every case's size (2^26 elements the largest): a module that rounds to 1/64 widens the
    tolerance, the exact kernel passes and a kernel off by 1.0 in one element still mismatches."""
    wl = write_problem(tmp_path / "wl", twist=" + 3e5 - 3e5")
    _large(wl)
    workload = find_workload(wl, Settings())
    launch = LaunchSpec.model_validate(ADD_LAUNCH)
    off_by_one = kernel().replace("c[i] = a[i] + b[i];", "c[i] = a[i] + b[i] + (i == n / 2 ? 1.0f : 0.0f);")
    assert off_by_one != kernel()
    with Session(workload, proc, device, workdir=tmp_path / "w") as ev:
        honest = evaluate(ev, Candidate(kernel(), launch, [], "honest"))
        wrong = evaluate(ev, Candidate(off_by_one, launch, [], "off by one"), benchmark=False)
        said = ev.record.expected_from
    assert honest.status is Status.ok, honest.message
    assert wrong.status is Status.mismatch, wrong.message
    assert honest.tolerances["c"].source == "widened" and honest.tolerances["c"].rtol >= 0.02, honest.tolerances
    assert "differs from its float64 result by up to" in said and "not measured" not in said, said


def test_cuda_starts_in_a_gpu_child_under_its_own_uid() -> None:
    """On the GPU machine (root there) the GPU children move to a uid of their own, their tasks
    bounded: the CUDA driver starts so (``_cuda_probe``); else they would stay root, unbounded."""
    import os

    from kernelopt_mcp.confined_python import gpu_child_own_uid

    if os.getuid() != 0:
        pytest.skip("not root: the children keep this uid")
    assert gpu_child_own_uid.__wrapped__() is True
