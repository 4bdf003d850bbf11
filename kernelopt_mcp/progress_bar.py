"""One progress bar for the command line's long loops: configurations tuned, kernels evaluated,
import steps, KernelBench problems (``kernelopt tune``, ``evaluate``, ``import-torch``,
``kernelbench``).

The bar is drawn with rich on stderr, so stdout stays what the command prints (pure JSON under
``--json``), and it shows the count, the budget, the elapsed time and rich's ETA. It is on when
stderr is a terminal and off otherwise, so logs and CI output stay clean; ``--progress`` turns it
on anyway and ``--no-progress`` off (:func:`progress_wanted`). While it is shown, the command's
step messages go into the bar's line instead of being printed one per line; when it is off, the
commands print those lines as they always did.
"""

from __future__ import annotations

import argparse
import os
import sys
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # rich is imported when a bar is drawn
    from rich.console import Console
    from rich.progress import Progress, TaskID

#: at most this many characters of a step message in the bar's line (the rest is cut with "…")
MESSAGE_CHARS = 60


def add_progress_flag(parser: argparse.ArgumentParser) -> None:
    """``--progress`` / ``--no-progress`` on a command's parser (the default, None, follows stderr)."""
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="a progress bar with ETA on stderr (default: when stderr is a terminal); stdout is "
                        "unchanged, pure JSON under --json")


def progress_wanted(flag: bool | None, stream: TextIO | None = None) -> bool:
    """Whether to draw the bar: ``flag`` when given (--progress / --no-progress), else whether
    ``stream`` (stderr) is a terminal that is not TERM=dumb."""
    if flag is not None:
        return flag
    stream = sys.stderr if stream is None else stream
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False
    return tty and os.environ.get("TERM") != "dumb"


class ProgressBar:
    """A count against a total with ETA, drawn on stderr from the first progress to the end of the
    ``with`` block; does nothing when not ``enabled`` (every method may be called either way).

    Args:
        description: what is counted, e.g. "tuning sgemm" (shown before the bar).
        total: the count that means done (None or 0: not known yet; :meth:`update` may give it).
        enabled: draw it (see :func:`progress_wanted`).
        console: where to draw (default: a stderr console); tests pass one writing to a buffer.
    """

    def __init__(self, description: str, total: int | None = None, *, enabled: bool = True,
                 console: Console | None = None) -> None:
        self.description = description
        self.total = total or None
        self.enabled = enabled
        self._console = console
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._entered = False
        self.done = 0
        self.message = ""

    def __enter__(self) -> ProgressBar:
        self._entered = True
        return self

    def _start(self) -> None:
        """Draw the bar: at the first progress, so a command that fails before any (no GPU, a bad
        argument) prints its error without an empty bar above it."""
        from rich.console import Console
        from rich.markup import escape
        from rich.progress import (
            BarColumn,
            Column,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        # on a terminal rich measures it; forced on elsewhere (--progress into a log), 120 columns
        console = self._console or Console(stderr=True, width=None if progress_wanted(None) else 120)
        # the count and the times keep their width; the step message gets what is left, cut with "…"
        message = Column(no_wrap=True, overflow="ellipsis", ratio=1)
        # never redirect stdout into the bar's console: under --json stdout must stay the command's
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(bar_width=24),
            MofNCompleteColumn(table_column=Column(min_width=5)),
            TimeElapsedColumn(table_column=Column(min_width=7)), TextColumn("eta"),
            TimeRemainingColumn(table_column=Column(min_width=7)),
            TextColumn("[dim]{task.fields[message]}", table_column=message),
            console=console, transient=False, redirect_stdout=False, redirect_stderr=False, expand=True,
        )
        self._progress.start()
        self._task = self._progress.add_task(escape(self.description), total=self.total, message="")

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._entered = False
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    @property
    def active(self) -> bool:
        """Whether progress goes to the bar (enabled, inside the ``with`` block): the command then
        leaves its step messages to it instead of printing them."""
        return self.enabled and self._entered

    @property
    def shown(self) -> bool:
        """Whether the bar is on screen now (from the first progress to the end of the block)."""
        return self._progress is not None

    def update(self, done: int | None = None, total: int | None = None, message: str | None = None) -> None:
        """Set the count (``done``), the total where it became known (0 or None: unchanged) and the
        step message shown after the bar."""
        if done is not None:
            self.done = done
        if total:
            self.total = total
        if message is not None:
            self.message = message
        if self.active and self._progress is None:
            self._start()
        if self._progress is not None and self._task is not None:
            from rich.markup import escape

            shown = self.message if len(self.message) <= MESSAGE_CHARS else self.message[: MESSAGE_CHARS - 1] + "…"
            self._progress.update(self._task, completed=self.done, total=self.total, message=escape(shown))

    def advance(self, message: str | None = None) -> None:
        """One more done."""
        self.update(self.done + 1, message=message)

    def step(self, message: str, done: int, total: int) -> None:
        """A ``progress(message, done, total)`` callback (the library's ProgressFn shape) that moves the bar."""
        self.update(done, total, message)

    def log(self, text: str) -> None:
        """A line printed above the bar (on stderr); nothing when the bar is off."""
        if self.active and self._progress is None:
            self._start()
        if self._progress is not None:
            self._progress.console.print(text, highlight=False, markup=False, soft_wrap=True)

