"""The documented Python API: what ``kernelopt_mcp`` exports (an explicit ``__all__``), its
``py.typed`` marker, and the README's "Use it from Python" example, run as written on the pretend
H200 of tests/fakegpu.py (a tiny workload named vector_add stands in for the bundled one, whose
performance cases are too large for a NumPy stand-in)."""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fakegpu import TINY_SPEC, write_harness, write_tiny_workload

import kernelopt_mcp
from kernelopt_mcp import app

REPO = Path(__file__).resolve().parents[2]


def test_all_is_explicit_complete_and_documented() -> None:
    names = kernelopt_mcp.__all__
    assert len(names) == len(set(names)), "a name listed twice"
    missing = [n for n in names if not hasattr(kernelopt_mcp, n)]
    assert missing == []
    # every public name the package defines is listed (submodules aside), and nothing else
    public = {n for n in dir(kernelopt_mcp) if not n.startswith("_")}
    public -= {n for n in public if inspect.ismodule(getattr(kernelopt_mcp, n))}
    assert public - {"annotations", "importlib", "TYPE_CHECKING", "Any"} == set(names) - {"__version__"}
    for name in names:
        obj = getattr(kernelopt_mcp, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            assert inspect.getdoc(obj), f"{name} has no docstring"


def test_the_application_layer_is_exported() -> None:
    assert set(app.__all__) <= set(kernelopt_mcp.__all__)
    for name in app.__all__:
        assert getattr(kernelopt_mcp, name) is getattr(app, name)


def test_star_import_gives_the_api() -> None:
    scope: dict[str, object] = {}
    exec("from kernelopt_mcp import *", scope)  # noqa: S102 (the statement users write)
    assert set(kernelopt_mcp.__all__) <= set(scope)


def test_what_type_checkers_read_is_what_is_loaded() -> None:
    """The ``if TYPE_CHECKING:`` imports of __init__.py (what mypy and IDEs see) and the table
    ``__getattr__`` loads from name the same modules and names."""
    tree = ast.parse((REPO / "kernelopt_mcp" / "__init__.py").read_text())
    guarded = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    seen = {a.name: node.module for node in guarded.body if isinstance(node, ast.ImportFrom) for a in node.names}
    assert seen == kernelopt_mcp._WHERE


def test_importing_a_data_module_loads_only_the_data_layer() -> None:
    """The package's names load on first use: a client that reads workloads does not load the
    evaluation, the compiler or the server's engine (the orchestrator imports only these)."""
    code = ("import sys, kernelopt_mcp.workload, kernelopt_mcp.launch, kernelopt_mcp.config, kernelopt_mcp.tune.spec\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('kernelopt_mcp'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    assert {"kernelopt_mcp.workload", "kernelopt_mcp.config"} <= loaded
    heavy = {m for m in loaded if m.split(".")[1:2] in (["evaluation"], ["compiler"], ["compile_pool"], ["app"],
                                                        ["service"], ["server"])}
    assert heavy == set(), heavy
    assert kernelopt_mcp.Settings is kernelopt_mcp.config.Settings  # and the names still resolve


def test_the_package_is_typed() -> None:
    assert (REPO / "kernelopt_mcp" / "py.typed").is_file()


def test_importing_the_api_imports_no_mcp_openai_torch_or_optuna() -> None:
    code = ("import sys, kernelopt_mcp\n"
            "print(sorted({'mcp', 'openai', 'torch', 'optuna', 'matplotlib'} & {m.split('.')[0] for m in "
            "sys.modules}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def readme_example() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Use it from Python\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1, "one python example in the section"
    return blocks[0]


def test_the_readme_example_runs_on_the_pretend_gpu(tmp_path: Path) -> None:
    spec = json.loads(json.dumps(TINY_SPEC))
    spec["name"] = "vector_add"
    workloads = write_tiny_workload(tmp_path / "workloads", spec)
    env = {**os.environ, "PYTHONPATH": str(REPO), "KERNELOPT_HARNESS": str(write_harness(tmp_path, "fake")),
           "KERNELOPT_WORKLOADS": str(workloads), "KERNELOPT_CACHE": str(tmp_path / "cache")}
    (tmp_path / "example.py").write_text(readme_example())
    proc = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert re.fullmatch(r"ok \d+ registers", lines[0]), lines
    assert lines[1] == "ok 0.101 ms 1.00x the CUDA reference", lines
    assert lines[2:] == ["one ok ", "odd_1001 ok ", "n_4096 ok 0.101"], lines


@pytest.mark.parametrize("name", ["compile_source", "evaluate_kernel", "open_session", "find_workload", "Settings"])
def test_names_used_in_the_readme_example_are_exported(name: str) -> None:
    assert f"ko.{name}" in readme_example() and name in kernelopt_mcp.__all__
