"""The ``kernelopt`` command line."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import __version__, app
from .cli_io import CliParser, answer_errors_in_json, consoles, fail, join_option_values
from .compile_options import OptionError
from .compile_pool import warn_if_unconfined
from .config import LAUNCH_DEFAULTS, Settings, find_workload, list_workloads
from .docs import search_docs
from .errors import KerneloptError, format_validation_error
from .evaluation.candidate import (
    PRECISION_MIN_ITERATIONS,
    PRECISION_RSE,
    STOP_RULES,
    Candidate,
    initial_candidate,
    stop_rule,
)
from .evaluation.evaluate import preparation_text, prepare
from .files import missing_path_message, read_json, read_text
from .launch import LaunchSpec
from .profiler import CLOCK_CONTROLS, ProfileOptions, find_ncu
from .render import print_calibration, print_evaluation, print_torch_baseline, print_tune, size_text
from .results import CheckedEvaluation
from .sanitizer import find_sanitizer
from .torch_baseline import BaselineReport, compare
from .workload import Workload, json_schema

EXIT_OK, EXIT_FAILED, EXIT_ERROR = 0, 1, 2


def _settings(args: argparse.Namespace) -> Settings:
    settings = Settings.from_env(
        harness=getattr(args, "harness", None),
        device=getattr(args, "device", None),
        arch=getattr(args, "arch", None),
        ncu=getattr(args, "ncu", None),
        unconfined_compiler=getattr(args, "unconfined_compiler", None),
    )
    warn_if_unconfined(settings.compile_limits())
    return settings


def cmd_gpu(args: argparse.Namespace, out: Console) -> int:
    settings = _settings(args)
    if args.force and not args.calibrate:
        raise KerneloptError("--force only applies to --calibrate: `kernelopt gpu --calibrate --force`")
    if args.calibrate:
        return _calibrate(args, out, settings)
    info = app.gpu_info(settings)
    if args.json:
        print(info.model_dump_json(indent=2))
        return EXIT_OK
    table = Table(title=info.summary(), show_header=False)
    for key, value in info.model_dump().items():
        table.add_row(key, str(value))
    out.print(table)
    return EXIT_OK


def _calibrate(args: argparse.Namespace, out: Console, settings: Settings) -> int:
    def progress(message: str) -> None:
        if not args.json:
            out.print(f"[dim]… {escape(message)}[/]", highlight=False)

    info, cal = app.calibrate_gpu(settings, force=args.force, progress=progress)
    if args.json:
        print(cal.model_dump_json(indent=2))
        return EXIT_OK
    print_calibration(out, info, cal, settings.cache_root())
    return EXIT_OK


def cmd_workloads(args: argparse.Namespace, out: Console) -> int:
    """The workloads that load, listed; one that does not is reported with its error (a row with
    ``error`` under --json) and makes the status EXIT_FAILED, without hiding the others."""
    settings = _settings(args)
    rows: list[dict[str, Any]] = []
    broken: list[dict[str, str]] = []
    for name, path in list_workloads(settings).items():
        try:
            wl = find_workload(path, settings)
        except (KerneloptError, ValueError) as exc:
            broken.append({"name": name, "path": str(path), "error": str(exc)})
            continue
        kinds = [c.kind for c in wl.spec.cases]
        rows.append({
            "name": name, "path": str(path), "description": wl.spec.description,
            "correctness_cases": kinds.count("correctness"), "performance_cases": kinds.count("performance"),
            "signature": wl.signature.c_prototype(),
        })
    status = EXIT_FAILED if broken else EXIT_OK
    if args.json:
        print(json.dumps(rows + broken, indent=2))
        return status
    table = Table(title="bundled and configured workloads")
    for col in ("name", "cases (corr/perf)", "description"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["name"], f"{r['correctness_cases']}/{r['performance_cases']}", escape(r["description"]))
    out.print(table)
    err = consoles()[1]
    for b in broken:
        err.print(f"[red]error:[/] workload {escape(b['name'])} does not load: {escape(b['error'])}", highlight=False)
    return status


def cmd_compile(args: argparse.Namespace, out: Console) -> int:
    settings = _settings(args)
    source = read_text(Path(args.file), "kernel source", KerneloptError)
    arch, arch_from = app.target_arch(settings, args.arch)
    # the same shape as the MCP compile tool's output (results.CompileOutput)
    result, output = app.compile_source(
        settings, source, arch, arch_from=arch_from, options=args.option or [], filename=Path(args.file).name,
        cache=app.compile_cache(settings),
    )
    if args.ptx and result.ptx:
        Path(args.ptx).write_text(result.ptx)
    if args.cubin and result.cubin:
        Path(args.cubin).write_bytes(result.cubin)
    if args.json:
        print(output.model_dump_json(indent=2))
    else:
        out.print(f"[bold]{escape(args.file)}[/]", highlight=False)
        out.print(escape(output.text()), highlight=False)
    return EXIT_OK if result.ok else EXIT_FAILED


def _candidate(args: argparse.Namespace, workload: Workload, kernel: str | None = None) -> Candidate:
    """KERNEL.cu (``kernel``, else args.kernel) with --launch, else ``<name>.launch.json`` beside it
    (a launch spec, or {"launch": ..., "compile_options": [...]}), else the initial kernel's
    launch; or the initial kernel."""
    kernel = kernel or args.kernel
    if kernel:
        source = read_text(Path(kernel), "kernel source", KerneloptError)
        beside = Path(kernel).with_name(Path(kernel).stem + ".launch.json")
        options = list(args.option or [])
        if args.launch:
            launch = _launch(Path(args.launch), read_json(Path(args.launch), KerneloptError))
        elif beside.is_file():
            data = read_json(beside, KerneloptError)
            if isinstance(data, dict) and "launch" in data:
                launch = _launch(beside, data["launch"])
                options += list(data.get("compile_options") or [])
            else:
                launch = _launch(beside, data)
        elif workload.spec.initial is not None:
            launch = workload.spec.initial.launch
        else:
            raise KerneloptError("no launch configuration: pass --launch LAUNCH.json")
        return Candidate(source, launch, options, Path(kernel).stem)
    candidate = initial_candidate(workload)
    if args.launch:
        candidate.launch = _launch(Path(args.launch), read_json(Path(args.launch), KerneloptError))
    return candidate


def _launch(path: Path, data: object) -> LaunchSpec:
    """A launch spec read from ``path``; an error names the file and the field, one line each."""
    try:
        return LaunchSpec.model_validate(data)
    except ValidationError as exc:
        raise KerneloptError(format_validation_error(exc, str(path))) from None


def cmd_evaluate(args: argparse.Namespace, out: Console) -> int:
    settings = _settings(args)
    workload = find_workload(args.workload, settings)
    # several kernels share one session: the same inputs, expected outputs and reference timing
    candidates = [_candidate(args, workload, k) for k in [args.kernel, *args.more_kernels] if k] or [_candidate(args, workload)]
    device = app.gpu_info(settings)
    options = app.evaluate_options(
        settings, warmup=args.warmup, iterations=args.iterations, flush_l2=not args.no_flush_l2,
        timeout_s=args.timeout, timing_mode=args.timing_mode, blocking=not args.no_blocking,
        adaptive_rse=args.adaptive, stop=args.stop,
    )
    quiet = args.json

    def progress(message: str, done: int, total: int) -> None:
        if not quiet:
            out.print(f"[dim]… {message}[/]", highlight=False)

    sanitizer = find_sanitizer(settings.sanitizer, cuda_home=settings.cuda_home) if args.sanitize else None  # say at once when it is missing
    done: list[CheckedEvaluation] = []
    with app.open_harness(settings) as proc, app.open_session(
        settings, workload, proc, device, options=options, seed=args.seed,
        workdir=Path(args.workdir) if args.workdir else None, progress=progress,
    ) as session:
        prepare(session, time_reference=not args.no_benchmark)
        for candidate in candidates:
            done.append(app.evaluate_kernel(
                session, candidate, benchmark=not args.no_benchmark, sanitizer=sanitizer,
                sanitizer_dir=session.workdir / "sanitizer" / candidate.name,
            ))
        reference = session.reference_result
        prepared = dict(session.prepare_ms)
    # an imported PyTorch problem: eager and torch.compile timed beside it (after the harness is closed)
    baselines = None if args.no_benchmark or args.no_torch_baseline else _torch_baselines(settings, workload, device, options, progress)
    payloads = [{**checked.as_json(reference), "preparation_ms": prepared} for checked in done]
    if baselines is not None:
        for payload, checked in zip(payloads, done, strict=True):
            payload["torch_baseline"] = compare(checked.result, baselines).model_dump(mode="json")
    if args.json:
        print(json.dumps(payloads[0] if len(payloads) == 1 else payloads, indent=2))
    else:
        for checked in done:
            print_evaluation(out, checked, reference, sanitize_asked=args.sanitize)
            if baselines is not None:
                print_torch_baseline(out, compare(checked.result, baselines))
        if prepared:
            out.print(f"[dim]{escape(preparation_text(prepared))}[/]", highlight=False)
    return EXIT_OK if all(checked.ok for checked in done) else EXIT_FAILED


def _torch_baselines(
    settings: Settings, workload: Workload, device: Any, options: Any, progress: Callable[[str, int, int], None],
) -> BaselineReport | None:
    """PyTorch eager and torch.compile on an imported problem's performance cases (None for any
    other workload); a failure is the report's note, never the evaluation's."""
    from .torch_baseline import imported_problem, settings_baselines

    if imported_problem(workload) is None:
        return None
    progress("timing PyTorch eager and torch.compile on the performance cases (a child process; cached after)", 0, 1)
    try:
        return settings_baselines(settings, workload, device, options)
    except (KerneloptError, OSError) as exc:
        return BaselineReport.unmeasured(f"PyTorch eager and torch.compile not timed: {exc}")


def cmd_profile(args: argparse.Namespace, out: Console) -> int:
    settings = _settings(args)
    workload = find_workload(args.workload, settings)
    candidate = _candidate(args, workload)
    options = ProfileOptions(
        ncu=settings.ncu, clock_control=args.clock_control, section_set=args.set,
        timeout_s=args.timeout or settings.profile_timeout_s,
    )
    options.check()
    options.ncu = find_ncu(settings.ncu)  # before any GPU work: say at once when ncu is missing
    device = app.gpu_info(settings)
    case = args.case or app.default_profile_case(workload)
    out_dir = Path(args.output) if args.output else (
        Path("kernelopt-profiles") / f"{time.strftime('%Y%m%d-%H%M%S')}-{workload.name}-{candidate.name}-{case}"
    )

    def progress(message: str, *_: int) -> None:
        if not args.json:
            out.print(f"[dim]… {escape(message)}[/]", highlight=False)

    with app.open_harness(settings) as proc, app.open_session(
        settings, workload, proc, device, seed=args.seed, progress=progress,
    ) as session:
        summary = app.profile_kernel(session, candidate, case, out_dir, options, progress=progress)
    if args.json:
        print(summary.model_dump_json(indent=2))
    else:
        out.print(escape(summary.text()), highlight=False)
    return EXIT_OK


def cmd_docs(args: argparse.Namespace, out: Console) -> int:
    settings = _settings(args)
    arch = args.arch or settings.arch
    if arch is None and not args.offline and not settings.docs_offline:
        try:
            arch = app.gpu_info(settings).arch
        except KerneloptError:
            arch = None

    def progress(message: str) -> None:
        if not args.json:
            out.print(f"[dim]… {escape(message)}[/]", highlight=False)

    result = search_docs(
        " ".join(args.query), arch=arch, limit=args.n, settings=settings, offline=True if args.offline else None,
        progress=progress,
    )
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        out.print(escape(result.text()), highlight=False)
    return EXIT_OK if result.passages else EXIT_FAILED


def cmd_tune(args: argparse.Namespace, out: Console) -> int:
    from .evaluation.inputs import new_input_seed
    from .tune.report import save_tuning
    from .tune.spec import load_tunable, workload_tunable_path
    from .tune.tuner import summary_line

    settings = _settings(args)
    workload = find_workload(args.workload, settings)
    tunable = load_tunable(workload_tunable_path(workload, args.tunable), workload)
    run_dir = Path(args.output) if args.output else (
        Path("kernelopt-tune") / f"{time.strftime('%Y%m%d-%H%M%S')}-{workload.name}"
    )
    options = app.evaluate_options(
        settings, warmup=args.warmup, iterations=args.iterations, flush_l2=not args.no_flush_l2, timeout_s=args.timeout,
        stop=stop_rule(args.stop, warmup=args.warmup, iterations=args.iterations),
    )
    seed = new_input_seed() if args.seed is None else args.seed  # one seed: every device sees the same inputs
    cache = app.tune_cache(settings, enabled=not args.no_cache)
    quiet = args.json

    def progress(message: str, done: int, total: int) -> None:
        if not quiet:
            out.print(f"[dim]… [{done}/{total or '?'}] {escape(message)}[/]", highlight=False)

    with app.tune_pool(
        settings, workload, devices=args.devices, one=args.device is not None, ray=args.ray, seed=seed, options=options,
        progress=(lambda m, d, t: out.print(f"[dim]    {escape(m)}[/]", highlight=False)) if args.verbose and not quiet else None,
    ) as (session, workers):
        result = app.tune_kernel(
            session, tunable, strategy=args.strategy, budget_evals=args.budget_evals, budget_s=args.budget_s,
            seed=args.tune_seed, cache=cache, progress=progress, early_stop=not args.time_all, workers=workers,
        )
    written = save_tuning(result, tunable, run_dir)
    if args.json:
        print(result.model_dump_json(indent=2, exclude={"best": {"compile"}, "untuned": {"compile"}}))
        return EXIT_OK if result.best else EXIT_FAILED
    print_tune(out, result, args.top)
    out.print(f"saved in {escape(str(run_dir))}: {', '.join(written)}", highlight=False)
    out.print(escape(summary_line(result)), highlight=False)
    return EXIT_OK if result.best else EXIT_FAILED


def cmd_schema(args: argparse.Namespace, out: Console) -> int:
    text = json.dumps(json_schema(), indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n")
    else:
        print(text)
    return EXIT_OK


def cmd_cache(args: argparse.Namespace, out: Console) -> int:
    from dataclasses import asdict

    from .caches import cache_info, clear_cache

    settings = _settings(args)
    if args.action == "info":
        kinds = cache_info(settings)
        if args.json:
            print(json.dumps({"location": str(settings.cache_root()), "kinds": [asdict(k) for k in kinds]}, indent=2))
            return EXIT_OK
        table = Table(title=f"caches in {escape(str(settings.cache_root()))}")
        for col in ("kind", "entries", "size", "bound"):
            table.add_column(col, justify="left" if col == "kind" else "right")
        for k in kinds:
            table.add_row(k.kind, str(k.entries), size_text(k.bytes), size_text(k.bound_bytes) if k.bound_bytes else "")
        out.print(table)
        out.print("[dim]`kernelopt cache clear [KIND]` empties them; KERNELOPT_CACHE moves them; "
                  "KERNELOPT_COMPILE_CACHE_MB and KERNELOPT_TUNE_CACHE_MB bound them[/]", highlight=False)
        return EXIT_OK
    if args.kind and args.action != "clear":
        raise KerneloptError(f"`kernelopt cache info` shows every kind; `kernelopt cache clear {args.kind}` clears one")
    removed = clear_cache(settings, args.kind)
    if args.json:
        print(json.dumps({"location": str(settings.cache_root()), "removed": [asdict(k) for k in removed]}, indent=2))
        return EXIT_OK
    for k in removed:
        out.print(f"cleared {k.kind}: {k.entries} entries, {size_text(k.bytes)}", highlight=False)
    return EXIT_OK


@dataclass(frozen=True)
class Command:
    """A command that another package adds to ``kernelopt`` (``main``'s ``extra_commands``): listed
    in ``kernelopt -h`` with ``help``; ``run`` gets the arguments after the command's name, parses them
    itself and returns the exit status."""

    help: str
    run: Callable[[list[str]], int]


def build_parser(extra_commands: Mapping[str, Command] | None = None, prog: str = "kernelopt") -> argparse.ArgumentParser:
    p = CliParser(prog=prog, description="Agentic CUDA kernel optimizer: GPU tools and evaluation.")
    p.add_argument("--version", action="version", version=f"kernelopt {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def kernel_args(sp: argparse.ArgumentParser) -> None:
        """What names a candidate on a workload (evaluate, profile)."""
        sp.add_argument("workload", help="bundled workload name or workload directory")
        sp.add_argument("kernel", nargs="?", help="kernel .cu (default: the workload's initial kernel)")
        sp.add_argument("--launch", help='launch spec JSON: {"default": {grid, block, shared_bytes}, "cases": {...}} '
                        "(default: the initial kernel's launch)")
        sp.add_argument("--arch", help="compile target (default: the GPU's)")
        sp.add_argument("-O", "--option", action="append", metavar="OPT",
                        help="NVRTC option (whitelisted), repeatable: -O --use_fast_math or -O=--use_fast_math")
        sp.add_argument("--seed", type=int, help="input seed (default: fresh, recorded in the result)")

    def common(sp: argparse.ArgumentParser, gpu: bool = True) -> None:
        """The harness and device flags (not for ``gpu=False``: compile needs no GPU), and the compiler's."""
        if gpu:
            sp.add_argument("--harness", help="path to kernelopt-harness (default: installed one; env KERNELOPT_HARNESS)")
            sp.add_argument("--device", type=int, help="CUDA device ordinal (default 0; env KERNELOPT_DEVICE)")
        sp.add_argument("--unconfined-compiler", action="store_true", default=None,
                        help="where the kernel has no Landlock, compile anyway WITHOUT confining NVRTC (trusted "
                        "sources only; env KERNELOPT_UNCONFINED_COMPILER=1)")

    sp = sub.add_parser("gpu", help="show the GPU's properties; --calibrate measures its copy bandwidth and FP32 rate")
    common(sp)
    sp.add_argument("--calibrate", action="store_true",
                    help="measure copy bandwidth and FP32 FMA rate (cached per device and driver)")
    sp.add_argument("--force", action="store_true", help="with --calibrate: measure again even if cached")
    sp.add_argument("--json", action="store_true", help="print the properties (or the calibration) as JSON; errors too")
    sp.set_defaults(fn=cmd_gpu)

    sp = sub.add_parser("workloads", help="list bundled and configured workloads")
    sp.add_argument("--json", action="store_true", help="print the list as JSON (a workload that does not load: a row with its error); errors too")
    sp.set_defaults(fn=cmd_workloads)

    sp = sub.add_parser("compile", help="compile a .cu file with NVRTC (no GPU needed)")
    common(sp, gpu=False)  # the arch comes from --arch, else KERNELOPT_ARCH, else a GPU if one is set up
    sp.add_argument("file")
    sp.add_argument("--arch", help="target, e.g. sm_90 or sm_90a (arch-specific: wgmma, setmaxnreg) (default: the GPU's, else sm_90)")
    sp.add_argument("-O", "--option", action="append", metavar="OPT",
                        help="NVRTC option (whitelisted), repeatable: -O --use_fast_math or -O=--use_fast_math")
    sp.add_argument("--ptx", help="write the PTX here")
    sp.add_argument("--cubin", help="write the CUBIN here")
    sp.add_argument("--json", action="store_true", help="print the result as JSON (the MCP compile tool's shape); errors too")
    sp.set_defaults(fn=cmd_compile)

    sp = sub.add_parser("evaluate", help="validate and benchmark a kernel (or several) on a workload")
    common(sp)
    kernel_args(sp)
    sp.add_argument("more_kernels", nargs="*", metavar="KERNEL",
                    help="more kernels, evaluated in the same session (same inputs, expected outputs and reference "
                    "timing); each takes its launch from --launch, else <name>.launch.json beside it, else the "
                    "initial kernel's; with --json the results are printed as a list")
    sp.add_argument("--warmup", type=int, default=LAUNCH_DEFAULTS.warmup,
                    help=f"warm-up launches per case (default {LAUNCH_DEFAULTS.warmup})")
    sp.add_argument("--iterations", type=int, default=LAUNCH_DEFAULTS.iterations,
                    help=f"measured launches per case (default {LAUNCH_DEFAULTS.iterations})")
    sp.add_argument("--no-flush-l2", action="store_true", help="do not flush L2 between measured launches")
    sp.add_argument("--timing-mode", choices=["events", "graph"], default="events",
                    help="events: an event pair per launch (default); graph: back-to-back launches in a CUDA graph")
    sp.add_argument("--no-blocking", action="store_true",
                    help="do not queue the launches behind a blocking kernel (host enqueue gaps may be timed)")
    sp.add_argument("--adaptive", type=float, metavar="RSE",
                    help="time until the median's relative standard error is below RSE (e.g. 0.01), ~2 s cap per case")
    sp.add_argument("--stop", choices=STOP_RULES, default="count",
                    help=f"count: exactly --iterations launches (default); precision: {PRECISION_MIN_ITERATIONS} "
                    f"launches, then more until the median's relative standard error is at most "
                    f"{100 * PRECISION_RSE:g}%% (or --adaptive), --iterations at most (search's default)")
    sp.add_argument("--no-benchmark", action="store_true", help="validate only")
    sp.add_argument("--no-torch-baseline", action="store_true",
                    help="an imported PyTorch problem: do not time PyTorch eager and torch.compile beside the kernel")
    sp.add_argument("--timeout", type=float, help="seconds per harness request (default 60)")
    sp.add_argument("--workdir", help="keep inputs and modules here (default: a temporary directory)")
    sp.add_argument("--sanitize", action="store_true", help="after a passing validation, run compute-sanitizer "
                    "memcheck, racecheck and initcheck on the correctness cases; an error fails the kernel with "
                    "status sanitizer_error (env KERNELOPT_SANITIZER names the binary)")
    sp.add_argument("--json", action="store_true", help="print the full result as JSON")
    sp.set_defaults(fn=cmd_evaluate)

    sp = sub.add_parser("profile", help="profile one case of a kernel under Nsight Compute (ncu)")
    common(sp)
    kernel_args(sp)
    sp.add_argument("--case", help="case to profile (default: the first performance case)")
    sp.add_argument("--clock-control", choices=CLOCK_CONTROLS, default="none", help="ncu clock control (default none: the GPU's own clocks)")
    sp.add_argument("--set", default="curated", help="curated (default: what the summary needs) or an ncu section set: basic, detailed, full")
    sp.add_argument("--ncu", help="the ncu binary (default: PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-compute; env KERNELOPT_NCU)")
    sp.add_argument("--timeout", type=float, help="seconds ncu may take (default 600; env KERNELOPT_PROFILE_TIMEOUT)")
    sp.add_argument("-o", "--output", help="directory for the report, raw CSV and summary (default kernelopt-profiles/<time>-<workload>-...)")
    sp.add_argument("--json", action="store_true", help="print the summary as JSON")
    sp.set_defaults(fn=cmd_profile)

    sp = sub.add_parser("docs", help="search CUDA optimization guidance (offline notes + NVIDIA docs)")
    # no --harness/--device: it needs no GPU (the arch comes from --arch, else KERNELOPT_ARCH, else a GPU if one is set up)
    sp.add_argument("query", nargs="+", help="a few words, e.g. shared memory bank conflicts")
    sp.add_argument("--arch", help="rank guidance for this GPU first, e.g. sm_90 (default: the GPU's, if any)")
    sp.add_argument("--offline", action="store_true", help="no network: the shipped notes and cached NVIDIA pages only")
    sp.add_argument("-n", type=int, default=6, help="passages to show (default 6)")
    sp.add_argument("--json", action="store_true", help="print the passages as JSON; errors too")
    sp.set_defaults(fn=cmd_docs)

    from .tune.strategies import STRATEGIES

    sp = sub.add_parser("tune", help="autotune a tunable kernel (tunable.json) on a workload")
    common(sp)
    sp.add_argument("workload", help="bundled workload name or workload directory")
    sp.add_argument("tunable", nargs="?", help="TUNABLE.json: a path, or the name of a spec beside the workload "
                    "(sgemm: tunable_3xtf32.json) (default: the workload's tunable.json)")
    sp.add_argument("--strategy", choices=STRATEGIES, default="auto",
                    help="exhaustive, random, tpe (optuna) or auto: exhaustive when the valid space fits the budget (default)")
    sp.add_argument("--budget-evals", type=int, help="configurations to try at most, the untuned defaults included")
    sp.add_argument("--budget-s", type=float, help="seconds: no new configuration starts after this")
    sp.add_argument("--seed", type=int, help="input seed (default: fresh, recorded)")
    sp.add_argument("--tune-seed", type=int, default=0, help="the search strategy's seed (default 0: repeatable)")
    sp.add_argument("--devices", help="CUDA devices to measure on at once, e.g. 0,1 (env KERNELOPT_DEVICES; default every visible one; --device: that one)")
    sp.add_argument("--ray", metavar="ADDRESS", help="measure on a Ray cluster, one actor per GPU: auto (this machine's cluster) or HOST:PORT (pip install \"kernelopt-mcp[ray]\")")
    sp.add_argument("--arch", help="compile target (default: the GPU's)")
    sp.add_argument("--warmup", type=int, help=f"warm-up launches per case (default {LAUNCH_DEFAULTS.warmup})")
    sp.add_argument("--iterations", type=int,
                    help=f"measured launches per case (default {LAUNCH_DEFAULTS.iterations}); given, or --warmup "
                    "given, the count is exact unless --stop precision")
    sp.add_argument("--stop", choices=STOP_RULES,
                    help=f"precision (default without --warmup/--iterations): {PRECISION_MIN_ITERATIONS} launches, then "
                    f"more until the median's relative standard error is at most {100 * PRECISION_RSE:g}%%, "
                    f"{LAUNCH_DEFAULTS.iterations} (or --iterations) at most; count: exactly --iterations launches")
    sp.add_argument("--no-flush-l2", action="store_true", help="do not flush L2 between measured launches")
    sp.add_argument("--timeout", type=float, help="seconds per harness request (default 60)")
    sp.add_argument("--no-cache", action="store_true", help="measure everything again (the cache is <cache>/tune: see `kernelopt cache info`)")
    sp.add_argument("--time-all", action="store_true",
                    help="time every configuration on every performance case; by default timing stops once a "
                    "configuration provably cannot beat the best so far (its row: stopped_early, with the bound)")
    sp.add_argument("--top", type=int, default=20, help="rows of the table to print (default 20; all are saved)")
    sp.add_argument("-o", "--output", help="run directory for tune.json, tune.csv, best.cu ... (default kernelopt-tune/<time>-<workload>)")
    sp.add_argument("-v", "--verbose", action="store_true", help="print every evaluation step")
    sp.add_argument("--json", action="store_true", help="print the result as JSON")
    sp.set_defaults(fn=cmd_tune)

    from .caches import KINDS

    sp = sub.add_parser("cache", help="the on-disk caches: `kernelopt cache info`, `kernelopt cache clear [KIND]`")
    sp.add_argument("action", choices=["info", "clear"], help="info: location, entries and bytes per kind; "
                    "clear: remove every cache, or one KIND")
    sp.add_argument("kind", nargs="?", choices=KINDS, help="with clear: only this kind")
    sp.add_argument("--json", action="store_true", help="print the result as JSON; errors too")
    sp.set_defaults(fn=cmd_cache)

    from .torch_cli import add_parser as add_import_torch

    add_import_torch(sub)  # kernelopt import-torch: a PyTorch problem file becomes a workload (torch_import.py)

    from .kernelbench_cli import add_parser as add_kernelbench

    add_kernelbench(sub)  # kernelopt kernelbench: a KernelBench checkout imported, solutions evaluated (suite.py)

    sp = sub.add_parser("schema", help="print the JSON Schema of workload.json")
    sp.add_argument("--output", "-o", help="write to a file instead of stdout")
    sp.set_defaults(fn=cmd_schema)

    for name, command in (extra_commands or {}).items():  # listed here, parsed by command.run (main)
        sub.add_parser(name, help=command.help, add_help=False)
    return p


def main(argv: list[str] | None = None, extra_commands: Mapping[str, Command] | None = None, prog: str = "kernelopt") -> int:
    """Run ``kernelopt ARGV``; returns the exit status.

    Args:
        argv: the arguments (default ``sys.argv[1:]``).
        extra_commands: commands another package adds (the ``kernelopt`` console script adds the
            orchestrator's optimize, graph and runs): each is listed in ``kernelopt -h`` and runs
            with the arguments after its name.
        prog: the name usage lines show (``python -m kernelopt_mcp`` has no optimize, graph or runs).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    extra = dict(extra_commands or {})
    if argv and argv[0] in extra:
        return extra[argv[0]].run(argv[1:])
    parser = build_parser(extra, prog)
    answer_errors_in_json(parser, argv)
    args = parser.parse_args(join_option_values(argv))
    out, err = consoles()
    try:
        return args.fn(args, out)
    except ValidationError as exc:  # a model checked past the readers above: still one line per field
        return _fail(args, err, format_validation_error(exc, getattr(args, "command", None) or "kernelopt"), "ValidationError")
    except (KerneloptError, OptionError, ValueError) as exc:
        return _fail(args, err, str(exc), type(exc).__name__)
    except FileNotFoundError as exc:
        return _fail(args, err, missing_path_message(exc), "FileNotFoundError")
    except BrokenPipeError:
        raise  # the reader went away (`| head`): nobody to tell
    except OSError as exc:
        return _fail(args, err, f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "), type(exc).__name__)


def _fail(args: argparse.Namespace, err: Console, message: str, kind: str) -> int:
    return fail(bool(getattr(args, "json", False)), err, message, kind)


if __name__ == "__main__":
    sys.exit(main())
