"""Kernels against the vendor (issue 16): each workload's best tuned kernel beside cuBLAS, PyTorch
or the device's copy bandwidth, measured side by side in one run on one GPU.

    python bench/vendor.py [--json] [--budget N] [--only ENTRY ...]

Each entry autotunes one tunable kernel (``--budget`` configurations, random search, seed 0, the
precision stopping rule that ``kernelopt tune`` uses; every configuration validated on every case)
and times the vendor's routine on the same performance cases:

- ``cuBLAS``: FP32 SGEMM through the harness's baseline op (no TF32), timed like the kernels
  (CUDA events, L2 flushed by the same read before each launch, 10 warm-up + 100 measured);
- ``torch``: the PyTorch routine on CUDA tensors of the case's shapes (``torch.matmul`` on bf16,
  which is cuBLAS; ``scaled_dot_product_attention`` with the flash backend; ``softmax``;
  ``layer_norm``), timed per launch with CUDA events after an L2 flush (a read of twice the
  L2, as the harness flushes before our kernels), 10 warm-up + 100 measured, the median; skipped
  with a reason where torch or its CUDA build is missing;
- ``copy``: the device's measured copy bandwidth (``kernelopt gpu --calibrate``), for kernels whose
  floor is moving their bytes once.

The ratio is the vendor's time over ours (copy: our bytes per second over the copy rate): above 1,
ours is faster. ``vendor tol`` (PyTorch rows) is the share of the workload's tolerance the vendor's
own output needs (its atol, at its rtol, by the harness's rule, against float64 rounded to the
output's dtype, on inputs made by the workload's own generators): past 0.5 a note says a correct
kernel has little room, past 1 that the contract fails the vendor itself (attention_fwd's atol of
0.06 was such a contract until 2026-12-07). A vendor writing another dtype than the output (bf16
matmul for gemm_bf16's float32 C) is not measured. Targets are issue 16's; a row without one is
reported, not judged. Run on the H200 in pieces (each entry is a few minutes at the default
budget): ``--only sgemm_3xtf32 --only sgemm``.

``--config ENTRY:NAME=VALUE,...`` evaluates that configuration instead of tuning (a known best,
in seconds); ``--known`` does so with each entry's best configuration measured so far (``Entry.known``,
the configurations of docs/measurements.md). ``--profile DIR`` puts each entry's row furthest under
its target under Nsight Compute (the same kernel, case and inputs, in the same session; one ncu run per entry, as the
rows of an entry share the kernel) and names what bounds it in the notes: the
speed-of-light figures, the top warp stalls and the summary's first hint; the reports and full
summaries stay in ``DIR/<entry>-<case>/``. That is the profile evidence issue 16 asks for where a
gap remains.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from rich.console import Console
from run import Bench, Section, make_bench, print_section, reference

from kernelopt_mcp import Candidate, EvaluationResult, HarnessProcess, Session, Settings, app
from kernelopt_mcp.baselines import run_cublas_sgemm
from kernelopt_mcp.dtypes import DType
from kernelopt_mcp.errors import KerneloptError
from kernelopt_mcp.evaluation.evaluate import evaluate
from kernelopt_mcp.evaluation.inputs import generate
from kernelopt_mcp.evaluation.support_module import support_module
from kernelopt_mcp.ncu_report import ProfileSummary
from kernelopt_mcp.profiler import ProfileOptions, find_ncu
from kernelopt_mcp.tune.space import Space, Value
from kernelopt_mcp.tune.spec import Tunable, load_tunable
from kernelopt_mcp.workload import Tolerance, Workload, case_shape

WARMUP, ITERATIONS = 10, 100
TIGHT = 0.5  # a vendor that needs more of a workload's tolerance leaves a correct kernel less than 2x room


@dataclass(frozen=True)
class Entry:
    """One row group: a workload's tunable kernel (None: its CUDA reference) against a vendor."""

    workload: str
    spec: str | None  # a tunable spec beside workload.json
    vendor: str  # "cublas", "torch" or "copy"
    target: float | None  # the ratio to reach on every performance case (None: reported)
    cases: tuple[str, ...] = ()  # judged cases (empty: every performance case)
    note: str = ""
    known: dict[str, Value] | None = None  # the best configuration measured (docs/measurements.md), for --known


ENTRIES: dict[str, Entry] = {
    "sgemm": Entry("sgemm", "tunable.json", "cublas", None,
                   note="FP32 SIMT, the baseline the 3xTF32 kernel must beat at 3001x2999x1007"),
    "sgemm_3xtf32": Entry("sgemm", "tunable_3xtf32.json", "cublas", 1.2, ("square_4096", "wide_2048x8192x1024"),
                          "tensor cores at FP32 accuracy; issue 16: >= 1.2x cuBLAS FP32 at 4096^3 and 2048x8192x1024"),
    "gemm_bf16": Entry("gemm_bf16", "tunable.json", "torch", 0.9,
                       note="torch.matmul on bf16 (cuBLAS, bf16 out; ours writes fp32)"),
    "gemm_bf16_wgmma": Entry("gemm_bf16", "tunable_wgmma.json", "torch", 0.9,
                             note="wgmma (sm_90a); issue 16: >= 90% of cuBLAS bf16 at 4096^3 and 8192x8192x4096"),
    "gemm_bf16_tma": Entry("gemm_bf16", "tunable_tma.json", "torch", 0.9,
                           note="TMA + mbarrier + wgmma, warp-specialized (sm_90a, tensor maps); "
                           "issue 16: >= 90% of cuBLAS"),
    "attention_fwd": Entry("attention_fwd", "tunable.json", "torch", 1.0,
                           ("d128_4x32x4096", "d128_4x32x4096_causal", "d64_4x32x4096", "d64_4x32x4096_causal"),
                           "issue 16: >= 1.0x PyTorch SDPA (flash backend)",
                           known={"WARPS": 4, "BKV": 64, "QREG": 1, "RPW": 1}),
    "attention_fwd_wgmma": Entry("attention_fwd", "tunable_wgmma.json", "torch", 1.0,
                                 ("d128_4x32x4096", "d128_4x32x4096_causal", "d64_4x32x4096", "d64_4x32x4096_causal"),
                                 "wgmma for QK^T and PV, P in registers (sm_90a); issue 44: >= 1.0x SDPA flash",
                                 known={"NWG": 2, "BKV": 128, "STAGES": 2}),
    "attention_fwd_tma": Entry("attention_fwd", "tunable_tma.json", "torch", 1.0,
                               ("d128_4x32x4096", "d128_4x32x4096_causal", "d64_4x32x4096", "d64_4x32x4096_causal"),
                               "FlashAttention-3's structure: TMA producer warpgroup, mbarrier rings, setmaxnreg; "
                               "issue 44: >= 1.0x SDPA flash",
                               known={"NWG": 2, "BKV": 64, "STAGES": 2, "OVERLAP": 1, "NWG64": 3, "BKV64": 128}),
    "softmax": Entry("softmax", "tunable.json", "torch", 2.0, ("square_8192",), "issue 16: >= 2x PyTorch at 8192x8192",
                     known={"TPR": 128, "RPB": 1, "VPT": 8, "SMEM": 1}),
    "layernorm": Entry("layernorm", "tunable.json", "copy", 0.85, note="issue 16: >= 85% of copy",
                       known={"TPR": 128, "RPB": 2, "VPT": 8, "WR": 1}),
    "transpose": Entry("transpose", "tunable.json", "copy", 0.9, note="issue 16: >= 90% of copy at every size",
                       known={"TILE": 64, "ROWS": 8, "STCS": 1, "ALIGN": 8, "MINB": 4, "VEC": 1}),
    "histogram": Entry("histogram", "tunable.json", "copy", 0.8, note="issue 16: >= 80% of copy (it reads only)",
                       known={"THREADS": 256, "VPT": 4, "COPIES": 1, "GRID": 1056, "LANES": 1, "PIPE": 1}),
    "reduce_sum": Entry("reduce_sum", "tunable.json", "copy", 0.85, note="reads only, so it can pass the copy rate"),
}


@dataclass(frozen=True)
class Best:
    """An entry's kernel as measured: its evaluation, what it was, and the candidate itself, in
    the session that measured it (open while the rows are made, so a profile sees the same inputs)."""

    session: Session
    result: EvaluationResult
    what: str
    candidate: Candidate


def parse_config(text: str) -> tuple[str, dict[str, Value]]:
    """``ENTRY:NAME=VALUE,...`` -> (entry, {NAME: VALUE}); values are ints, floats or strings."""
    entry, sep, rest = text.partition(":")
    if not sep or entry not in ENTRIES or not rest:
        raise ValueError(f"--config {text!r}: expected ENTRY:NAME=VALUE,... with ENTRY one of {', '.join(ENTRIES)}")
    config: dict[str, Value] = {}
    for item in rest.split(","):
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise ValueError(f"--config {text!r}: {item!r} is not NAME=VALUE")
        config[name.strip()] = _value(value.strip())
    return entry, config


def _value(text: str) -> Value:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def chosen_configs(texts: list[str], *, known: bool) -> dict[str, dict[str, Value]]:
    """The configurations to evaluate instead of tuning: each ``--config`` text, and with ``known`` every
    entry's best measured one that no text overrides."""
    given = dict(parse_config(t) for t in texts)
    return ({name: dict(e.known) for name, e in ENTRIES.items() if e.known is not None} if known else {}) | given


def configured(tunable: Tunable, config: dict[str, Value]) -> Candidate:
    """The candidate of one configuration of ``tunable``, checked against its space, in the form the
    tuner evaluates (the source as it is, the parameters as -D defines), so a tuned best compiles
    to the same module (a compile-cache hit) when it is profiled."""
    params = tunable.spec.params
    if set(config) != set(params):
        raise KerneloptError(f"{tunable.origin}: a configuration names every parameter ({', '.join(params)}); got "
                             f"{', '.join(config)}")
    off = [f"{k}={v!r} (one of {params[k]})" for k, v in config.items() if v not in params[k]]
    if off:
        raise KerneloptError(f"{tunable.origin}: {', '.join(off)}")
    if (broken := Space(tunable.spec).violation(config)) is not None:
        raise KerneloptError(f"{tunable.origin}: {config} breaks the constraint {broken}")
    return Candidate(tunable.source, tunable.spec.launch, list(tunable.spec.compile_options),
                     "configured", dict(config))


@contextmanager
def best_of(bench: Bench, entry: Entry, wl: Workload, budget: int, config: dict[str, Value] | None) -> Iterator[Best]:
    """The entry's kernel: the CUDA reference, the given configuration, or the best of a tuning run."""
    options = app.evaluate_options(bench.settings, stop="precision")
    with bench.evaluator(wl, f"vendor-{entry.workload}-{entry.spec or 'reference'}", options=options) as ev:
        if entry.spec is None:
            cand = reference(wl)
            yield Best(ev, evaluate(ev, cand), "CUDA reference", cand)
            return
        assert wl.root is not None
        tunable = load_tunable(wl.root / entry.spec, wl)
        if config is not None:
            cand = configured(tunable, config)
            bench.say(f"vendor: {entry.workload} {entry.spec} {config}")
            result = evaluate(ev, cand)
            if not result.ok:
                raise KerneloptError(f"{entry.workload} {entry.spec} {config}: {result.status}: {result.message}")
            yield Best(ev, result, f"{entry.spec} {config} (given)", cand)
            return
        bench.say(f"vendor: tuning {entry.workload} {entry.spec} ({budget} configurations)")
        tuned = app.tune_kernel(ev, tunable, options=options, strategy="random", budget_evals=budget, seed=0,
                                progress=lambda m, *_: bench.say(f"vendor: {m}"))
        if tuned.best is None or tuned.best_params is None:
            raise KerneloptError(f"{entry.workload} {entry.spec}: no configuration passed every case "
                                 f"({tuned.stop_reason})")
        yield Best(ev, tuned.best, f"{entry.spec} {tuned.best_params}", configured(tunable, tuned.best_params))


def profile_gap(bench: Bench, best: Best, name: str, case: str, out: Path) -> str:
    """One line naming what bounds ``best`` on ``case`` (Nsight Compute, same session and inputs),
    or why it was not profiled; the report and the full summary stay under ``out``."""
    try:
        ncu = find_ncu(bench.settings.ncu)
        bench.say(f"vendor: {name} {case}: Nsight Compute")
        summary = app.profile_kernel(best.session, best.candidate, case, out,
                                     ProfileOptions(ncu=ncu, timeout_s=bench.settings.profile_timeout_s))
    except KerneloptError as exc:
        return f"{name} {case}: not profiled: {exc}"
    (out / "summary.txt").write_text(summary.text() + "\n")
    return f"{name} {case} under Nsight Compute: {profile_line(summary)}"


def profile_line(s: ProfileSummary) -> str:
    """The figures that say what bounds a kernel: speed of light, occupancy, the top stalls, a hint."""
    parts = []
    t = s.throughput
    sol = [f"{label} {v:.0f}%" for label, v in (("compute", t.compute_pct), ("memory", t.memory_pct),
                                                ("DRAM", t.dram_pct))
           if v is not None]
    if sol:
        parts.append("speed of light " + ", ".join(sol))
    if s.occupancy.achieved_pct is not None:
        limit = f", limited by {s.occupancy.limiter}" if s.occupancy.limiter else ""
        parts.append(f"occupancy {s.occupancy.achieved_pct:.0f}% (of {s.occupancy.theoretical_pct or 0:.0f}%{limit})")
    if s.top_stalls:
        parts.append("stalls " + ", ".join(
            f"{st.reason} {st.share_pct:.0f}%" if st.share_pct is not None
            else f"{st.reason} {st.cycles_per_issue:.1f} cycles"
            for st in s.top_stalls[:3]))
    if s.hints:
        parts.append(f"hint: {s.hints[0]}")
    return "; ".join(parts) or "no figures in the report"


# --- the vendors -------------------------------------------------------------------------------


def cublas_ms(bench: Bench, wl: Workload, case: str) -> float:
    s = wl.spec.case(case).scalars
    # the support module gives the baseline the harness's flush by reading, as our kernels get
    support = support_module(bench.device.arch)
    with HarnessProcess(bench.harness, bench.settings.device) as proc:
        r = run_cublas_sgemm(proc, int(s["M"]), int(s["N"]), int(s["K"]), {"warmup": WARMUP, "iterations": ITERATIONS},
                             support_module=support)
    return r.median_ms


def torch_timer() -> Callable[[Callable[[], Any]], float]:
    """A timer of one CUDA call: L2 flushed before each launch by reading twice its size (so no
    dirty line is left for the call to write back, as the harness's ko_flush_l2 does for our
    kernels), the median of the measured launches (raises ImportError / RuntimeError without
    torch on CUDA)."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("torch has no usable CUDA device")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size or 64 * 2**20
    scratch = torch.zeros(2 * l2 // 4, dtype=torch.float32, device="cuda")

    def time_ms(fn: Callable[[], Any]) -> float:
        for _ in range(WARMUP):
            fn()
        times = []
        for _ in range(ITERATIONS):
            scratch.sum()  # reads every byte (and writes one float)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    return time_ms


@dataclass(frozen=True)
class TorchRoutine:
    """The vendor's routine on one case's shapes and inputs: ``call`` is timed; ``exact`` is the same
    math in float64 on the same inputs, the answer the vendor's own error is measured from."""

    call: Callable[[], Any]
    exact: Callable[[], Any]
    output: str  # the workload's output it computes
    backend: Callable[[], AbstractContextManager[Any]] = nullcontext  # entered around the calls and the timing


def host_input(wl: Workload, case: str, name: str) -> np.ndarray:
    """Input ``name`` of ``case`` as the workload makes it: its own generator at the case's shape and
    the buffer's dtype (:func:`kernelopt_mcp.evaluation.inputs.generate`, seed 0), so the vendor
    computes on the distribution our kernels are checked on."""
    c, param = wl.spec.case(case), wl.spec.signature.param(name)
    gen = c.inputs.get(name) or wl.spec.inputs[name]
    return generate(gen, param, case_shape(param, c.scalars), 0, case, wl.root)


def drawn(wl: Workload, case: str, name: str) -> Any:
    """:func:`host_input` as a CUDA tensor of the buffer's dtype."""
    import torch

    host = host_input(wl, case, name)
    if host.dtype == DType.bfloat16.numpy:  # ml_dtypes' bfloat16: the same bits, viewed as torch's
        return torch.from_numpy(host.view(np.int16)).cuda().view(torch.bfloat16)
    return torch.from_numpy(host).cuda()


def torch_routine(wl: Workload, case: str) -> TorchRoutine:
    import torch
    import torch.nn.functional as F

    s = {k: int(v) if isinstance(v, int) else v for k, v in wl.spec.case(case).scalars.items()}
    f64 = torch.float64
    if wl.name == "gemm_bf16":
        a, b = drawn(wl, case, "A"), drawn(wl, case, "B")
        return TorchRoutine(lambda: torch.matmul(a, b), lambda: a.to(f64) @ b.to(f64), "C")
    if wl.name == "attention_fwd":
        q, k, v = (drawn(wl, case, n) for n in "qkv")
        from torch.nn.attention import SDPBackend, sdpa_kernel

        causal = bool(s["causal"])
        return TorchRoutine(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                            lambda: exact_attention(q, k, v, causal), "o",
                            lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION))
    if wl.name == "softmax":
        x = drawn(wl, case, "x")
        return TorchRoutine(lambda: torch.softmax(x, dim=-1), lambda: torch.softmax(x.to(f64), dim=-1), "y")
    if wl.name == "layernorm":
        x, g, b = (drawn(wl, case, n) for n in ("x", "gamma", "beta"))
        eps = float(s["eps"])
        return TorchRoutine(lambda: F.layer_norm(x, (s["cols"],), g, b, eps),
                            lambda: F.layer_norm(x.to(f64), (s["cols"],), g.to(f64), b.to(f64), eps), "y")
    raise KerneloptError(f"no torch routine for {wl.name}")


def exact_attention(q: Any, k: Any, v: Any, causal: bool) -> Any:
    """softmax(q k^T / sqrt(D)) v in float64, a few heads at a time (a 4096^2 score matrix each)."""
    import torch

    qf, kf, vf = (t.flatten(0, 1).to(torch.float64) for t in (q, k, v))
    out = torch.empty_like(qf)
    s_len = q.shape[-2]
    future = torch.ones(s_len, s_len, dtype=torch.bool, device=q.device).triu(1) if causal else None
    for h in range(0, qf.shape[0], 4):
        scores = qf[h:h + 4] @ kf[h:h + 4].transpose(1, 2) / q.shape[-1] ** 0.5
        if future is not None:
            scores.masked_fill_(future, float("-inf"))
        out[h:h + 4] = torch.softmax(scores, dim=-1) @ vf[h:h + 4]
    return out.view(q.shape)


def tolerance_used(actual: Any, expected: Any, tol: Tolerance) -> float:
    """The share of ``tol``'s atol that ``actual`` needs at its rtol, by the harness's rule
    (``|a - e| <= atol * scale + rtol * |e|``, scale the RMS of ``expected`` unless the tolerance is
    absolute): up to 1 passes; a correct kernel needs room below it. NumPy arrays or torch tensors."""
    excess = float((abs(actual - expected) - tol.rtol * abs(expected)).max())
    if math.isnan(excess):
        return math.inf
    if excess <= 0:
        return 0.0
    scale = 1.0 if tol.absolute else float((expected * expected).mean()) ** 0.5
    return excess / (tol.atol * scale) if tol.atol * scale > 0 else math.inf


def torch_ms(wl: Workload, case: str, time_ms: Callable[[Callable[[], Any]], float]) -> tuple[float, float | None]:
    """The vendor's time on ``case`` and the share of the workload's tolerance its own output needs
    against float64 rounded to the output's dtype, as the harness keeps expected values (None where the
    vendor writes another dtype than the workload's output: its rounding is not the contract's)."""
    routine = torch_routine(wl, case)
    with routine.backend():
        used = vendor_tolerance(wl, routine, routine.call())
        return time_ms(routine.call), used


def vendor_tolerance(wl: Workload, routine: TorchRoutine, got: Any) -> float | None:
    """:func:`tolerance_used` of ``got`` (the routine's output) against ``routine.exact()`` rounded to
    the output's dtype; None where ``got`` is of another dtype. Call it inside ``routine.backend()``."""
    import torch

    if got.dtype != getattr(torch, wl.spec.signature.param(routine.output).dtype.value):
        return None
    expected = routine.exact().to(got.dtype).to(torch.float64)
    return tolerance_used(got.to(torch.float64), expected, wl.spec.tolerance_for(routine.output))


# --- the table ---------------------------------------------------------------------------------


class Vendors:
    """The vendors' side of the rows, each set up once per run: the copy rate (a calibration) and
    the torch timer (None with the reason where torch cannot run)."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.copy_rate: float | None = None
        self.timer: Callable[[Callable[[], Any]], float] | None = None
        self.timer_problem = ""

    def time(self, entry: Entry, wl: Workload, case: str) -> tuple[str, float | None, float | None]:
        """The vendor's name, its time on ``case`` (None for the copy rate, a rate not a time) and the
        share of the workload's tolerance its own output needs (None where not measured)."""
        if entry.vendor == "cublas":
            return "cuBLAS SGEMM (FP32)", cublas_ms(self.bench, wl, case), None
        if entry.vendor == "torch":
            if self.timer is None and not self.timer_problem:
                try:
                    self.timer = torch_timer()
                except (ImportError, RuntimeError) as exc:
                    self.timer_problem = f"torch unavailable: {exc}"
            if self.timer is None:
                raise KerneloptError(self.timer_problem)
            return "PyTorch", *torch_ms(wl, case, self.timer)
        if self.copy_rate is None:
            _, cal = app.calibrate_gpu(self.bench.settings)
            self.copy_rate = cal.copy_bytes_per_s
        return f"copy {self.copy_rate / 1e12:.2f} TB/s", None, None


def vendor(bench: Bench, names: list[str], budget: int, configs: dict[str, dict[str, Value]] | None = None,
           profile_dir: Path | None = None) -> Section:
    """The table: per entry its kernel (``configs[entry]``, else tuned with ``budget``
    configurations) beside its vendor; with ``profile_dir``, the row furthest under its target (per
    entry) profiled."""
    sec = Section(
        "vendor", "kernels against the vendor: the best tuned kernel of each workload beside cuBLAS, PyTorch or "
        "the copy bandwidth (ratio > 1: ours is faster)",
        "issue 16's targets, per row", ["workload", "kernel", "case", "ours ms", "ours rate", "vendor", "vendor ms",
                                        "vendor tol", "ratio", "target", "pass"],
    )
    vendors = Vendors(bench)
    verdicts: list[bool] = []
    for name in names:
        entry = ENTRIES[name]
        wl = bench.workload(entry.workload)
        try:
            with best_of(bench, entry, wl, budget, (configs or {}).get(name)) as best:
                sec.notes.append(f"{name}: {best.what}; score {best.result.score_ms:.4g} ms. {entry.note}".rstrip(". ")
                                 + ".")
                missed: list[tuple[float, str]] = []
                for case in (c.name for c in wl.spec.performance_cases):
                    ok = _row(bench, sec, vendors, name, entry, wl, best, case)
                    if ok is not None:
                        verdicts.append(ok)
                    if ok is False:
                        missed.append((sec.rows[-1]["ratio"], case))
                if missed and profile_dir is not None:  # the furthest from its target: one ncu run per entry
                    case = min(missed)[1]
                    sec.notes.append(profile_gap(bench, best, name, case, profile_dir / f"{name}-{case}"))
        except KerneloptError as exc:
            sec.notes.append(f"{name}: {exc}")
            verdicts.append(False)
    sec.passed = all(verdicts) if verdicts else None
    how = ("the given configuration, validated on every case" if configs and set(configs) >= set(names) else
           f"tuned with {budget} configurations (random, seed 0), each validated on every case")
    sec.notes.append(f"ours: {how} and timed with the precision rule (median's relative standard error <= 0.3%, 20 to "
                     f"100 launches), L2 flushed before each launch; vendors: {WARMUP} warm-up + {ITERATIONS} "
                     "measured, L2 flushed")
    return sec


def _row(bench: Bench, sec: Section, vendors: Vendors, name: str, entry: Entry, wl: Workload, best: Best,
         case: str) -> bool | None:
    """Adds ``case``'s row; its verdict (None: not judged)."""
    got = next((c for c in best.result.cases if c.name == case and c.timing), None)
    if got is None or got.timing is None:
        return None
    ours = got.timing.median_ms
    rate = (f"{got.flops_per_s / 1e12:.1f} TFLOP/s" if got.flops_per_s and wl.spec.cost and wl.spec.cost.flops
            else f"{(got.bytes_per_s or 0) / 1e12:.2f} TB/s")
    vendor_name, vendor_ms, used, ratio = entry.vendor, None, None, None
    try:
        vendor_name, vendor_ms, used = vendors.time(entry, wl, case)
    except KerneloptError as exc:
        sec.notes.append(f"{name} {case}: vendor not timed: {exc}")
    if used is not None and used > TIGHT:
        room = "it fails the contract" if used > 1 else "little room for a correct kernel"
        sec.notes.append(f"{name} {case}: the vendor's own output needs {used:.2f} of the tolerance (atol at its "
                         f"rtol): {room}; widen the tolerance in workloads/{wl.name}/workload.json if the vendor's "
                         "arithmetic is sound")
    if entry.vendor == "copy":
        ratio = (got.bytes_per_s or 0) / vendors.copy_rate if vendors.copy_rate else None
    elif vendor_ms:
        ratio = vendor_ms / ours
    judged = entry.target is not None and (not entry.cases or case in entry.cases)
    ok = None if not judged or ratio is None else ratio >= (entry.target or 0)
    sec.rows.append({
        "workload": wl.name, "kernel": entry.spec or "reference", "case": case, "ours ms": ours, "ours rate": rate,
        "vendor": vendor_name, "vendor ms": vendor_ms, "vendor tol": used, "ratio": ratio,
        "target": f">= {entry.target:.2f}" if judged else "-", "pass": ok,
    })
    return ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    p.add_argument("--only", action="append", choices=list(ENTRIES), help="run this entry (repeatable; default: all)")
    p.add_argument("--budget", type=int, default=40,
                   help="configurations tuned per entry (default 40; 1: the defaults only)")
    p.add_argument("--config", action="append", default=[], metavar="ENTRY:NAME=VALUE,...",
                   help="evaluate this configuration of ENTRY instead of tuning it (repeatable)")
    p.add_argument("--known", action="store_true",
                   help="evaluate each entry's best measured configuration (docs/measurements.md) instead of "
                   "tuning it, where it has one and --config names none")
    p.add_argument("--profile", type=Path, metavar="DIR",
                   help="profile each entry's row furthest under its target with Nsight Compute; reports in DIR")
    args = p.parse_args(argv)
    if args.budget < 1:
        p.error("--budget must be at least 1")
    try:
        configs = chosen_configs(args.config, known=args.known)
    except ValueError as exc:
        p.error(str(exc))
    out, err = Console(), Console(stderr=True)
    settings = Settings.from_env()
    with tempfile.TemporaryDirectory(prefix="kernelopt-vendor-") as tmp:
        try:
            bench = make_bench(settings, Path(tmp), lambda m: err.print(f"[dim]… {m}[/]", highlight=False))
        except KerneloptError as exc:  # no GPU, no harness: say so, as the CLI does
            err.print(f"error: {exc}", highlight=False)
            return 2
        bench = replace(bench, options=app.evaluate_options(settings, stop="precision"))
        sec = vendor(bench, args.only or list(ENTRIES), args.budget, configs,
                     args.profile.resolve() if args.profile else None)
    if args.json:
        print(json.dumps({"device": bench.device.summary(), "sections": [sec.as_json()]}, indent=1, default=str))
    else:
        out.print(f"[bold]{bench.device.summary()}[/]", highlight=False)
        print_section(out, sec)
    return 0 if sec.passed is not False else 1


if __name__ == "__main__":
    sys.exit(main())
