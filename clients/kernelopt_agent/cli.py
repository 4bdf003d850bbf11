"""`kernelopt optimize`, `kernelopt graph` and `kernelopt runs list|show|report` (``entry.py``, the
``kernelopt`` console script, hands them here; each imports what it needs, openai and mcp among
them, only when it runs)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from kernelopt_mcp.config import LAUNCH_DEFAULTS
from kernelopt_mcp.files import missing_path_message

EXIT_OK, EXIT_NO_VALID, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130

EXAMPLE = """examples:
  kernelopt optimize --description "Single-precision GEMM with rectangular matrices." --max-iterations 7
  kernelopt optimize --workload sgemm --max-iterations 5
  kernelopt optimize --config clients/example.json
  kernelopt optimize --description "..." --input-cases results/run-001/input_cases.json \\
      --reference results/run-001/reference.cu --initial-kernel results/run-001/best.cu --max-iterations 7

  kernelopt optimize --workload sgemm --strategy tune --tune-evals 100     (no model: autotune tunable.json)
  kernelopt optimize --resume run-007 --max-iterations 12    (go on with an interrupted or finished run)

OPENAI_API_KEY (and OPENAI_BASE_URL, KERNELOPT_* ...) come from the environment, else from a .env
file in the working directory (or --env-file PATH), which never overrides a variable already set;
without a key, --strategy tune is the default."""


def optimize_parser(prog: str = "kernelopt optimize") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description="Optimize a CUDA kernel with a model and kernelopt-mcp's GPU tools: a workload in, "
        "the fastest validated kernel out, every experiment recorded under results/run-NNN/.",
        epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--description", help="what the kernel computes; omitted parts are generated from it")
    p.add_argument("--max-iterations", type=int, help="proposals (repairs included) after the initial kernel (default "
                   "7); with --resume, the total, counting the iterations done")
    p.add_argument("--signature", help="signature JSON (entry and parameters; a run's signature.json)")
    p.add_argument("--reference",
                   help="CUDA reference .cu (its launch from <name>.launch.json beside it, else generated)")
    p.add_argument("--initial-kernel",
                   help="starting kernel .cu (launch from <name>.launch.json beside it, else generated)")
    p.add_argument("--input-cases",
                   help="input-cases JSON: cases, generators or data files, tolerances (a run's input_cases.json)")
    p.add_argument("--oracle", help="NumPy oracle reference.py (default: reference.py beside --input-cases, if any)")
    p.add_argument("--workload", help="a bundled, configured or created workload name, or a workload directory")
    p.add_argument("--use-nsight", action="store_true", default=None, help="profile a performance case after each "
                   "valid candidate (ncu_profile)")
    p.add_argument("--nvidia-research", action="store_true", default=None,
                   help="retrieve NVIDIA guidance first (docs_search)")
    p.add_argument("--config", help="JSON file with any of these options (flags win)")
    p.add_argument("--env-file", metavar="PATH", help="read OPENAI_API_KEY, OPENAI_BASE_URL, KERNELOPT_* ... from this "
                   "file (KEY=VALUE lines) instead of ./.env; a variable already set in the environment wins")
    p.add_argument("--model", help="model name (default gpt-5-mini)")
    p.add_argument("--reasoning-effort",
                   help="none|minimal|low|medium|high|xhigh, or off to not send it (default medium)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:"
                   "11434/v1 (env OPENAI_BASE_URL)")
    p.add_argument("--api", choices=("responses", "chat"), help="OpenAI API to use: responses (default on OpenAI's "
                   "endpoint; reasoning kept between turns) or chat (Chat Completions; "
                   "default with another --base-url)")
    p.add_argument("--results-dir", help="where run-NNN/ directories go (default results/)")
    p.add_argument("--max-tokens", type=int, help="stop cleanly once the run has used this many tokens")
    p.add_argument("--max-cost", type=float, help="stop cleanly once the estimated cost reaches this many USD "
                   "(prices: clients/kernelopt_agent/pricing.py, or --price-per-mtok)")
    p.add_argument("--price-per-mtok", help="the model's prices, USD per million tokens: IN,OUT or IN,CACHED,OUT "
                   "(for a model the price table lacks, or prices that changed)")
    p.add_argument("--warmup", type=int,
                   help=f"untimed launches per performance case (server default {LAUNCH_DEFAULTS.warmup})")
    p.add_argument("--iterations", type=int,
                   help=f"timed launches per performance case (server default {LAUNCH_DEFAULTS.iterations}); "
                   "given, or --warmup given, the count is exact unless --stop precision")
    p.add_argument("--stop", choices=("count", "precision"),
                   help="precision (default without --warmup/--iterations): 20 timed launches, then more until the "
                   f"median's relative standard error is at most 0.3%%, {LAUNCH_DEFAULTS.iterations} (or --iterations) "
                   "at most; count: exactly "
                   "--iterations")
    p.add_argument("--workspace", help="kernelopt-mcp workspace (default ~/.kernelopt)")
    p.add_argument("--harness", help="kernelopt-harness binary for the server (default: the installed one)")
    p.add_argument("--device", type=int,
                   help="run on this CUDA device alone (default: every visible device, see --devices)")
    p.add_argument("--devices", help="CUDA devices the server spreads evaluations over, e.g. 0,1: --candidates N keeps "
                   "them busy (default every visible device)")
    p.add_argument("--ray", metavar="ADDRESS", help="evaluate on a Ray cluster's GPUs (auto or HOST:PORT), one actor "
                   "per GPU; needs pip install \"kernelopt-mcp[ray]\"")
    p.add_argument("--strategy", choices=("llm", "tune"), help="llm: a model proposes kernels (default with an API "
                   "key); tune: autotune the workload's tunable.json, no model (default without one)")
    p.add_argument("--tune-budget", type=int,
                   help="configurations to measure when a model's proposal carries tunables (default 8)")
    p.add_argument("--tune-evals", type=int, help="configurations to measure with --strategy tune (default 64)")
    p.add_argument("--tune-seconds", type=float, help="seconds of tuning at most with --strategy tune")
    p.add_argument("--candidates", type=int, help="proposals per iteration, asked for concurrently (distinct ideas; "
                   "identical ones evaluated once) and evaluated one after another on the GPU (default 1)")
    p.add_argument("--resume", metavar="RUN",
                   help="continue a run (interrupted, stopped by a budget, or finished) in its directory: a path, or a "
                   "run's name or number under --results-dir. It keeps its options, frozen workload, candidates and "
                   "their numbering, best so far and spent tokens and cost; only --max-iterations (the total, counting "
                   "the iterations done), --max-tokens and --max-cost (which count what was spent) and --base-url, "
                   "--harness, --workspace, --device, --devices may be given again")
    p.add_argument("--keep-data", action="store_true", default=None,
                   help="keep the drawn input files and large expected outputs in the run directory (default: they are "
                   "removed when the run ends and `kernelopt runs restore RUN` draws them again "
                   "from the recorded seed)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    return p


def cmd_optimize(argv: list[str]) -> int:
    from .options import OptimizeOptions, OptionsError, env_file_path, export_dotenv, read_dotenv

    args = optimize_parser().parse_args(argv)
    quiet = bool(args.quiet)
    flags = {k: v for k, v in vars(args).items() if k != "quiet"}
    err = Console(stderr=True)
    try:
        dotenv = read_dotenv(env_file_path(args.env_file, Path.cwd()))
    except OptionsError as exc:
        err.print(f"error: {exc}", highlight=False, markup=False)
        return EXIT_ERROR
    export_dotenv(dotenv, os.environ)  # the kernelopt-mcp server a run starts sees the file's KERNELOPT_* settings too
    if args.resume is not None:
        return resume_optimize(flags, Console(width=None if sys.stdout.isatty() else 160), quiet=quiet)
    flags.pop("resume")
    try:
        opts = OptimizeOptions.build(flags)
    except OptionsError as exc:
        err.print(f"error: {exc}", highlight=False, markup=False)
        return EXIT_ERROR
    if opts.strategy == "tune" and opts.strategy_defaulted:
        err.print("no OPENAI_API_KEY: tuning the bundled tunable kernel instead of asking a model", highlight=False,
                  markup=False)
    return run_optimize(opts, Console(width=None if sys.stdout.isatty() else 160), quiet=quiet)


def run_optimize(opts: Any, console: Console, quiet: bool = False) -> int:
    """Check what can be checked, create the run directory, run the loop, finalize whatever happened.

    A run that cannot start (unreadable parts, no API key, no tunable for --strategy tune, no GPU
    or no server) exits 2 with the error and leaves no run directory."""
    from kernelopt_mcp.errors import KerneloptError

    from .loop import Optimizer, RunFailed, preflight
    from .model import ModelError
    from .parts import PartsError
    from .progress import Display
    from .rundir import RunDir

    try:
        parts = preflight(opts)
    except (PartsError, RunFailed, ModelError, KerneloptError) as exc:
        Console(stderr=True).print(f"error: {exc}", highlight=False, markup=False)
        return EXIT_ERROR
    run = RunDir.create(opts.results_dir)
    run.write_json("config.json", opts.as_json())
    display = Display(console, quiet=quiet)
    display.info(f"{run.name}: {run.path}")
    opt = Optimizer(opts, run, display, parts=parts)
    opt.write_progress()
    return execute(opt, display, console)


def resume_optimize(flags: dict[str, Any], console: Console, quiet: bool = False) -> int:
    """``--resume RUN``: check that the run can go on as asked (before anything is written), then run the
    loop from its records (resume.py). A resume that cannot start (no GPU, no server) leaves the run as it was."""
    from .loop import RunFailed
    from .model import ModelError
    from .options import OptionsError
    from .progress import Display
    from .resume import ResumedOptimizer, resume_options

    try:
        res = resume_options(flags)
        display = Display(console, quiet=quiet)
        opt = ResumedOptimizer(res, display)
    except (OptionsError, RunFailed, ModelError) as exc:
        Console(stderr=True).print(f"error: {exc}", highlight=False, markup=False)
        return EXIT_ERROR
    display.info(f"{res.run.name}: {res.run.path} (resumed)")
    return execute(opt, display, console, started=lambda: opt.reopened)


def execute(opt: Any, display: Any, console: Console, started: Any = None) -> int:
    """Run the loop and finalize whatever happened. ``started()``: whether the run got going (default: it
    reached the GPU or has a candidate); one that did not leaves no run directory (a resumed one: untouched)."""
    import shutil

    import anyio

    from kernelopt_mcp.errors import KerneloptError

    from .finalize import error_text, finalize
    from .loop import RunFailed
    from .model import ModelError
    from .parts import PartsError
    from .toolbox import ToolboxError

    state = opt.state  # what the run has, however the loop ends: finalize writes it out
    run = state.run
    resumed = started is not None

    def terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, terminate)
    status, error, code = "completed", None, EXIT_OK
    try:
        anyio.run(opt.run_loop)
        if state.stop_reason.startswith("--max-tokens") or state.stop_reason.startswith("--max-cost"):
            status = "stopped"
    except BaseException as raised:  # noqa: BLE001 (every ending is recorded; none may lose the run)
        cause = unwrap(raised)
        if isinstance(cause, KeyboardInterrupt):
            status, error, code = "interrupted", f"interrupted ({cause or 'Ctrl-C'})", EXIT_INTERRUPTED
        elif isinstance(cause, (ModelError, ToolboxError, PartsError, KerneloptError, RunFailed, ValueError)):
            status, error, code = "failed", str(cause), EXIT_ERROR
        else:  # a crash: keep the run readable and say what happened
            status, error, code = "interrupted", f"crashed: {error_text(cause)}", EXIT_ERROR
            console.print_exception() if cause is raised else console.print(f"{error_text(cause)}", markup=False)
        state.stop_reason = {"failed": "error", "interrupted": "interrupted"}.get(status, "")
    finally:
        signal.signal(signal.SIGTERM, previous)
        # it never started (no GPU, no server)
        if not (started() if resumed else state.device is not None or state.records):
            error = (error or status).replace(f"; see {run.path / 'server.log'}", "") + server_log_tail(run.path)
            if not resumed:  # leave no run behind; a resumed run stays as it was
                shutil.rmtree(run.path, ignore_errors=True)
            written = None
        else:
            opt.finishing(status)
            written = finalize(state, status, error=error)
    if written is None:
        kept = (f"(the resume did not start: {run.name} is as it was)" if resumed
                else "(no run directory was kept: nothing ran)")
        Console(stderr=True).print(f"error: {error}\n{kept}", highlight=False, markup=False)
        return EXIT_ERROR if code == EXIT_OK else code
    if error:
        Console(stderr=True).print(f"error: {error}", highlight=False, markup=False)
    display.final(state.records, state.best(), state.frozen.performance_cases if state.frozen else [], written)
    if code == EXIT_OK and state.best() is None and state.records:
        code = EXIT_NO_VALID
    return code


def server_log_tail(run_path: Path, lines: int = 15) -> str:
    """The end of the server's stderr (kept in the message when the run directory is removed)."""
    try:
        text = (run_path / "server.log").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
    return "\nkernelopt-mcp's stderr (last lines):\n" + "\n".join(text.splitlines()[-lines:]) if text else ""


def unwrap(exc: BaseException) -> BaseException:
    """The exception inside task-group wrappers (the MCP client runs in one): the first that is not a cancellation."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)] or list(exc.exceptions)
        exc = inner[0]
    return exc


def graph_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kernelopt graph", description="Print the optimization loop as a Mermaid "
                                "flowchart (dashed edges are conditional routes).")
    p.add_argument("--no-nsight", action="store_true", help="leave out the profiling route")
    p.add_argument("--no-research", action="store_true", help="leave out the research route")
    return p


def cmd_graph(argv: list[str]) -> int:
    from .graph import mermaid

    args = graph_parser().parse_args(argv)
    print(mermaid(use_nsight=not args.no_nsight, nvidia_research=not args.no_research), end="")
    return EXIT_OK


def runs_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kernelopt runs", description="Read recorded optimizer runs.")
    sub = p.add_subparsers(dest="action", required=True)
    lp = sub.add_parser("list", help="one line per run under the results directory (the default action)")
    sp = sub.add_parser("show",
                        help="summarize a run (finished, running or interrupted); the newest when none is named")
    sp.add_argument("run", nargs="?",
                    help="a run directory, or a run's name or number under --results-dir (default: the newest)")
    rp = sub.add_parser("report", help="write the run's report.html (one self-contained page: plots, candidates, "
                        "diffs, tuning, timing, provenance; opens offline); the newest run when none is named")
    rp.add_argument("run", nargs="?",
                    help="a run directory, or a run's name or number under --results-dir (default: the newest)")
    rp.add_argument("--output", "-o", help="where to write the page (default: report.html in the run directory)")
    dp = sub.add_parser("du", help="disk use of the runs, largest first, with the entries that take the space")
    pp = sub.add_parser("prune", help="remove whole run directories (never a run in progress)")
    pp.add_argument("--keep", type=int, help="keep the newest N runs")
    pp.add_argument("--older-than", metavar="AGE", help="remove runs that last recorded anything longer ago than AGE "
                    "(30d, 12h, 90m; a plain number is days); with --keep, only runs beyond the newest N")
    pp.add_argument("--dry-run", action="store_true", help="say which runs would go, remove nothing")
    tp = sub.add_parser("restore",
                        help="draw a run's inputs and expected outputs again from its recorded seed (checked against "
                        "input_cases.json's sha256), so `kernelopt-harness run replay/<case>.json` replays it")
    tp.add_argument("run", nargs="?",
                    help="a run directory, or a run's name or number under --results-dir (default: the newest)")
    tp.add_argument("--harness", help="kernelopt-harness binary for the server (default: the run's)")
    tp.add_argument("--workspace", help="kernelopt-mcp workspace (default: the run's)")
    for q in (lp, sp, rp, dp, pp, tp):
        q.add_argument("--results-dir", default="results",
                       help="where `kernelopt optimize` put run-NNN/ (default results/)")
    for q in (lp, sp, dp, pp, tp):
        q.add_argument("--json", action="store_true")
    return p


def cmd_runs(argv: list[str]) -> int:
    from .runs import list_runs, resolve_run, show

    p = runs_parser()
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["list", *argv]  # `kernelopt runs [--json] [--results-dir D]` lists, like `git stash`
    args = p.parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 160)
    results = Path(args.results_dir)
    try:
        if args.action == "list":
            return list_runs(results, console, as_json=args.json)
        if args.action == "report":
            from .report import write_report

            print(write_report(resolve_run(args.run, results), output=Path(args.output) if args.output else None))
            return EXIT_OK
        if args.action in ("du", "prune"):
            from .rundisk import PruneError, du, prune

            try:
                if args.action == "du":
                    return du(results, console, as_json=args.json)
                return prune(results, console, keep=args.keep, older_than=args.older_than, dry_run=args.dry_run,
                             as_json=args.json)
            except PruneError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return EXIT_ERROR
        if args.action == "restore":
            return restore_run(resolve_run(args.run, results), args, console)
        return show(resolve_run(args.run, results), console, as_json=args.json)
    except FileNotFoundError as exc:
        print(f"error: {missing_path_message(exc) if exc.filename else exc}", file=sys.stderr)
        return EXIT_ERROR


def restore_run(path: Path, args: argparse.Namespace, console: Console) -> int:
    """`kernelopt runs restore`: the run's data drawn again by a server started with the run's options."""
    import json

    import anyio

    from .freeze import torch_copy
    from .options import OptionsError
    from .resume import ResumeError, freeze_call, run_options
    from .rundata import RestoreError, restore
    from .rundir import RunDir, read_json
    from .toolbox import ToolboxError

    copy = torch_copy(path)
    if copy is not None:
        print(f"error: {path.name}: PyTorch is this run's reference, so nothing was drawn to files and there is "
              "nothing to restore; replay a candidate by evaluating it on the run's copy of the workload: kernelopt "
              f"evaluate {copy} {path / 'best.cu'} (or any candidates/<label>/source.cu)", file=sys.stderr)
        return EXIT_ERROR
    try:
        recorded = read_json(path / "config.json")
        flags = {"harness": args.harness, "workspace": args.workspace}
        opts, _ = run_options(flags, recorded, path, None, None)
        freeze_args, seed = freeze_call(path, {})
        done = anyio.run(restore, RunDir.reopen(path), opts, freeze_args, seed)
    except (OSError, ValueError, OptionsError, ResumeError, RestoreError, ToolboxError) as exc:
        print(f"error: {path.name}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        print(json.dumps(done, indent=2))
    else:
        console.print(f"{path.name}: {done['inputs']} input files drawn again from seed {seed}, sha256 as recorded; "
                      f"replay with `kernelopt-harness run {path / 'replay'}/<case>.json`",
                      highlight=False, markup=False)
    return EXIT_OK


COMMANDS = {"optimize": cmd_optimize, "graph": cmd_graph, "runs": cmd_runs}
PARSERS = {"optimize": optimize_parser, "graph": graph_parser, "runs": runs_parser}  # for the completion script


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in COMMANDS:
        print("usage: kernelopt {optimize,graph,runs} ...", file=sys.stderr)
        return EXIT_ERROR
    return COMMANDS[argv[0]](argv[1:])
