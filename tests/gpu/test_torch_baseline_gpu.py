"""PyTorch eager and torch.compile timed on a real GPU beside a candidate (torch_baseline.py): the
confined child (gpu=True) runs torch there, its eager time agrees with events around torch.mm
measured here, the L2 flush is real, and `kernelopt evaluate` / `kernelopt kernelbench` print the
baselines and the speedups for imported problems.

Needs torch (with CUDA) in this interpreter. Where the kernel has no Landlock (a gVisor machine)
the child runs unconfined by the operator's setting (KERNELOPT_UNCONFINED_COMPILER=1, as compiles
do there). Run with --run-gpu (scripts/device_gpu_tests.sh tests/gpu/test_torch_baseline_gpu.py).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from kernelopt_mcp.cli import main
from kernelopt_mcp.confined_python import ChildLimits
from kernelopt_mcp.sandbox import landlock_abi
from kernelopt_mcp.torch_baseline import BaselineOptions, measure_baselines
from kernelopt_mcp.torch_import import import_torch_problem

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(1200)]

LIMITS = ChildLimits(timeout_s=600, landlock=landlock_abi() >= 1, accept_unconfined=True)

MATMUL = '''import torch
import torch.nn as nn

N = 4096


class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.rand(N, N), torch.rand(N, N)]


def get_init_inputs():
    return []
'''
# 1M floats: 4 MB in, 4 MB out, well inside the H200's 60 MB of L2
SCALE = '''import torch
import torch.nn as nn

n = 1048576


class Model(nn.Module):
    def forward(self, x):
        return x * 2.0


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
'''
VECTOR_ADD = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a + b


n = 16777216


def get_inputs():
    return [torch.rand(n), torch.randn(n)]


def get_init_inputs():
    return []
'''
RELU = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


n = 16777216


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
'''
ADD_KERNEL = r"""extern "C" __global__ void {name}(const float* a, const float* b, float* out, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}}
"""
RELU_KERNEL = r"""extern "C" __global__ void {name}(const float* x, float* out, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}}
"""
LAUNCH = {"default": {"grid": ["ceil_div(n, 256)"], "block": [256]}}


@pytest.fixture
def torch() -> Any:
    torch = pytest.importorskip("torch", reason="torch is not installed: the baselines need it")
    assert torch.cuda.is_available(), "torch sees no CUDA device on this GPU machine"
    return torch


@pytest.fixture
def settings_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh baseline cache; the child unconfined only where the kernel has no Landlock."""
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    if landlock_abi() < 1:
        monkeypatch.setenv("KERNELOPT_UNCONFINED_COMPILER", "1")


def _events_median_mm(torch: Any, n: int, iterations: int = 100) -> float:
    """torch.mm of two n x n float32 matrices timed here, as the child times a call: L2 flushed
    (a read of twice its size) before each, an event pair around each."""
    a, b = torch.rand(n, n, device="cuda"), torch.rand(n, n, device="cuda")
    scratch = torch.zeros(2 * torch.cuda.get_device_properties(0).L2_cache_size // 4, dtype=torch.int32, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(10):
        torch.mm(a, b)
    times = []
    for _ in range(iterations):
        scratch.sum()
        torch.cuda._sleep(100_000)
        start.record()
        torch.mm(a, b)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def test_eager_matches_events_around_torch_mm(torch: Any, tmp_path: Path) -> None:
    report = measure_baselines(MATMUL, [("perf", {"N": 4096})], device=0, limits=LIMITS, workdir=tmp_path)
    assert report.note is None, report.note
    [case] = report.cases
    assert case.eager is not None and case.eager.samples == 100
    here = _events_median_mm(torch, 4096)
    assert abs(case.eager.median_ms - here) <= 0.25 * here, (case.eager.median_ms, here)
    assert case.compile is not None or case.compile_note, "torch.compile is timed or says why not"
    if case.compile is not None:
        assert case.compile.median_ms > 0 and case.compile.samples == 100
    assert case.device_name == torch.cuda.get_device_name(0) and case.torch_version == torch.__version__
    assert case.mode == "default"


def test_the_l2_flush_makes_a_problem_that_fits_in_l2_slower(torch: Any, tmp_path: Path) -> None:
    flushed = measure_baselines(SCALE, [("perf", {})], device=0, options=BaselineOptions(compile=False), limits=LIMITS,
                                workdir=tmp_path)
    warm = measure_baselines(SCALE, [("perf", {})], device=0, options=BaselineOptions(compile=False, flush_l2=False),
                             limits=LIMITS, workdir=tmp_path)
    assert flushed.note is None and warm.note is None, (flushed.note, warm.note)
    on, off = flushed.cases[0].eager, warm.cases[0].eager
    assert on is not None and off is not None
    assert on.median_ms > off.median_ms, (on.median_ms, off.median_ms)
    assert flushed.cases[0].compile_note == "torch.compile not timed (turned off)"


def test_evaluate_prints_eager_compile_and_the_speedups(
    torch: Any, tmp_path: Path, harness_binary: Path, settings_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "1_VectorAdd.py").write_text(VECTOR_ADD)
    workload = import_torch_problem(tmp_path / "1_VectorAdd.py", tmp_path / "va").path
    kernel = tmp_path / "add.cu"
    kernel.write_text(ADD_KERNEL.format(name="p1_VectorAdd"))
    (tmp_path / "launch.json").write_text(json.dumps(LAUNCH))
    argv = ["evaluate", str(workload), str(kernel), "--launch", str(tmp_path / "launch.json"), "--harness",
            str(harness_binary)]
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    base = result["torch_baseline"]
    assert base["note"] is None, base["note"]
    assert base["eager_ms"] > 0 and base["speedup_eager"] == pytest.approx(base["eager_ms"] / result["score_ms"])
    assert base["compile_ms"] or base["compile_note"]
    assert base["mode"] == "default" and not base["cached"]
    assert main(argv) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "speedup vs PyTorch eager" in text and "(cached)" in text and "vs compile" in text


@pytest.mark.anyio
async def test_the_benchmark_tool_puts_pytorch_beside_a_passing_result(torch: Any, tmp_path: Path, harness_binary: Path,
                                                                       settings_env: None) -> None:
    """The MCP benchmark tool on an imported problem: eager and torch.compile timed on the GPU that timed
    the candidate, by the call's rules, beside the result; cached for the next call."""
    from fakegpu import in_memory_server, tool_text

    from kernelopt_mcp.config import Settings
    from kernelopt_mcp.server_config import ServerConfig

    (tmp_path / "1_VectorAdd.py").write_text(VECTOR_ADD)
    import_torch_problem(tmp_path / "1_VectorAdd.py", tmp_path / "va" / "p1_VectorAdd")  # a directory of workloads
    settings = Settings(harness=harness_binary, workload_dirs=(tmp_path / "va",), cache_dir=tmp_path / "cache")
    async with in_memory_server(ServerConfig(settings=settings, workspace=tmp_path / "ws")) as (client, _):
        args = {"workload": "p1_VectorAdd", "source": ADD_KERNEL.format(name="p1_VectorAdd"), "launch": LAUNCH,
                "warmup": 5, "iterations": 50}
        r = await client.call_tool("benchmark", args)
        out = r.structured_content
        assert not r.is_error and out["status"] == "ok", tool_text(r)
        base = out["torch_baseline"]
        assert base.get("note") is None and base["eager_ms"] > 0, base  # the structured result leaves out what is None
        assert base["speedup_eager"] == pytest.approx(base["eager_ms"] / out["score_ms"])
        assert base["device_name"] == out["device"] and (base.get("compile_ms") or base.get("compile_note"))
        assert (await client.call_tool("benchmark", args)).structured_content["torch_baseline"]["cached"]


def test_kernelbench_prints_fast_1_and_the_speedups(
    torch: Any, tmp_path: Path, harness_binary: Path, settings_env: None, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KERNELOPT_HARNESS", str(harness_binary))
    root, solutions, out = tmp_path / "kb", tmp_path / "solutions", tmp_path / "out"
    (root / "level1").mkdir(parents=True)
    solutions.mkdir()
    for stem, problem, kernel in (("1_VectorAdd", VECTOR_ADD, ADD_KERNEL), ("2_ReLU", RELU, RELU_KERNEL)):
        (root / "level1" / f"{stem}.py").write_text(problem)
        (solutions / f"{stem}.cu").write_text(kernel.format(name=f"p{stem}"))
        (solutions / f"{stem}.launch.json").write_text(json.dumps(LAUNCH))
    assert main(["kernelbench", str(root), "--level", "1", "-o", str(out), "--solutions", str(solutions)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "fast_1 vs eager" in printed and "fast_1 vs compile" in printed
    data = json.loads((out / "results.json").read_text())
    for row in data["problems"]:
        assert row["correct"], row
        assert row["eager_ms"] and row["speedup_eager"] == pytest.approx(row["eager_ms"] / row["ours_ms"]), row
        assert row["compile_ms"] or row["compile_note"], row
    assert data["levels"][0]["fast"]["eager"]["1"] is not None and data["levels"][0]["geomean_speedup"]["eager"]


# tries, as it is imported, to fake every other problem's answer and the batch's, now and from a
# daemon that outlives it; then is an honest x * 2 (its own baseline is its own to lie about)
HOSTILE = '''import json, os, time
from pathlib import Path
import torch
import torch.nn as nn

FAKE = json.dumps({"cases": [{"name": "perf", "eager": {"times_ms": [1000.0]}}], "error": None, "finished": True})


def fake_all():
    staging = Path.cwd().parent
    for k in range(8):
        for path in (staging / f"job_{k}" / "entry.json", staging / "answer.json"):
            try:
                path.parent.mkdir(exist_ok=True)
                path.write_text(FAKE)
            except OSError:
                pass


fake_all()
if os.fork() == 0:
    os.setsid()
    for _ in range(3000):
        fake_all()
        time.sleep(0.01)
    os._exit(0)


class Model(nn.Module):
    def forward(self, x):
        return x * 2.0


def get_inputs():
    return [torch.randn(1 << 20)]


def get_init_inputs():
    return []
'''
HANGS = SCALE.replace("return x * 2.0", "import time; time.sleep(1000)")
# an index far out of bounds: a device-side assert, after which this CUDA context serves nothing
CRASHES = SCALE.replace("return x * 2.0", "return x[torch.full((1,), 1 << 30, device=x.device, dtype=torch.long)]")


def test_a_batch_keeps_each_problem_to_itself(torch: Any, tmp_path: Path) -> None:
    """One timing child, five problems, each in a confined process of its own: a problem that tries
    to write the others' answers (at import and from a daemon) changes none, one past its deadline
    is killed and says so, one that breaks its CUDA context breaks nobody else's; the problems
    around them are timed as when alone."""
    from kernelopt_mcp.torch_baseline import BaselineJob, measure_batch

    jobs = [BaselineJob(text, [("perf", {})], f"{name}.py")
            for name, text in (("first", SCALE), ("hostile", HOSTILE), ("hangs", HANGS), ("crashes", CRASHES),
                               ("last", SCALE))]
    limits = ChildLimits(timeout_s=45, landlock=landlock_abi() >= 1, accept_unconfined=True)
    first, hostile, hangs, crashes, last = measure_batch(jobs, device=0, options=BaselineOptions(compile=False),
                                                         limits=limits, workdir=tmp_path)
    for report in (first, last):
        assert report.note is None and report.cases[0].eager is not None, report
        assert report.cases[0].eager.median_ms < 1.0, report  # not the faked 1000 ms
    assert hostile.cases, hostile  # its own answer is its own to fake (its daemon's last write may be what stands)
    assert hangs.note is not None and "deadline" in hangs.note and hangs.seconds is not None and hangs.seconds < 120
    # the assert shows at the first synchronization: a note on the case, or on the problem where it was later
    assert crashes.cases and crashes.cases[0].eager is None, crashes
    assert "failed on the GPU" in (crashes.cases[0].eager_note or "") or "ended" in (crashes.note or ""), crashes
    assert abs(last.cases[0].eager.median_ms - first.cases[0].eager.median_ms) <= 0.5 * first.cases[0].eager.median_ms
    assert first.startup_s is not None and first.startup_s > 0


def test_a_batch_compiled_ahead_times_every_problem_as_when_compiled_alone(torch: Any, tmp_path: Path) -> None:
    """The compile-ahead phase on the GPU: three problems compiled at once, then each timed alone,
    loading its compiled code; every case gets eager and compiled times and the first compile's
    seconds, and the compiled medians are those of the same batch compiled one problem at a time
    (within the noise of such small kernels)."""
    from kernelopt_mcp.torch_baseline import BaselineJob, measure_batch

    problems = Path(__file__).resolve().parents[1] / "torch_problems"
    jobs = [BaselineJob((problems / name).read_text(), [("perf", {})], name)
            for name in ("vector_add.py", "elementwise_gelu.py", "reduction_sum.py")]
    limits = ChildLimits(timeout_s=240, landlock=landlock_abi() >= 1, accept_unconfined=True)
    ahead = measure_batch(jobs, device=0, options=BaselineOptions(compile_ahead=3), limits=limits, workdir=tmp_path)
    alone = measure_batch(jobs, device=0, options=BaselineOptions(compile_ahead=1), limits=limits, workdir=tmp_path)
    for a, b in zip(ahead, alone, strict=True):
        case_a, case_b = a.cases[0], b.cases[0]
        assert case_a.compile is not None and case_b.compile is not None, (a, b)
        assert case_a.eager is not None and case_a.compile_s is not None and case_a.compile_s > 0, a
        assert abs(case_a.compile.median_ms - case_b.compile.median_ms) <= 0.5 * case_b.compile.median_ms, (a, b)
