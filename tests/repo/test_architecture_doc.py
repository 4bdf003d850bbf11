"""ARCHITECTURE.md matches the code: every module, file and tool it names exists, and it names
every module of the library."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEXT = (REPO / "ARCHITECTURE.md").read_text()
PACKAGE = REPO / "kernelopt_mcp"
SEARCH = [REPO, *sorted(p.parent for p in PACKAGE.rglob("__init__.py")),
          REPO / "clients" / "kernelopt_agent", REPO / "native_harness", REPO / "native_harness" / "src"]
# The layers diagram names modules without ".py" in its boxes ("fresh_inputs, compare, ...").
DIAGRAM = re.search(r"```mermaid\n(flowchart.*?)```", TEXT, re.S)


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


def _unnamed(text: str, diagram: str, modules: list[Path]) -> list[str]:
    """The modules ``text`` does not name: as ``name.py`` (as ``package/name.py`` where two
    modules share the name), or by bare name in the layers ``diagram``."""
    shared = {n for n, count in Counter(p.name for p in modules).items() if count > 1}
    missing = []
    for path in modules:
        rel = path.relative_to(PACKAGE).as_posix()
        name = rel if path.name in shared else path.name
        named = re.search(rf"(?<![\w.]){re.escape(name)}\b", text) or (
            path.name not in shared and re.search(rf"(?<![\w.]){re.escape(path.stem)}\b", diagram))
        if not named:
            missing.append(rel)
    return missing


def test_it_names_every_module_of_the_library() -> None:
    assert DIAGRAM is not None
    modules = sorted(p for p in PACKAGE.rglob("*.py") if not p.name.startswith("__"))
    assert len(modules) > 50
    missing = _unnamed(TEXT, DIAGRAM.group(1), modules)
    assert not missing, f"ARCHITECTURE.md does not name {missing}: add one line on what each is where it belongs"


def test_a_shared_module_name_must_be_qualified() -> None:
    """session.py is two modules (evaluation/, server/): naming one does not name the other."""
    modules = [PACKAGE / "evaluation" / "session.py", PACKAGE / "server" / "session.py", PACKAGE / "expr.py"]
    assert (_unnamed("session.py: a prepared Session", "", modules)
            == ["evaluation/session.py", "server/session.py", "expr.py"])
    assert _unnamed("`server/session.py`, `expr.py`", "", modules) == ["evaluation/session.py"]
    assert _unnamed("", "data: expr, workload", modules[2:]) == []
