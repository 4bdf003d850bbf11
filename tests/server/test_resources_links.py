"""An autotune spec served as an MCP resource is the workload's own regular file: a link named
tunable_<x>.json that leads out of the workload directory is not listed (so never read)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from kernelopt_mcp.server.resources import _tunable_files
from kernelopt_mcp.workload import load_workload

REPO = Path(__file__).resolve().parents[2]


def test_a_linked_spec_is_not_a_resource(tmp_path: Path) -> None:
    shutil.copytree(REPO / "workloads" / "sgemm", tmp_path / "sgemm")
    secret = tmp_path / "secret.json"
    secret.write_text("{}")
    os.symlink(secret, tmp_path / "sgemm" / "tunable_evil.json")
    files = _tunable_files(load_workload(tmp_path / "sgemm"))
    assert "tunable_evil.json" not in files
    assert files[:2] == ["tunable.json", "tunable.cu"] and "tunable_3xtf32.json" in files
