"""Diagnostic for the GPU machine: where the warm per-candidate overhead of `bench/run.py --only
overhead` goes (issue 44). Evaluates softmax's CUDA reference (the overhead section's six cases)
under the default options and under variants that each switch one check or one preparation step
off, the variants alternating trial by trial in one process so clocks and caches affect all alike.
Prints, per variant, the median overhead (wall minus the kernels' own GPU time) and its difference
from the default, then where the default's time went (harness steps, pipe, Python).

    python scripts/probe_overhead.py [trials]      # default 5
"""

import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_core import make_bench, overhead_breakdown, reference, timed_evaluate, variant
from run import OVERHEAD_CASES as CASES

from kernelopt_mcp import Settings
from kernelopt_mcp.evaluation.evaluate import evaluate


def main() -> None:
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with tempfile.TemporaryDirectory(prefix="kernelopt-probe-") as tmp:
        bench = make_bench(Settings.from_env(), Path(tmp), lambda m: None)
        o = bench.options
        variants = {
            "default": o,
            "precision rule": replace(o, stop="precision"),
            "poison before every launch": replace(o, poison_subset=False),
            "redraw before every launch": replace(o, fresh_launches=None),
            "no fresh inputs": replace(o, fresh_inputs=False),
            "no L2 flush": replace(o, flush_l2=False),
            "no checked launches": replace(o, checked_launches=0),
            "no confirm launch": replace(o, check_consistency=False),
            "no determinism re-run": replace(o, check_determinism=False),
            "no timed-inputs check": replace(o, check_timed_outputs=False),
            "not blocking": replace(o, blocking=False),
        }
        wl = bench.workload("softmax", list(CASES))
        cand = variant(reference(wl), "probe")
        runs: dict[str, list[float]] = {k: [] for k in variants}
        phases: list = []
        kernels: list[float] = []
        with bench.evaluator(wl, "probe") as ev:
            evaluate(ev, cand)  # compiled before the clock starts
            for i in range(trials):
                for name, opts in variants.items():
                    _wall, kernel, over = timed_evaluate(ev, cand, phases if name == "default" else None, options=opts)
                    runs[name].append(over)
                    if name == "default":
                        kernels.append(kernel)
                print(f"trial {i + 1}/{trials} done", file=sys.stderr)
        base = statistics.median(runs["default"])
        print(f"{bench.device.summary()}; softmax, {len(CASES)} cases, {o.warmup} + {o.iterations} launches, "
              f"fresh_launches {o.fresh_launches}; medians of {trials}")
        print(f"{'variant':32s} {'overhead ms':>12s} {'vs default':>11s}")
        for name, over in runs.items():
            med = statistics.median(over)
            print(f"{name:32s} {med:12.1f} {med - base:+11.1f}")
        print("default, where it went: " + overhead_breakdown(phases, statistics.median(kernels)))


if __name__ == "__main__":
    main()
