"""The command line's progress bar (kernelopt_mcp/progress_bar.py): on stderr with a count, the
total and an ETA; stdout stays pure JSON under --json; off when stderr is not a terminal unless
--progress asks for it. `kernelopt tune` and `evaluate` run on the pretend GPU of tests/fakegpu.py."""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

import pytest
from fakegpu import kernel, write_harness, write_tiny_workload
from rich.console import Console
from test_suite import kernelbench_dir

from kernelopt_mcp.cli import main
from kernelopt_mcp.progress_bar import ProgressBar, progress_wanted

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tune"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_shows_the_count_the_total_and_an_eta() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=140, color_system=None)
    with ProgressBar("tuning sgemm", enabled=True, console=console) as bar:
        assert bar.active and not bar.shown  # drawn at the first progress, not before
        bar.step("configuration {'BLOCK': 32}", 3, 0)  # the total not known yet
        assert bar.shown
        bar.step("configuration {'BLOCK': 64}", 4, 24)
        bar.log("    a line above the bar")
    text = buffer.getvalue()
    assert "tuning sgemm" in text and "4/24" in text and "eta" in text
    assert "BLOCK': 64" in text and "a line above the bar" in text
    assert not bar.shown


def test_a_disabled_bar_draws_nothing_and_takes_every_call() -> None:
    buffer = io.StringIO()
    with ProgressBar("x", 3, enabled=False, console=Console(file=buffer)) as bar:
        bar.step("a", 1, 3)
        bar.advance("b")
        bar.log("never printed")
    assert buffer.getvalue() == "" and not bar.shown and not bar.active and bar.done == 2


def test_on_for_a_terminal_off_for_a_pipe_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm")
    assert progress_wanted(None, _Tty()) is True
    assert progress_wanted(None, io.StringIO()) is False  # a log, a pipe, CI
    assert progress_wanted(True, io.StringIO()) is True  # --progress
    assert progress_wanted(False, _Tty()) is False  # --no-progress
    monkeypatch.setenv("TERM", "dumb")
    assert progress_wanted(None, _Tty()) is False


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    workload = write_tiny_workload(tmp_path / "wl") / "tiny_add"
    return {"harness": str(write_harness(tmp_path, "fake")), "workload": str(workload)}


def test_tune_json_progress_draws_on_stderr_and_keeps_stdout_json(
    tmp_path: Path, fake: dict[str, str], capsys: pytest.CaptureFixture[str],
) -> None:
    """`kernelopt tune --json` printed nothing for its whole budget; with --progress the bar counts
    configurations on stderr, and stdout is the result alone."""
    argv = ["tune", fake["workload"], str(FIXTURES / "add.json"), "--harness", fake["harness"], "--iterations", "3",
            "--warmup", "0", "-o", str(tmp_path / "run"), "--json", "--budget-evals", "5"]
    assert main([*argv, "--progress"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)  # pure JSON
    assert result["counts"]["measured"] == 5
    assert "tuning tiny_add" in captured.err and "5/5" in captured.err

    # stderr is not a terminal here: without --progress, no bar (logs stay clean)
    assert main([*argv[:-2], "-o", str(tmp_path / "run2"), "--json", "--budget-evals", "5", "--no-cache"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)
    assert "tuning tiny_add" not in captured.err


def test_evaluate_counts_kernels(tmp_path: Path, fake: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    kernels = []
    for name, body in (("a", "FAST"), ("b", "WRONG"), ("c", "FAST")):
        path = tmp_path / f"{name}.cu"
        path.write_text(kernel(body))
        kernels.append(str(path))
    argv = ["evaluate", fake["workload"], *kernels, "--harness", fake["harness"], "--warmup", "1", "--iterations", "3",
            "--json", "--progress"]
    assert main(argv) == 1  # b fails
    captured = capsys.readouterr()
    assert [r["candidate"] for r in json.loads(captured.out)] == ["a", "b", "c"]
    assert "evaluating on tiny_add" in captured.err and "3/3" in captured.err
    # without --json and with the bar on, the step lines go into the bar, not stdout
    assert main(argv[:-2] + ["--progress"]) == 1
    captured = capsys.readouterr()
    assert "…" not in captured.out and "3/3" in captured.err


def test_import_torch_shows_its_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`kernelopt import-torch --json --progress`: the five steps on stderr, the result alone on stdout."""
    pytest.importorskip("torch", reason="torch is not installed (pip install torch): PyTorch problems cannot be run")
    problem = Path(__file__).parents[1] / "torch_problems" / "vector_add.py"
    assert main(["import-torch", str(problem), "-o", str(tmp_path / "va"), "--json", "--progress"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["status"] == "ok"
    assert "importing vector_add.py" in captured.err and "5/5" in captured.err and "imported" in captured.err


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None,
                    reason="torch is installed here: the import would take minutes")
def test_kernelbench_counts_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without torch every problem is refused at once: the bar still counts them, and --json's stdout
    is results.json."""
    root = kernelbench_dir(tmp_path / "kb")
    assert main(["kernelbench", str(root), "--level", "1", "2", "-o", str(tmp_path / "out"), "--json",
                 "--progress"]) == 0
    captured = capsys.readouterr()
    assert len(json.loads(captured.out)["problems"]) == 4
    assert "kernelbench" in captured.err and "4/4" in captured.err
