"""A confined child cannot fill the disk it writes (_confined_child._DiskFloor).

RLIMIT_FSIZE bounds one file; a problem that writes file after file (or a million empty ones)
into its staging directory would fill the file system long before its deadline. The supervisor
watches every file system the child may write and stops the whole tree once one falls under its
floor of free space or inodes, saying which and why. The tests give the child a small tmpfs.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_torch_child import needs_landlock, probe_package

from kernelopt_mcp._confined_child import STOPPED
from kernelopt_mcp.confined_python import ChildLimits, run_confined_python

#: writes files of MiB each (0: empty files) into its working directory, retrying after an error,
#: until it is killed: only the supervisor ends it early
FILL = """
import os, sys, time
mib, n = int(sys.argv[1]), 0
block = b"x" * (mib << 20)
while True:
    try:
        with open(f"f{n}", "wb") as f:
            f.write(block)
        n += 1
    except OSError:
        time.sleep(0.01)
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs of 20,000 inodes (mounting needs root: skipped elsewhere)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,nr_inodes=20000", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"no tmpfs can be mounted here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(tmp_path: Path, disk: Path, mib: int):
    package = probe_package(tmp_path, "fill_probe", FILL)
    staging = disk / "staging"
    staging.mkdir()
    return run_confined_python("fill_probe", [str(mib)], staging=staging, python_path=[str(package.parent)],
                               read=[str(package)], limits=ChildLimits(timeout_s=60))


@needs_landlock
def test_a_child_that_fills_its_disk_is_stopped_at_the_floor(tmp_path: Path, small_disk: Path) -> None:
    result = _fill(tmp_path, small_disk, mib=4)
    assert result.returncode == STOPPED and not result.timed_out, result
    assert "the child was stopped: the file system of" in result.stderr_tail, result.stderr_tail
    assert "under the floor of 32 MiB" in result.stderr_tail, result.stderr_tail  # half of the 64 free at its start


@needs_landlock
def test_a_child_that_makes_files_without_end_is_stopped_at_the_inode_floor(tmp_path: Path, small_disk: Path) -> None:
    result = _fill(tmp_path, small_disk, mib=0)
    assert result.returncode == STOPPED and not result.timed_out, result
    assert "inodes free, under the floor of" in result.stderr_tail, result.stderr_tail
