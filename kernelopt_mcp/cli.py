"""The ``kernelopt`` command line: each command parses its arguments, makes one settings object,
calls the application layer (:mod:`kernelopt_mcp.app`, or :mod:`kernelopt_mcp.workflows` where
the arguments are files) and prints the result.

Each command imports what it needs when it runs, and the parser (:mod:`kernelopt_mcp.cli_parser`)
adds the arguments of the command named only: ``kernelopt --help`` and ``kernelopt compile`` start
without the evaluation stack, the tuner, torch, mcp or openai (tests/cli/test_startup.py checks the
import set; bench/startup.py times it).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .cli_io import answer_errors_in_json, consoles, fail, join_option_values
from .cli_parser import COMMANDS, Command, build_parser, command_named
from .errors import KerneloptError
from .files import missing_path_message
from .progress_bar import ProgressBar, progress_wanted

if TYPE_CHECKING:
    from rich.console import Console

    from .config import Settings

__all__ = ["COMMANDS", "Command", "build_parser", "main"]

EXIT_OK, EXIT_FAILED, EXIT_ERROR = 0, 1, 2


def _settings(args: argparse.Namespace) -> Settings:
    from . import app

    return app.settings_from_env(
        harness=getattr(args, "harness", None),
        device=getattr(args, "device", None),
        arch=getattr(args, "arch", None),
        ncu=getattr(args, "ncu", None),
        unconfined_compiler=getattr(args, "unconfined_compiler", None),
    )


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

    from .workflows import workload_table

    rows, broken = workload_table(_settings(args))
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

    # the same shape as the MCP compile tool's output (compile_report.CompileOutput)
    result, output = app.compile_file(_settings(args), Path(args.file), args.arch, options=args.option or [])
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


def cmd_evaluate(args: argparse.Namespace, out: Console) -> int:
    from . import app
    from .render import print_evaluations
    from .workflows import compare_with_pytorch, evaluate_files

    settings = _settings(args)
    workload = app.resolve_workload(settings, args.workload)
    # several kernels share one session: the same inputs, expected outputs and reference timing
    kernels = [k for k in [args.kernel, *args.more_kernels] if k]
    quiet = args.json
    bar = ProgressBar(f"evaluating on {workload.name}", len(kernels) or 1, enabled=progress_wanted(args.progress))

    def progress(message: str, done: int, total: int) -> None:
        if bar.active:
            bar.update(message=message)  # the bar counts kernels; the step shows beside it
        elif not quiet:
            out.print(f"[dim]… {message}[/]", highlight=False)

    with bar:
        run = evaluate_files(
            settings, workload, kernels, launch=args.launch, options=args.option, warmup=args.warmup,
            iterations=args.iterations, flush_l2=not args.no_flush_l2, timeout_s=args.timeout,
            timing_mode=args.timing_mode, blocking=not args.no_blocking, adaptive_rse=args.adaptive, stop=args.stop,
            seed=args.seed, workdir=args.workdir, benchmark=not args.no_benchmark, sanitize=args.sanitize,
            progress=progress,
            on_result=lambda done, kernel, checked: bar.update(done, message=f"{kernel.name}: {checked.status}"),
        )
    # an imported PyTorch problem: eager and torch.compile timed beside it (after the harness is closed)
    beside = None if args.no_torch_baseline else compare_with_pytorch(settings, run, progress)
    print_evaluations(out, run, beside, as_json=args.json, sanitize_asked=args.sanitize)
    return EXIT_OK if run.ok else EXIT_FAILED


def cmd_profile(args: argparse.Namespace, out: Console) -> int:
    from rich.markup import escape

    from .workflows import profile_files

    def progress(message: str) -> None:
        if not args.json:
            out.print(f"[dim]… {escape(message)}[/]", highlight=False)

    summary = profile_files(
        _settings(args), args.workload, kernel=args.kernel, launch=args.launch, options=args.option, case=args.case,
        output=args.output, clock_control=args.clock_control, section_set=args.set, timeout_s=args.timeout,
        seed=args.seed, progress=progress,
    )
    if args.json:
        print(summary.model_dump_json(indent=2))
    else:
        out.print(escape(summary.text()), highlight=False)
    return EXIT_OK


def cmd_docs(args: argparse.Namespace, out: Console) -> int:
    from rich.markup import escape

    from . import app

    def progress(message: str) -> None:
        if not args.json:
            out.print(f"[dim]… {escape(message)}[/]", highlight=False)

    result = app.search_guidance(
        _settings(args), " ".join(args.query), arch=args.arch, limit=args.n, offline=True if args.offline else None,
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
    from .render import print_tuning
    from .workflows import tune_files

    settings = _settings(args)
    workload = app.resolve_workload(settings, args.workload)
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

    with bar:
        tuning = tune_files(
            settings, workload, tunable=args.tunable, output=args.output, devices=args.devices,
            one_device=args.device is not None, ray=args.ray, warmup=args.warmup, iterations=args.iterations,
            flush_l2=not args.no_flush_l2, timeout_s=args.timeout, stop=args.stop, seed=args.seed,
            cache=not args.no_cache, strategy=args.strategy, budget_evals=args.budget_evals, budget_s=args.budget_s,
            tune_seed=args.tune_seed, early_stop=not args.time_all, progress=progress,
            steps=step if args.verbose and (bar.active or not quiet) else None,
        )
    print_tuning(out, tuning, args.top, as_json=args.json)
    return EXIT_OK if tuning.result.best else EXIT_FAILED


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

    from . import app
    from .render import size_text

    settings = _settings(args)
    if args.action == "info":
        kinds = app.cache_info(settings)
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
    removed = app.clear_cache(settings, args.kind)
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
    "gpu": cmd_gpu, "workloads": cmd_workloads, "compile": cmd_compile, "evaluate": cmd_evaluate,
    "profile": cmd_profile,
    "docs": cmd_docs, "tune": cmd_tune, "cache": cmd_cache, "schema": cmd_schema,
}


def main(argv: list[str] | None = None, extra_commands: Mapping[str, Command] | None = None,
         prog: str = "kernelopt") -> int:
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
    except (KerneloptError, ValueError) as exc:  # OptionError, ExpressionError, pydantic's: ValueErrors
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
