"""ARCHITECTURE.md matches the code: every module, file and tool it names exists."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEXT = (REPO / "ARCHITECTURE.md").read_text()
SEARCH = [REPO, REPO / "kernelopt_mcp", REPO / "kernelopt_mcp" / "evaluation", REPO / "kernelopt_mcp" / "server",
          REPO / "clients" / "kernelopt_agent", REPO / "native_harness", REPO / "native_harness" / "src"]


def _exists(name: str) -> bool:
    name = name.rstrip("/")
    return any((base / name).exists() for base in SEARCH)


def test_every_file_it_names_exists() -> None:
    names = set(re.findall(r"[\w./-]+\.(?:py|cpp|md|sh|yaml|cu)\b", TEXT)) | set(re.findall(r"\b([\w]+/)[ <`\"]", TEXT))
    names = {n for n in names if "*" not in n and not n.startswith(("http", "."))}
    missing = sorted(n for n in names if not _exists(n) and not _exists(n.split("/")[-1]))
    assert not missing, f"ARCHITECTURE.md names what is not there: {missing}"


def test_every_tool_it_names_is_a_server_tool() -> None:
    sources = "".join(p.read_text() for p in (REPO / "kernelopt_mcp" / "server").glob("tools_*.py"))
    named = re.findall(r"`(freeze_workload|benchmark|validate|ncu_profile|autotune|replay_requests|docs_search)`", TEXT)
    assert named
    for tool in set(named):
        assert re.search(rf"\b{tool}\b", sources), tool
