"""PyTorch eager and ``torch.compile`` beside a candidate's result: the views the CLI prints and the
MCP ``benchmark`` tool returns for an imported PyTorch problem (``torch_baseline``). What times
them and how: :mod:`kernelopt_mcp.torch_baseline`; this module holds only the records, so a
result view can name them without loading the timing machinery."""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = ["COMPILE_MODE", "BaselineTiming", "CaseComparison", "TorchComparison"]

COMPILE_MODE = "default"  # torch.compile(model) as called: no mode=, no options


class BaselineTiming(BaseModel):
    """One baseline's times on one case, summarized as the harness summarizes a candidate's."""

    median_ms: float
    iqr_ms: float
    cv: float = Field(description="coefficient of variation (stdev / mean)")
    samples: int
    noisy: bool = False
    noisy_reason: str | None = None


class CaseComparison(BaseModel):
    case: str
    ours_ms: float | None = None
    eager: BaselineTiming | None = None
    compile: BaselineTiming | None = None
    speedup_eager: float | None = Field(None, description="eager's median / ours")
    speedup_compile: float | None = Field(None, description="torch.compile's median / ours")
    eager_note: str | None = None
    compile_note: str | None = None
    cached: bool = False


class TorchComparison(BaseModel):
    """A candidate's performance cases beside PyTorch eager and ``torch.compile``: per case and
    as geometric means (ours: the result's ``score_ms``), with the speedups (baseline / ours)."""

    mode: str = COMPILE_MODE
    torch_version: str | None = None
    device_name: str | None = None
    cases: list[CaseComparison] = Field(default_factory=list)
    ours_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    eager_note: str | None = None
    compile_note: str | None = None
    note: str | None = None
    cached: bool = Field(False, description="every case's baselines came from the cache")

    def text(self) -> str:
        """A few lines for the terminal."""
        if not self.cases:
            return self.note or "PyTorch baselines: not measured"
        head = f"PyTorch {self.torch_version or '?'} on {self.device_name or '?'}"
        lines = [f"{head} (torch.compile mode {self.mode}{', cached' if self.cached else ''}):"]
        lines.append("  eager: " + (_pair(self.eager_ms, self.speedup_eager) if self.eager_ms
                                    else (self.eager_note or "not measured")))
        lines.append("  torch.compile: " + (_pair(self.compile_ms, self.speedup_compile) if self.compile_ms
                                            else (self.compile_note or "not measured")))
        if self.note:
            lines.append(f"  note: {self.note}")
        return "\n".join(lines)


def _pair(ms: float, speedup: float | None) -> str:
    return f"{ms:.4g} ms" + (f", ours {speedup:.2f}x faster" if speedup and speedup >= 1 else
                             f", ours {1 / speedup:.2f}x slower" if speedup else "")
