"""Start-up of the command line: what a fresh interpreter imports for `kernelopt --help`,
`kernelopt compile` and `kernelopt evaluate --help` (the import set, not a time: bench/startup.py
times them). Every command took ~0.85 s to start because each one imported everything (the
evaluation stack, the tuner, ml_dtypes' extension, the orchestrator); these commands need none of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelopt_mcp.cli_parser import COMMANDS, build_parser

REPO = Path(__file__).resolve().parents[2]
KERNEL = REPO / "workloads" / "sgemm" / "initial.cu"
# never needed to print help or compile a kernel
HEAVY = ("mcp", "openai", "httpx", "matplotlib", "ray", "optuna", "torch", "ml_dtypes", "anyio", "bs4")
# the library's stacks a command loads only when it evaluates, tunes, profiles or freezes
LIBRARY_STACKS = (
    "kernelopt_mcp.evaluation.evaluate", "kernelopt_mcp.evaluation.session", "kernelopt_mcp.tune.tuner",
    "kernelopt_mcp.tune.strategies", "kernelopt_mcp.freeze", "kernelopt_mcp.profiler", "kernelopt_mcp.torch_import",
    "kernelopt_mcp.docs", "kernelopt_agent.cli",
)

PROBE = """
import json, sys
sys.argv = ["kernelopt", *json.loads(sys.argv[1])]
from kernelopt_agent.entry import main
try:
    code = main()
except SystemExit as exc:
    code = exc.code
sys.stdout.flush()
sys.stderr.write("\\nMODULES " + json.dumps({"code": code, "modules": sorted(sys.modules)}) + "\\n")
"""


def imported_by(argv: list[str], cwd: Path) -> tuple[int, set[str]]:
    """(exit status, modules imported) of ``kernelopt ARGV`` in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "clients")]),
           "KERNELOPT_CACHE": str(cwd / "cache")}
    env.pop("KERNELOPT_ARCH", None)
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)
    line = next(x for x in done.stderr.splitlines() if x.startswith("MODULES "))
    report = json.loads(line.removeprefix("MODULES "))
    return report["code"], set(report["modules"])


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if n in modules or any(m.startswith(n + ".") for m in modules))


def test_help_imports_neither_the_heavy_dependencies_nor_rich_numpy_or_pydantic(tmp_path: Path) -> None:
    code, modules = imported_by(["--help"], tmp_path)
    assert code == 0
    assert _loaded(modules, HEAVY) == []
    assert _loaded(modules, LIBRARY_STACKS) == []
    # the help page needs argparse and the help lines, nothing that renders or validates
    assert _loaded(modules, ("rich", "numpy", "pydantic", "kernelopt_mcp.app", "kernelopt_mcp.config")) == []


def test_compile_imports_what_compiling_needs_only(tmp_path: Path) -> None:
    code, modules = imported_by(["compile", str(KERNEL), "--arch", "sm_90", "--json"], tmp_path)
    assert code == 0
    assert _loaded(modules, HEAVY) == []
    assert _loaded(modules, LIBRARY_STACKS) == []
    # nor a workload's model and its numpy, nor the evaluation views: a compile's report is its own module;
    # NVRTC's version is asked of the library itself: the bindings are the compile workers' (other processes)
    unneeded = ("numpy", "kernelopt_mcp.workload", "kernelopt_mcp.results", "kernelopt_mcp.evaluation",
                "cuda.bindings.nvrtc", "cuda.bindings.driver")
    assert _loaded(modules, unneeded) == []
    assert "kernelopt_mcp.compiler" in modules  # it did compile


def test_a_commands_help_builds_its_own_arguments_only(tmp_path: Path) -> None:
    code, modules = imported_by(["evaluate", "--help"], tmp_path)
    assert code == 0
    assert _loaded(modules, HEAVY) == []
    # evaluate's flags name the stopping rules (evaluation.candidate), not the tuner's strategies
    assert _loaded(modules, ("kernelopt_mcp.tune.strategies", "kernelopt_mcp.torch_import",
                             "kernelopt_mcp.profiler")) == []


# ids never equal to a marker's name (the `gpu` command's test would read as a GPU test: conftest.py)
@pytest.mark.parametrize("command", [None, *COMMANDS], ids=lambda c: f"command={c or 'none'}")
def test_the_lazy_parser_reads_as_the_full_one(command: str | None) -> None:
    """Building only the named command's arguments changes nothing a user sees: the top-level help
    (import-torch's and kernelbench's help lines are copied in cli_parser.COMMANDS) and that
    command's own help and parse."""
    full = build_parser()
    lazy = build_parser(command=command or "")
    assert lazy.format_help() == full.format_help()
    if command is not None:
        def sub_help(parser: object) -> str:
            for action in parser._actions:  # type: ignore[attr-defined]
                if hasattr(action, "choices") and isinstance(action.choices, dict) and command in action.choices:
                    return str(action.choices[command].format_help())
            raise AssertionError(command)

        assert sub_help(lazy) == sub_help(full)
