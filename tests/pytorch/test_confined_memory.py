"""A confined child's process tree holds at most its memory bound together (kernelopt_mcp.cgroups).

An rlimit bounds one process's memory: a PyTorch problem that forks its bound of tasks, each
holding just under the per-process cap, would hold hundreds of times the cap. Where a cgroup can
be made (root, a delegated cgroup: KERNELOPT_CGROUP), the supervisor puts the child's whole tree in
one whose memory the kernel bounds, kills every process in it at the end and removes it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_torch_child import needs_landlock, probe_package, run_jobs_probe

from kernelopt_mcp import cgroups
from kernelopt_mcp.confined_python import ChildLimits, run_confined_python

MADE = cgroups.make(64)
if not isinstance(MADE, str):
    MADE.remove()
needs_cgroup = pytest.mark.skipif(isinstance(MADE, str), reason=f"no cgroup can be made here: {MADE}")

#: N processes (the child and N - 1 forks) that each touch MiB of memory, then report and wait
HOLD = """
import json, os, sys, time
processes, mib = int(sys.argv[1]), int(sys.argv[2])

def hold():
    block = bytearray(mib << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    return block

kids = []
for _ in range(processes - 1):
    pid = os.fork()
    if pid == 0:
        block = hold()
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
block = hold()
time.sleep(2)
alive = sum(1 for pid in kids if os.waitpid(pid, os.WNOHANG) == (0, 0))
print(json.dumps({"alive": alive, "confined_as": os.environ.get("KERNELOPT_CONFINED_AS")}))
"""


def _hold(tmp_path: Path, processes: int, mib: int, memory_mb: int):
    package = probe_package(tmp_path, "hold_probe", HOLD)
    staging = tmp_path / "staging"
    staging.mkdir()
    return run_confined_python("hold_probe", [str(processes), str(mib)], staging=staging,
                               python_path=[str(package.parent)], read=[str(package)],
                               limits=ChildLimits(timeout_s=60, memory_mb=memory_mb))


def _ours() -> list[str]:
    """The cgroups of this package's supervisors left in every place one may be made."""
    return [entry for base, _ in cgroups.bases() if os.path.isdir(base)
            for entry in os.listdir(base) if entry.startswith(cgroups.PREFIX)
            and entry[len(cgroups.PREFIX):].split("-")[0] not in ("", str(os.getpid()))]


@needs_landlock
@needs_cgroup
def test_a_tree_within_its_bound_runs_and_says_what_bounds_it(tmp_path: Path) -> None:
    result = _hold(tmp_path, processes=3, mib=40, memory_mb=400)
    assert result.returncode == 0, result.stderr_tail
    out = json.loads(result.stdout)
    assert out["alive"] == 2, out
    assert "tree memory 400 MiB (cgroup v" in out["confined_as"], out


@needs_landlock
@needs_cgroup
def test_a_tree_past_its_bound_is_killed_by_the_kernel_and_says_so(tmp_path: Path) -> None:
    """Six processes of 150 MiB under a bound of 300 MiB: each is under the per-process cap (300),
    together three times the bound; the kernel kills them, the error says why, nothing is left."""
    before = set(_ours())
    result = _hold(tmp_path, processes=6, mib=150, memory_mb=300)
    assert result.returncode != 0
    assert "together reached their memory bound of 300 MiB" in result.stderr_tail, result.stderr_tail
    assert set(_ours()) <= before  # its cgroup was removed


JOBS = """
import json, os
from pathlib import Path
from kernelopt_mcp._confined_child import run_confined_jobs

staging = Path.cwd()

def work():
    (staging / "job" / "out.json").write_text(json.dumps({"confined_as": os.environ.get("KERNELOPT_CONFINED_AS")}))

(staging / "job").mkdir()
statuses = run_confined_jobs([(str(staging / "job"), work)], 30.0)
print(json.dumps({"statuses": statuses, "parent": open("/proc/self/cgroup").read(),
                  "job": json.loads((staging / "job" / "out.json").read_text())}))
"""


@needs_landlock
@needs_cgroup
def test_the_timing_childs_jobs_are_in_its_cgroup(tmp_path: Path) -> None:
    """The child that hands out jobs is in the cgroup before it forks any (a job inherits it, and
    cannot read /proc/self/cgroup itself: Landlock)."""
    out = run_jobs_probe(tmp_path, "memory_jobs_probe", JOBS, ChildLimits(timeout_s=60, memory_mb=4096))
    assert out["statuses"] == [0], out
    assert cgroups.PREFIX in out["parent"], out
    assert "tree memory 4096 MiB" in out["job"]["confined_as"], out


def test_where_no_cgroup_can_be_made_the_reason_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory that is no cgroup (the operator's KERNELOPT_CGROUP mistyped) is skipped with its reason."""
    monkeypatch.setattr(cgroups, "_own_cgroups", dict)
    made = cgroups.make(64, str(tmp_path / "missing"))
    assert isinstance(made, str) and str(tmp_path / "missing") in made, made


@needs_landlock
def test_the_operators_cgroup_reaches_the_supervisor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """KERNELOPT_CGROUP is read where the child is started (its environment is an allowlist): the
    child's cgroup is made in the operator's; a directory that is no cgroup is named with its failure."""
    chosen = tmp_path / "missing"
    if not isinstance(MADE, str):  # a cgroup of the test's own, beside where the supervisor would make one
        chosen = Path(os.path.dirname(MADE.path)) / f"operator-{os.getpid()}"
        chosen.mkdir()
    monkeypatch.setenv(cgroups.BASE_ENV, str(chosen))
    try:
        result = _hold(tmp_path, processes=1, mib=1, memory_mb=400)
    finally:
        if chosen.name.startswith("operator-"):
            chosen.rmdir()
    assert result.returncode == 0, result.stderr_tail
    confined_as = json.loads(result.stdout)["confined_as"]
    if isinstance(MADE, str):
        assert f"no cgroup: {chosen}: No such file or directory" in confined_as, confined_as
    else:
        assert f"tree memory 400 MiB (cgroup v{MADE.version} {chosen}/{cgroups.PREFIX}" in confined_as, confined_as
