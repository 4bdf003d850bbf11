"""The documented Python API: what ``kernelopt_mcp`` exports (an explicit ``__all__``), its
``py.typed`` marker, and the README's "Use it from Python" example, run as written on the pretend
H200 of tests/fakegpu.py (a tiny workload named vector_add stands in for the bundled one, whose
performance cases are too large for a NumPy stand-in)."""

from __future__ import annotations

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

REPO = Path(__file__).resolve().parent.parent


def test_all_is_explicit_complete_and_documented() -> None:
    names = kernelopt_mcp.__all__
    assert len(names) == len(set(names)), "a name listed twice"
    missing = [n for n in names if not hasattr(kernelopt_mcp, n)]
    assert missing == []
    # every public name the package defines is listed (submodules aside)
    public = {n for n, v in vars(kernelopt_mcp).items() if not n.startswith("_") and not inspect.ismodule(v)}
    assert public - {"annotations"} == set(names) - {"__version__"}
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


def test_the_package_is_typed() -> None:
    assert (REPO / "kernelopt_mcp" / "py.typed").is_file()


def test_importing_the_api_imports_no_mcp_openai_torch_or_optuna() -> None:
    code = ("import sys, kernelopt_mcp\n"
            "print(sorted({'mcp', 'openai', 'torch', 'optuna', 'matplotlib'} & {m.split('.')[0] for m in sys.modules}))")
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
    proc = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert re.fullmatch(r"ok \d+ registers", lines[0]), lines
    assert lines[1] == "ok 0.101 ms 1.00x the CUDA reference", lines
    assert lines[2:] == ["one ok ", "odd_1001 ok ", "n_4096 ok 0.101"], lines


@pytest.mark.parametrize("name", ["compile_source", "evaluate_kernel", "open_session", "find_workload", "Settings"])
def test_names_used_in_the_readme_example_are_exported(name: str) -> None:
    assert f"ko.{name}" in readme_example() and name in kernelopt_mcp.__all__
