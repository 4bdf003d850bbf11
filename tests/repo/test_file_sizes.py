"""No source file of the tool is over 600 lines (issue 18; ARCHITECTURE.md: "No module is over 600
lines"). A file that grows past it is split along a seam (a sibling module, a second test file
importing the first's helpers, a second .cpp in the same CMake target), not let grow.

Walked: the Python, C++ and CUDA of kernelopt_mcp/, clients/, native_harness/ (not third_party/
or build directories), bench/, tests/ and scripts/. Not the workloads' kernels under workloads/:
each is one self-contained .cu file, data as much as code.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_LINES = 600
ROOTS = ("kernelopt_mcp", "clients", "native_harness", "bench", "tests", "scripts")
SUFFIXES = {".py", ".cpp", ".h", ".hpp", ".cu", ".cuh"}
# A class past ~300 lines is usually two (ARCHITECTURE.md, "Habits"): the library's classes stay
# within it.
MAX_CLASS_LINES = 300


def skipped(directory: Path) -> bool:
    """Vendored code, build trees, caches and other hidden directories."""
    name = directory.name
    return name == "third_party" or name.startswith(("build", ".")) or name == "__pycache__"


def source_files() -> list[Path]:
    found: list[Path] = []
    for root in ROOTS:
        stack = [REPO / root]
        while stack:
            for entry in sorted(stack.pop().iterdir()):
                if entry.is_dir() and not entry.is_symlink():
                    if not skipped(entry):
                        stack.append(entry)
                elif entry.is_file() and entry.suffix in SUFFIXES:
                    found.append(entry)
    return found


def line_count(path: Path) -> int:
    return len(path.read_bytes().splitlines())


def test_the_walk_finds_the_sources() -> None:
    files = {p.relative_to(REPO).as_posix() for p in source_files()}
    for expected in ("kernelopt_mcp/app.py", "bench/run.py", "tests/repo/test_file_sizes.py",
                     "native_harness/src/main.cpp", "native_harness/tests/fake_libcuda.cpp"):
        assert expected in files
    assert not any(f.startswith("native_harness/third_party/") for f in files)


def test_no_source_file_is_over_600_lines() -> None:
    over = sorted((n, p.relative_to(REPO).as_posix()) for p in source_files() if (n := line_count(p)) > MAX_LINES)
    assert not over, (
        f"{len(over)} source file(s) over {MAX_LINES} lines (issue 18 / ARCHITECTURE.md set the {MAX_LINES}-line "
        "rule): split each along a seam, e.g. a sibling module, a second test file importing the first's helpers, "
        "or a second .cpp in the same CMake target:\n" + "\n".join(f"  {path}: {n} lines" for n, path in over)
    )


def class_lines() -> dict[str, int]:
    """Every class of kernelopt_mcp (nested ones too), by module and name: its lines, decorators left out."""
    found: dict[str, int] = {}
    for path in sorted((REPO / "kernelopt_mcp").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                found[f"{module}.{node.name}"] = node.end_lineno - node.lineno + 1
    return found


def test_no_class_is_over_300_lines() -> None:
    lines = class_lines()
    over = {name: n for name, n in sorted(lines.items()) if n > MAX_CLASS_LINES}
    assert not over, f"classes over {MAX_CLASS_LINES} lines (split each by concern): {over}"
    # the walk has teeth: it sees the service and the classes of nested packages
    assert {"kernelopt_mcp.service.KerneloptService", "kernelopt_mcp.evaluation.session.Session"} <= set(lines)
