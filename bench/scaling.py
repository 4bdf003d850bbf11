"""Scaling of `kernelopt tune` over devices: 1 device vs N, the same search and the same seeds.

    python bench/scaling.py [--devices 1,2] [--json]                       # pretend GPUs, on the CPU
    python bench/scaling.py --real --workload sgemm --devices 1,2,4 [--json]   # a machine with N GPUs

Each run tunes the same space with the same strategy seed and input seed on the first n devices
(`--devices 0,..,n-1`) and no tune cache; the table puts configurations measured per minute side by
side, the ratio to the first row, and whether the best configuration is the same.

Without --real the GPUs are the pretend H200s of tests/fakegpu.py (a machine of N of them), each
evaluation's "GPU time" the stand-in's 0.5 s sleep (KO_FAKE_SLOW), compiles real NVRTC: the figures
then measure the orchestration only (dispatch, one harness and session per device, compiles
ahead), not a GPU. With --real they are the machine's own GPUs and the workload's tunable.json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from fakegpu import write_harness, write_tiny_workload
from rich.console import Console
from rich.table import Table

from kernelopt_mcp.cli import main as cli_main

FIXTURES = ROOT / "tests" / "fixtures" / "tune"


def pretend(work: Path, devices: int) -> tuple[list[str], str]:
    """The workload, tunable and harness arguments of a run on ``devices`` pretend GPUs."""
    harness = write_harness(work, "fake", devices=devices)
    workload = write_tiny_workload(work / "wl") / "tiny_add"
    spec = json.loads((FIXTURES / "add.json").read_text())
    # every configuration spends 0.5 s "on the GPU" per request: the stand-in's sleep
    (work / "add.cu").write_text('__device__ char ko_fake_slow[] = "KO_FAKE_SLOW";\n'
                                 + (FIXTURES / "add.cu").read_text())
    (work / "add.json").write_text(json.dumps(spec))
    return [str(workload), str(work / "add.json"), "--harness", str(harness)], "pretend H200s (orchestration only)"


def run(args: list[str], n: int, out_dir: Path, extra: list[str]) -> dict[str, Any]:
    argv = ["tune", *args, "--devices", ",".join(str(i) for i in range(n)), "--no-cache", "--json", "--seed", "7",
            "--tune-seed", "0", "-o", str(out_dir), *extra]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = cli_main(argv)
    text = buffer.getvalue()
    result = json.loads(text[text.index("{"):])
    if code not in (0, 1):
        raise SystemExit(f"the run on {n} device(s) failed (exit {code})")
    measured = result["counts"]["measured"]
    return {"devices": n, "measured": measured, "elapsed_s": result["elapsed_s"],
            "configs_per_min": round(measured / result["elapsed_s"] * 60, 2) if result["elapsed_s"] else None,
            "per_device_per_min": result["evals_per_min_per_device"], "best": result["best_params"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--devices", default="1,2", help="device counts to compare (default 1,2)")
    p.add_argument("--real", action="store_true", help="the machine's GPUs and the installed harness, not pretend ones")
    p.add_argument("--workload", default="sgemm", help="with --real: the workload whose tunable.json is searched")
    p.add_argument("--budget-evals", type=int, help="configurations per run at most (default: the whole space)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    counts = [int(c) for c in args.devices.split(",")]
    extra = ["--budget-evals", str(args.budget_evals)] if args.budget_evals else []
    rows = []
    with tempfile.TemporaryDirectory(prefix="kernelopt-scaling-") as tmp:
        work = Path(tmp)
        os.environ["KERNELOPT_CACHE"] = str(work / "cache")
        if args.real:
            tune_args, what = [args.workload], "this machine's GPUs"
        else:
            extra += ["--iterations", "3", "--warmup", "0"]
            tune_args, what = pretend(work, max(counts))
        for n in counts:
            rows.append(run(tune_args, n, work / f"run-{n}", extra))
    first = rows[0]["configs_per_min"] or 1.0
    for row in rows:
        row["vs_first"] = round((row["configs_per_min"] or 0.0) / first, 2)
        row["same_best"] = row["best"] == rows[0]["best"]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title=f"kernelopt tune over 1 to {max(counts)} devices: {what}")
    for col in ("devices", "measured", "seconds", "configs/min", "per device/min", "vs first", "same best"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["devices"]), str(r["measured"]), f"{r['elapsed_s']:.1f}", f"{r['configs_per_min']:.1f}",
                      f"{r['per_device_per_min'] or 0:.1f}", f"{r['vs_first']:.2f}x", "yes" if r["same_best"] else "no")
    Console().print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
