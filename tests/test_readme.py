"""The README and the packaging files agree with the code (issue 19)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from kernelopt_agent.entry import main  # the `kernelopt` console script

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def test_the_readmes_mermaid_graph_is_kernelopt_graph(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["graph"]) == 0
    graph = capsys.readouterr().out.strip()
    blocks = re.findall(r"```mermaid\n(.*?)```", README, re.DOTALL)
    assert len(blocks) == 1
    assert blocks[0].strip() == graph, "README.md's Mermaid graph is stale: paste `kernelopt graph` into it"


def test_the_license_is_the_one_pyproject_names() -> None:
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "MIT"
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License") and "the kernelopt developers" in text
    assert "WITHOUT WARRANTY OF ANY KIND" in text


def test_the_readme_names_the_seed_optimizer() -> None:
    assert "original tool" not in README
    assert "seed optimizer this project grew from" in README


def test_client_configs_say_to_use_an_absolute_path_in_a_virtual_environment() -> None:
    clients = REPO / "clients"
    for name in ("README.md", "codex_config.toml", "claude_code.sh"):
        text = " ".join((clients / name).read_text().split())
        assert "virtual environment" in text and "absolute path" in text, name
    assert "absolute path" in README and "virtual environment" in README
