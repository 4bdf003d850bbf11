"""Many PyTorch problems imported at once, each in a fresh process of its own.

:func:`import_confined` is ``kernelopt import-torch``'s one problem the same way.
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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .compile_options import CompileLimits, physical_memory_mb
from .confined_python import ChildLimits, ChildResult, check_plain_tree, run_torch_child
from .torch_import import TorchImportOptions
from .torch_source import TORCH_MISSING, TorchProblemError
from .torch_store import move_into_place
from .workload import WorkloadSpec, load_workload

__all__ = ["ConfinedImport", "ImportJob", "ImportLimits", "disk_bytes", "import_confined", "import_in_child",
           "import_many", "import_record"]

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
    limits' deadline): the problem's code reads the Python installation and a copy of the problem
    file, writes only a staging directory beside ``job.out``, and sees no secret of this
    process's environment. The workload it wrote replaces ``job.out`` once checked to be plain
    files. A child that dies, is refused or runs past its deadline is a refusal that says so."""
    start = time.perf_counter()

    def failed(refusal: str, died: bool = False) -> dict[str, Any]:
        return {"problem": str(job.problem), "imported": False, "refusal": refusal, "died": died,
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
            tail = result.last_line(most=200)
            return failed(f"the import died (exit {result.returncode}, data memory capped at "
                          f"{max_bytes / 2**30:.1f} GiB): {tail}", died=True)
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
    """``python -m kernelopt_mcp.suite_imports PROBLEM STAGING/workload TOLERANCE`` confined, on a
    copy of the problem in the staging directory: the child reads that file, not its directory."""
    (staging / "problem").mkdir()
    copy = shutil.copyfile(problem, staging / "problem" / problem.name)
    return run_torch_child(
        __name__, [str(copy), str(staging / "workload"), limits.tolerance], staging=staging,
        env={"OMP_NUM_THREADS": "1"}, gpu=False,
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
            # a child killed for memory dies without a word: tried alone too, as one short of memory
            if (record.get("out_of_memory") or record.get("died")) and alone > max_bytes:
                again.append(futures[future])
                continue
            report(record)
            yield futures[future], record
    for job in again:
        record = {**import_in_child(job, limits, alone), "alone": True}
        report(record)
        yield job, record


@dataclass(frozen=True)
class ConfinedImport:
    """What :func:`import_confined` moved into place: the workload's spec as loaded here, the
    import's notes and the torch version the child ran."""

    spec: WorkloadSpec
    notes: list[str]
    torch_version: str


#: how the confined importer hands each step to its parent's progress: a stderr line of this prefix and JSON
PROGRESS_LINE = b"\x1ekernelopt-import-progress "


def import_confined(
    problem: Path, target: Path, options: TorchImportOptions, *, timeout_s: float = IMPORT_TIMEOUT_S,
    compile_limits: CompileLimits | None = None, progress: Callable[[str, int, int], None] | None = None,
) -> ConfinedImport:
    """``kernelopt import-torch --in-process`` on ``problem`` in a confined child (threads only, the
    machine's memory, ``timeout_s``; the operator's confinement choice in ``compile_limits``) that
    reads the Python installation and a copy of the problem, and writes a staging directory beside
    ``target``, whose workload replaces ``target`` (``options.overwrite``) once it holds plain files
    only and loads here. What is said of it comes from that workload, not from the child's word.

    Raises:
        TorchProblemError: the problem's refusal, or why the child gave none (not run, timed out, died).
    """
    if not problem.is_file():
        raise TorchProblemError(f"{problem}: no such file")
    if target.exists() and not options.overwrite and (not target.is_dir() or any(target.iterdir())):
        raise TorchProblemError(f"{target}: exists and is not empty; choose another directory or pass --force")
    target.resolve().parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-import-", dir=target.resolve().parent))
    try:
        # the problem alone, copied in: the child reads that, not its directory (a file in $HOME would open $HOME)
        (staging / "problem").mkdir()
        copy = Path(shutil.copyfile(problem, staging / "problem" / problem.name))
        args = ["import-torch", str(copy), "-o", str(staging / "workload"), "--seed", str(options.seed),
                "--output-name", options.output_name, "--tolerance", options.tolerance, "--json", "--no-progress",
                "--in-process", "--progress-lines", *(["--name", options.name] if options.name else [])]
        if options.initial_cu is not None:  # read by the caller, handed over in the staging directory
            (staging / "initial.cu").write_text(options.initial_cu)
            launch = options.initial_launch.model_dump(mode="json") if options.initial_launch else None
            (staging / "initial.launch.json").write_text(
                json.dumps({"launch": launch, "compile_options": options.initial_options}))
            args += ["--initial", str(staging / "initial.cu")]
        limits = replace(ChildLimits.following(compile_limits, timeout_s, processes=False),
                         memory_mb=ImportLimits().memory_for(1) >> 20)
        if progress is not None:
            progress("starting the confined importer", 0, 1)
        result = run_torch_child("kernelopt_mcp", args, staging=staging, limits=limits, gpu=False,
                                 on_stderr=_ProgressLines(progress) if progress else None)
        answer = _import_answer(result, timeout_s, {str(copy): str(problem)})
        try:  # the problem's code wrote it: plain files only, never a link
            check_plain_tree(staging / "workload")
        except OSError as exc:
            raise TorchProblemError(f"{problem}: the import left {exc}") from None
        spec = load_workload(staging / "workload").spec
        move_into_place(staging / "workload", target)
        notes = [n for n in answer.get("notes") or [] if isinstance(n, str)]
        return ConfinedImport(spec, notes, str(answer.get("torch") or "unknown"))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class _ProgressLines:
    """stderr chunks in, each progress line to ``step`` (anything else is left to the stderr tail)."""

    def __init__(self, step: Callable[[str, int, int], None]) -> None:
        self.step, self.pending = step, b""

    def __call__(self, chunk: bytes) -> None:
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        self.pending = self.pending[-4096:]
        for line in lines:
            if line.startswith(PROGRESS_LINE):
                try:
                    message, done, total = json.loads(line[len(PROGRESS_LINE):])
                    self.step(str(message), int(done), int(total))
                except (ValueError, TypeError):
                    continue


def _import_answer(result: ChildResult, timeout_s: float, spelled: dict[str, str]) -> dict[str, Any]:
    """The confined importer's JSON answer, or the error that says why there is none (the paths in
    it as ``spelled``: the child was handed absolute ones)."""
    if result.refused is not None:
        if result.missing == "torch":
            raise TorchProblemError(TORCH_MISSING)
        raise TorchProblemError(f"the importer was not run: {result.refused}; or pass --in-process to run the "
                                "problem's code in this process, unconfined")
    if result.timed_out:
        raise TorchProblemError(f"the import did not finish within {timeout_s:.0f} s (the problem's get_inputs, Model "
                                "or forward ran that long on the CPU): make its sizes smaller, or pass --timeout")
    try:
        answer = json.loads(result.stdout)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        last = result.last_line(skip=PROGRESS_LINE.decode().strip())
        raise TorchProblemError(f"the import died (exit {result.returncode}): {last}")
    if answer.get("status") != "ok":
        message = str(answer.get("message") or "the import failed")[:2000]
        for absolute, own in spelled.items():
            message = message.replace(absolute, own)
        raise TorchProblemError(message)
    return answer


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: python -m kernelopt_mcp.suite_imports PROBLEM.py OUT_DIR [TOLERANCE]", file=sys.stderr)
        return 2
    print(json.dumps(import_record(Path(argv[0]), Path(argv[1]), *argv[2:3])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
