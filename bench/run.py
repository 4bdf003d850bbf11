"""kernelopt's own performance, measured side by side in one run on one GPU (issue 6).

    python bench/run.py [--json] [--only overhead|throughput|repeatability|agreement|checks|tuning]

Sections (each a function taking a :class:`Bench`, so they can be run separately):
1. overhead:      per-candidate overhead (evaluate wall time minus the kernels' own GPU time),
                  cold and warm, against a baseline in the original tool's style (a fresh
                  `kernelopt-harness run` process per case, compile per case, no caches);
2. throughput:    candidates per minute for sgemm and softmax;
3. repeatability: CV of the score over 10 repeated benchmarks, ~5 us and ~1 ms kernels;
4. agreement:     our median, and the net median (the measured event-pair floor taken out),
                  against Nsight Compute's gpu__time_duration (kernels >= 20 us);
5. checks:        per-candidate overhead with issue 14's timed-launch checks (fresh device-drawn
                  inputs for every timed launch, checked launches against the CUDA reference,
                  the confirm launch) on and off, side by side in one harness, as a ratio;
6. tuning:        one `kernelopt tune sgemm` search timed the seed's way and with the defaults
                  (precision stopping rule, early stop): wall time and the best configuration.
Every table states its target (issues 6 and 14) and PASS/FAIL. See bench/README.md.
What the sections are built on (Section, Bench, the candidates, the tables) is bench/bench_core.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import numpy as np
from bench_core import (
    Bench,
    Section,
    evaluate_counted,
    make_bench,
    overhead_breakdown,
    print_section,
    reference,
    timed_evaluate,
    variant,
)
from rich.console import Console

from kernelopt_mcp import Candidate, EvaluateOptions, Session, Settings, app
from kernelopt_mcp.compiler import CompileCache, compile_kernel
from kernelopt_mcp.errors import KerneloptError
from kernelopt_mcp.evaluation.candidate import PRECISION_MIN_ITERATIONS, PRECISION_RSE
from kernelopt_mcp.evaluation.compare import compare
from kernelopt_mcp.evaluation.evaluate import case_request, evaluate, preparation_text
from kernelopt_mcp.evaluation.outcomes import PhaseTimes
from kernelopt_mcp.evaluation.protocol import request_json
from kernelopt_mcp.evaluation.support_module import support_module
from kernelopt_mcp.tune.prefetch import CompileAhead

# Targets from issue 6 ("Measurement you can trust")
WARM_OVERHEAD_MS = 50.0
BASELINE_RATIO = 0.1
CV_LONG, CV_SHORT = 0.01, 0.03
AGREEMENT = 0.03
# Target from issue 14: the new checks cost at most 10% more per-candidate overhead
CHECKS_RATIO = 1.10
# Targets from issue 17: a session's one-time preparation (harness start, inputs, expected outputs),
# and the warm per-candidate overhead (issue 6 asked for 50 ms; issue 17 for under 25 ms)
PREPARE_MS = 2000.0
WARM_OVERHEAD_17_MS = 25.0


# --- 1. per-candidate overhead ----------------------------------------------------------------

#: softmax's cases the overhead is measured on (scripts/probe_overhead.py takes it apart on the same)
OVERHEAD_CASES = ("one", "single_col_37x1", "rows_7x1000", "odd_33x4097", "large_values_5x30001",
                  "short_rows_32768x1024")


def overhead(bench: Bench, workload: str = "softmax", cases: list[str] | None = None, trials: int = 3) -> Section:
    """Evaluate wall time minus kernel GPU time: cold, warm, and the one-process-per-case baseline."""
    cases = cases or list(OVERHEAD_CASES)
    wl = bench.workload(workload, cases)
    sec = Section(
        "overhead", f"per-candidate overhead, {workload} ({len(wl.spec.cases)} cases, CUDA reference kernel)",
        f"warm < {WARM_OVERHEAD_17_MS:.0f} ms (issue 17; issue 6: <= {WARM_OVERHEAD_MS:.0f} ms) and <= "
        f"{BASELINE_RATIO:g} x the baseline",
        ["mode", "wall ms", "kernel ms", "overhead ms (median)", "overhead min", "overhead max", "vs baseline"],
    )
    base = reference(wl)
    cold, warm, per_case, precision, baseline = [], [], [], [], []
    warm_phases: list[PhaseTimes] = []
    per_case_options = replace(bench.options, batch_validation=False)
    # search's default stopping rule (kernelopt tune, optimize): what a candidate costs in a search
    precision_options = replace(bench.options, stop="precision")
    start = time.perf_counter()
    with bench.evaluator(wl, "overhead") as ev:
        prepare_ms = (time.perf_counter() - start) * 1e3
        for i in range(trials):
            bench.say(f"overhead: cold evaluation {i + 1}/{trials}")
            cold.append(timed_evaluate(ev, variant(base, f"cold{i}")))
        warm_candidate = variant(base, "warm")
        evaluate(ev, warm_candidate)  # compile it once
        for i in range(trials):
            bench.say(f"overhead: warm evaluation {i + 1}/{trials}")
            warm.append(timed_evaluate(ev, warm_candidate, warm_phases))
            # side by side: the same candidate validated with one harness request per case
            per_case.append(timed_evaluate(ev, warm_candidate, options=per_case_options))
            precision.append(timed_evaluate(ev, warm_candidate, options=precision_options))
    # the baseline compares on the host: its session writes every expected output to a file
    with bench.evaluator(wl, "overhead-baseline", options=replace(bench.options, device_expected=False)) as host_ev:
        for i in range(trials):
            bench.say(f"overhead: baseline (process per case) {i + 1}/{trials}")
            baseline.append(_baseline(bench, host_ev, variant(base, f"baseline{i}"), f"b{i}"))
    base_over = statistics.median(o for _, _, o in baseline)
    for mode, runs in (("cold (compile, harness running)", cold), ("warm (compile cached)", warm),
                       ("warm, one validation request per case", per_case),
                       ("warm, precision rule (search's default stop)", precision),
                       ("baseline: process + compile per case", baseline)):
        over = [o for _, _, o in runs]
        sec.rows.append({
            "mode": mode, "wall ms": statistics.median(w for w, _, _ in runs),
            "kernel ms": statistics.median(k for _, k, _ in runs), "overhead ms (median)": statistics.median(over),
            "overhead min": min(over), "overhead max": max(over),
            "vs baseline": statistics.median(over) / base_over if base_over else None,
        })
    warm_over = statistics.median(o for _, _, o in warm)
    sec.passed = warm_over < WARM_OVERHEAD_17_MS and warm_over <= BASELINE_RATIO * base_over
    sec.notes.append(
        f"warm overhead {warm_over:.1f} ms: issue 6's <= {WARM_OVERHEAD_MS:.0f} ms "
        f"{'met' if warm_over <= WARM_OVERHEAD_MS else 'NOT met'}, issue 17's < {WARM_OVERHEAD_17_MS:.0f} ms "
        f"{'met' if warm_over < WARM_OVERHEAD_17_MS else 'NOT met'}"
    )
    precision_over = statistics.median(o for _, _, o in precision)
    sec.notes.append(
        f"under search's precision rule (at least {PRECISION_MIN_ITERATIONS} measured launches per timed case, "
        f"more until the median's rse <= {100 * PRECISION_RSE:g}%) the warm overhead is {precision_over:.1f} ms: "
        f"issue 17's < {WARM_OVERHEAD_17_MS:.0f} ms {'met' if precision_over < WARM_OVERHEAD_17_MS else 'NOT met'} "
        "there; the target above is judged on the count rule's row"
    )
    sec.notes.append("warm, where it went (medians): "
                     + overhead_breakdown(warm_phases, statistics.median(k for _, k, _ in warm)))
    sec.notes.append(f"once per run, not per candidate: harness start + inputs + expected outputs {prepare_ms:.0f} ms "
                     f"({preparation_text(ev.prepare_ms)})")
    sec.notes.append(f"{trials} trials each; kernel time = measured + warm-up + validation launches "
                     f"({bench.options.warmup} warm-up, {bench.options.iterations} measured per timed case)")
    return sec


def _baseline(bench: Bench, ev: Session, candidate: Candidate, tag: str) -> tuple[float, float, float]:
    """The original tool's way: per case, compile, write the request, start a harness process,
    read its outputs back and compare them. Request JSON files come from evaluation.evaluate.case_request."""
    wl = ev.workload
    requests = {}
    root = bench.workdir / "baseline" / tag
    for case in wl.spec.cases:  # building the requests is not timed: the same files either way
        built = case_request(ev, candidate, case.name, root / case.name, timing=case.kind == "performance")
        if built.request is None:
            raise KerneloptError(f"baseline request for {case.name}: {built.problem}")
        requests[case.name] = request_json(built.request)
    start = time.perf_counter()
    kernel = 0.0
    for i, case in enumerate(wl.spec.cases):
        compiled = compile_kernel(candidate.source + f"\n// case {i}\n", ev.arch, candidate.compile_options,
                                  cache=CompileCache())
        module = root / case.name / "kernel.cubin"
        module.write_bytes(compiled.cubin or b"")
        req = dict(requests[case.name], module=str(module.resolve()))
        path = root / case.name / "request.json"
        path.write_text(json.dumps(req, separators=(",", ":")) + "\n")
        with path.open("rb") as stdin:
            proc = subprocess.run([str(bench.harness), "run", "-"], stdin=stdin, capture_output=True,
                                  timeout=600, check=False)
        answer = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        ca = answer["cases"][0]
        if ca.get("status") != "ok":
            raise KerneloptError(f"baseline case {case.name}: {ca.get('status')} {ca.get('error')}")
        for arg in req["cases"][0]["args"]:
            if arg.get("output"):
                param = wl.signature.param(arg["name"])
                actual = np.fromfile(arg["output"], dtype=param.dtype.numpy.newbyteorder("<"))
                cmp = compare(arg["name"], ev.expected[case.name][arg["name"]], actual,
                              wl.spec.tolerance_for(arg["name"]))
                if not cmp.passed:
                    raise KerneloptError(f"baseline case {case.name}: {cmp.summary()}")
        t = ca.get("timing")
        if t and t.get("times_ms"):
            times = t["times_ms"]
            kernel += sum(times) + statistics.median(times) * (t.get("warmup", 0) + 1)
    wall = (time.perf_counter() - start) * 1e3
    return wall, kernel, wall - kernel


# --- 2. candidates per minute -----------------------------------------------------------------


def evaluate_ahead(ev: Session, candidates: list[Candidate]) -> tuple[list[tuple[float, float, float]], int]:
    """Evaluate ``candidates`` in order as a search does (kernelopt tune): the next ones compile
    in the background (tune.prefetch) while the GPU validates and times the current one. Returns
    the runs and how many compiles began ahead."""
    ahead = CompileAhead(ev)
    runs = []
    try:
        for i, candidate in enumerate(candidates):
            ahead.wait(str(i))
            for j in range(i + 1, min(i + 1 + ahead.lookahead, len(candidates))):
                ahead.start(str(j), candidates[j])
            runs.append(evaluate_counted(ev, candidate))
    finally:
        ahead.close()
    return runs, ahead.started


def throughput(bench: Bench, workloads: tuple[str, ...] = ("sgemm", "softmax"), n: int = 5) -> Section:
    """Evaluate n distinct-but-equivalent candidates (a new compile each) one after the other,
    then n others with the next compiles overlapping the GPU's work (as a search runs), then one
    candidate n times; each with both stopping rules ("count": the seed's exact launches;
    "precision": search's default), side by side in one run. Wall time is the whole loop's,
    waits for compiles included."""
    sec = Section(
        "throughput", "candidates per minute (CUDA reference kernel, full validation + timing of every case)",
        "issue 17: distinct, compiles overlapped, stop precision: >= 120 / min sgemm, >= 300 / min softmax",
        ["workload", "stop", "mode", "candidates", "compiled ahead", "launches", "wall s", "per minute", "kernel share",
         "target"],
    )
    targets = {"sgemm": 120, "softmax": 300}
    for name in workloads:
        wl = bench.workload(name)
        base = reference(wl)
        for stop in ("count", "precision"):
            with bench.evaluator(wl, f"throughput-{name}-{stop}", options=replace(bench.options, stop=stop)) as ev:
                for mode, candidates in (
                    ("distinct (compile each)", [variant(base, f"d{stop}{i}") for i in range(n)]),
                    ("distinct, next compiles ahead", [variant(base, f"a{stop}{i}") for i in range(n)]),
                    ("same candidate (warm)", [variant(base, f"same{stop}")] * n),
                ):
                    bench.say(f"throughput: {name}, {stop}, {mode}")
                    if mode.startswith("same"):
                        evaluate(ev, candidates[0])  # compiled once before the clock starts
                    start = time.perf_counter()
                    runs, ahead = (evaluate_ahead(ev, candidates) if "ahead" in mode
                                   else ([evaluate_counted(ev, c) for c in candidates], None))
                    wall = (time.perf_counter() - start) * 1e3
                    target = targets.get(name) if stop == "precision" and "ahead" in mode else None
                    sec.rows.append({
                        "workload": name, "stop": stop, "mode": mode, "candidates": n,
                        "compiled ahead": "-" if ahead is None else ahead,
                        "launches": sum(s for _, _, s in runs) / n, "wall s": wall / 1e3, "per minute": 60e3 * n / wall,
                        "kernel share": sum(k for _, k, _ in runs) / wall,
                        "target": ("-" if target is None
                                   else "met" if 60e3 * n / wall >= target else f"NOT met (>= {target})"),
                    })
    sec.notes.append(f"{bench.options.warmup} warm-up per performance case; count: {bench.options.iterations} measured "
                     f"launches; precision: {PRECISION_MIN_ITERATIONS}, then rounds until the median's rse <= "
                     f"{100 * PRECISION_RSE:g}%, {bench.options.iterations} at most (launches: the mean measured)")
    return sec


# --- 3. repeatability -------------------------------------------------------------------------


@dataclass
class RepeatSpec:
    label: str
    workload: str
    case: str
    target_cv: float
    scalars: dict[str, Any] | None = None


REPEAT_SPECS = (
    RepeatSpec("~5 us: vector_add 2^20 (reference)", "vector_add", "n_2e25", CV_SHORT, {"n": 1 << 20}),
    RepeatSpec("~1 ms: sgemm 2048x8192x1024 (reference)", "sgemm", "wide_2048x8192x1024", CV_LONG),
)


def repeatability(bench: Bench, specs: tuple[RepeatSpec, ...] = REPEAT_SPECS, repeats: int = 10) -> Section:
    """CV of the score over ``repeats`` benchmarks of one kernel (one session, inputs fixed)."""
    sec = Section(
        "repeatability", f"score over {repeats} repeated benchmarks of one kernel",
        f"CV <= {CV_LONG:.0%} (~1 ms kernel), <= {CV_SHORT:.0%} (~5 us kernel)",
        ["kernel", "median score ms", "CV", "min ms", "max ms", "target", "pass"],
    )
    verdicts = []
    for spec in specs:
        wl = bench.workload(spec.workload, [spec.case], {spec.case: spec.scalars} if spec.scalars else None)
        with bench.evaluator(wl, f"repeat-{spec.workload}") as ev:
            cand = reference(wl)
            scores = []
            for i in range(repeats):
                bench.say(f"repeatability: {spec.label} {i + 1}/{repeats}")
                result = evaluate(ev, cand)
                if not result.ok or result.score_ms is None:
                    raise KerneloptError(f"{spec.label}: {result.status}: {result.message}")
                scores.append(result.score_ms)
        cv = statistics.stdev(scores) / statistics.fmean(scores)
        verdicts.append(cv <= spec.target_cv)
        sec.rows.append({"kernel": spec.label, "median score ms": statistics.median(scores), "CV": cv,
                         "min ms": min(scores), "max ms": max(scores), "target": f"<= {spec.target_cv:.0%}",
                         "pass": cv <= spec.target_cv})
    sec.passed = all(verdicts)
    return sec


# --- 4. agreement with Nsight Compute ---------------------------------------------------------


AGREE_SPECS = (
    ("sgemm", "wide_2048x8192x1024"), ("softmax", "square_8192"), ("vector_add", "n_2e25"),
)


def agreement(bench: Bench, specs: tuple[tuple[str, str], ...] = AGREE_SPECS) -> Section:
    """Our median against ncu's gpu__time_duration of the same kernel, case and launch."""
    from kernelopt_mcp.profiler import ProfileOptions, find_ncu, profile_case

    sec = Section(
        "agreement", "our median vs Nsight Compute gpu__time_duration (CUDA reference kernels, L2 flushed / ncu "
        "cache control all, ncu clock control none)",
        f"net median (the event pair's measured floor taken out) within {AGREEMENT:.0%} for kernels >= 20 us",
        ["kernel", "case", "our median ms", "floor ms", "net ms", "ncu ms", "difference", "net difference", "pass"],
    )
    try:
        ncu = find_ncu(bench.settings.ncu)
    except KerneloptError as exc:
        sec.skipped = f"Nsight Compute not available: {exc}"
        return sec
    verdicts = []
    for name, case in specs:
        wl = bench.workload(name, [case])
        with bench.evaluator(wl, f"agree-{name}") as ev:
            cand = reference(wl)
            bench.say(f"agreement: {name} {case}: benchmark")
            result = evaluate(ev, cand)
            timing = result.cases[0].timing
            if not result.ok or timing is None:
                raise KerneloptError(f"{name}: {result.status}: {result.message}")
            bench.say(f"agreement: {name} {case}: ncu")
            summary = profile_case(ev, cand, case, bench.workdir / f"ncu-{name}",
                                   ProfileOptions(ncu=ncu, clock_control="none",
                                                  timeout_s=bench.settings.profile_timeout_s), harness=bench.harness)
        ncu_ms = summary.duration_ms
        diff = (timing.median_ms - ncu_ms) / ncu_ms if ncu_ms else None
        net = timing.net_median_ms
        net_diff = (net - ncu_ms) / ncu_ms if ncu_ms and net is not None else None
        judged = timing.median_ms >= 0.020 and net_diff is not None
        ok = abs(net_diff) <= AGREEMENT if judged and net_diff is not None else None
        if ok is not None:
            verdicts.append(ok)
        sec.rows.append({"kernel": name, "case": case, "our median ms": timing.median_ms,
                         "floor ms": timing.launch_overhead_ms, "net ms": net, "ncu ms": ncu_ms,
                         "difference": diff, "net difference": net_diff, "pass": ok})
    sec.passed = all(verdicts) if verdicts else None
    return sec


# --- 5. the cost of issue 14's checks ---------------------------------------------------------


#: How many hidden measured launches the "subset" mode redraws before (EvaluateOptions.fresh_launches)
CHECKS_SUBSET = 16


def checks(bench: Bench, workloads: tuple[str, ...] = ("vector_add", "softmax", "sgemm"), trials: int = 3) -> Section:
    """Per-candidate overhead (wall minus the candidate's own GPU time) of one warm candidate with the
    timed-launch checks off (the behaviour before issue 14), on with fresh inputs before every
    launch, and on with a redraw before a hidden subset of launches only (``fresh_launches``, the
    others compared with them: the default), evaluated alternately in one session per
    mode so clocks and caches affect all alike."""
    sec = Section(
        "checks", "per-candidate overhead with issue 14's checks (fresh device-drawn inputs, hidden launches checked "
        "against the CUDA reference, the confirm launch): off, on (a redraw before every launch), subset (a redraw "
        f"before a hidden {CHECKS_SUBSET} of the measured launches, times on new and seen inputs compared)",
        f"subset <= {CHECKS_RATIO:.2f} x off",
        ["workload", "mode", "wall ms", "kernel ms", "overhead ms (median)", "vs off", "pass"],
    )
    options = {
        "off": replace(bench.options, fresh_inputs=False, checked_launches=0, check_consistency=False),
        "on": replace(bench.options, fresh_launches=None),
        "subset": replace(bench.options, fresh_launches=CHECKS_SUBSET),
    }
    verdicts = []
    for name in workloads:
        wl = bench.workload(name)
        cand = variant(reference(wl), "checks")
        with ExitStack() as stack:
            sessions = {mode: stack.enter_context(bench.evaluator(wl, f"checks-{name}-{mode}", options=o))
                        for mode, o in options.items()}
            runs: dict[str, list[tuple[float, float, float]]] = {mode: [] for mode in sessions}
            for ev in sessions.values():
                evaluate(ev, cand)  # compiled once before the clock starts
            for i in range(trials):
                for mode, ev in sessions.items():
                    bench.say(f"checks: {name} {mode} {i + 1}/{trials}")
                    runs[mode].append(timed_evaluate(ev, cand))
            described = {mode: [c for c in ev.checks if "fresh" in c or "CUDA reference" in c]
                         for mode, ev in sessions.items() if mode != "off"}
        over = {mode: statistics.median(o for _, _, o in r) for mode, r in runs.items()}
        for mode in runs:
            ratio = over[mode] / over["off"] if over["off"] > 0 else None
            ok = None if mode == "off" else ratio is not None and ratio <= CHECKS_RATIO
            if mode == "subset":
                verdicts.append(bool(ok))
            sec.rows.append({
                "workload": name, "mode": mode, "wall ms": statistics.median(w for w, _, _ in runs[mode]),
                "kernel ms": statistics.median(k for _, k, _ in runs[mode]), "overhead ms (median)": over[mode],
                "vs off": ratio, "pass": ok,
            })
        for mode, lines in described.items():
            sec.notes.append(f"{name} '{mode}' ran: " + "; ".join(lines))
    sec.passed = all(verdicts)
    sec.notes.append(f"{trials} trials each, alternating; {bench.options.warmup} warm-up + {bench.options.iterations} "
                     "measured launches per performance case; the reference's checked launches count as overhead; "
                     "the subset mode is judged against the target (a redraw before every launch writes every input "
                     "once per launch: for a memory-bound kernel that alone is most of its own time)")
    return sec


# --- 6. tuning speed (issue 17) ---------------------------------------------------------------

#: Target from issue 17: `kernelopt tune` with its defaults at least this much faster than the
#: seed's way of timing every configuration, with the same best configuration (or one within noise)
TUNE_SPEEDUP = 2.0
#: ... where "within noise" is a best score at most this much above the other's
TUNE_NOISE = 0.01


def tuning(bench: Bench, workload: str = "sgemm", budget: int = 24) -> Section:
    """The same search three times (random, seed 0, ``budget`` configurations, the workload's
    tunable.json, nothing cached), side by side: as before issue 17 (the seed's 10 warm-up + 100
    measured launches, each configuration compiled when its turn comes), the seed's launches with
    the compiles queued ahead, and `kernelopt tune`'s defaults (the precision stopping rule,
    compiles ahead, configurations that cannot beat the best stopped early). The target is judged
    against the first. Each run compiles its own copy of the source, so none finds another's
    compiles cached."""
    from kernelopt_mcp.tune.spec import load_tunable, workload_tunable_path

    wl = bench.workload(workload)
    base = load_tunable(workload_tunable_path(wl), wl)
    sec = Section(
        "tuning", f"`kernelopt tune {workload}`: one search ({budget} configurations, random, seed 0) as before "
        "issue 17, with compiles ahead, and with the defaults", f">= {TUNE_SPEEDUP:g}x faster than before issue 17 "
        f"with the same best configuration (or one within {TUNE_NOISE:.0%})",
        ["mode", "wall s", "measured", "compiled ahead", "stopped early", "best configuration", "best score ms",
         "speedup", "pass"],
    )
    seed_way = EvaluateOptions(warmup=10, iterations=100, stop="count")
    # mode: (options, early stop, compiles queued ahead)
    modes = {
        "before issue 17: 10 + 100 launches, compiles in turn": (seed_way, False, False),
        "10 + 100 launches, compiles ahead": (seed_way, False, True),
        "defaults: precision rule, compiles ahead, early stop": (
            app.evaluate_options(bench.settings, stop="precision"), True, True),
    }
    runs = {}
    for mode, (options, early, ahead) in modes.items():
        tunable = replace(base, source=f"// kernelopt bench tuning {mode} {time.time_ns()}\n{base.source}")
        bench.say(f"tuning: {workload}, {mode}")
        with bench.evaluator(wl, f"tuning-{len(runs)}", options=options) as ev:
            if not ahead:
                ev.compile_cache = None  # nothing to compile into ahead: each evaluation compiles its own
            start = time.perf_counter()
            runs[mode] = (app.tune_kernel(ev, tunable, options=options, strategy="random", budget_evals=budget, seed=0,
                                          early_stop=early), time.perf_counter() - start)
    (before, before_s), _, (ours, ours_s) = runs.values()
    for mode, (result, wall) in runs.items():
        best = result.best.score_ms if result.best else None
        sec.rows.append({
            "mode": mode, "wall s": wall, "measured": result.counts.measured,
            "compiled ahead": result.counts.compiled_ahead, "stopped early": result.counts.stopped_early,
            "best configuration": json.dumps(result.best_params), "best score ms": best,
            "speedup": before_s / wall if wall else None, "pass": None,
        })
    speedup = before_s / ours_s if ours_s else None
    same = ours.best_params == before.best_params
    near = bool(ours.best and before.best and ours.best.score_ms and before.best.score_ms
                and ours.best.score_ms <= before.best.score_ms * (1 + TUNE_NOISE))
    sec.passed = sec.rows[-1]["pass"] = bool(speedup and speedup >= TUNE_SPEEDUP and (same or near))
    sec.notes.append("the best configurations are " + ("the same" if same else
                     "different; the defaults' is " + ("within noise" if near else "slower")))
    sec.notes.append("speedup: against the first row, measured in this run; the scores compared are each run's own "
                     "measurement of its best configuration")
    return sec


# --- once per run: preparing a session ---------------------------------------------------------


# the preparation section's ways, side by side: (column, device_inputs, device_expected)
PREPARATION_WAYS = (
    ("on the device ms", True, True),  # the defaults: inputs drawn and expected values kept there
    ("expected in files ms", True, False),  # inputs drawn, the reference's outputs through files
    ("all on the host ms", False, False),  # NumPy inputs uploaded, expected values through files
)


def preparation(bench: Bench, workloads: tuple[str, ...] = ("softmax", "sgemm", "vector_add")) -> Section:
    """A session's one-time preparation (harness start, inputs, expected outputs, the reference
    timed) with the defaults (performance inputs drawn on the device, the reference's outputs
    kept there as the expected values) and, side by side, the expected values written to files
    (``device_expected=False``) and everything made on the host (``device_inputs=False``)."""
    sec = Section(
        "preparation", "once per run: harness start + inputs + expected outputs + the reference timed",
        f"< {PREPARE_MS / 1e3:g} s with the defaults (issue 17)",
        ["workload", *(w[0] for w in PREPARATION_WAYS), "host / device", "defaults: where it went"],
    )
    # The support kernels compile once per machine and NVRTC version (the disk compile cache keeps
    # the CUBIN for every later run): compiled here first so that no row pays it, and reported.
    start = time.perf_counter()
    support_module(bench.device.arch, bench.workdir / "support-cold")
    cold_s = time.perf_counter() - start
    worst = 0.0
    for name in workloads:
        wl = bench.workload(name)
        row: dict[str, Any] = {"workload": name}
        for column, inputs, expected in PREPARATION_WAYS:
            bench.say(f"preparation: {name}, {column.removesuffix(' ms')}")
            start = time.perf_counter()
            options = replace(bench.options, device_inputs=inputs, device_expected=expected)
            with bench.evaluator(wl, f"prepare-{name}-{inputs}-{expected}", time_reference=True, options=options) as ev:
                row[column] = (time.perf_counter() - start) * 1e3
                if inputs and expected:
                    row["defaults: where it went"] = preparation_text(ev.prepare_ms)
        first, last = row[PREPARATION_WAYS[0][0]], row[PREPARATION_WAYS[-1][0]]
        worst = max(worst, first)
        row["host / device"] = last / first if first else None
        sec.rows.append(row)
    sec.passed = worst < PREPARE_MS
    sec.notes.append("each row: a new harness process and session, prepared as `kernelopt evaluate` does "
                     "(the reference validated against the oracle on the correctness cases and timed)")
    sec.notes.append(f"not in the rows: the support kernels' first compile, {cold_s:.1f} s once per machine and NVRTC "
                     "version (the disk compile cache keeps it for every later run)")
    return sec


SECTIONS: dict[str, Callable[[Bench], Section]] = {
    "overhead": overhead, "throughput": throughput, "repeatability": repeatability, "agreement": agreement,
    "checks": checks, "tuning": tuning, "preparation": preparation,
}


def run(bench: Bench, only: list[str] | None = None) -> list[Section]:
    names = only or list(SECTIONS)
    return [SECTIONS[name](bench) for name in names]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print the sections as JSON")
    p.add_argument("--only", action="append", choices=list(SECTIONS), help="run this section (repeatable)")
    args = p.parse_args(argv)
    out, err = Console(), Console(stderr=True)
    settings = Settings.from_env()
    with tempfile.TemporaryDirectory(prefix="kernelopt-bench-") as tmp:
        bench = make_bench(settings, Path(tmp), lambda m: err.print(f"[dim]… {m}[/]", highlight=False))
        from kernelopt_mcp.evaluation.clocks import probe_device_clocks

        clocks_before, why = probe_device_clocks(bench.device)
        sections = run(bench, args.only)
        clocks_after, _ = probe_device_clocks(bench.device)
    meta = {"device": bench.device.summary(), "clocks_before": clocks_before.model_dump() if clocks_before else why,
            "clocks_after": clocks_after.model_dump() if clocks_after else why}
    if args.json:
        print(json.dumps({"meta": meta, "sections": [s.as_json() for s in sections]}, indent=1, default=str))
    else:
        out.print(f"[bold]{bench.device.summary()}[/]", highlight=False)
        for sec in sections:
            print_section(out, sec)
        if clocks_after is not None:
            out.print(f"[dim]clocks after: {clocks_after.summary()}[/]", highlight=False)
    return 0 if all(s.passed is not False for s in sections) else 1


if __name__ == "__main__":
    sys.exit(main())
