"""The ``kernelopt`` argument parser, built for the command that runs.

Start-up time is part of the interface (``kernelopt --help``, ``kernelopt compile`` in a shell
loop), and the arguments of some commands name constants of heavy modules (the tuner's strategies,
the stopping rules, the profiler's clock controls). So :func:`build_parser` lists every command
with its help line but adds the arguments of only the command named on the command line; the
completion script and the tests build them all (``command=None``). Each built-in command is one
row of :data:`COMMANDS`: its help line and the function that adds its arguments.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from . import __version__
from .cli_io import CliParser
from .progress_bar import add_progress_flag

#: ``command`` of :func:`build_parser` for "every command's arguments" (completion, tests)
ALL = None


@dataclass(frozen=True)
class Command:
    """A command that another package adds to ``kernelopt`` (``main``'s ``extra_commands``): listed
    in ``kernelopt -h`` with ``help``; ``run`` gets the arguments after the command's name, parses them
    itself and returns the exit status; ``parser`` (optional) builds that parser, for completion."""

    help: str
    run: Callable[[list[str]], int]
    parser: Callable[[], argparse.ArgumentParser] | None = None


def _kernel_args(sp: argparse.ArgumentParser) -> None:
    """What names a candidate on a workload (evaluate, profile)."""
    sp.add_argument("workload", help="bundled workload name or workload directory")
    sp.add_argument("kernel", nargs="?", help="kernel .cu (default: the workload's initial kernel)")
    sp.add_argument("--launch", help='launch spec JSON: {"default": {grid, block, shared_bytes}, "cases": {...}} '
                    "(default: the initial kernel's launch)")
    sp.add_argument("--arch", help="compile target (default: the GPU's)")
    sp.add_argument("-O", "--option", action="append", metavar="OPT",
                    help="NVRTC option (whitelisted), repeatable: -O --use_fast_math or -O=--use_fast_math")
    sp.add_argument("--seed", type=int, help="input seed (default: fresh, recorded in the result)")


def _common(sp: argparse.ArgumentParser, gpu: bool = True) -> None:
    """The harness and device flags (not for ``gpu=False``: compile needs no GPU), and the compiler's."""
    if gpu:
        sp.add_argument("--harness", help="path to kernelopt-harness (default: installed one; env KERNELOPT_HARNESS)")
        sp.add_argument("--device", type=int, help="CUDA device ordinal (default 0; env KERNELOPT_DEVICE)")
    sp.add_argument("--unconfined-compiler", action="store_true", default=None,
                    help="where the kernel has no Landlock, compile anyway WITHOUT confining NVRTC (trusted "
                    "sources only; env KERNELOPT_UNCONFINED_COMPILER=1)")


def _gpu(sp: argparse.ArgumentParser) -> None:
    _common(sp)
    sp.add_argument("--calibrate", action="store_true",
                    help="measure copy bandwidth and FP32 FMA rate (cached per device and driver)")
    sp.add_argument("--force", action="store_true", help="with --calibrate: measure again even if cached")
    sp.add_argument("--json", action="store_true", help="print the properties (or the calibration) as JSON; errors too")


def _workloads(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--json", action="store_true", help="print the list as JSON (a workload that does not load: a row "
                    "with its error); errors too")


def _compile(sp: argparse.ArgumentParser) -> None:
    _common(sp, gpu=False)  # the arch comes from --arch, else KERNELOPT_ARCH, else a GPU if one is set up
    sp.add_argument("file")
    sp.add_argument("--arch", help="target, e.g. sm_90 or sm_90a (arch-specific: wgmma, setmaxnreg) (default: the "
                    "GPU's, else sm_90)")
    sp.add_argument("-O", "--option", action="append", metavar="OPT",
                        help="NVRTC option (whitelisted), repeatable: -O --use_fast_math or -O=--use_fast_math")
    sp.add_argument("--ptx", help="write the PTX here")
    sp.add_argument("--cubin", help="write the CUBIN here")
    sp.add_argument("--json", action="store_true",
                    help="print the result as JSON (the MCP compile tool's shape); errors too")


def _evaluate(sp: argparse.ArgumentParser) -> None:
    from .config import LAUNCH_DEFAULTS
    from .evaluation.candidate import PRECISION_MIN_ITERATIONS, PRECISION_RSE, STOP_RULES

    _common(sp)
    _kernel_args(sp)
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
    add_progress_flag(sp)  # kernels done / total


def _profile(sp: argparse.ArgumentParser) -> None:
    from .profiler import CLOCK_CONTROLS

    _common(sp)
    _kernel_args(sp)
    sp.add_argument("--case", help="case to profile (default: the first performance case)")
    sp.add_argument("--clock-control", choices=CLOCK_CONTROLS, default="none", help="ncu clock control (default none: "
                    "the GPU's own clocks)")
    sp.add_argument("--set", default="curated", help="curated (default: what the summary needs) or an ncu section set: "
                    "basic, detailed, full")
    sp.add_argument("--ncu", help="the ncu binary (default: PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-compute; env "
                    "KERNELOPT_NCU)")
    sp.add_argument("--timeout", type=float, help="seconds ncu may take (default 600; env KERNELOPT_PROFILE_TIMEOUT)")
    sp.add_argument("-o", "--output", help="directory for the report, raw CSV and summary (default "
                    "kernelopt-profiles/<time>-<workload>-...)")
    sp.add_argument("--json", action="store_true", help="print the summary as JSON")


def _docs(sp: argparse.ArgumentParser) -> None:
    # no --harness/--device: it needs no GPU (the arch comes from --arch, else KERNELOPT_ARCH, else a GPU if one is
    # set up)
    sp.add_argument("query", nargs="+", help="a few words, e.g. shared memory bank conflicts")
    sp.add_argument("--arch", help="rank guidance for this GPU first, e.g. sm_90 (default: the GPU's, if any)")
    sp.add_argument("--offline", action="store_true", help="no network: the shipped notes and cached NVIDIA pages only")
    sp.add_argument("-n", type=int, default=6, help="passages to show (default 6)")
    sp.add_argument("--json", action="store_true", help="print the passages as JSON; errors too")


def _tune(sp: argparse.ArgumentParser) -> None:
    from .config import LAUNCH_DEFAULTS
    from .evaluation.candidate import PRECISION_MIN_ITERATIONS, PRECISION_RSE, STOP_RULES
    from .tune.strategies import STRATEGIES

    _common(sp)
    sp.add_argument("workload", help="bundled workload name or workload directory")
    sp.add_argument("tunable", nargs="?", help="TUNABLE.json: a path, or the name of a spec beside the workload "
                    "(sgemm: tunable_3xtf32.json) (default: the workload's tunable.json)")
    sp.add_argument("--strategy", choices=STRATEGIES, default="auto",
                    help="exhaustive, random, tpe (optuna) or auto: exhaustive when the valid space fits "
                    "the budget (default)")
    sp.add_argument("--budget-evals", type=int, help="configurations to try at most, the untuned defaults included")
    sp.add_argument("--budget-s", type=float, help="seconds: no new configuration starts after this")
    sp.add_argument("--seed", type=int, help="input seed (default: fresh, recorded)")
    sp.add_argument("--tune-seed", type=int, default=0, help="the search strategy's seed (default 0: repeatable)")
    sp.add_argument("--devices", help="CUDA devices to measure on at once, e.g. 0,1 (env KERNELOPT_DEVICES; default "
                    "every visible one; --device: that one)")
    sp.add_argument("--ray", metavar="ADDRESS", help="measure on a Ray cluster, one actor per GPU: auto (this "
                    "machine's cluster) or HOST:PORT (pip install \"kernelopt-mcp[ray]\")")
    sp.add_argument("--arch", help="compile target (default: the GPU's)")
    sp.add_argument("--warmup", type=int, help=f"warm-up launches per case (default {LAUNCH_DEFAULTS.warmup})")
    sp.add_argument("--iterations", type=int,
                    help=f"measured launches per case (default {LAUNCH_DEFAULTS.iterations}); given, or --warmup "
                    "given, the count is exact unless --stop precision")
    sp.add_argument("--stop", choices=STOP_RULES,
                    help=f"precision (default without --warmup/--iterations): {PRECISION_MIN_ITERATIONS} launches, "
                    f"then more until the median's relative standard error is at most {100 * PRECISION_RSE:g}%%, "
                    f"{LAUNCH_DEFAULTS.iterations} (or --iterations) at most; count: exactly --iterations launches")
    sp.add_argument("--no-flush-l2", action="store_true", help="do not flush L2 between measured launches")
    sp.add_argument("--timeout", type=float, help="seconds per harness request (default 60)")
    sp.add_argument("--no-cache", action="store_true", help="measure everything again (the cache is <cache>/tune: see "
                    "`kernelopt cache info`)")
    sp.add_argument("--time-all", action="store_true",
                    help="time every configuration on every performance case; by default timing stops once a "
                    "configuration provably cannot beat the best so far (its row: stopped_early, with the bound)")
    sp.add_argument("--top", type=int, default=20, help="rows of the table to print (default 20; all are saved)")
    sp.add_argument("-o", "--output", help="run directory for tune.json, tune.csv, best.cu ... (default "
                    "kernelopt-tune/<time>-<workload>)")
    sp.add_argument("-v", "--verbose", action="store_true", help="print every evaluation step")
    sp.add_argument("--json", action="store_true", help="print the result as JSON")
    add_progress_flag(sp)  # configurations done / budget


def _cache(sp: argparse.ArgumentParser) -> None:
    from .caches import KINDS

    sp.add_argument("action", choices=["info", "clear"], help="info: location, entries and bytes per kind; "
                    "clear: remove every cache, or one KIND")
    sp.add_argument("kind", nargs="?", choices=KINDS, help="with clear: only this kind")
    sp.add_argument("--json", action="store_true", help="print the result as JSON; errors too")


def _schema(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--output", "-o", help="write to a file instead of stdout")


def _import_torch(sub: argparse._SubParsersAction) -> None:
    from .torch_cli import add_parser

    add_parser(sub)  # kernelopt import-torch: a PyTorch problem file becomes a workload (torch_import.py)


def _kernelbench(sub: argparse._SubParsersAction) -> None:
    from .kernelbench_cli import add_parser

    add_parser(sub)  # kernelopt kernelbench: a KernelBench checkout imported, solutions evaluated (suite.py)


def _completion(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("shell", choices=("bash", "zsh", "tcsh"),
                    help="the shell: bash (`eval \"$(kernelopt completion bash)\"` in ~/.bashrc), zsh (write it to a "
                    "file named _kernelopt on $fpath), tcsh")


@dataclass(frozen=True)
class _Builtin:
    """A built-in command's line in ``kernelopt -h`` and what adds its arguments: to its own parser
    (``args``), or, for commands whose module adds the parser itself, to the subcommands (``adds``)."""

    help: str
    args: Callable[[argparse.ArgumentParser], None] | None = None
    adds: Callable[[argparse._SubParsersAction], None] | None = None


# In `kernelopt -h` order. import-torch's and kernelbench's help lines are their modules' own
# (torch_cli.py, kernelbench_cli.py): tests/cli/test_startup.py checks that the lists agree.
COMMANDS: dict[str, _Builtin] = {
    "gpu": _Builtin("show the GPU's properties; --calibrate measures its copy bandwidth and FP32 rate", _gpu),
    "workloads": _Builtin('list bundled and configured workloads', _workloads),
    "compile": _Builtin('compile a .cu file with NVRTC (no GPU needed)', _compile),
    "evaluate": _Builtin('validate and benchmark a kernel (or several) on a workload', _evaluate),
    "profile": _Builtin('profile one case of a kernel under Nsight Compute (ncu)', _profile),
    "docs": _Builtin('search CUDA optimization guidance (offline notes + NVIDIA docs)', _docs),
    "tune": _Builtin('autotune a tunable kernel (tunable.json) on a workload', _tune),
    "cache": _Builtin('the on-disk caches: `kernelopt cache info`, `kernelopt cache clear [KIND]`', _cache),
    "import-torch": _Builtin(
        "turn a KernelBench-style PyTorch problem (Model, get_inputs, get_init_inputs) into a workload; "
        "needs torch here only",
        adds=_import_torch),
    "kernelbench": _Builtin(
        "import every problem of a KernelBench checkout (level1/ ... level3/, N_Name.py), evaluate the solutions "
        "found, and write a table (correct %%, fast_p, speedups) and JSON; a second run continues", adds=_kernelbench),
    "schema": _Builtin("print the JSON Schema of workload.json", _schema),
    "completion": _Builtin("print a shell completion script: `kernelopt completion bash|zsh|tcsh`", _completion),
}


def command_named(argv: list[str]) -> str | None:
    """The command ``argv`` runs: its first word that is not an option (the top-level parser has
    only -h and --version, which take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(
    extra_commands: Mapping[str, Command] | None = None, prog: str = "kernelopt", command: str | None = ALL,
) -> argparse.ArgumentParser:
    """The ``kernelopt`` parser: every command listed; the arguments of ``command`` alone (``ALL``:
    of every command, the extra commands' from their ``parser`` where they have one)."""
    p = CliParser(prog=prog, description="Agentic CUDA kernel optimizer: GPU tools and evaluation.")
    p.add_argument("--version", action="version", version=f"kernelopt {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for name, builtin in COMMANDS.items():
        full = command is ALL or command == name
        if builtin.adds is not None and full:
            builtin.adds(sub)
            continue
        sp = sub.add_parser(name, help=builtin.help)
        if full and builtin.args is not None:
            builtin.args(sp)
    choices: dict[str, argparse.ArgumentParser] = sub.choices  # type: ignore[assignment]
    for name, extra in (extra_commands or {}).items():  # listed here, parsed by extra.run (cli.main)
        sub.add_parser(name, help=extra.help, add_help=False)
        if command is ALL and extra.parser is not None:
            choices[name] = extra.parser()  # the command's own parser, for the completion script
    return p
