"""The README, its pages under docs/ and the packaging files agree with the code (issue 19)."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from kernelopt_agent.entry import main  # the `kernelopt` console script

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
README_WORDS = " ".join(README.split())  # as read: a phrase may wrap across lines
# the optimizer's page, where the loop's graph is drawn
OPTIMIZE_DOC = (REPO / "docs" / "optimize.md").read_text()


def test_the_optimize_pages_mermaid_graph_is_kernelopt_graph(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["graph"]) == 0
    graph = capsys.readouterr().out.strip()
    blocks = re.findall(r"```mermaid\n(.*?)```", OPTIMIZE_DOC, re.DOTALL)
    assert len(blocks) == 1
    assert blocks[0].strip() == graph, "docs/optimize.md's Mermaid graph is stale: paste `kernelopt graph` into it"


def test_the_license_is_the_one_pyproject_names() -> None:
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "MIT"
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License") and "the kernelopt developers" in text
    assert "WITHOUT WARRANTY OF ANY KIND" in text


def test_the_readme_names_the_seed_optimizer() -> None:
    assert "original tool" not in README_WORDS
    assert "seed optimizer this project grew from" in README_WORDS


def test_client_configs_say_to_use_an_absolute_path_in_a_virtual_environment() -> None:
    clients = REPO / "clients"
    for name in ("README.md", "codex_config.toml", "claude_code.sh"):
        text = " ".join((clients / name).read_text().split())
        assert "virtual environment" in text and "absolute path" in text, name
    assert "absolute path" in README_WORDS and "virtual environment" in README_WORDS


def readme_block(section: str, language: str) -> str:
    """The one ``language`` code block of the README's ``## section``."""
    text = README.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)
    assert len(blocks) == 1, f"one {language} block in the README's {section!r}"
    return blocks[0]


def test_the_readmes_first_run_without_a_gpu_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Each command of "Without a GPU" runs as written, from the repository's root, and succeeds on
    a machine with no GPU (CI's): compile for sm_90 and sm_90a, the offline guidance, the workloads
    and the schema. The compile cache and the docs cache are the test's own."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("KERNELOPT_DOCS_OFFLINE", "1")  # the block says --offline; never the network here
    monkeypatch.delenv("KERNELOPT_ARCH", raising=False)  # the first compile targets the default arch
    commands = [line.split("#", 1)[0].strip() for line in readme_block("Without a GPU", "bash").splitlines()]
    commands = [c for c in commands if c]
    assert {shlex.split(c)[1] for c in commands} >= {"compile", "docs", "workloads", "schema"}
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "kernelopt", command
        capsys.readouterr()
        assert main(argv[1:]) == 0, (command, capsys.readouterr())
        out = capsys.readouterr().out
        assert out.strip(), command
        if argv[1] == "compile":
            assert "compile ok" in out and "registers" in out, (command, out)
            assert ("sm_90a" in out) == ("sm_90a" in argv), (command, out)
        if argv[1] == "docs":
            assert "bank" in out.lower(), out
        if argv[1] == "workloads":
            assert "sgemm" in out and "vector_add" in out, out
        if argv[1] == "schema":
            assert json.loads(out)["title"], out[:200]
