"""The ``kernelopt import-torch`` command (parser and handler; cli.py registers them).

The problem file is someone's code: by default it runs in a confined child
(:func:`.suite_imports.import_confined`, which runs this command again with ``--in-process``);
``--in-process`` runs it here, as ``python problem.py`` would (where the kernel has no Landlock).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from .config import Settings
from .errors import KerneloptError
from .files import read_text
from .launch import LaunchSpec
from .progress_bar import ProgressBar, add_progress_flag, progress_wanted
from .suite_imports import IMPORT_TIMEOUT_S, PROGRESS_LINE, import_confined
from .torch_import import TOLERANCE_MODES, TorchImportOptions, import_torch_problem, safe_name
from .workload import WorkloadSpec, format_validation_error


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
    sp.add_argument("--output-name", default="out",
                    help="the output buffer's name (default out; a forward that returns a tuple: out0, out1, ...)")
    sp.add_argument("--seed", type=int, default=0,
                    help="torch seed the module is built with (default 0): the state it keeps, "
                    "a random mask, comes from it")
    sp.add_argument("--tolerance", choices=TOLERANCE_MODES, default="strict",
                    help="strict (default): by the output's dtype, widened where the module's own result needs it; "
                    "kernelbench: KernelBench's atol = rtol = 1e-2 (results say which)")
    sp.add_argument("--force", action="store_true", help="replace the output directory if it exists")
    sp.add_argument("--json", action="store_true", help="print the result as JSON; errors too")
    sp.add_argument("--timeout", type=float, default=IMPORT_TIMEOUT_S, metavar="S",
                    help=f"seconds the import may take (default {IMPORT_TIMEOUT_S:.0f}; the child is killed then)")
    sp.add_argument("--in-process", action="store_true",
                    help="run the problem's code in this process, unconfined, as `python problem.py` would (default: "
                    "a confined child that reads only the Python installation and a copy of the problem file, writes "
                    "only the output, and sees no secret of the environment)")
    add_progress_flag(sp)  # the import's steps
    # where the MCP server will move the output directory: accepted, not needed (the workload names no absolute path)
    sp.add_argument("--home", help=argparse.SUPPRESS)
    # the confined child's steps, as lines on stderr for the parent's bar (PROGRESS_LINE)
    sp.add_argument("--progress-lines", action="store_true", help=argparse.SUPPRESS)
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
    target = Path(args.output or name)
    options = TorchImportOptions(name=name, seed=args.seed, overwrite=args.force, output_name=args.output_name,
                                 tolerance=args.tolerance)
    if args.initial:
        kernel, launch = _initial_files(args)
        options.initial_cu = read_text(kernel, "initial kernel", KerneloptError)
        options.initial_launch, options.initial_options = _launch(launch)
    with ProgressBar(f"importing {problem.name}", enabled=progress_wanted(args.progress)) as bar:
        if args.in_process:
            with _stdout_to_stderr(args.json):
                result = import_torch_problem(problem, target, options,
                                              progress=_progress_line if args.progress_lines else bar.step)
            answer = _answer(result.spec, result.path, result.notes, result.torch_version)
        else:
            confined = import_confined(problem, target, options, timeout_s=args.timeout, progress=bar.step,
                                       compile_limits=Settings.from_env().compile_limits())
            answer = _answer(confined.spec, target, confined.notes, confined.torch_version)
    if args.json:
        print(json.dumps(answer, indent=2))
    else:
        out.print(escape(summary_text(answer)), highlight=False)
        out.print(escape(f"next: kernelopt optimize --workload {answer['path']}  (or: kernelopt evaluate "
                         f"{answer['path']} KERNEL.cu --launch LAUNCH.json)"), highlight=False)
    return 0


def _answer(spec: WorkloadSpec, path: Path, notes: list[str], torch_version: str) -> dict[str, Any]:
    """What ``--json`` prints of an import: the workload's name, prototype, size constants (as the
    problem writes them: the performance case's) and cases, the import's notes, torch's version."""
    perf = next(c.name for c in spec.cases if c.kind == "performance")
    return {
        "status": "ok", "path": str(path), "name": spec.name, "c_prototype": spec.signature.c_prototype(),
        "size_constants": dict(spec.imported.sizes.get(perf, {})) if spec.imported else {},
        "cases": [c.model_dump(mode="json", exclude={"inputs"}) for c in spec.cases],
        "notes": notes, "degenerate": list(spec.imported.degenerate) if spec.imported else [], "torch": torch_version,
    }


def _progress_line(message: str, done: int, total: int) -> None:
    """The confined importer's step, as a line its parent reads (suite_imports.PROGRESS_LINE)."""
    sys.stderr.buffer.write(b"\n" + PROGRESS_LINE + json.dumps([message, done, total]).encode() + b"\n")
    sys.stderr.flush()


@contextlib.contextmanager
def _stdout_to_stderr(moved: bool) -> Iterator[None]:
    """With ``moved``, what the problem's code prints (print, or C writing to descriptor 1) goes to
    stderr: stdout stays the one JSON answer under --json."""
    if not moved:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _initial_files(args: argparse.Namespace) -> tuple[Path, Path]:
    """``--initial`` and its launch file (``--initial-launch``, else KERNEL.launch.json beside it)."""
    kernel = Path(args.initial)
    launch = Path(args.initial_launch) if args.initial_launch else kernel.with_name(kernel.stem + ".launch.json")
    if not args.initial_launch and not launch.is_file():
        raise KerneloptError(f"{kernel}: the initial kernel needs a launch: pass --initial-launch LAUNCH.json or "
                             f"add {launch.name} beside it")
    return kernel, launch


def summary_text(answer: dict[str, Any]) -> str:
    """What the import wrote, for people: the kernel's prototype, the size constants, the cases, the notes."""
    lines = [f"workload {answer['name']!r} written to {answer['path']}", f"  kernel: {answer['c_prototype']}"]
    consts = ", ".join(f"{k}={v}" for k, v in answer["size_constants"].items()) or "none found"
    lines.append(f"  size constants (scaled for the correctness cases): {consts}")
    for case in answer["cases"]:
        scalars = ", ".join(f"{k}={v}" for k, v in (case.get("scalars") or {}).items())
        lines.append(f"  case {case['name']} ({case['kind']}){': ' + scalars if scalars else ''}")
    lines += [f"  note: {n}" for n in answer["notes"]]
    return "\n".join(lines)
