"""NVRTC in capped worker processes: a compile bomb is a compile error, never a hang."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from kernelopt_mcp.compile_pool import CompileLimits, default_pool
from kernelopt_mcp.compiler import CompileCache, compile_kernel
from kernelopt_mcp.config import Settings

BOMB = (Path(__file__).parent / "adversarial" / "vector_add_compile_bomb.cu").read_text()
SMALL = 'extern "C" __global__ void k(float* a, int n) {{ int i = threadIdx.x; if (i < n) a[i] *= {}.0f; }}'


def test_a_compile_bomb_hits_the_time_limit_and_the_next_compile_works() -> None:
    start = time.monotonic()
    result = compile_kernel(BOMB, limits=CompileLimits(timeout_s=3), cache=CompileCache())
    elapsed = time.monotonic() - start
    assert not result.ok
    assert "compile exceeded the 3 s limit" in result.summary()
    assert "reduce unrolling" in result.summary()
    assert elapsed < 3 + 5, elapsed  # killed at the deadline, not left to finish
    after = compile_kernel(SMALL.format(1), cache=CompileCache())
    assert after.ok and "k" in after.entries


def test_a_compile_bomb_hits_the_memory_limit() -> None:
    result = compile_kernel(BOMB, limits=CompileLimits(timeout_s=120, memory_mb=1024), cache=CompileCache())
    assert not result.ok
    assert "1024 MiB" in result.summary() or "out of memory" in result.summary(), result.summary()
    # not remembered: under a larger limit the same source is compiled again
    cache = CompileCache()
    compile_kernel(BOMB, limits=CompileLimits(timeout_s=120, memory_mb=1024), cache=cache)
    assert not cache._items


def test_workers_are_reused_between_compiles() -> None:
    pool = default_pool()
    compile_kernel(SMALL.format(2), cache=CompileCache())
    started = pool.started
    for i in range(3, 8):
        assert compile_kernel(SMALL.format(i), cache=CompileCache()).ok
    assert pool.started == started


def test_concurrent_compiles_from_threads() -> None:
    results: dict[int, bool] = {}

    def work(i: int) -> None:
        results[i] = compile_kernel(SMALL.format(100 + i), cache=CompileCache()).ok

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results == {i: True for i in range(4)}


def test_limits_come_from_the_environment() -> None:
    s = Settings.from_env({"KERNELOPT_COMPILE_TIMEOUT": "7.5", "KERNELOPT_COMPILE_MEMORY_MB": "2048"})
    assert s.compile_limits() == CompileLimits(timeout_s=7.5, memory_mb=2048)
    assert Settings.from_env({}).compile_limits() == CompileLimits(timeout_s=60.0, memory_mb=8192)
