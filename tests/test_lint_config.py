"""The lint step stays one step: CI, pre-commit and the test extra run the same tools at the same
versions (scripts/lint.sh, .pre-commit-config.yaml, pyproject.toml)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LINTERS = ("ruff", "mypy", "clang-format")


def _pins(requirements: list[str]) -> dict[str, str]:
    pins = {}
    for req in requirements:
        if m := re.fullmatch(r"([A-Za-z0-9_.-]+)==([0-9][0-9A-Za-z.]*)", req.strip()):
            pins[m.group(1).lower()] = m.group(2)
    return pins


def test_the_test_extra_pins_every_linter_exactly() -> None:
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    pins = _pins(extra)
    assert set(LINTERS) <= pins.keys(), f"the test extra must pin {LINTERS} with ==, got {extra}"


def test_pre_commit_installs_the_versions_that_ci_installs() -> None:
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    config = (REPO / ".pre-commit-config.yaml").read_text()
    hook_pins = _pins(re.findall(r'"([A-Za-z0-9_.-]+==[^"]+)"', config))
    assert hook_pins, "no pinned additional_dependencies in .pre-commit-config.yaml"
    ci_pins = _pins(extra)
    for name, version in hook_pins.items():
        assert ci_pins.get(name) == version, f"pre-commit runs {name}=={version}, CI {name}=={ci_pins.get(name)}"


def test_ci_runs_the_lint_script_that_the_hooks_mirror() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"^\s*(bash )?scripts/lint\.sh\s*$", ci, re.MULTILINE), ".ci/run must call scripts/lint.sh"
    lint = (REPO / "scripts" / "lint.sh").read_text()
    for tool in LINTERS:
        assert tool in lint and tool in (REPO / ".pre-commit-config.yaml").read_text()
