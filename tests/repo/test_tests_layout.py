"""The tests' layout (docs/testing.md): every test file in a folder of tests/ named for the part of the
project it tests, none in tests/ itself (where the shared helpers and data stay), none deeper; and no
two test files with one name, since each is imported as a top-level module (tests/conftest.py puts
every folder on sys.path, and pytest's prepend import mode refuses a second module of one name)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
FOLDERS = {"analysis", "bench", "cli", "compiler", "evaluation", "gpu", "harness", "optimize", "pytorch", "repo",
           "server", "tune", "workloads"}


def test_every_test_file_is_in_a_folder_of_tests() -> None:
    files = sorted(TESTS.rglob("test_*.py"))
    assert len(files) > 150, "the walk has teeth"
    placed = {p.relative_to(TESTS).as_posix() for p in files}
    stray = sorted(f for f in placed if f.count("/") != 1 or f.split("/")[0] not in FOLDERS)
    assert not stray, (f"test files belong in one of the folders {sorted(FOLDERS)} of tests/ (a new part of the "
                       f"project gets a new folder, added to FOLDERS here and to docs/testing.md): {stray}")
    assert {f.split("/")[0] for f in placed} == FOLDERS, "every folder named here holds tests"


def test_test_files_have_unique_names_and_the_folders_are_not_packages() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, count in names.items() if count > 1] == []
    assert not list(TESTS.rglob("__init__.py"))
