"""The CLI's rough edges of issue 19: file outputs with --json, -O with a dash value, output that is
not hard-wrapped, JSON errors, one compile JSON shape, help text, ISO times, python -m."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelopt_mcp.cli import build_parser, main
from kernelopt_mcp.compile_report import CompileOutput

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("KERNELOPT_CACHE", str(cache))
    return cache


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process with stdout and stderr piped (not terminals)."""
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "kernelopt_mcp", *args], check=False, capture_output=True, text=True, env=full,
        cwd=REPO, timeout=120,
    )


def test_compile_json_writes_the_ptx_and_cubin_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ptx, cubin = tmp_path / "k.ptx", tmp_path / "k.cubin"
    src = str(REPO / "workloads/vector_add/initial.cu")
    assert main(["compile", src, "--arch", "sm_90", "--json", "--ptx", str(ptx), "--cubin", str(cubin)]) == 0
    json.loads(capsys.readouterr().out)
    assert ".entry vector_add" in ptx.read_text()
    assert cubin.read_bytes()[:4] == b"\x7fELF"


def test_option_flag_takes_a_value_that_starts_with_a_dash(capsys: pytest.CaptureFixture[str]) -> None:
    src = str(REPO / "workloads/vector_add/initial.cu")
    for argv in (["-O", "--use_fast_math"], ["-O=--use_fast_math"], ["--option", "--use_fast_math"]):
        assert main(["compile", src, "--arch", "sm_90", *argv, "-O", "-lineinfo", "--json"]) == 0, argv
        assert json.loads(capsys.readouterr().out)["options"] == ["--use_fast_math", "-lineinfo"]
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert "-O --use_fast_math" in " ".join(sub.choices["compile"].format_help().split())  # the help says so


def test_compile_json_is_the_mcp_tools_shape_with_the_full_hash(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", str(REPO / "workloads/sgemm/reference.cu"), "--arch", "sm_90", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == set(CompileOutput.model_fields)
    CompileOutput.model_validate(out)
    assert out["kernels"]["sgemm"]["registers"] > 0 and out["arch_from"] == "argument"
    assert len(out["source_hash"]) == 16 and len(out["source_sha256"]) == 64
    assert out["source_sha256"].startswith(out["source_hash"])


def test_json_errors_are_json_on_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", str(tmp_path / "missing.cu"), "--json"]) == 2
    captured = capsys.readouterr()
    err = json.loads(captured.out)
    assert err["status"] == "error" and "missing.cu" in err["message"] and captured.err == ""
    src = str(REPO / "workloads/vector_add/initial.cu")
    assert main(["compile", src, "--arch", "sm_90", "-O", "-rdc=true", "--json"]) == 2
    err = json.loads(capsys.readouterr().out)
    assert err["error"] == "OptionError" and "not allowed" in err["message"]
    assert main(["evaluate", "no_such_workload", "--json"]) == 2
    assert "known:" in json.loads(capsys.readouterr().out)["message"]


def test_piped_output_is_not_hard_wrapped_and_honours_columns() -> None:
    src = str(REPO / "workloads/vector_add/initial.cu")
    done = _run("compile", src, "--arch", "sm_90", "--option=-rdc=true")
    assert done.returncode == 2
    # the whole message (well over 160 characters) on one line
    line = next(x for x in done.stderr.splitlines() if "not allowed" in x)
    assert len(line) > 160 and line.rstrip().endswith("chosen for you)")
    wide = _run("workloads")
    narrow = _run("workloads", env={"COLUMNS": "90"})
    assert max(map(len, wide.stdout.splitlines())) > 90
    assert max(map(len, narrow.stdout.splitlines())) <= 90


def test_every_json_flag_has_help_and_docs_takes_no_gpu_flags() -> None:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    seen = 0
    for name, parser in sub.choices.items():
        for action in parser._actions:
            if "--json" in action.option_strings:
                seen += 1
                assert action.help, f"`kernelopt {name} --json` has no help text"
    assert seen >= 7
    docs = sub.choices["docs"]
    flags = {f for a in docs._actions for f in a.option_strings}
    assert "--harness" not in flags and "--device" not in flags


def _parsers(parser: argparse.ArgumentParser,
             path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    out = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _parsers(sub, (*path, name))
    return out


def test_every_command_prints_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse formats help strings with %: a bare '%' in one (e.g. "at most 0.3%") makes that
    command's --help a traceback (`kernelopt evaluate --help` and `tune --help` were)."""
    from kernelopt_agent.entry import commands
    from kernelopt_agent.entry import main as kernelopt_main  # the `kernelopt` console script

    parsers = _parsers(build_parser(commands()))
    assert len(parsers) >= 14
    for path, parser in parsers:
        assert "usage:" in parser.format_help(), path
    for argv in (["optimize"], ["graph"], ["runs"], ["runs", "list"], ["runs", "show"], ["runs", "report"]):
        with pytest.raises(SystemExit) as exit_:
            kernelopt_main([*argv, "--help"])
        assert exit_.value.code == 0, argv
        assert "usage:" in capsys.readouterr().out, argv


def test_runs_list_json_times_are_iso_utc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kernelopt_agent.cli import main as agent_main

    run = tmp_path / "results" / "run-001"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"status": "finished",
                                                  "timings": {"started": 1764559800.5, "wall_s": 3}}))
    assert agent_main(["runs", "list", "--results-dir", str(tmp_path / "results"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["started"] == "2025-12-01T03:30:00Z"


def test_python_dash_m_runs_the_cli() -> None:
    done = _run("--version")
    assert done.returncode == 0 and done.stdout.startswith("kernelopt ")
    done = _run("schema")
    assert json.loads(done.stdout)["title"] == "kernelopt workload"


def test_compile_of_a_fifo_fails_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `kernelopt compile FIFO` waited for a writer forever (Path.read_text): the CLI reads kernels
    # and launch files through the same hardened reader as the server (regular files only)
    fifo = tmp_path / "k.cu"
    os.mkfifo(fifo)
    assert main(["compile", str(fifo), "--json"]) == 2
    assert "not a regular file" in json.loads(capsys.readouterr().out)["message"]
