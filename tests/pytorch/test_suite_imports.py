"""`kernelopt kernelbench` imports each problem in a confined child (kernelopt_mcp/suite_imports.py):
a KernelBench directory is someone else's code. The problem runs with torch stood in (the test needs
no torch: the probe runs as the file executes, before torch computes anything)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_torch_child import fake_distribution, needs_landlock

from kernelopt_mcp import confined_python
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


@needs_landlock
def test_a_suite_problem_runs_confined(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No secret of the caller's environment, no file outside its own directory read or written, no
    process started; the refusal says what the problem raised and the workload directory stays empty."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted-suite")
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text('__version__ = "0.0+stand-in"\ndef set_num_threads(n):\n    pass\n')
    monkeypatch.setattr(confined_python, "installed_requirements",
                        lambda *packages: Installed(path=(str(site),), read=(str(site / "torch"),)))
    secret, outside = tmp_path / "secret.txt", tmp_path / "escaped.txt"
    secret.write_text("sk-planted-file")
    problem = tmp_path / "kb" / "level1" / "1_Probe.py"
    problem.parent.mkdir(parents=True)
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
