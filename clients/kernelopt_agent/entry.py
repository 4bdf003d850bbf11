"""The ``kernelopt`` console script: the library's command line (``kernelopt_mcp.cli``) with the
orchestrator's commands added.

``optimize``, ``graph`` and ``runs`` run here (``cli.py``); every other command is the library's.
The library lists these three in ``kernelopt -h`` through its ``extra_commands`` hook and never
names this package, so the dependency points one way: client -> library. ``python -m
kernelopt_agent`` is the same command; ``python -m kernelopt_mcp`` is the library's alone.

Nothing of the orchestrator is imported until one of its commands runs (or the completion script
asks for their parsers): ``kernelopt --help`` and ``kernelopt compile`` start without it.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial

from kernelopt_mcp.cli import Command
from kernelopt_mcp.cli import main as library_main

EXIT_ERROR = 2  # cli.EXIT_ERROR: a command that could not run

# The help line of each orchestrator command in `kernelopt -h`.
HELP = {
    "optimize": "optimize a kernel with a model and kernelopt-mcp (see `kernelopt optimize -h`)",
    "graph": "print the optimize loop as a Mermaid diagram",
    "runs": "read recorded optimize runs: `kernelopt runs list`, `kernelopt runs show [RUN]`",
}


def commands() -> dict[str, Command]:
    """The orchestrator's commands, as the library's CLI takes them (``main``'s ``extra_commands``)."""
    return {name: Command(help=HELP[name], run=partial(run_command, name), parser=partial(command_parser, name))
            for name in HELP}


def command_parser(name: str) -> argparse.ArgumentParser:
    """``kernelopt NAME``'s own parser (for the completion script)."""
    from .cli import PARSERS

    return PARSERS[name]()


def run_command(name: str, args: list[str]) -> int:
    """Run ``kernelopt NAME ARGS``. The command imports what it needs (openai, mcp, matplotlib) only
    when it runs; a dependency that is not installed is an error that says so, not a traceback."""
    try:
        from .cli import COMMANDS

        return COMMANDS[name](args)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing in ("", "kernelopt_mcp", "kernelopt_agent"):
            raise  # a broken install of kernelopt itself: the traceback says more
        print(f"error: `kernelopt {name}` needs the {missing} package, which is not installed ({exc}); "
              "reinstall kernelopt with `pip install .`, which installs its dependencies", file=sys.stderr)
        return EXIT_ERROR


def main(argv: list[str] | None = None) -> int:
    """``kernelopt ARGV``: the library's commands and the orchestrator's; returns the exit status."""
    return library_main(argv, extra_commands=commands())
