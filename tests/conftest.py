"""Test configuration: the `gpu` marker and the --run-gpu switch, and where the tests find their helpers.

Without --run-gpu, tests marked `gpu` or `ncu` are skipped. With it, a missing CUDA device
fails the run instead of skipping, so a GPU run can never pass silently.

The tests sit in folders by the part of the project they test (tests/server/, tests/optimize/,
...; tests/gpu/ holds the GPU tests; tests/repo/test_tests_layout.py keeps the layout). What they
share stays here in tests/: the helper modules (fakegpu.py, scripted_model.py, ...) and the data
(fixtures/, adversarial/, torch_problems/), which a test reaches from its folder as
``Path(__file__).parents[1]``.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from kernelopt_mcp.evaluation.device import cuda_device_count

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

# pytest's import mode (prepend, the folders have no __init__.py) imports every test file and helper
# as a top-level module: `from fakegpu import ...` finds tests/ (where this conftest is), and a test
# may import another test file's helpers by its name (`from test_optimize import env`). So that such
# an import does not depend on which folders a run happens to collect, tests/ and every test folder
# are on sys.path from the start; the basenames of test files are unique across the folders.
for _folder in [TESTS, *sorted(p for p in TESTS.iterdir() if p.is_dir() and any(p.glob("test_*.py")))]:
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))

# The tests see no terminal of the runner's: xdist's workers set COLUMNS=80 and LINES=24, which the
# CLI honours (its tables and a child's would be narrower than on a pipe, where the default is 160).
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

# Started as a background job of a non-interactive shell (`cmd &` in a script), a process inherits
# SIGINT ignored, and so does every optimizer the tests start: the Ctrl-C tests would then see no
# Ctrl-C (the run goes on). They test a terminal's default, so the tests run with it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The server passes the harness, ncu and compute-sanitizer only an allowlist of its environment
# (executables.child_env); the stand-ins for them take their switches from variables named KO_*
# (the pretend harness, the stub ncu) and FAKE_SANITIZER_*, which the operator's list passes on.
os.environ["KERNELOPT_CHILD_ENV"] = "KO_*,FAKE_SANITIZER_*"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-gpu", action="store_true", help="run tests that need a CUDA device")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (pyproject's addopts) runs the CPU tests on every core; with --run-gpu in one
    process: the GPU tests time kernels, and parallel ones would share the GPU and its clocks."""
    return 0 if config.getoption("--run-gpu") else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run_gpu = config.getoption("--run-gpu")
    if not run_gpu:
        skip = pytest.mark.skip(reason="needs a CUDA device: run with --run-gpu")
        for item in items:
            # the markers, not item.keywords: a parametrize id "gpu" is a keyword too
            if item.get_closest_marker("gpu") or item.get_closest_marker("ncu"):
                item.add_marker(skip)
        return
    if any(item.get_closest_marker("gpu") for item in items) and cuda_device_count() == 0:
        raise pytest.UsageError("--run-gpu was given but no CUDA device is usable (cuInit/cuDeviceGetCount)")


@pytest.fixture
def anyio_backend() -> str:
    """anyio tests (pytest.mark.anyio) run on asyncio, as the MCP server does."""
    return "asyncio"


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def harness_binary() -> Path:
    from kernelopt_mcp.errors import ToolchainNotFound
    from kernelopt_mcp.evaluation.harness import find_harness

    try:
        return find_harness(os.environ.get("KERNELOPT_HARNESS"))
    except ToolchainNotFound as exc:
        pytest.fail(f"the harness is not built: {exc}")
