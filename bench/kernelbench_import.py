"""Import every problem of a KernelBench checkout and say what it cost: per level how many import,
the refusals by reason, and per import its wall time and the bytes it wrote (issue 40's bar: at least
97% of the 250 import, each under 60 s and 256 MB).

    python bench/kernelbench_import.py KERNELBENCH_DIR [--level 1 2 3] [--jobs N] [--out DIR] [--json FILE]

KERNELBENCH_DIR holds level1/ ... level3/ (KernelBench's KernelBench/ folder; never copied into this
repository). Problems import in ``--jobs`` processes at once (default: the CPUs, at most 16), each a
fresh process of its own (kernelopt_mcp.suite_imports, the import children of `kernelopt kernelbench --jobs`)
with torch limited to one thread, its data memory capped (``--max-gib``, default the machine's memory over
the jobs) and a deadline (``--timeout``): an import that runs away is a row of the table, not the end of the
bench. Needs torch.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's kernelopt_mcp, and its import children's (suite_imports puts it first)

from kernelopt_mcp.suite_imports import ImportJob, ImportLimits, import_many

LIMIT_S, LIMIT_BYTES = 60.0, 256 * 2**20


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
    ap.add_argument("--max-gib", type=float,
                    help="data memory cap of one import (default: the machine's memory / jobs)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds one import may take (default 600)")
    args = ap.parse_args(argv)
    limits = ImportLimits(max_bytes=int(args.max_gib * 2**30) if args.max_gib else 0, timeout_s=args.timeout)
    problems = [(level, p) for level in args.level for p in sorted((args.problems_dir / f"level{level}").glob("*.py"),
                                                                   key=lambda p: (int(p.name.split("_")[0]), p.name))]
    if not problems:
        print(f"{args.problems_dir}: no level*/N_Name.py files", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="kb-import-") as tmp:
        root = args.out or Path(tmp)
        records: list[dict[str, Any]] = []
        jobs = {ImportJob(p, root / f"level{level}" / p.stem): level for level, p in problems}
        for i, (job, record) in enumerate(import_many(list(jobs), args.jobs, limits), 1):
            rec = {**record, "level": jobs[job]}
            records.append(rec)
            print(f"[{i}/{len(problems)}] level{rec['level']} {Path(rec['problem']).name}: "
                  f"{'ok' if rec['imported'] else 'refused: ' + str(rec['refusal'])[:120]} "
                  f"({rec['seconds']:.1f} s, {rec['bytes'] / 2**20:.2f} MiB{', alone' if rec.get('alone') else ''})",
                  file=sys.stderr, flush=True)
    if args.json:
        args.json.write_text(json.dumps(sorted(records, key=lambda r: r["problem"]), indent=1))
    print("| level | problems | imported | % | median s | max s | max MiB | over 60 s | over 256 MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for level in [*args.level, None]:
        rows = [r for r in records if level is None or r["level"] == level]
        ok = [r for r in rows if r["imported"]]
        secs = [r["seconds"] for r in ok] or [0.0]
        print(f"| {level or 'all'} | {len(rows)} | {len(ok)} | {100 * len(ok) / max(1, len(rows)):.1f} | "
              f"{statistics.median(secs):.1f} | {max(secs):.1f} | "
              f"{max((r['bytes'] for r in ok), default=0) / 2**20:.2f} | {sum(r['seconds'] > LIMIT_S for r in ok)} | "
              f"{sum(r['bytes'] > LIMIT_BYTES for r in ok)} |")
    refusals = Counter(reason(r["refusal"]) for r in records if not r["imported"])
    if refusals:
        print("\n| refusals by reason | problems |\n|---|---|")
        for text, n in refusals.most_common():
            print(f"| {text} | {n} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
