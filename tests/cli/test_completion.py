"""Shell completion (kernelopt_mcp/completion.py): `kernelopt completion bash|zsh|tcsh` and
`kernelopt-mcp --completion SHELL` print scripts generated from the real parsers by shtab. The bash
script is checked by `bash -n` and then driven as bash drives it (COMP_WORDS, the completion
function, COMPREPLY): subcommands, the orchestrator's commands and their flags, workload names."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kernelopt_agent.entry import main as kernelopt
from kernelopt_mcp.cli_parser import COMMANDS
from kernelopt_mcp.completion import workload_names
from kernelopt_mcp.server.entry import main as kernelopt_mcp

BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="bash is not installed")


def script(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], run: object = kernelopt) -> Path:
    assert run(argv) == 0  # type: ignore[operator]
    path = tmp_path / "completion.sh"
    path.write_text(capsys.readouterr().out)
    return path


def complete(path: Path, words: list[str], function: str = "_shtab_kernelopt") -> list[str]:
    """What bash offers for the last of ``words``, as it would on Tab."""
    array = " ".join(f"'{w}'" for w in words)
    line = " ".join(words)
    program = (f"source '{path}'; COMP_WORDS=({array}); COMP_CWORD={len(words) - 1}; COMP_LINE='{line}'; "
               f"COMP_POINT={len(line)}; {function}; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    done = subprocess.run([BASH or "bash", "-c", program], capture_output=True, text=True, timeout=60, check=True)
    return [w for w in done.stdout.splitlines() if w]


@needs_bash
def test_the_bash_script_parses_and_names_every_subcommand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = script(tmp_path, capsys, ["completion", "bash"])
    subprocess.run([BASH or "bash", "-n", str(path)], check=True, timeout=60)
    text = path.read_text()
    for name in [*COMMANDS, "optimize", "graph", "runs"]:
        assert name in text
    assert set(complete(path, ["kernelopt", ""])) >= {*COMMANDS, "optimize", "graph", "runs"}
    assert complete(path, ["kernelopt", "ev"]) == ["evaluate"]


@needs_bash
def test_bash_completes_flags_workload_names_and_the_orchestrators_options(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = script(tmp_path, capsys, ["completion", "bash"])
    assert "sgemm" in workload_names() and "softmax" in workload_names()
    assert "sgemm" in complete(path, ["kernelopt", "evaluate", "sg"])
    assert "softmax" in complete(path, ["kernelopt", "tune", "soft"])
    assert complete(path, ["kernelopt", "tune", "sgemm", "--budget-e"]) == ["--budget-evals"]
    assert "--max-iterations" in complete(path, ["kernelopt", "optimize", "--max-"])  # the orchestrator's own parser
    assert set(complete(path, ["kernelopt", "runs", ""])) >= {"list", "show", "du", "prune"}


@needs_bash
def test_kernelopt_mcp_has_its_own_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = script(tmp_path, capsys, ["--completion", "bash"], kernelopt_mcp)
    subprocess.run([BASH or "bash", "-n", str(path)], check=True, timeout=60)
    assert "--max-sessions" in complete(path, ["kernelopt-mcp", "--max-sess"], "_shtab_kernelopt_mcp")


@pytest.mark.parametrize("shell", ["zsh", "tcsh"])
def test_zsh_and_tcsh_scripts_name_the_commands(shell: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = script(tmp_path, capsys, ["completion", shell]).read_text()
    assert "evaluate" in text and "optimize" in text and "sgemm" in text


def test_an_unknown_shell_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        kernelopt(["completion", "fish"])
    assert raised.value.code == 2 and "invalid choice: 'fish'" in capsys.readouterr().err
