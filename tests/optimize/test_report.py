"""The run report (report.html): written at the end of every `kernelopt optimize` run and by
`kernelopt runs report`, one self-contained page. The run is a real one: the scripted model on
loopback and kernelopt-mcp over stdio with the pretend H200 of tests/fakegpu.py (plus the stub ncu
of test_profiler, so candidates carry profiles, and a proposal with tunables, so a tuning table).

The browser test loads the page in a real headless Chromium (Playwright): every section renders,
every plot has a size, no script error, nothing fetched but the page itself. It skips where
Playwright or a Chromium is missing (docs/optimize.md, "Run report", says how to get both). With
KO_REPORT_SCREENSHOT=FILE it also saves the top of the page as a PNG (docs/report.png, shown in
the README and docs/optimize.md).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakegpu import kernel, write_harness, write_tiny_workload
from scripted_model import ScriptedModel
from test_optimize import REPO, SECRET, SYNTAX_ERROR, TWO_PERF, proposal
from test_profiler import STUB_CSV, STUB_NCU

from kernelopt_agent.cli import main as agent_main
from kernelopt_agent.report import SECTIONS, finish_report, load_candidates, render_report, write_report
from kernelopt_agent.runs import load_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tune"
BETTER = kernel("MS:big_a=0.05;big_b=0.08;")
BEST = kernel("MS:big_a=0.03;big_b=0.05;")


def tunable_answer() -> dict[str, Any]:
    launch = {"default": {"grid": ["ceil_div(n, BLOCK * UNROLL)"], "block": ["BLOCK"],
                          "shared_bytes": "0"}, "cases": []}
    tunables = {"params": [{"name": "BLOCK", "values": ["32", "64", "128", "256"]},
                           {"name": "UNROLL", "values": ["1", "2", "4"]}], "constraints": ["BLOCK * UNROLL >= 64"],
                "defaults": [{"name": "BLOCK", "value": "256"}, {"name": "UNROLL", "value": "4"}]}
    return {"content": json.dumps({"rationale": "unroll and tune", "source": (FIXTURES / "add.cu").read_text(),
                                   "launch": launch, "compile_options": [], "tunables": tunables})}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One optimizer run (module-wide: it takes seconds): a compile error, a wrong kernel, two
    improvements, a tuned proposal, an Nsight profile of each valid candidate."""
    tmp = tmp_path_factory.mktemp("report")
    harness = write_harness(tmp, "fake")
    extra = write_tiny_workload(tmp / "extra")
    write_tiny_workload(extra, TWO_PERF)
    ncu = tmp / "bin" / "ncu"
    ncu.parent.mkdir()
    (tmp / "stub_ncu.py").write_text(STUB_NCU)
    ncu.write_text(f"#!/bin/sh\nexec {sys.executable} {tmp / 'stub_ncu.py'} \"$@\"\n")
    ncu.chmod(0o755)
    (tmp / "stub.csv").write_text(STUB_CSV)
    script = [proposal(SYNTAX_ERROR, "vectorize"), proposal(kernel("WRONG"), "fix the typo"),
              proposal(BETTER, "two elements per thread"), proposal(BEST, "four elements per thread"), tunable_answer()]
    with pytest.MonkeyPatch.context() as mp, ScriptedModel(script) as model:
        mp.chdir(tmp)
        for key, value in {"OPENAI_API_KEY": SECRET, "KERNELOPT_WORKLOADS": str(extra), "KERNELOPT_DOCS_OFFLINE": "1",
                           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "clients")]), "KERNELOPT_NCU": str(ncu),
                           "KERNELOPT_CACHE": str(tmp / "cache"), "KO_STUB_CSV": str(tmp / "stub.csv"),
                           "KO_STUB_LOG": str(tmp / "stub_calls.jsonl"), "KO_STUB_NCU": "ok"}.items():
            mp.setenv(key, value)
        mp.delenv("OPENAI_BASE_URL", raising=False)
        code = agent_main(["optimize", "--harness", str(harness), "--workspace", str(tmp / "ws"), "--results-dir",
                           str(tmp / "results"), "--iterations", "3", "--warmup", "1", "--quiet", "--base-url",
                           model.url, "--workload", "tiny2", "--max-iterations", "5", "--use-nsight",
                           "--tune-budget", "4"])
    assert code == 0 and not model.steps
    yield tmp / "results" / "run-001"


def sections(page: str) -> dict[str, str]:
    return dict(re.findall(r'<section id="(\w+)">(.*?)</section>', page, re.DOTALL))


def test_every_run_ends_with_its_report(run: Path) -> None:
    summary = json.loads((run / "summary.json").read_text())
    assert summary["files"]["report"] == "report.html" and not summary["notes"]
    page = (run / "report.html").read_text()
    assert list(sections(page)) == list(SECTIONS)
    assert "could not be drawn" not in page
    # self-contained: no script, no stylesheet or image to fetch, no link off the page; the policy forbids both
    assert "<script" not in page and "<link" not in page and "<img" not in page
    assert not re.findall(r'(?:src|href)="(?!#|data:image/png;base64,)', page)  # (the heatmap's cells: an inline PNG)
    assert "default-src 'none'" in page
    assert SECRET not in page


def test_the_report_shows_what_the_run_recorded(run: Path) -> None:
    page = sections((run / "report.html").read_text())
    summary = json.loads((run / "summary.json").read_text())
    best = summary["best"]["label"]
    assert best == "005-it4"
    labels = sorted(p.name for p in (run / "candidates").iterdir())
    assert labels == ["000-reference", "001-initial", "002-it1", "003-it2-repair", "004-it3-repair",
                      "005-it4", "006-it5"]
    # overview: the best and its speedup over the reference
    assert best in page["overview"] and f"{summary['best']['speedup_vs_reference']:.2f}x" in page["overview"]
    # score over the run and the heatmap are plots
    assert page["score"].count("<svg") == 1 and "best so far" in page["score"]
    assert page["heatmap"].count("<svg") == 1 and "<?xml" not in page["heatmap"]
    # every candidate with its verdict, its launch, its profile and the diff against the best before it
    cands = page["candidates"]
    for label in labels:
        assert f'id="c-{label}"' in cands
    assert re.search(r'c-002-it1.*?Verdict:</b> <span class="bad">compile_error</span> compile error: line 2',
                     cands, re.DOTALL)
    assert re.search(r'c-003-it2-repair.*?<span class="bad">mismatch</span>', cands, re.DOTALL)
    diff = re.search(r'id="c-005-it4".*?Diff against 004-it3-repair \(the best before it\)</h3>(.*?)</pre>',
                     cands, re.DOTALL)
    assert diff is not None
    assert ('<span class="del">-__device__ char ko_fake_mode[] = &quot;KO_FAKE_MS:big_a=0.05;big_b=0.08;&quot;;</span>'
            in diff[1])
    assert ('<span class="add">+__device__ char ko_fake_mode[] = &quot;KO_FAKE_MS:big_a=0.03;big_b=0.05;&quot;;</span>'
            in diff[1])
    assert "Diff against 001-initial" in cands.split('id="c-004-it3-repair"')[1].split("</details>")[0]
    assert re.search(r'id="c-005-it4".*?<h3>Launch</h3><pre class="wrap">\{&quot;launch&quot;: \{&quot;default&quot;',
                     cands, re.DOTALL)
    assert re.search(r'id="c-005-it4".*?Profile summary \(Nsight Compute, case big_\w\)</h3><pre>tiny2',
                     cands, re.DOTALL)
    assert "0.03 ms" in cands and "0.05 ms" in cands  # per-case medians in the table
    # tuning: the autotune summary, its plot and one row per measured configuration
    tuned = json.loads((run / "tuning" / "it5" / "autotune.json").read_text())["result"]
    assert "it5" in page["tuning"] and page["tuning"].count("<svg") == 1
    assert page["tuning"].count("<tr>") == 1 + tuned["counts"]["tried"]
    assert html.escape(json.dumps(tuned["best_params"])) in page["tuning"]
    # timing: one box-plot figure with a panel per performance case
    assert page["timing"].count("<svg") == 1 and "big_a" in page["timing"] and "big_b" in page["timing"]
    # provenance: device, driver, seed, options
    for text in ("NVIDIA H200 (fake)", "580.00", str(summary["workload"]["seed"]), "gpt-5-mini", "max_iterations"):
        assert text in page["provenance"], text


def test_previous_best_is_the_best_candidate_evaluated_before(run: Path) -> None:
    previous = {c.label: c.previous.label if c.previous else None
                for c in load_candidates(run, load_run(run)["candidates"])}
    assert previous == {"000-reference": None, "001-initial": "000-reference", "002-it1": "001-initial",
                        "003-it2-repair": "001-initial", "004-it3-repair": "001-initial", "005-it4": "004-it3-repair",
                        "006-it5": "005-it4"}


def test_runs_report_writes_it_for_a_named_or_the_newest_run(run: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out" / "page.html"
    assert agent_main(["runs", "report", str(run), "--output", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert list(sections(out.read_text())) == list(SECTIONS)
    copy = tmp_path / "results" / "run-004"
    shutil.copytree(run, copy)
    (copy / "report.html").unlink()
    assert agent_main(["runs", "report", "--results-dir", str(tmp_path / "results")]) == 0
    assert (copy / "report.html").is_file()
    assert agent_main(["runs", "report", "9", "--results-dir", str(tmp_path / "results")]) == 2
    assert "9: no such run directory" in capsys.readouterr().err


def test_an_interrupted_run_without_records_still_has_a_report(tmp_path: Path) -> None:
    run = tmp_path / "run-001"
    (run / "candidates" / "001-initial").mkdir(parents=True)
    (run / "candidates" / "001-initial" / "source.cu").write_text(kernel())
    (run / "config.json").write_text('{"workload": "tiny_add"}')
    page = render_report(run)
    parts = sections(page)
    assert list(parts) == list(SECTIONS) and "could not be drawn" not in page
    assert "no summary.json" in parts["overview"]
    assert 'id="c-001-initial"' in parts["candidates"]
    assert "nothing was tuned" in parts["tuning"] and "no valid candidate was timed" in parts["timing"]
    assert write_report(run) == run / "report.html"


def test_a_report_that_cannot_be_written_is_a_note_not_an_error(tmp_path: Path) -> None:
    data: dict[str, Any] = {"files": {}, "notes": []}
    finish_report(tmp_path / "missing", data)
    assert (data["files"] == {}
            and data["notes"] == [f"report: FileNotFoundError: {tmp_path / 'missing'}: no such run directory"])


# --- in a real browser ---------------------------------------------------------------------------

def _browser() -> tuple[Any, str | None]:
    """Playwright's sync API and a Chromium to drive (None: Playwright's own download)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright is not installed: pip install playwright (docs/optimize.md, 'Run report')")
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if found := shutil.which(name):
            return sync_playwright, found
    with sync_playwright() as p:
        if Path(p.chromium.executable_path).is_file():
            return sync_playwright, None
    pytest.skip("no Chromium: apt-get install chromium, or python -m playwright install chromium (docs/optimize.md, "
                "'Run report')")


def test_the_report_renders_in_headless_chromium(run: Path) -> None:
    sync_playwright, executable = _browser()
    url = (run / "report.html").resolve().as_uri()
    problems: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"] if os.geteuid() == 0 else [])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(url, wait_until="load")
            if shot := os.environ.get("KO_REPORT_SCREENSHOT"):  # the README's picture: docs/report.png
                page.screenshot(path=shot, full_page=True, clip={"x": 0, "y": 0, "width": 1280, "height": 1700})
            shown = page.evaluate("""() => [...document.querySelectorAll('section')].map(s => {
                const r = s.getBoundingClientRect(); return [s.id, r.width, r.height, s.querySelector('h2').innerText]; })""")  # noqa: E501
            plots = page.evaluate("""() => [...document.querySelectorAll('svg.plot')].map(s => {
                const r = s.getBoundingClientRect(); return [s.closest('section').id, r.width, r.height,
                s.querySelectorAll('path, text, use').length]; })""")
            page.click("a[href='#candidates']")
            best_open = page.is_visible("#c-005-it4 pre.diff")  # the best candidate opens with the page
            closed = page.is_visible("#c-004-it3-repair pre.diff")
            page.click("#c-004-it3-repair > summary")  # open another: its diff shows
            diff_visible = page.is_visible("#c-004-it3-repair pre.diff")
            page.click("#c-002-it1 > summary")
            verdict = page.inner_text("#c-002-it1 p")
        finally:
            browser.close()
    assert problems == []
    assert requests == [url]  # the page itself, nothing else
    assert [s[0] for s in shown] == list(SECTIONS) and [s[3] for s in shown] == list(SECTIONS.values())
    assert all(width > 300 and height > 40 for _, width, height, _ in shown), shown
    assert sorted(p[0] for p in plots) == ["heatmap", "score", "timing", "tuning"]
    assert all(width > 300 and height > 150 and elements > 20 for _, width, height, elements in plots), plots
    assert best_open and not closed and diff_visible
    assert verdict.startswith("Verdict: compile_error compile error: line 2")


def test_model_text_is_escaped_never_markup(tmp_path: Path) -> None:
    """Rationales, sources, messages and labels come from a model: shown as text, never as HTML."""
    run = tmp_path / "run-001"
    evil = '<script>alert(1)</script><img src=x onerror="alert(2)"></pre></details>'
    folder = run / "candidates" / "001-initial"
    folder.mkdir(parents=True)
    (folder / "source.cu").write_text(f"// {evil}\n" + kernel())
    event = {"event": "candidate", "index": 1, "label": "001-initial", "kind": "initial", "status": "mismatch",
             "valid": False, "rationale": evil, "message": evil}
    (run / "history.json").write_text(json.dumps([event]))
    (run / "summary.json").write_text(json.dumps({"status": "completed", "error": evil, "notes": [evil],
                                                  "workload": {"name": evil}}))
    page = render_report(run)
    assert "<script" not in page and "<img" not in page and "onerror=\"" not in page
    assert page.count(html.escape(evil)) >= 5  # title, error, note, verdict message, rationale (+ the source)


@pytest.mark.parametrize(("cost", "shown"), [(None, "(cost unknown)"), (0.0, "(~0.0000 USD)"), (0.25, "(~0.2500 USD)")])
def test_the_overview_says_an_unknown_cost_is_unknown(cost: float | None, shown: str) -> None:
    from kernelopt_agent.report import _overview

    page = _overview({"status": "completed", "tokens": {"total_tokens": 1234, "cost_usd": cost}}, [])
    assert f"1,234 {shown}" in page
