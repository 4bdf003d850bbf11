"""Compiling ahead (tune.prefetch): how many compiles run at once, and that they really do run
at once, each reaching NVRTC once (real NVRTC, no GPU)."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from kernelopt_mcp import compiler
from kernelopt_mcp.compile_options import CompileLimits
from kernelopt_mcp.compiler import CompileCache, compile_kernel
from kernelopt_mcp.evaluation.candidate import Candidate
from kernelopt_mcp.launch import LaunchSpec
from kernelopt_mcp.tune.prefetch import MAX_AHEAD_WORKERS, QUEUE_PER_WORKER, CompileAhead, ahead_workers

LAUNCH = LaunchSpec.model_validate({"grid": [1], "block": [32]})


@pytest.mark.parametrize(("cpus", "workers"), [(1, 1), (2, 1), (3, 2), (4, 3), (5, 4), (16, MAX_AHEAD_WORKERS)])
def test_one_core_is_left_to_the_gpu_thread(cpus: int, workers: int) -> None:
    assert ahead_workers(cpus) == workers


def test_the_lookahead_queues_several_configurations_per_worker() -> None:
    session: Any = SimpleNamespace(compile_cache=CompileCache(), arch="sm_90", compile_limits=CompileLimits())
    ahead = CompileAhead(session, workers=3)
    try:
        assert ahead.workers == 3 and ahead.lookahead == 3 * QUEUE_PER_WORKER > 3
    finally:
        ahead.close()
    # without a compile cache nothing is compiled ahead, whatever the workers
    idle = CompileAhead(SimpleNamespace(compile_cache=None, arch="sm_90", compile_limits=CompileLimits()))  # type: ignore[arg-type]
    idle.start("x", Candidate("bad", LAUNCH))
    assert idle.started == 0


def test_workers_compile_at_once_and_each_source_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three compiles started ahead meet inside the compiler together (a barrier that breaks
    after 60 s unless all three arrive), and the evaluation then finds each in the cache."""
    pool = compiler.default_pool()
    real = pool.compile
    met = threading.Barrier(3, timeout=60)
    reached: list[str] = []

    def together(source: str, *args: object, **kwargs: object) -> object:
        reached.append(source)
        met.wait()
        return real(source, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pool, "compile", together)
    cache = CompileCache()
    session: Any = SimpleNamespace(compile_cache=cache, arch="sm_90", compile_limits=CompileLimits())
    sources = [f'extern "C" __global__ void k(float* p) {{ p[threadIdx.x] = {i}.0f; }}\n' for i in range(3)]
    ahead = CompileAhead(session, workers=3)
    try:
        for i, source in enumerate(sources):
            ahead.start(str(i), Candidate(source, LAUNCH))
            ahead.start(str(i), Candidate(source, LAUNCH))  # started once only
        for i in range(3):
            ahead.wait(str(i))
    finally:
        ahead.close()
    assert not met.broken and ahead.started == 3 and sorted(reached) == sorted(sources)
    monkeypatch.setattr(pool, "compile", real)
    for source in sources:
        result = compile_kernel(source, "sm_90", [], cache=cache)
        assert result.ok and result.cache_hit, result.summary()
