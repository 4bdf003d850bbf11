"""PyTorch baselines of a batch of problems, compiled ahead or not, side by side in one run.

    python bench/torch_baselines.py                       # tests/torch_problems/*.py, one batch
    python bench/torch_baselines.py KERNELBENCH/level1 --limit 8 --ahead 8 --json

The timing child times each problem of a batch in a process of its own; with ``compile_ahead`` it
first compiles up to that many problems at once (torch.compile is CPU work; nothing is timed
meanwhile, and the autotuning made while they shared the GPU is dropped), so each timing job loads
its compiled code. This script times the same batch both ways (ahead first, then one at a time, a
fresh cache directory for each so neither finds the other's code) and prints the wall seconds of
each, the ratio, and whether both gave every problem eager and compiled times. No time is judged
against a target; the medians of the two ways are printed side by side so a reader sees whether
compiling ahead changed what was measured (it should not: the same compiled code, timed alone).
Needs torch and a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelopt_mcp.confined_python import ChildLimits
from kernelopt_mcp.torch_baseline import BaselineJob, BaselineOptions, measure_batch
from kernelopt_mcp.torch_problem import parse_problem


def jobs_in(directory: Path, limit: int) -> list[BaselineJob]:
    """Up to ``limit`` problem files of ``directory`` (sorted), each at its own sizes, with the bytes
    of its buffers (from torch's meta device, as the import counts them; 0 where that fails), which
    bound how many compile at once on the GPU."""
    jobs = []
    for path in sorted(directory.glob("*.py"))[:limit]:
        text = path.read_text(encoding="utf-8")
        source = parse_problem(text, path.name)
        constants = {c.name: c.value for c in source.constants}
        jobs.append(BaselineJob(text, [("perf", constants)], path.name, buffer_bytes(source, constants)))
    return jobs


def buffer_bytes(source: Any, constants: dict[str, int]) -> int:
    try:
        from kernelopt_mcp.torch_problem import draw_shapes

        shapes = draw_shapes(source, constants, 0)
    except Exception:  # noqa: BLE001 - torch missing, or the meta device refuses the problem: bytes unknown
        return 0
    return sum(a.nbytes for a in [*(a for a in shapes.args if a.tensor), *shapes.state, *shapes.outputs])


def run(jobs: list[BaselineJob], ahead: int, device: int, timeout_s: float) -> dict[str, object]:
    """One batch timed with ``compile_ahead`` = ``ahead``: its wall seconds and each problem's medians."""
    with tempfile.TemporaryDirectory(prefix="kernelopt-baselines-") as work:
        began = time.perf_counter()
        reports = measure_batch(jobs, device=device, options=BaselineOptions(compile_ahead=ahead, timeout_s=timeout_s),
                                limits=ChildLimits(timeout_s=timeout_s), workdir=Path(work))
        seconds = time.perf_counter() - began
    rows = {}
    for job, report in zip(jobs, reports, strict=True):
        case = report.cases[0] if report.cases else None
        rows[job.label] = {"eager_ms": case.eager.median_ms if case and case.eager else None,
                           "compile_ms": case.compile.median_ms if case and case.compile else None,
                           "compile_s": case.compile_s if case else None,
                           "note": report.note or (case.compile_note if case else None)}
    return {"ahead": ahead, "seconds": round(seconds, 2), "problems": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="?", type=Path, default=ROOT / "tests" / "torch_problems")
    parser.add_argument("--limit", type=int, default=8, help="problems in the batch (the suite's batch is 8)")
    parser.add_argument("--ahead", type=int, default=8, help="problems compiled at once in the compile-ahead run")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=600.0, help="each problem's deadline (s)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    jobs = jobs_in(args.problems, args.limit)
    if not jobs:
        raise SystemExit(f"{args.problems}: no problem files")
    ahead, alone = run(jobs, args.ahead, args.device, args.timeout), run(jobs, 1, args.device, args.timeout)
    if args.json:
        print(json.dumps({"ahead": ahead, "alone": alone}, indent=2))
        return 0
    print(f"{len(jobs)} problems: compiled ahead ({args.ahead} at once) {ahead['seconds']} s, one at a time "
          f"{alone['seconds']} s: {alone['seconds'] / ahead['seconds']:.2f}x")  # type: ignore[operator]
    print("| problem | eager ms (ahead / alone) | compile ms (ahead / alone) | compile s (ahead / alone) | note |")
    print("|---|---|---|---|---|")
    ratios = []
    for label, a in ahead["problems"].items():  # type: ignore[attr-defined]
        b = alone["problems"][label]  # type: ignore[index]
        if a["compile_ms"] and b["compile_ms"]:
            ratios.append(a["compile_ms"] / b["compile_ms"])
        print(f"| {label} | {a['eager_ms']} / {b['eager_ms']} | {a['compile_ms']} / {b['compile_ms']} | "
              f"{a['compile_s']} / {b['compile_s']} | {a['note'] or b['note'] or ''} |")
    if ratios:
        print(f"compiled medians, ahead / alone: median ratio {statistics.median(ratios):.3f} over {len(ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
