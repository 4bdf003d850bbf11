"""Many PyTorch problems imported at once, each in a fresh process of its own.

``kernelopt kernelbench --jobs N`` and ``bench/kernelbench_import.py`` import a whole KernelBench
level this way: one problem per process, ``jobs`` processes at a time, each with torch held to one
thread, its data memory capped and a deadline, so an import that runs away (a module that fills
the memory, a ``get_inputs`` that never returns) is one refused row, never the end of the run, and
the problem's own code never runs in the caller's process: each runs confined as the MCP server's
import does (``confined_python``: a KernelBench directory is someone else's code). The record an import leaves
(:func:`import_record`) says whether it imported, the refusal's reason, its wall seconds and the
bytes it wrote.

    python -m kernelopt_mcp.suite_imports PROBLEM.py OUT_DIR [TOLERANCE]   # one import, its record as JSON
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .compile_options import physical_memory_mb
from .confined_python import ChildLimits, ChildResult, check_plain_tree, run_torch_child

__all__ = ["ImportJob", "ImportLimits", "disk_bytes", "import_in_child", "import_many", "import_record"]

#: the deadline of one import unless the caller says otherwise (KernelBench's imports take seconds; VGG a minute)
IMPORT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class ImportJob:
    """One problem file and the workload directory its import writes."""

    problem: Path
    out: Path


@dataclass(frozen=True)
class ImportLimits:
    """Caps on each import's process: data memory (bytes; 0: the machine's memory over the jobs)
    and wall time (s); the tolerance mode the workloads are judged by."""

    max_bytes: int = 0
    timeout_s: float = IMPORT_TIMEOUT_S
    tolerance: str = "strict"

    def memory_for(self, jobs: int) -> int:
        """Each import's cap: ``max_bytes``, else the machine's memory over the jobs (0: none known)."""
        if self.max_bytes > 0:
            return self.max_bytes
        return (physical_memory_mb() << 20) // max(1, jobs)


def disk_bytes(path: Path) -> int:
    """The bytes of the files under ``path`` (0 where it does not exist)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def import_record(problem: Path, out: Path, tolerance: str = "strict") -> dict[str, Any]:
    """Import ``problem`` into ``out`` in this process: its record (imported, refusal, seconds, bytes)."""
    import torch

    torch.set_num_threads(1)
    from .torch_import import TorchImportOptions, import_torch_problem
    from .torch_problem import CpuOutOfMemory, TorchProblemError

    start = time.perf_counter()
    record: dict[str, Any] = {"problem": str(problem), "imported": False, "refusal": None}
    try:
        result = import_torch_problem(problem, out, TorchImportOptions(overwrite=True, tolerance=tolerance))
        record.update(imported=True, degenerate=len(result.degenerate))
    except TorchProblemError as exc:
        record.update(refusal=str(exc).removeprefix(f"{problem}: "), out_of_memory=isinstance(exc, CpuOutOfMemory))
    except Exception as exc:  # noqa: BLE001 - the problem's own code may raise anything: a refusal, not a crash
        record.update(refusal=f"the import failed: {type(exc).__name__}: {str(exc)[:300]}",
                      out_of_memory=isinstance(exc, MemoryError))
    record["seconds"] = time.perf_counter() - start
    record["bytes"] = disk_bytes(out)
    return record


def import_in_child(job: ImportJob, limits: ImportLimits, max_bytes: int) -> dict[str, Any]:
    """:func:`import_record` in a confined child of its own (``confined_python``: Landlock, seccomp
    with threads only, an allowlisted environment, its data memory capped at ``max_bytes``, the
    limits' deadline): the problem's code reads the Python installation and the problem's own
    directory, writes only a staging directory beside ``job.out``, and sees no secret of this
    process's environment. The workload it wrote replaces ``job.out`` once checked to be plain
    files. A child that dies, is refused or runs past its deadline is a refusal that says so."""
    start = time.perf_counter()

    def failed(refusal: str, died: bool = False) -> dict[str, Any]:
        return {"problem": str(job.problem), "imported": False, "refusal": refusal, "out_of_memory": died,
                "seconds": time.perf_counter() - start, "bytes": disk_bytes(job.out)}

    job.out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{job.out.name}-import-", dir=job.out.parent))
    try:
        result = _confined_import(job.problem.resolve(), staging, limits, max_bytes)
        if result.refused is not None:
            return failed(f"the importer was not run: {result.refused}")
        if result.timed_out:
            return failed(f"the import ran past its {limits.timeout_s:.0f} s deadline")
        lines = result.stdout.decode(errors="replace").strip().splitlines()
        if result.returncode != 0 or not lines:
            tail = (result.stderr_tail.strip().splitlines() or ["no output"])[-1]
            return failed(f"the import died (exit {result.returncode}, data memory capped at "
                          f"{max_bytes / 2**30:.1f} GiB): {tail[:200]}", died=True)  # memory, as often as not
        try:
            record: dict[str, Any] = {**json.loads(lines[-1]), "problem": str(job.problem)}
        except ValueError:
            return failed(f"the import's answer was not JSON: {lines[-1][:200]}")
        if record.get("imported"):
            try:  # the problem's code ran in the child that wrote it: plain files only, never a link
                check_plain_tree(staging / "workload")
            except OSError as exc:
                return failed(f"the import left {exc}")
            shutil.rmtree(job.out, ignore_errors=True)
            os.rename(staging / "workload", job.out)
            record["bytes"] = disk_bytes(job.out)
        return record
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _confined_import(problem: Path, staging: Path, limits: ImportLimits, max_bytes: int) -> ChildResult:
    """``python -m kernelopt_mcp.suite_imports PROBLEM STAGING/workload TOLERANCE`` confined."""
    return run_torch_child(
        __name__, [str(problem), str(staging / "workload"), limits.tolerance], staging=staging,
        read=[str(problem.parent)], env={"OMP_NUM_THREADS": "1"}, gpu=False,
        limits=ChildLimits(timeout_s=limits.timeout_s, memory_mb=max_bytes >> 20, processes=False),
    )


def import_many(
    jobs: Sequence[ImportJob], workers: int, limits: ImportLimits | None = None,
    done: Callable[[int, int, dict[str, Any]], None] | None = None,
) -> Iterator[tuple[ImportJob, dict[str, Any]]]:
    """Import every job, ``workers`` processes at a time; yields (job, record) as each ends and
    calls ``done(finished, total, record)`` first. An import that ran out of memory (or died) under
    its share of the machine's memory is tried once more at the end, alone, with all of it (unless
    the caller fixed the cap): a full-size level-3 module (a 2 GiB ``Linear``) fits one at a time."""
    limits = limits or ImportLimits()
    workers = max(1, min(workers, len(jobs) or 1))
    max_bytes, alone = limits.memory_for(workers), limits.memory_for(1)
    again: list[ImportJob] = []
    finished = 0

    def report(record: dict[str, Any]) -> None:
        nonlocal finished
        finished += 1
        if done is not None:
            done(finished, len(jobs), record)

    with ThreadPoolExecutor(workers) as pool:
        futures = {pool.submit(import_in_child, job, limits, max_bytes): job for job in jobs}
        for future in as_completed(futures):
            record = future.result()
            if record.get("out_of_memory") and alone > max_bytes:
                again.append(futures[future])
                continue
            report(record)
            yield futures[future], record
    for job in again:
        record = {**import_in_child(job, limits, alone), "alone": True}
        report(record)
        yield job, record


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: python -m kernelopt_mcp.suite_imports PROBLEM.py OUT_DIR [TOLERANCE]", file=sys.stderr)
        return 2
    print(json.dumps(import_record(Path(argv[0]), Path(argv[1]), *argv[2:3])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
