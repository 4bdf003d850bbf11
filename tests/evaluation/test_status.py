"""The result statuses are one table (kernelopt_mcp.status): every member carries its value,
severity, meaning and cheat verdict, and every other view of them (the overall status of an
evaluation, the tools' manual, the orchestrator's rejection text, SECURITY.md's list) is read
from that table."""

from __future__ import annotations

import re
from pathlib import Path

from kernelopt_mcp.evaluation.outcomes import Status as OutcomeStatus
from kernelopt_mcp.evaluation.outcomes import worst
from kernelopt_mcp.status import CHEATS, STATUS_MEANING, Status

REPO = Path(__file__).resolve().parents[2]

# The overall status of an evaluation whose cases fail differently is the most serious one, in this order.
MOST_SERIOUS_FIRST = [
    "compile_error", "runtime_error", "timeout", "out_of_bounds_write", "input_modified", "sanitizer_error",
    "invalid_launch", "timed_mismatch", "mismatch", "nondeterministic", "inconsistent_timing", "impossible_time",
    "skipped", "ok",
]
CHEAT_VERDICTS = {"timed_mismatch", "inconsistent_timing", "impossible_time", "nondeterministic", "input_modified"}


def test_every_member_has_a_value_a_severity_a_meaning_and_a_cheat_flag() -> None:
    severities = []
    for status in Status:
        assert isinstance(status, str) and status == status.value and Status(status.value) is status
        assert re.fullmatch(r"[a-z_]+", status.value), status
        assert isinstance(status.severity, int)
        severities.append(status.severity)
        assert status.meaning and not status.meaning[0].isupper() and not status.meaning.endswith("."), status
        assert status.is_cheat is (status.cheat is not None)
        if status.is_cheat:
            assert status.cheat and status.cheat.endswith("."), status
    assert sorted(severities) == list(range(len(Status)))  # a strict order, no ties
    assert [s.value for s in sorted(Status, key=lambda s: s.severity)] == MOST_SERIOUS_FIRST
    assert {s.value for s in Status if s.is_cheat} == CHEAT_VERDICTS


def test_the_evaluation_picks_the_most_serious_status_by_the_table() -> None:
    assert OutcomeStatus is Status
    assert worst([]) is Status.ok
    for i, value in enumerate(MOST_SERIOUS_FIRST):
        less_serious = [Status(v) for v in MOST_SERIOUS_FIRST[i:]]
        assert worst(list(reversed(less_serious))) is Status(value)


def test_the_views_are_read_from_the_table() -> None:
    assert {s: s.meaning for s in Status if s is not Status.ok} == STATUS_MEANING
    assert list(STATUS_MEANING) == [s for s in Status if s is not Status.ok]  # the manual's order
    assert {s.value: s.cheat for s in Status if s.cheat is not None} == CHEATS
    from kernelopt_agent import prompts

    assert prompts.CHEATS is CHEATS
    text = prompts._task(_Record("c7", "impossible_time"), repair=True)  # type: ignore[arg-type]
    assert "was rejected (impossible_time)" in text and Status.impossible_time.cheat in text
    assert "Repair it" in prompts._task(_Record("c8", "mismatch"), repair=True)  # type: ignore[arg-type]


def test_security_md_names_exactly_the_cheat_verdicts() -> None:
    text = (REPO / "SECURITY.md").read_text()
    sentence = text[text.index("that the idea itself is not acceptable") - 200:]
    named = set(re.findall(r"`([a-z_]+)`", sentence[: sentence.index("that the idea itself")]))
    assert named == {s.value for s in Status if s.is_cheat}


class _Record:
    def __init__(self, label: str, status: str) -> None:
        self.label, self.status = label, status
