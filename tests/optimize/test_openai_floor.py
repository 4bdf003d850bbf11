"""The oldest openai release pyproject allows, tested for real rather than from a table of first releases.

.ci/run installs that release (the `openai>=X` floor of pyproject.toml) into build/openai-floor with
`pip install --target build/openai-floor --no-deps "openai==X" distro`; this test then runs the
scripted-model runs through both APIs (Responses and Chat Completions over loopback HTTP, with tool
calls, retries and token accounting) and the keyword checks again, in a pytest subprocess whose
`import openai` finds that release first. Elsewhere it skips and says how to make the install
(`KERNELOPT_OPENAI_FLOOR` names another directory).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FLOOR_DIR = Path(os.environ.get("KERNELOPT_OPENAI_FLOOR", REPO / "build" / "openai-floor"))
# the whole runs through each API and the checks of the keywords sent, from the model tests
SELECTED = [
    "tests/optimize/test_optimize_model.py::test_a_whole_run_through_each_api",
    "tests/optimize/test_optimize_model.py::test_tokens_and_cost_are_what_the_server_reported",
    "tests/optimize/test_optimize_model.py::test_responses_round_trip_keeps_reasoning_between_turns",
    "tests/optimize/test_optimize_model.py::test_the_openai_floor_has_the_responses_api_with_every_keyword_sent",
    "tests/optimize/test_optimize_records.py::test_the_openai_floor_accepts_every_keyword_sent",
    "tests/optimize/test_optimize_records.py::test_requests_carry_only_the_keywords_the_floor_was_checked_for",
]


def pyproject_floor() -> tuple[int, ...]:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    [spec] = [d for d in deps if re.match(r"openai\b", d)]
    match = re.search(r">=\s*([\d.]+)", spec)
    assert match, f"pyproject's openai requirement {spec!r} has no >= floor"
    return release(match.group(1))


def release(version: str) -> tuple[int, ...]:
    parts = [int(x) for x in re.findall(r"\d+", version)[:3]]
    return tuple(parts + [0] * (3 - len(parts)))


def test_the_loop_runs_on_the_oldest_openai_pyproject_allows() -> None:
    floor = ".".join(map(str, pyproject_floor()))
    if not (FLOOR_DIR / "openai").is_dir():
        pytest.skip(f"no openai {floor} in {FLOOR_DIR}: make it with `python3 -m pip install --no-deps --target "
                    f"{FLOOR_DIR} 'openai=={floor}' distro` (.ci/run does)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(FLOOR_DIR), os.environ.get("PYTHONPATH")]))}
    found = subprocess.run([sys.executable, "-c", "import openai; print(openai.__version__)"], env=env, cwd=REPO,
                           capture_output=True, text=True, timeout=60)
    assert found.returncode == 0, found.stderr
    assert release(found.stdout.strip()) == pyproject_floor(), \
        f"{FLOOR_DIR} holds openai {found.stdout.strip()}, pyproject's floor is {floor}: reinstall it"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *SELECTED],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    summary = run.stdout.strip().splitlines()[-1:] or [""]
    assert run.returncode == 0, f"on openai {floor}:\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}"
    passed = re.fullmatch(r"(\d+) passed in [\d.]+s", summary[0])  # nothing skipped, nothing deselected
    assert passed and int(passed.group(1)) >= len(SELECTED), summary
