"""The ``kernelopt`` command line: each command parses its arguments, makes one settings object,
calls the application layer (:mod:`kernelopt_mcp.app`) and prints the result.

Each command imports what it needs when it runs, and the parser (:mod:`kernelopt_mcp.cli_parser`)
adds the arguments of the command named only: ``kernelopt --help`` and ``kernelopt compile`` start
without the evaluation stack, the tuner, torch, mcp or openai (tests/test_startup.py checks the
import set; bench/startup.py times it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .cli_io import answer_errors_in_json, consoles, fail, join_option_values
from .cli_parser import COMMANDS, Command, build_parser, command_named
from .compile_options import OptionError
from .errors import KerneloptError
from .files import missing_path_message, read_json, read_text
from .progress_bar import ProgressBar, progress_wanted

if TYPE_CHECKING:
    from rich.console import Console

    from .config import Settings
    from .evaluation.candidate import Candidate
    from .launch import LaunchSpec
    from .workload import Workload

__all__ = ["COMMANDS", "Command", "build_parser", "main"]

EXIT_OK, EXIT_FAILED, EXIT_ERROR = 0, 1, 2


def _settings(args: argparse.Namespace) -> Settings:
    from .compile_pool import warn_if_unconfined
    from .config import Settings

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
    from rich.table import Table

    from . import app

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
    from rich.markup import escape

    from . import app
    from .render import print_calibration

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
    from rich.markup import escape
    from rich.table import Table

    from .config import find_workload, list_workloads

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
    from rich.markup import escape

    from . import app

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
    from .evaluation.candidate import Candidate, initial_candidate

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
    from pydantic import ValidationError

    from .errors import format_validation_error
    from .launch import LaunchSpec

    try:
        return LaunchSpec.model_validate(data)
    except ValidationError as exc:
        raise KerneloptError(format_validation_error(exc, str(path))) from None


def cmd_evaluate(args: argparse.Namespace, out: Console) -> int:
    from rich.markup import escape

    from . import app
    from .config import find_workload
    from .evaluation.evaluate import preparation_text, prepare
    from .render import print_evaluation, print_torch_baseline
    from .results import CheckedEvaluation
    from .sanitizer import find_sanitizer
    from .torch_baseline import compare

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
    bar = ProgressBar(f"evaluating on {workload.name}", len(candidates), enabled=progress_wanted(args.progress))

    def progress(message: str, done: int, total: int) -> None:
        if bar.active:
            bar.update(message=message)  # the bar counts kernels; the step shows beside it
        elif not quiet:
            out.print(f"[dim]… {message}[/]", highlight=False)

    sanitizer = find_sanitizer(settings.sanitizer, cuda_home=settings.cuda_home) if args.sanitize else None  # say at once when it is missing
    done: list[CheckedEvaluation] = []
    with bar, app.open_harness(settings) as proc, app.open_session(
        settings, workload, proc, device, options=options, seed=args.seed,
        workdir=Path(args.workdir) if args.workdir else None, progress=progress,
    ) as session:
        prepare(session, time_reference=not args.no_benchmark)
        for candidate in candidates:
            done.append(app.evaluate_kernel(
                session, candidate, benchmark=not args.no_benchmark, sanitizer=sanitizer,
                sanitizer_dir=session.workdir / "sanitizer" / candidate.name,
            ))
            bar.update(len(done), message=f"{candidate.name}: {done[-1].status}")
        reference = session.reference_result
        prepared = dict(session.prepare_ms)
    # an imported PyTorch problem: eager and torch.compile timed beside it (after the harness is closed)
    baselines = None if args.no_benchmark or args.no_torch_baseline else app.torch_baselines(settings, workload, device, options, progress)
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


def cmd_profile(args: argparse.Namespace, out: Console) -> int:
    from rich.markup import escape

    from . import app
    from .config import find_workload
    from .profiler import ProfileOptions, find_ncu

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
    from rich.markup import escape

    from . import app
    from .docs import search_docs

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
    from rich.markup import escape

    from . import app
    from .config import find_workload
    from .evaluation.candidate import stop_rule
    from .evaluation.inputs import new_input_seed
    from .render import print_tune
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
    bar = ProgressBar(f"tuning {workload.name}", args.budget_evals, enabled=progress_wanted(args.progress))

    def progress(message: str, done: int, total: int) -> None:
        if bar.active:
            bar.step(message, done, total)  # configurations done / budget (0: not known yet)
        elif not quiet:
            out.print(f"[dim]… [{done}/{total or '?'}] {escape(message)}[/]", highlight=False)

    def step(message: str, done: int, total: int) -> None:  # -v: every evaluation step
        if bar.active:
            bar.log(f"    {message}")
        else:
            out.print(f"[dim]    {escape(message)}[/]", highlight=False)

    with bar, app.tune_pool(
        settings, workload, devices=args.devices, one=args.device is not None, ray=args.ray, seed=seed, options=options,
        progress=step if args.verbose and (bar.active or not quiet) else None,
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
    from .workload import json_schema

    text = json.dumps(json_schema(), indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n")
    else:
        print(text)
    return EXIT_OK


def cmd_cache(args: argparse.Namespace, out: Console) -> int:
    from dataclasses import asdict

    from rich.markup import escape
    from rich.table import Table

    from .caches import cache_info, clear_cache
    from .render import size_text

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


def cmd_completion(args: argparse.Namespace, out: Console, extra: Mapping[str, Command] | None = None,
                   prog: str = "kernelopt") -> int:
    """The shell completion script of every command (the extra ones' too, where they give their
    parser), printed to stdout. It completes the installed command, ``kernelopt`` (a shell cannot
    complete ``python -m kernelopt_mcp``)."""
    from .completion import completion_script

    name = "kernelopt" if " " in prog else prog
    sys.stdout.write(completion_script(build_parser(extra, name), args.shell, name))
    return EXIT_OK


# The command functions, by the name kernelopt_mcp.cli_parser.COMMANDS lists them under; import-torch
# and kernelbench set their own (``fn``, in torch_cli.py and kernelbench_cli.py); completion is main's.
HANDLERS: dict[str, Callable[..., int]] = {
    "gpu": cmd_gpu, "workloads": cmd_workloads, "compile": cmd_compile, "evaluate": cmd_evaluate, "profile": cmd_profile,
    "docs": cmd_docs, "tune": cmd_tune, "cache": cmd_cache, "schema": cmd_schema,
}


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
    named = command_named(argv)
    # only the named command's arguments are built (none for `kernelopt -h` or an unknown command)
    parser = build_parser(extra, prog, command=named if named in COMMANDS else "")
    answer_errors_in_json(parser, argv)
    args = parser.parse_args(join_option_values(argv))
    out, err = consoles()
    try:
        if args.command == "completion":
            return cmd_completion(args, out, extra, prog)
        return (getattr(args, "fn", None) or HANDLERS[args.command])(args, out)
    except (KerneloptError, OptionError, ValueError) as exc:
        return _fail(args, err, *_error_line(exc, args))
    except FileNotFoundError as exc:
        return _fail(args, err, missing_path_message(exc), "FileNotFoundError")
    except BrokenPipeError:
        raise  # the reader went away (`| head`): nobody to tell
    except OSError as exc:
        return _fail(args, err, f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "), type(exc).__name__)


def _error_line(exc: Exception, args: argparse.Namespace) -> tuple[str, str]:
    """(message, kind) of an error that stopped a command. A pydantic model checked past the readers
    (a ValueError too) still gets one line per field, named after the command."""
    from pydantic import ValidationError  # loaded already wherever one was raised

    if isinstance(exc, ValidationError):
        from .errors import format_validation_error

        return format_validation_error(exc, getattr(args, "command", None) or "kernelopt"), "ValidationError"
    return str(exc), type(exc).__name__


def _fail(args: argparse.Namespace, err: Console, message: str, kind: str) -> int:
    return fail(bool(getattr(args, "json", False)), err, message, kind)


if __name__ == "__main__":
    sys.exit(main())
