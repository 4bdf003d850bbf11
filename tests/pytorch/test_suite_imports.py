"""`kernelopt kernelbench` imports each problem in a confined child (kernelopt_mcp/suite_imports.py):
a KernelBench directory is someone else's code. The problem runs with torch stood in (the test needs
no torch: the probe runs as the file executes, before torch computes anything)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_torch_child import fake_distribution, needs_landlock

from kernelopt_mcp import confined_python, suite_imports
from kernelopt_mcp.confined_python import Installed
from kernelopt_mcp.suite_imports import ImportJob, ImportLimits, import_in_child

PROBE = """
import json, os

class Model:
    pass

def get_inputs():
    return []

def tried(fn):
    try:
        fn()
        return "done"
    except OSError as exc:
        return type(exc).__name__
found = {
    "key": "sk-planted" in json.dumps(dict(os.environ)),
    "read": tried(lambda: open(SECRET).read()),
    "write": tried(lambda: open(OUTSIDE, "w").write("escaped")),
    "fork": tried(os.fork),
}
raise RuntimeError("PROBE" + json.dumps(found))
"""


def stand_in_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in torch (test_torch_child's) the confined children import in place of the real one."""
    from test_torch_child import stand_in_torch as stand_in

    site = stand_in(tmp_path / "site")
    monkeypatch.setattr(confined_python, "installed_requirements",
                        lambda *packages: Installed(path=(str(site),), read=(str(site / "torch"),)))


@needs_landlock
def test_a_suite_problem_runs_confined(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No secret of the caller's environment, no other file read (not even one beside the problem:
    the child reads a copy of the file) or written, no process started; the refusal says what the
    problem raised and the workload directory stays empty."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted-suite")
    stand_in_torch(tmp_path, monkeypatch)
    problem = tmp_path / "kb" / "level1" / "1_Probe.py"
    problem.parent.mkdir(parents=True)
    secret, outside = problem.parent / "secret.txt", tmp_path / "escaped.txt"
    secret.write_text("sk-planted-file")
    problem.write_text(f"SECRET = {str(secret)!r}\nOUTSIDE = {str(outside)!r}\n{PROBE}")
    out = tmp_path / "out" / "level1" / "p1_Probe"
    record = import_in_child(ImportJob(problem, out), ImportLimits(timeout_s=60), 2 << 30)
    assert record["imported"] is False and "PROBE" in record["refusal"], record
    found, _ = json.JSONDecoder().raw_decode(record["refusal"].split("PROBE", 1)[1])
    assert found == {"key": False, "read": "PermissionError", "write": "PermissionError", "fork": "PermissionError"}
    assert not outside.exists() and record["problem"] == str(problem)
    assert [p.name for p in out.parent.iterdir()] == []  # no staging directory left, nothing imported


def test_installed_requirements_are_read_once_yet_follow_an_installation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A suite starts hundreds of import children and each asks which distributions torch needs:
    read once, not per child (about a second of the parent's one interpreter each, which held a
    16-job import of KernelBench to 0.3 problems a second), yet a distribution installed, upgraded
    or removed afterwards is seen at the next ask."""
    site = fake_distribution(tmp_path / "site", "ko-probe-top", ["ko-probe-dep>=1"])
    monkeypatch.syspath_prepend(str(site))
    reads = []
    real = confined_python.importlib.metadata.distribution
    monkeypatch.setattr(confined_python.importlib.metadata, "distribution",
                        lambda name: reads.append(name) or real(name))
    first = confined_python.installed_requirements("ko_probe_top")
    assert first.path == (str(site.resolve()),) and reads
    reads.clear()
    assert confined_python.installed_requirements("ko_probe_top") == first and not reads
    fake_distribution(site, "ko-probe-dep", [])  # installed beside it afterwards
    assert str(site.resolve() / "ko_probe_dep") in confined_python.installed_requirements("ko_probe_top").read
    shutil.rmtree(site / "ko_probe_dep-1.0.dist-info")  # and removed again
    assert str(site.resolve() / "ko_probe_dep") not in confined_python.installed_requirements("ko_probe_top").read


@needs_landlock
def test_an_import_out_of_memory_beside_others_is_tried_again_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Level 3's VanillaRNN holds a 2 GiB Linear: beside 15 other imports its share of the memory is
    too small, alone it fits. The suite tries such a problem once more after the others, alone with
    all the memory, and says so; a problem that imported is not tried twice."""
    pytest.importorskip("torch", reason="torch is not installed (pip install torch): PyTorch problems cannot be run")
    monkeypatch.setattr(suite_imports, "physical_memory_mb", lambda: 4096)  # 2 GiB each of two, 4 alone
    level = tmp_path / "kb" / "level3"
    level.mkdir(parents=True)
    body = ("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n        self.scratch = {}\n"
            "    def forward(self, x):\n        return x * 2\n"
            "def get_inputs():\n    return [torch.rand(64)]\ndef get_init_inputs():\n    return []\n")
    (level / "1_Small.py").write_text(body)
    hog = "self.scratch = {'held': torch.ones(1792 << 20, dtype=torch.uint8)}"  # touched: counted once alive
    (level / "2_Large.py").write_text(body.replace("self.scratch = {}", hog))
    jobs = [ImportJob(level / name, tmp_path / "out" / name) for name in ("1_Small.py", "2_Large.py")]
    seen = []
    records = {job.problem.name: record for job, record in
               suite_imports.import_many(jobs, 2, ImportLimits(timeout_s=120), lambda i, n, r: seen.append((i, n)))}
    assert records["1_Small.py"]["imported"] and "alone" not in records["1_Small.py"], records
    assert records["2_Large.py"]["imported"] and records["2_Large.py"]["alone"] is True, records
    assert seen == [(1, 2), (2, 2)]
