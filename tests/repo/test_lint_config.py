"""The lint step stays one step: CI, pre-commit and the dev extra run the same tools at the same
versions (scripts/lint.sh, .pre-commit-config.yaml, pyproject.toml); the test extra brings the dev
extra (CI installs `.[test]` and lints), and a user's `pip install .` brings neither."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINTERS = ("ruff", "mypy", "clang-format")


def _pins(requirements: list[str]) -> dict[str, str]:
    pins = {}
    for req in requirements:
        if m := re.fullmatch(r"([A-Za-z0-9_.-]+)==([0-9][0-9A-Za-z.]*)", req.strip()):
            pins[m.group(1).lower()] = m.group(2)
    return pins


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~ ;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-") for req in requirements}


def test_the_dev_extra_pins_every_linter_exactly_and_the_test_extra_brings_it() -> None:
    extras = _project()["optional-dependencies"]
    pins = _pins(extras["dev"])
    assert set(LINTERS) <= pins.keys(), f"the dev extra must pin {LINTERS} with ==, got {extras['dev']}"
    assert (f"{_project()['name']}[dev]"
            in extras["test"]), "CI installs .[test] and runs the lint step: test must bring dev"


def test_a_users_install_pulls_no_linter_and_no_test_runner() -> None:
    """`pip install .` is what a user runs: the linters and pytest are the dev and test extras'."""
    installed = _names(_project()["dependencies"])
    assert not installed & {*LINTERS, "pytest", "hypothesis", "pytest-xdist", "pytest-timeout"}


def test_pre_commit_installs_the_versions_that_ci_installs() -> None:
    extra = _project()["optional-dependencies"]["dev"]
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
