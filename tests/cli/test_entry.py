"""The ``kernelopt`` console script (clients/kernelopt_agent/entry.py): it enters through the client
package, runs optimize, graph and runs there and hands every other command to the library's CLI,
which lists the three in ``kernelopt -h`` through its generic ``extra_commands`` hook."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kernelopt_agent.entry import HELP, commands
from kernelopt_agent.entry import main as kernelopt_main
from kernelopt_mcp.cli import Command
from kernelopt_mcp.cli import main as library_main

REPO = Path(__file__).resolve().parents[2]


def _help(main: object, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["-h"])  # type: ignore[operator]
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_kernelopt_help_lists_the_orchestrator_commands(capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join(_help(kernelopt_main, capsys).split())  # argparse wraps the help lines
    for name, line in HELP.items():
        assert f"{name} {' '.join(line.split())}" in text, name
    for library_command in ("gpu", "compile", "evaluate", "tune", "schema"):
        assert library_command in text
    # the library's own command line knows nothing of them
    choices = set(re.search(r"\{([a-z,-]+)\}", _help(library_main, capsys)).group(1).split(","))  # type: ignore[union-attr]
    assert "evaluate" in choices and not choices & set(HELP)


def test_library_commands_pass_through(capsys: pytest.CaptureFixture[str]) -> None:
    assert kernelopt_main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "kernelopt workload"
    with pytest.raises(SystemExit) as exit_:
        library_main(["graph"])  # without the client, not a command
    assert exit_.value.code == 2 and "invalid choice: 'graph'" in capsys.readouterr().err


def test_orchestrator_commands_run_in_the_client(capsys: pytest.CaptureFixture[str]) -> None:
    assert kernelopt_main(["graph", "--no-nsight"]) == 0
    assert capsys.readouterr().out.startswith("flowchart TD")
    with pytest.raises(SystemExit) as exit_:
        kernelopt_main(["optimize", "-h"])
    assert exit_.value.code == 0 and "usage: kernelopt optimize" in capsys.readouterr().out
    assert set(commands()) == {"optimize", "graph", "runs"}


def test_extra_commands_get_the_arguments_after_their_name() -> None:
    seen: list[list[str]] = []

    def run(args: list[str]) -> int:
        seen.append(args)
        return 7

    assert library_main(["hello", "--loud", "x"], extra_commands={"hello": Command("say hello", run)}) == 7
    assert seen == [["--loud", "x"]]


def test_the_console_script_enters_through_the_client() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["kernelopt"] == "kernelopt_agent.entry:main"
    assert "kernelopt.commands" not in project.get("entry-points", {})


def test_a_missing_dependency_is_a_clear_error(tmp_path: Path) -> None:
    """Without openai, `kernelopt optimize` says what is missing and what to do (no traceback, no run
    directory); the library's commands still work."""
    code = ("import sys; sys.modules['openai'] = None; from kernelopt_agent.entry import main; "
            "sys.exit(main(sys.argv[1:]))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "clients"), str(REPO)])

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=120, check=False)

    done = run("optimize", "--workload", "vector_add", "--results-dir", str(tmp_path / "results"))
    assert done.returncode == 2, done.stderr
    assert "`kernelopt optimize` needs the openai package" in done.stderr and "pip install ." in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "results").exists()
    done = run("--version")
    assert done.returncode == 0 and done.stdout.startswith("kernelopt ")
