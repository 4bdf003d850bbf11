"""Live terminal progress (rich): a status line while the model thinks or the GPU runs, one line
per candidate (iteration, status, score, best so far, tokens), and a final table.

With --candidates N several activities run at once (model requests in flight, the GPU busy): the
one status line shows them all, started by the first and stopped by the last."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from .records import CandidateRecord


class Display:
    def __init__(self, console: Console | None = None, quiet: bool = False) -> None:
        self.console = console or Console()
        self.quiet = quiet
        self._status: Any = None
        self._active: list[str] = []  # activities under way, oldest first
        self.tokens = 0
        self.best = ""

    def info(self, message: str, style: str = "") -> None:
        if not self.quiet:
            text = escape(message)
            self.console.print(f"[{style}]{text}[/]" if style else text, highlight=False)

    def warn(self, message: str) -> None:
        self.info(f"warning: {message}", "yellow")

    @contextmanager
    def activity(self, message: str) -> Iterator[None]:
        """A spinner with the current activities (terminals only); server progress updates it."""
        if self.quiet or not self.console.is_terminal:
            yield
            return
        self._active.append(message)
        if self._status is None:
            self._status = self.console.status(self._line())
            self._status.start()
        else:
            self._status.update(self._line())
        try:
            yield
        finally:
            self._active.remove(message)
            if not self._active:
                self._status.stop()
                self._status = None
            else:
                self._status.update(self._line())

    def progress(self, message: str) -> None:
        if self._status is not None and self._active:
            self._status.update(self._line(f": {message}"))

    def _line(self, detail: str = "") -> str:
        tail = f" · best {self.best}" if self.best else ""
        now = self._active[-1] + detail if self._active else ""
        more = f" (+{len(self._active) - 1} more under way)" if len(self._active) > 1 else ""
        return escape(f"{now}{more}{tail} · {self.tokens:,} tokens")

    def candidate(self, rec: CandidateRecord, best: CandidateRecord | None, tokens: int) -> None:
        self.tokens = tokens
        if best is not None and best.score_ms:
            self.best = f"{best.label} {best.score_ms:.4g} ms"
        style = "green" if rec.valid else "red"
        score = f" score {rec.score_ms:.4g} ms" if rec.score_ms else ""
        versus = (([f"{rec.speedup:.2f}x vs reference"] if rec.speedup else [])
                  + ([rec.versus_pytorch()] if rec.versus_pytorch() else []))
        speed = f" ({', '.join(versus)})" if versus else ""
        where = ((f"iteration {rec.iteration}" + (f" candidate {rec.slot}" if rec.slot else ""))
                 if rec.iteration else rec.kind)
        self.info(
            f"[{where}] {rec.label}: {rec.status}{score}{speed} | best {self.best or '-'} | {tokens:,} tokens", style
        )
        if not rec.valid and rec.message:
            self.info(f"    {rec.message[:300]}", "dim")

    def final(self, records: list[CandidateRecord], best: CandidateRecord | None, perf_cases: list[str],
              summary: dict[str, Any]) -> None:
        if self.quiet:
            return
        if not records:  # nothing was evaluated: no empty table, no verdict on candidates that never existed
            self.info(f"{summary.get('run')}: no candidate was evaluated ({summary.get('status')})", "bold red")
            self.info(f"run directory: {summary.get('path')}")
            return
        table = Table(title=f"{summary.get('run')} · {summary.get('workload', {}).get('name')} · "
                      f"{summary.get('status')}")
        for col in ("candidate", "status", "score ms", "vs reference", *perf_cases):
            table.add_column(col, justify="left" if col in ("candidate", "status") else "right")
        for r in records:
            mark = " *" if best is not None and r is best else ""
            table.add_row(
                escape(r.label + mark), r.status, f"{r.score_ms:.4g}" if r.score_ms else "",
                f"{r.speedup:.2f}x" if r.speedup else "",
                *(f"{r.case_ms[c]:.4g}" if c in r.case_ms else "" for c in perf_cases),
            )
        self.console.print(table)
        tokens = summary.get("tokens", {})
        cost = tokens.get("cost_usd")
        if summary.get("model") is None:
            self.info("no model was asked")
        else:
            self.info(f"tokens: {tokens.get('total_tokens', 0):,} in {tokens.get('calls', 0)} model calls"
                      + (f", about {cost:.4f} USD" if cost is not None else ", cost unknown")
                      + (f" ({tokens['cost_note']})" if tokens.get("cost_note") else ""))
        if best is not None:
            self.info(f"best: {best.label}, score {best.score_ms:.4g} ms"
                      + (f", {best.speedup:.2f}x vs reference" if best.speedup else "")
                      + (f", {best.versus_pytorch()}" if best.versus_pytorch() else "")
                      + f" -> {summary.get('files', {}).get('best')}", "bold green")
        else:
            self.info("no candidate passed every case", "bold red")
        self.info(f"run directory: {summary.get('path')}")
