"""Comments and help text say why, not when: no issue numbers in the library's, the client's or the
harness's sources. The history lives in git (tests/ and bench/ may name the issue a measurement
was taken for)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = {
    REPO / "kernelopt_mcp": ("*.py", "*.cu"),
    REPO / "clients" / "kernelopt_agent": ("*.py",),
    REPO / "native_harness" / "src": ("*.cpp", "*.hpp"),
}
ISSUE = re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE)


def _issue_numbers(text: str) -> list[str]:
    return [m.group(0) for m in ISSUE.finditer(text)]


def test_no_issue_numbers_in_the_sources() -> None:
    files = [path for root, patterns in SOURCES.items() for pattern in patterns for path in sorted(root.rglob(pattern))]
    assert len(files) > 100
    found = {
        f"{path.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}": m.group(0)
        for path in files for text in [path.read_text(encoding="utf-8")] for m in ISSUE.finditer(text)
    }
    assert found == {}, "say why, not when (the issue is in git's history):"


def test_the_pattern_finds_issue_numbers_and_only_those() -> None:
    assert (_issue_numbers("overlap compiles (issue 17); see Issue #43 and issues 5")
            == ["issue 17", "Issue #43", "issues 5"])
    assert _issue_numbers("issue fewer, wider loads (4.2 cycles per issue)") == []
