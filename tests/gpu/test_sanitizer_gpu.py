"""The sanitizer tier on a real GPU: compute-sanitizer memcheck, racecheck and initcheck on the
correctness cases of kernels that pass or that hide a fault validation cannot see.

Run with --run-gpu. Needs compute-sanitizer (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin or
KERNELOPT_SANITIZER); skipped where it is missing or refuses the device (gVisor machines).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelopt_mcp import (
    Candidate,
    EvaluateOptions,
    HarnessProcess,
    Session,
    Settings,
)
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.errors import ToolchainNotFound
from kernelopt_mcp.evaluation.candidate import initial_candidate
from kernelopt_mcp.evaluation.device import device_info
from kernelopt_mcp.evaluation.evaluate import evaluate, prepare
from kernelopt_mcp.launch import LaunchSpec
from kernelopt_mcp.sanitizer import (
    SanitizerTool,
    SanitizerUnavailable,
    find_sanitizer,
    sanitize_candidate,
)

pytestmark = pytest.mark.gpu

ADVERSARIAL = Path(__file__).resolve().parents[1] / "adversarial"
FAST = EvaluateOptions(warmup=1, iterations=3, timeout_s=60)
LAUNCH_256 = LaunchSpec.model_validate({"grid": ["ceil_div(n, 256)"], "block": [256]})


@pytest.fixture(scope="module")
def sanitizer() -> Path:
    try:
        settings = Settings.from_env()
        return find_sanitizer(settings.sanitizer, cuda_home=settings.cuda_home)
    except ToolchainNotFound as exc:
        pytest.skip(str(exc))


def evaluator(name: str, harness: Path, tmp_path: Path, correctness_cases: int) -> Iterator[Session]:
    wl = find_workload(name, Settings())
    small = [c for c in wl.spec.cases if c.kind == "correctness"][:correctness_cases]
    wl.spec = wl.spec.model_copy(update={"cases": small})
    with HarnessProcess(harness, 0) as proc, Session(
        wl, proc, device_info(harness, 0), workdir=tmp_path / "ev", options=FAST
    ) as ev:
        prepare(ev, time_reference=False)
        yield ev


@pytest.fixture
def vector_add(harness_binary: Path, tmp_path: Path) -> Iterator[Session]:
    yield from evaluator("vector_add", harness_binary, tmp_path, 2)


@pytest.fixture
def reduce_sum(harness_binary: Path, tmp_path: Path) -> Iterator[Session]:
    yield from evaluator("reduce_sum", harness_binary, tmp_path, 3)


def run(ev: Session, candidate: Candidate, sanitizer: Path, harness: Path, tmp_path: Path, tools: list[SanitizerTool]):
    try:
        return sanitize_candidate(ev, candidate, sanitizer, harness, tmp_path / "san", tools=tools, timeout_s=300)
    except SanitizerUnavailable as exc:
        pytest.skip(str(exc))


def test_a_correct_kernel_is_clean_under_every_tool(
    vector_add: Session, sanitizer: Path, harness_binary: Path, tmp_path: Path
) -> None:
    """No false positives from the harness itself: its inputs, poisoned outputs and guards are
    all initialised, and it copies back only what it allocated."""
    reports = run(vector_add, initial_candidate(vector_add.workload), sanitizer, harness_binary, tmp_path,
                  list(SanitizerTool))
    assert len(reports) == 2 * 3
    assert all(r.passed and r.errors == 0 for r in reports), [r.summary() for r in reports]


def test_memcheck_flags_an_out_of_bounds_read_with_its_line(
    vector_add: Session, sanitizer: Path, harness_binary: Path, tmp_path: Path
) -> None:
    source = (
        'extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {\n'
        "    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < (size_t)n) c[i] = a[i + ((size_t)1 << 32)] + b[i];\n"  # line 3: 16 GiB past a
        "}\n"
    )
    reports = run(vector_add, Candidate(source, LAUNCH_256), sanitizer, harness_binary, tmp_path,
                  [SanitizerTool.memcheck])
    assert reports and not any(r.passed for r in reports)
    first = reports[0].findings[0]
    assert first.kind.startswith("Invalid __global__ read of size 4 bytes"), first
    assert first.line == 3 and first.function is not None and "vector_add" in first.function
    assert first.thread is not None and first.block is not None and first.address, first.detail


def test_racecheck_flags_a_shared_memory_race(
    reduce_sum: Session, sanitizer: Path, harness_binary: Path, tmp_path: Path
) -> None:
    source = (ADVERSARIAL / "reduce_sum_racy.cu").read_text()
    launch = LaunchSpec.model_validate({"grid": ["ceil_div(n, 256)"], "block": [256]})
    reports = run(reduce_sum, Candidate(source, launch), sanitizer, harness_binary, tmp_path, [SanitizerTool.racecheck])
    racy = [r for r in reports if not r.passed]
    assert racy, [r.summary() for r in reports]
    f = racy[0].findings[0]
    assert "Race reported" in f.kind or "hazard" in f.kind.lower(), f
    assert f.line is not None and 8 <= f.line <= 16  # the shared-memory tree of reduce_sum_racy.cu


def test_initcheck_flags_a_read_of_uninitialised_memory(
    vector_add: Session, sanitizer: Path, harness_binary: Path, tmp_path: Path
) -> None:
    """Outputs are poisoned (initialised) by the harness, so the kernel reads memory nobody
    initialised: a device-heap block from malloc() and a __device__ array never written."""
    source = (ADVERSARIAL / "vector_add_uninitialized.cu").read_text()
    ok = evaluate(vector_add, Candidate(source, LAUNCH_256), benchmark=False)
    assert ok.ok, ok.message  # validation cannot see it
    reports = run(vector_add, Candidate(source, LAUNCH_256), sanitizer, harness_binary, tmp_path,
                  [SanitizerTool.initcheck])
    flagged = [r for r in reports if not r.passed]
    assert flagged, [r.summary() for r in reports]
    assert flagged[0].findings[0].kind.startswith("Uninitialized __global__ memory read"), flagged[0].findings[0]
