"""The ``kernelopt import-torch`` command (parser and handler; cli.py registers them)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from .errors import KerneloptError
from .files import read_text
from .launch import LaunchSpec
from .progress_bar import ProgressBar, add_progress_flag, progress_wanted
from .torch_import import TOLERANCE_MODES, TorchImportOptions, import_torch_problem, safe_name
from .workload import format_validation_error


def add_parser(sub: Any) -> None:
    """Add ``import-torch`` to the CLI's subcommands."""
    sp = sub.add_parser(
        "import-torch",
        help="turn a KernelBench-style PyTorch problem (Model, get_inputs, get_init_inputs) into a workload; needs "
        "torch here only",
    )
    sp.add_argument("problem", help="problem .py defining class Model(nn.Module), get_inputs() and get_init_inputs()")
    sp.add_argument("-o", "--output", help="workload directory to write (default: ./<name>)")
    sp.add_argument("--name", help="workload and kernel entry name (default: from the file name)")
    sp.add_argument("--initial", metavar="KERNEL.cu", help="starting kernel (default: none; `kernelopt optimize` then "
                    "has the model write one)")
    sp.add_argument("--initial-launch", metavar="LAUNCH.json",
                    help="launch spec of --initial (default: KERNEL.launch.json beside it)")
    sp.add_argument("--output-name", default="out", help="the output buffer's name (default out)")
    sp.add_argument("--seed", type=int, default=0,
                    help="torch seed the module is built with (default 0): the state it keeps, "
                    "a random mask, comes from it")
    sp.add_argument("--tolerance", choices=TOLERANCE_MODES, default="strict",
                    help="strict (default): by the output's dtype, widened where the module's own result needs it; "
                    "kernelbench: KernelBench's atol = rtol = 1e-2 (results say which)")
    sp.add_argument("--force", action="store_true", help="replace the output directory if it exists")
    sp.add_argument("--json", action="store_true", help="print the result as JSON; errors too")
    add_progress_flag(sp)  # the import's steps
    # where the MCP server will move the output directory: accepted, not needed (the workload names no absolute path)
    sp.add_argument("--home", help=argparse.SUPPRESS)
    sp.set_defaults(fn=cmd_import_torch)


def _launch(path: Path) -> tuple[LaunchSpec, list[str]]:
    """A launch file: a launch spec, or {"launch": ..., "compile_options": [...]}."""
    data = json.loads(read_text(path, "launch file", KerneloptError))
    try:
        if isinstance(data, dict) and "launch" in data:
            return LaunchSpec.model_validate(data["launch"]), list(data.get("compile_options") or [])
        return LaunchSpec.model_validate(data), []
    except ValidationError as exc:
        raise KerneloptError(format_validation_error(exc, str(path))) from None


def cmd_import_torch(args: argparse.Namespace, out: Console) -> int:
    problem = Path(args.problem)
    name = args.name or safe_name(problem.stem)
    options = TorchImportOptions(name=name, seed=args.seed, overwrite=args.force, output_name=args.output_name,
                                 tolerance=args.tolerance)
    if args.initial:
        kernel = Path(args.initial)
        options.initial_cu = read_text(kernel, "initial kernel", KerneloptError)
        launch = Path(args.initial_launch) if args.initial_launch else kernel.with_name(kernel.stem + ".launch.json")
        if not args.initial_launch and not launch.is_file():
            raise KerneloptError(f"{kernel}: the initial kernel needs a launch: pass --initial-launch LAUNCH.json or "
                                 f"add {launch.name} beside it")
        options.initial_launch, options.initial_options = _launch(launch)
    with ProgressBar(f"importing {problem.name}", enabled=progress_wanted(args.progress)) as bar:
        result = import_torch_problem(problem, Path(args.output or name), options, progress=bar.step)
    if args.json:
        print(json.dumps({
            "status": "ok", "path": str(result.path), "name": result.spec.name, "c_prototype": result.c_prototype,
            "size_constants": {c.name: c.value for c in result.constants},
            "cases": [c.model_dump(mode="json", exclude={"inputs"}) for c in result.spec.cases],
            "notes": result.notes, "degenerate": result.degenerate, "torch": result.torch_version,
        }, indent=2))
    else:
        out.print(escape(result.text()), highlight=False)
        out.print(escape(f"next: kernelopt optimize --workload {result.path}  (or: kernelopt evaluate {result.path} "
                         "KERNEL.cu --launch LAUNCH.json)"), highlight=False)
    return 0
