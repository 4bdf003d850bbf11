"""Candidates per minute of `kernelopt optimize --candidates N` when the model is the slow part (issue 15).

    python bench/candidates_per_minute.py [--delay 20] [--iterations 3] [--candidates 1,4] [--json]

A scripted OpenAI-compatible model on loopback (tests/scripted_model.py) answers every request
after ``--delay`` seconds (a realistic reasoning model's latency) with a distinct, valid kernel;
kernelopt-mcp evaluates each on the pretend H200 of tests/fakegpu.py (real NVRTC compiles, the
real server and client, a NumPy stand-in for the GPU). The same run is made for each N, and the
table puts them side by side: candidates evaluated per minute from the first model request to
the last evaluation, and the ratio to N = 1. With a real GPU the evaluations take longer, but
they overlap the model's latency the same way.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "clients", ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from fakegpu import kernel, write_harness, write_tiny_workload
from rich.console import Console
from rich.table import Table
from scripted_model import ScriptedModel

from kernelopt_agent.cli import main as agent_main
from kernelopt_agent.records import CandidateEvent, StepEvent, read_history

LAUNCH = {"default": {"grid": ["ceil_div(n, 256)"], "block": ["256"], "shared_bytes": "0"}, "cases": []}


def measure(work: Path, candidates: int, iterations: int, delay_s: float) -> dict[str, Any]:
    """One optimize run with ``candidates`` lanes; returns its counts and times (from its history)."""
    counter = itertools.count(1)
    lock = threading.Lock()

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        with lock:
            n = next(counter)
        source = kernel(f"MS:n_4096={0.05 - n * 0.0004:.4f};").rstrip() + f"\n// proposal {n}\n"
        return {"sleep": delay_s, "content": json.dumps({"rationale": f"idea {n}", "source": source, "launch": LAUNCH,
                                                         "compile_options": [], "tunables": None})}

    results = work / f"results-n{candidates}"
    with ScriptedModel([answer] * (candidates * iterations)) as model:
        code = agent_main(["optimize", "--workload", "tiny_add", "--max-iterations", str(iterations), "--candidates",
                           str(candidates), "--base-url", model.url, "--harness", str(work / "kernelopt-harness-fake"),
                           "--workspace", str(work / "ws"), "--results-dir", str(results), "--iterations", "3",
                           "--warmup", "1", "--quiet"])
    if code != 0 or model.exhausted:
        raise SystemExit(f"the run with --candidates {candidates} failed (exit {code}); see {results}")
    history = read_history(results / "run-001")
    first_ask = min(e.time for e in history.of(StepEvent) if e.node in ("propose", "repair"))
    evaluated = [e for e in history.of(CandidateEvent) if e.iteration is not None]
    span_s = max(e.time for e in evaluated) - first_ask
    gpu_s = sum(e.seconds for e in evaluated)
    return {"candidates_per_iteration": candidates, "iterations": iterations, "model_delay_s": delay_s,
            "evaluated": len(evaluated), "span_s": round(span_s, 2), "gpu_busy_s": round(gpu_s, 2),
            "candidates_per_min": round(len(evaluated) / span_s * 60, 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--delay", type=float, default=20.0, help="seconds the scripted model takes to answer (default 20)")
    p.add_argument("--iterations", type=int, default=3, help="--max-iterations of each run (default 3)")
    p.add_argument("--candidates", default="1,4", help="the values of --candidates to compare (default 1,4)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    ns = [int(x) for x in args.candidates.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="kernelopt-bench-cpm-") as tmp:
        work = Path(tmp)
        write_harness(work, "fake")
        extra = write_tiny_workload(work / "workloads")
        # the entry point's environment for the client and the server it starts (a script, not library code)
        os.environ.update({"OPENAI_API_KEY": "sk-bench", "KERNELOPT_WORKLOADS": str(extra),
                           "KERNELOPT_DOCS_OFFLINE": "1", "KERNELOPT_CACHE": str(work / "cache"),
                           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "clients")])})
        os.environ.pop("OPENAI_BASE_URL", None)
        for n in ns:
            rows.append(measure(work, n, args.iterations, args.delay))
    base = rows[0]["candidates_per_min"]
    for row in rows:
        row["vs_first"] = round(row["candidates_per_min"] / base, 2)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title=f"candidates per minute, model answering in {args.delay:g} s, pretend H200 "
                        f"({args.iterations} iterations)")
    for col in ("--candidates", "evaluated", "span s", "GPU busy s", "per min", f"x N={ns[0]}"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["candidates_per_iteration"]), str(r["evaluated"]), f"{r['span_s']:.1f}",
                      f"{r['gpu_busy_s']:.1f}", f"{r['candidates_per_min']:.2f}", f"{r['vs_first']:.2f}x")
    Console().print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
