"""NVRTC in capped worker processes: a compile bomb is a compile error, never a hang."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kernelopt_mcp import compile_pool
from kernelopt_mcp.compile_options import CompileLimits, default_budget_mb, physical_memory_mb
from kernelopt_mcp.compile_pool import CompilePool, ConfinementFailed, WorkerSpec, default_pool
from kernelopt_mcp.compiler import CompileCache, _load_nvrtc, compile_kernel
from kernelopt_mcp.config import Settings

BOMB = (Path(__file__).parents[1] / "adversarial" / "vector_add_compile_bomb.cu").read_text()
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
    assert results == dict.fromkeys(range(4), True)


def test_limits_come_from_the_environment() -> None:
    s = Settings.from_env({"KERNELOPT_COMPILE_TIMEOUT": "7.5", "KERNELOPT_COMPILE_MEMORY_MB": "2048"})
    assert s.compile_limits() == CompileLimits(timeout_s=7.5, memory_mb=2048)
    assert Settings.from_env({}).compile_limits() == CompileLimits(timeout_s=60.0, memory_mb=8192)
    assert Settings.from_env({}).compile_limits().budget_mb() == default_budget_mb(8192)


# --- the pool-wide budget ---------------------------------------------------------------------


class _BlockedWorker:
    """A stand-in for a compile worker that answers only when the test releases it."""

    live = 0
    peak_live = 0
    lock = threading.Lock()

    def __init__(self, spec: WorkerSpec, release: threading.Event) -> None:
        self.spec = spec
        self._release = release
        self._alive = True
        with _BlockedWorker.lock:
            _BlockedWorker.live += 1
            _BlockedWorker.peak_live = max(_BlockedWorker.peak_live, _BlockedWorker.live)

    def alive(self) -> bool:
        return self._alive

    def compile(self, request: dict, timeout_s: float) -> dict:
        assert self._release.wait(timeout=60)
        return {"ok": True, "log": "", "cubin": None, "ptx": None, "duration_ms": 1.0}

    def kill(self) -> None:
        pass

    def close(self) -> None:
        if self._alive:
            self._alive = False
            with _BlockedWorker.lock:
                _BlockedWorker.live -= 1


def test_concurrent_compiles_queue_behind_the_pool_memory_budget() -> None:
    """50 concurrent compile bombs gave 40 live 8 GiB workers (issue 13): now a compile reserves
    its worker's cap from a pool-wide budget and waits while it is taken."""
    release = threading.Event()
    _BlockedWorker.live = _BlockedWorker.peak_live = 0
    pool = CompilePool(max_idle=2, memory_budget_mb=3 * 512, max_workers=8,
                       worker_factory=lambda spec: _BlockedWorker(spec, release))
    limits = CompileLimits(memory_mb=512, landlock=False, accept_unconfined=True)
    done: list[bool] = []

    def work(i: int) -> None:
        done.append(pool.compile(f"// {i}", "k.cu", [], limits).ok)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while pool.peak_busy < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # the others had time to start a worker, were they allowed to
    assert pool.peak_busy == 3 and _BlockedWorker.live == 3 and not done
    release.set()
    for t in threads:
        t.join(timeout=60)
    assert done == [True] * 20
    assert pool.peak_busy == 3 and pool.peak_reserved_mb == 3 * 512 and _BlockedWorker.peak_live == 3
    assert pool.live_workers() <= 2  # idle ones kept for reuse, at most max_idle
    pool.close()
    assert _BlockedWorker.live == 0


def test_live_workers_are_capped_and_a_cap_above_the_budget_takes_it_all() -> None:
    release = threading.Event()
    release.set()
    _BlockedWorker.live = _BlockedWorker.peak_live = 0
    pool = CompilePool(max_idle=4, memory_budget_mb=10_000, max_workers=2,
                       worker_factory=lambda spec: _BlockedWorker(spec, release))
    threads = []
    for i in range(12):
        # different caps: idle workers of another cap must not pile up past max_workers
        limits = CompileLimits(memory_mb=100 + i % 5, landlock=False, accept_unconfined=True)
        threads.append(threading.Thread(target=pool.compile, args=(f"// {i}", "k.cu", [], limits)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert _BlockedWorker.peak_live <= 2 and pool.peak_busy <= 2
    # a worker without a cap (0) or above the budget reserves the whole budget: it runs alone
    big = CompilePool(memory_budget_mb=1000, worker_factory=lambda spec: _BlockedWorker(spec, release))
    big.compile("//", "k.cu", [], CompileLimits(memory_mb=0, landlock=False, accept_unconfined=True))
    big.compile("//", "k.cu", [], CompileLimits(memory_mb=5000, landlock=False, accept_unconfined=True))
    assert big.peak_reserved_mb == 1000
    pool.close()
    big.close()


def test_real_workers_under_a_one_worker_budget() -> None:
    pool = CompilePool(memory_budget_mb=4096, max_workers=4)
    limits = CompileLimits(memory_mb=4096)
    nv = _load_nvrtc()
    results: list[bool] = []

    def work(i: int) -> None:
        out = pool.compile(SMALL.format(200 + i), "kernel.cu", ["--gpu-architecture=sm_90"], limits, nv.toolchain)
        results.append(out.ok)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results == [True] * 3 and pool.peak_busy == 1 and pool.started == 1
    pool.close()


def test_the_default_budget_follows_the_machine() -> None:
    assert default_budget_mb(8192) >= 8192  # never below one worker
    assert default_budget_mb(8192) <= 4 * 8192
    physical = physical_memory_mb()
    if physical // 2 >= 2048:
        assert default_budget_mb(512) == min(physical // 2, 4 * 512)
    s = Settings.from_env({"KERNELOPT_COMPILE_TOTAL_MEMORY_MB": "3000", "KERNELOPT_COMPILE_WORKERS": "3"})
    assert s.compile_limits().budget_mb() == 3000 and s.compile_limits().max_workers == 3


class _UnconfinableWorker(_BlockedWorker):
    """A worker on a kernel whose Landlock refuses the restriction (e.g. a seccomp filter)."""

    def compile(self, request: dict, timeout_s: float) -> dict:
        if self.spec.confine == "landlock":
            raise ConfinementFailed("the compile worker could not confine itself with Landlock: EPERM")
        return super().compile(request, timeout_s)


def test_a_worker_that_cannot_confine_itself_is_refused_unless_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    release.set()
    monkeypatch.setattr(compile_pool, "landlock_abi", lambda: 7)
    monkeypatch.setattr(compile_pool, "_warned_unconfined", False)
    pool = CompilePool(memory_budget_mb=1024, worker_factory=lambda spec: _UnconfinableWorker(spec, release))
    with pytest.raises(ConfinementFailed, match="could not confine"):
        pool.compile("//", "k.cu", [], CompileLimits(memory_mb=512))
    out = pool.compile("//", "k.cu", [], CompileLimits(memory_mb=512, accept_unconfined=True))
    assert out.ok and out.confinement == "unconfined (accepted)"
    assert pool.peak_reserved_mb == 512  # the retry ran under the same reservation
    pool.close()


LIMIT_PROBE = r"""
import importlib.util, mmap, sys
spec = importlib.util.spec_from_file_location("w", sys.argv[1])
w = importlib.util.module_from_spec(spec); spec.loader.exec_module(w)
# what NVRTC does when it loads on the H200 machine: ~13 GB of address space reserved, little used
reserved = mmap.mmap(-1, 12 * 2**30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0), prot=0)  # PROT_NONE
w._limit_memory(512, w._load_sandbox().vm_kib())
small = bytearray(100 * 2**20)  # within the cap: must work
try:
    big = bytearray(1024 * 2**20)  # over the cap: must fail here, in the worker
except MemoryError:
    print("capped")
else:
    print("not capped")
"""  # noqa: E501


def test_the_worker_memory_cap_counts_from_what_the_worker_already_holds(tmp_path: Path) -> None:
    # An absolute RLIMIT_AS of 8 GiB failed every compile on the H200, where NVRTC reserves
    # ~13 GB of address space on load: the cap bounds what a compile adds, not the reservation.
    from kernelopt_mcp.compile_pool import WORKER_SCRIPT

    probe = tmp_path / "probe.py"
    probe.write_text(LIMIT_PROBE)
    out = subprocess.run([sys.executable, str(probe), str(WORKER_SCRIPT)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "capped"
