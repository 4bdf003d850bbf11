"""The suite's numbers (suite_table.py): KernelBench's fast_p over all problems of a level,
geometric-mean speedups over the correct ones, refusals by reason, and no invented figures."""

from __future__ import annotations

import json
import math

import pytest

from kernelopt_mcp.suite_table import ProblemRecord, render_markdown, summarize, to_json

NEEDS_GPU = "not measured: needs the GPU reference runner"


def _level1() -> list[ProblemRecord]:
    return [
        # correct, 3x eager, 1.5x compile
        ProblemRecord("1_A.py", 1, True, status="ok", ours_ms=1.0, eager_ms=3.0, compile_ms=1.5),
        # correct, 0.5x eager (slower), compile could not run
        ProblemRecord("2_B.py", 1, True, status="ok", ours_ms=2.0, eager_ms=1.0,
                      compile_note="torch.compile failed: X"),
        # wrong, yet "fast": never counts
        ProblemRecord("3_C.py", 1, True, status="mismatch", ours_ms=0.1, eager_ms=5.0, compile_ms=5.0),
        ProblemRecord("4_D.py", 1, False, refusal="forward uses randomness (dropout in training mode)"),
        ProblemRecord("5_E.py", 1, False, refusal="forward uses randomness (dropout in training mode)"),
        ProblemRecord("6_F.py", 1, True),  # imported, no solution evaluated
    ]


def test_fast_p_is_over_every_problem_of_the_level() -> None:
    [s] = summarize(_level1())
    assert (s.problems, s.imported, s.evaluated, s.correct) == (6, 4, 3, 2)
    assert s.correct_pct == pytest.approx(100 * 2 / 6)
    assert s.fast["eager"] == {0: pytest.approx(2 / 6), 1: pytest.approx(1 / 6), 2: pytest.approx(1 / 6)}
    assert s.fast["compile"] == {0: pytest.approx(1 / 6), 1: pytest.approx(1 / 6), 2: 0.0}
    assert s.geomean_speedup["eager"] == pytest.approx(math.sqrt(3.0 * 0.5))
    assert s.geomean_speedup["compile"] == pytest.approx(1.5)
    assert s.missing_time == {"eager": 0, "compile": 1}
    assert s.refusals == {"forward uses randomness (dropout in training mode)": 2}


def test_strictly_more_than_p_times_faster() -> None:
    [s] = summarize([ProblemRecord("a", 2, True, status="ok", ours_ms=1.0, eager_ms=2.0)])
    assert s.fast["eager"] == {0: 1.0, 1: 1.0, 2: 0.0}  # exactly 2x is not fast_2


def test_unmeasured_baselines_are_not_numbers() -> None:
    records = [ProblemRecord(f"{i}_P.py", 2, True, status="ok", ours_ms=1.0, eager_note=NEEDS_GPU,
                             compile_note=NEEDS_GPU)
               for i in range(3)]
    [s] = summarize(records)
    assert s.correct == 3 and s.fast["eager"] == {0: None, 1: None, 2: None} and s.geomean_speedup["eager"] is None
    table = render_markdown(records)
    assert "| 2 | 3 | 3 | 3 (100.0%) | not measured | not measured |" in table
    assert f"- {NEEDS_GPU}" in table and "| 0.0%" not in table


def test_a_run_that_only_times_the_baselines_claims_no_fast_p_and_counts_what_it_timed() -> None:
    """No solution evaluated (``kernelopt kernelbench`` without --solutions): fast_p is not 0% but
    "no solutions" (null in JSON), and the baselines' coverage per level is stated."""
    records = [ProblemRecord("1_A.py", 1, True, eager_ms=2.0, compile_ms=1.0),
               ProblemRecord("2_B.py", 1, True, eager_ms=3.0, compile_note="torch.compile failed: X"),
               ProblemRecord("3_C.py", 1, True, eager_note=NEEDS_GPU, compile_note=NEEDS_GPU),
               ProblemRecord("4_D.py", 1, False, refusal="forward uses randomness")]
    [s] = summarize(records)
    assert s.evaluated == 0 and s.timed == {"eager": 2, "compile": 1}
    assert s.fast == {"eager": {0: None, 1: None, 2: None}, "compile": {0: None, 1: None, 2: None}}
    table = render_markdown(records)
    assert "| 1 | 4 | 3 | 0 (0.0%) | no solutions | no solutions | no solutions | - |" in table
    assert "0.0%  |" not in table and "| 0.0% |" not in table
    assert "- level 1: eager timed on 2 of 3 imported problems, torch.compile on 1" in table
    assert "- torch.compile failed: X" in table and f"- {NEEDS_GPU}" in table
    assert json.loads(to_json(records))["levels"][0]["fast"]["eager"] == {"0": None, "1": None, "2": None}


def test_levels_table_and_json() -> None:
    records = [*_level1(), ProblemRecord("1_G.py", 2, True, status="ok", ours_ms=1.0, eager_ms=4.0, compile_ms=2.0)]
    table = render_markdown(records)
    assert table.splitlines()[0].startswith("| level | problems | imported | correct | fast_0 vs "
                                            "eager | fast_1 vs eager")
    assert "| 1 | 6 | 4 | 2 (33.3%) | 33.3% | 16.7% | 16.7% | 1.22x | 16.7% | 16.7% | 0.0% | 1.50x |" in table
    assert "| 2 | 1 | 1 | 1 (100.0%) | 100.0% | 100.0% | 100.0% | 4.00x |" in table
    assert "- 2 x forward uses randomness (dropout in training mode)" in table
    assert "| 4_D.py | 1 | refused: forward uses randomness" in table and "| 6_F.py | 1 | not evaluated |" in table
    data = json.loads(to_json(records))
    assert [lv["level"] for lv in data["levels"]] == [1, 2]
    assert data["levels"][1]["fast"]["eager"] == {"0": 1.0, "1": 1.0, "2": 1.0}
    first = data["problems"][0]
    assert first["correct"] and first["speedup_eager"] == 3.0 and first["speedup_compile"] == 1.5
    assert "more than p times faster" in data["definitions"]["fast_p"]


def test_the_report_page_shows_the_tables_figures_and_a_plot_of_the_speedups() -> None:
    """report.html: the level table's cells, every problem's row, the refusals and the baseline
    notes, a plot where a correct problem has a speedup; self-contained (its policy fetches and runs
    nothing) and a problem's own name cannot inject markup."""
    import re

    from kernelopt_mcp.suite_report import render_html
    from kernelopt_mcp.suite_table import level_table

    records = [*_level1(), ProblemRecord("7_<script>alert(1)</script>.py", 2, True, status="ok", ours_ms=1.0,
                                         eager_ms=0.8, compile_ms=0.5)]
    page = render_html(records, "/runs/kb")
    assert "default-src 'none'" in page and "<script>" not in page and "&lt;script&gt;alert(1)" in page
    _, rows = level_table(records)
    cells = re.findall(r'<td class="num">([^<]*)</td>', page.split('<section id="levels">')[1].split("</section>")[0])
    assert cells == [c for row in rows for c in row] and len(rows) == 2
    assert "50.0%" not in cells and "33.3%" in cells  # level 1: 2 of 6 correct
    problems = page.split('<section id="problems">')[1]
    assert problems.count("<tr>") == len(records) + 1
    assert '<td class="ok">ok</td>' in problems and '<td class="bad">mismatch</td>' in problems
    assert '<td class="bad">refused: forward uses randomness (dropout in training mode)</td>' in problems
    assert '<td class="muted">not evaluated</td>' in problems
    assert "2 x forward uses randomness" in page and "torch.compile failed: X" in page
    speedups = page.split('<section id="speedups">')[1].split("</section>")[0]
    assert speedups.count("<svg") == 1 and "1_A.py" in speedups and "3_C.py" not in speedups  # correct ones only
    assert "/runs/kb" in page.split("<footer")[1]


def test_the_report_page_without_a_speedup_says_so() -> None:
    from kernelopt_mcp.suite_report import render_html

    page = render_html([ProblemRecord("1_A.py", 1, True, status="ok", ours_ms=1.0),
                        ProblemRecord("2_B.py", 1, False, refusal="r")], "out")
    assert "<svg" not in page and "No correct problem has a baseline time" in page
