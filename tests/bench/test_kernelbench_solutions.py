"""Our CUDA solutions to KernelBench problems (bench/kernelbench_solutions/levelN/<stem>.cu with
<stem>.launch.json): each compiles with NVRTC for sm_90 with its entry named as the problem's
import names it, and its launch resolves, within the H200's limits, for every case of the
problem's import.

The compile test needs NVRTC (skipped without it). The launch test imports the problem, so it
needs torch and KernelBench's problem files: a folder holding level1/ and level2/, named by
KERNELBENCH_DIR or found as .kb/ in this checkout or the main one (skipped when either is
missing: CI has neither). Correctness and speed are measured on the GPU by
``kernelopt kernelbench DIR --level 1 2 --solutions bench/kernelbench_solutions``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kernelopt_mcp.compiler import compile_kernel
from kernelopt_mcp.errors import ToolchainNotFound
from kernelopt_mcp.launch import DeviceLimits, LaunchSpec, resolve
from kernelopt_mcp.torch_import import import_torch_problem, safe_name

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "bench" / "kernelbench_solutions"
SOURCES = sorted(SOLUTIONS.glob("level*/*.cu"))


def _ids(paths: list[Path]) -> list[str]:
    return [f"{p.parent.name}/{p.stem}" for p in paths]


def _entry(cu: Path) -> str:
    """The kernel name the import gives the problem (p<N>_<Name>)."""
    return safe_name(cu.stem)


def _kernelbench_dir() -> Path | None:
    named = os.environ.get("KERNELBENCH_DIR")
    candidates = [Path(named)] if named else [ROOT / ".kb"]
    try:  # a worktree's main checkout keeps the (ignored) .kb folder
        common = subprocess.run(["git", "rev-parse", "--git-common-dir"], cwd=ROOT, capture_output=True, text=True,
                                check=True, timeout=30).stdout.strip()
        candidates.append((ROOT / common).resolve().parent / ".kb")
    except (OSError, subprocess.SubprocessError):
        pass
    return next((c for c in candidates if (c / "level1").is_dir()), None)


def test_every_solution_has_its_launch_file_and_the_readme_lists_it() -> None:
    assert len(SOURCES) == 12
    readme = (SOLUTIONS / "README.md").read_text()
    for cu in SOURCES:
        assert cu.with_suffix(".launch.json").is_file(), f"{cu.name} has no launch file beside it"
        LaunchSpec.model_validate(json.loads(cu.with_suffix(".launch.json").read_text()))
        assert cu.name in readme, f"README.md does not describe {cu.name}"


@pytest.mark.parametrize("cu", SOURCES, ids=_ids(SOURCES))
def test_solution_compiles_for_sm90(cu: Path) -> None:
    try:
        result = compile_kernel(cu.read_text(), "sm_90", filename=cu.name)
    except ToolchainNotFound as exc:
        pytest.skip(f"NVRTC is not available: {exc}")
    assert result.ok, result.log
    assert _entry(cu) in result.entries, f"no kernel {_entry(cu)!r} in {cu.name}: {sorted(result.entries)}"
    resources = result.resources[_entry(cu)]
    assert not resources.spill_store_bytes, f"{cu.name} spills registers: {resources}"


@pytest.mark.parametrize("cu", SOURCES, ids=_ids(SOURCES))
def test_launch_resolves_for_every_case_of_the_import(cu: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="torch is not installed (pip install torch): problems cannot be imported")
    kb = _kernelbench_dir()
    if kb is None:
        pytest.skip("KernelBench's problem files are not here (set KERNELBENCH_DIR to the folder holding level1/)")
    problem = kb / cu.parent.name / f"{cu.stem}.py"
    if not problem.is_file():
        pytest.skip(f"{problem} is missing")
    imported = import_torch_problem(problem, tmp_path / "workload")
    spec = imported.spec
    assert spec.signature.entry == _entry(cu)
    launch = LaunchSpec.model_validate(json.loads(cu.with_suffix(".launch.json").read_text()))
    # the source's prototype is the import's: same parameters in the same order
    names = [p.name for p in spec.signature.params]
    source = cu.read_text()
    head = source[source.index(f"{_entry(cu)}("):]
    prototype = head[: head.index(")")]
    assert [tok.split()[-1].lstrip("*") for tok in prototype.split("(", 1)[1].split(",")] == names
    limits = DeviceLimits()
    assert {c.kind for c in spec.cases} >= {"correctness", "performance"}
    for case in spec.cases:
        resolved = resolve(launch.for_case(case.name), case.scalars, limits, case.name)
        assert resolved.threads_per_block <= limits.max_threads_per_block
