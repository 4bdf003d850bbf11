"""Import every problem of a KernelBench checkout and say what it cost: per level how many import,
the refusals by reason, and per import its wall time and the bytes it wrote (issue 40's bar: at least
97% of the 250 import, each under 60 s and 256 MB).

    python bench/kernelbench_import.py KERNELBENCH_DIR [--level 1 2 3] [--jobs N] [--out DIR] [--json FILE]

KERNELBENCH_DIR holds level1/ ... level3/ (KernelBench's KernelBench/ folder; never copied into this
repository). Problems import in ``--jobs`` processes at once (default: the CPUs, at most 16), each a
fresh process of its own (this checkout's kernelopt_mcp first on its path) with torch limited to one
thread, its data memory capped (``--max-gib``, default the machine's memory over the jobs) and a
deadline (``--timeout``): an import that runs away is a row of the table, not the end of the bench.
Needs torch.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

LIMIT_S, LIMIT_BYTES = 60.0, 256 * 2**20


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def import_one(problem: str, out: str) -> dict[str, Any]:
    """Import ``problem`` into ``out`` (in this process): its outcome, seconds and bytes written."""
    import torch

    torch.set_num_threads(1)
    from kernelopt_mcp.torch_import import TorchImportOptions, TorchProblemError, import_torch_problem

    start = time.perf_counter()
    record: dict[str, Any] = {"problem": problem, "imported": False, "refusal": None}
    try:
        result = import_torch_problem(problem, out, TorchImportOptions(overwrite=True))
        record.update(imported=True, degenerate=len(result.degenerate))
    except TorchProblemError as exc:
        record["refusal"] = str(exc).removeprefix(f"{problem}: ")
    except Exception as exc:  # noqa: BLE001 - a bench row, never a crash of the bench
        record["refusal"] = f"importer error: {type(exc).__name__}: {str(exc)[:200]}"
    record["seconds"] = time.perf_counter() - start
    record["bytes"] = _du(Path(out))
    return record


def import_in_child(problem: str, out: str, max_bytes: int, timeout_s: float) -> dict[str, Any]:
    """:func:`import_one` in a fresh process with its data memory capped and a deadline."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (max_bytes, max_bytes))

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, __file__, "--one", problem, out], capture_output=True, text=True,
                              timeout=timeout_s, env=env, preexec_fn=cap)
    except subprocess.TimeoutExpired:
        return {"problem": problem, "imported": False, "refusal": f"bench: over {timeout_s:.0f} s",
                "seconds": time.perf_counter() - start, "bytes": _du(Path(out))}
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        return json.loads(lines[-1])
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {"problem": problem, "imported": False, "seconds": time.perf_counter() - start, "bytes": _du(Path(out)),
            "refusal": f"bench: the import died (exit {done.returncode}, data memory cap {max_bytes / 2**30:.0f} GiB): {tail[:200]}"}


def reason(refusal: str) -> str:
    """A refusal's kind: its first clause without names and numbers."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"|\d+(\.\d+)?", "_", refusal.split(";")[0])
    return text[:90]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problems_dir", type=Path)
    ap.add_argument("--level", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--out", type=Path, help="where the workloads go (default: a temporary directory, removed)")
    ap.add_argument("--json", type=Path, help="write every problem's record here")
    ap.add_argument("--max-gib", type=float, help="data memory cap of one import (default: the machine's memory / jobs)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds one import may take (default 600)")
    args = ap.parse_args(argv)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    max_bytes = int(args.max_gib * 2**30) if args.max_gib else memory // max(1, args.jobs)
    problems = [(level, p) for level in args.level for p in sorted((args.problems_dir / f"level{level}").glob("*.py"),
                                                                   key=lambda p: (int(p.name.split("_")[0]), p.name))]
    if not problems:
        print(f"{args.problems_dir}: no level*/N_Name.py files", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="kb-import-") as tmp:
        root = args.out or Path(tmp)
        records: list[dict[str, Any]] = []
        with ThreadPoolExecutor(args.jobs) as pool:
            futures = {pool.submit(import_in_child, str(p), str(root / f"level{level}" / p.stem), max_bytes, args.timeout): level
                       for level, p in problems}
            for i, done in enumerate(as_completed(futures), 1):
                rec = {**done.result(), "level": futures[done]}
                records.append(rec)
                print(f"[{i}/{len(problems)}] level{rec['level']} {Path(rec['problem']).name}: "
                      f"{'ok' if rec['imported'] else 'refused: ' + str(rec['refusal'])[:120]} "
                      f"({rec['seconds']:.1f} s, {rec['bytes'] / 2**20:.2f} MiB)", file=sys.stderr, flush=True)
    if args.json:
        args.json.write_text(json.dumps(sorted(records, key=lambda r: r["problem"]), indent=1))
    print("| level | problems | imported | % | median s | max s | max MiB | over 60 s | over 256 MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for level in [*args.level, None]:
        rows = [r for r in records if level is None or r["level"] == level]
        ok = [r for r in rows if r["imported"]]
        secs = [r["seconds"] for r in ok] or [0.0]
        print(f"| {level or 'all'} | {len(rows)} | {len(ok)} | {100 * len(ok) / max(1, len(rows)):.1f} | "
              f"{statistics.median(secs):.1f} | {max(secs):.1f} | {max((r['bytes'] for r in ok), default=0) / 2**20:.2f} | "
              f"{sum(r['seconds'] > LIMIT_S for r in ok)} | {sum(r['bytes'] > LIMIT_BYTES for r in ok)} |")
    refusals = Counter(reason(r["refusal"]) for r in records if not r["imported"])
    if refusals:
        print("\n| refusals by reason | problems |\n|---|---|")
        for text, n in refusals.most_common():
            print(f"| {text} | {n} |")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        print(json.dumps(import_one(sys.argv[2], sys.argv[3])))
        sys.exit(0)
    sys.exit(main())
