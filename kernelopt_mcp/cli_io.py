"""How the command line talks to people and scripts: the consoles, and one error line (or one
JSON object under ``--json``, usage errors included). The commands themselves are in
:mod:`kernelopt_mcp.cli`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NoReturn, TextIO

if TYPE_CHECKING:  # rich is imported when a command prints, not for `kernelopt --help`
    from rich.console import Console

EXIT_USAGE = 2  # argparse's own status for a bad command line, and the CLI's for an error
OPTION_FLAGS = ("-O", "--option")


class CliParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one JSON object on stdout when the command
    line asks for ``--json`` (see :func:`answer_errors_in_json`): a script reads one stream, and
    a mistyped flag is an error it can parse like any other."""

    json_errors = False

    def error(self, message: str) -> NoReturn:
        if self.json_errors:
            print(json.dumps({"status": "error", "error": "UsageError", "message": message,
                              "usage": self.format_usage().strip()}, indent=2))
            raise SystemExit(EXIT_USAGE)
        super().error(message)


def wants_json(argv: Sequence[str]) -> bool:
    """Whether ``--json`` is among the options of ``argv`` (not after ``--``)."""
    for token in argv:
        if token == "--":
            return False
        if token == "--json":
            return True
    return False


def answer_errors_in_json(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """With ``--json`` in ``argv``: every :class:`CliParser` of ``parser``'s tree (its
    subcommands' too) reports usage errors as JSON."""
    if not wants_json(argv):
        return
    stack = [parser]
    while stack:
        current = stack.pop()
        if isinstance(current, CliParser):
            current.json_errors = True
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())


def join_option_values(argv: list[str]) -> list[str]:
    """``-O --use_fast_math`` as ``--option=--use_fast_math``: argparse takes a value that starts
    with '-' for a flag of its own and refuses it ("expected one argument"), while NVRTC options
    all start with '-'. Arguments after ``--`` are left alone."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            out += argv[i:]
            break
        if token in OPTION_FLAGS and i + 1 < len(argv) and argv[i + 1].startswith("-") and argv[i + 1] != "--":
            out.append(f"--option={argv[i + 1]}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out


def consoles(environ: Mapping[str, str] | None = None) -> tuple[Console, Console]:
    """stdout and stderr consoles. On a terminal rich measures it; elsewhere (a log, a pipe, CI) the
    width is COLUMNS when set, else 160 so tables are not squeezed into 80 columns. Text is never
    hard-wrapped (soft_wrap): a message piped to a file stays on one line."""
    from rich.console import Console

    env = os.environ if environ is None else environ
    columns = env.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and int(columns) > 0 else None

    def make(stream: TextIO, stderr: bool) -> Console:
        return Console(stderr=stderr, width=width or (None if stream.isatty() else 160), soft_wrap=True)

    return make(sys.stdout, False), make(sys.stderr, True)


def fail(json_wanted: bool, err: Console, message: str, kind: str) -> int:
    """An error that stopped the command: JSON on stdout with --json (a script reads one stream),
    else a line on stderr; returns the exit status for it."""
    if json_wanted:
        print(json.dumps({"status": "error", "error": kind, "message": message}, indent=2))
    else:
        from rich.markup import escape

        err.print(f"[red]error:[/] {escape(message)}", highlight=False)
    return EXIT_USAGE
