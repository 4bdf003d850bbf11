"""Shell completion scripts for ``kernelopt`` and ``kernelopt-mcp``, generated from their argparse
parsers by shtab (``kernelopt completion bash|zsh|tcsh``, ``kernelopt-mcp --completion SHELL``).

shtab writes a static script once, so pressing Tab never starts Python (argcomplete would run
``kernelopt`` on every Tab, and every start-up would pay for its hook). The parsers stay free of
shtab: :func:`mark_completions` walks a built parser and says what each argument completes to, by
its name: workload arguments to the bundled workloads' names (listed when the script is written:
cheap, and a directory path completes too), kernels, specs and output files to file names, and
directories to directories.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Iterator

SHELLS = ("bash", "zsh", "tcsh")

# argument names (argparse ``dest``) that complete to a file or a directory
FILE_ARGS = {
    "file", "kernel", "more_kernels", "tunable", "problem", "launch", "initial", "initial_launch", "ptx", "cubin",
    "signature", "reference", "initial_kernel", "input_cases", "oracle", "config", "env_file", "harness", "ncu",
    "tokens_file", "output",
}
DIR_ARGS = {"workdir", "results_dir", "workspace", "problems_dir", "solutions", "root", "data_root", "output_root"}
WORKLOAD_ARGS = {"workload"}


def workload_names() -> list[str]:
    """The bundled workloads' names (directories holding a workload.json), without loading any."""
    from .config import bundled_workloads_dir

    root = bundled_workloads_dir()
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir()
                  if (d / "workload.json").is_file() and re.fullmatch(r"[\w.-]+", d.name))


def _workload_completion(prog: str, names: Iterable[str]) -> dict[str, object]:
    """shtab's ``complete`` value for a workload argument: a name, else a directory."""
    words = " ".join(names)
    fn = "_" + re.sub(r"\W", "_", prog) + "_workloads"
    return {
        "bash": fn,
        "zsh": f"({words})",
        "tcsh": f"({words})",
        "preamble": {
            "bash": f'{fn}() {{\n  compgen -W "{words}" -- "$1"\n  compgen -d -- "$1"\n}}\n',
        },
    }


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every subcommand's parser under it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                yield from _parsers(child)


def mark_completions(parser: argparse.ArgumentParser, prog: str) -> None:
    """Set shtab's ``complete`` on each argument of ``parser``'s tree that completes to a workload,
    a file or a directory (by its ``dest``); arguments with ``choices`` complete to those already."""
    import shtab

    workload = _workload_completion(prog, workload_names())
    for p in _parsers(parser):
        for action in p._actions:
            if action.choices is not None or isinstance(action, argparse._SubParsersAction) or action.nargs == 0:
                continue
            if action.dest in WORKLOAD_ARGS:
                action.complete = workload  # type: ignore[attr-defined]
            elif action.dest in FILE_ARGS:
                action.complete = shtab.FILE  # type: ignore[attr-defined]
            elif action.dest in DIR_ARGS:
                action.complete = shtab.DIRECTORY  # type: ignore[attr-defined]


def completion_script(parser: argparse.ArgumentParser, shell: str, prog: str) -> str:
    """The completion script of ``parser`` (every command's arguments built) for ``shell``.

    Raises:
        ValueError: a shell shtab does not write here (bash, zsh and tcsh are).
    """
    if shell not in SHELLS:
        raise ValueError(f"no completion for shell {shell!r}: choose one of {', '.join(SHELLS)}")
    import shtab

    mark_completions(parser, prog)
    script = shtab.complete(parser, shell=shell)
    return script if script.endswith("\n") else script + "\n"
