"""How much a client may make the server keep on disk.

``create_workload`` and ``freeze_workload`` are reachable by any MCP client, and each makes the
server write on the client's behalf: a frozen workload keeps every input of every case and the
float64 expected outputs (one freeze of 60 cases of 256 MiB buffers wrote 31 GB before a bound
existed). Two bounds, enforced where the server writes and before it writes:

- **per workload** (``--workload-max-gib``, default 4 GiB): the buffers of all cases together;
- **per workspace** (``--workspace-quota-gib``, default 64 GiB): everything under the workspace's
  ``workloads/`` and ``runs/``, and what calls still in flight have reserved.

Those two directories hold only what the server wrote: a client cannot make it write anywhere
else in the workspace, nor name a directory of its own (freeze_workload writes under ``runs/`` or
an operator's ``--output-root``). So the usage, measured from the files (``lstat`` sizes, symlinks
not followed), is what the server wrote, never a file someone planted where the server once wrote
(counted, a sparse 4 TiB file beside a frozen run would block every later write, across restarts). Writes
under an ``--output-root`` are reserved while they are written, not counted after: the operator
named that directory. A write reserves its estimate under a lock first, so concurrent calls cannot
all pass the check and then all write.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from .workload import WorkloadSpec, case_shape

GIB = 2**30
DEFAULT_WORKLOAD_MAX_BYTES = 4 * GIB
DEFAULT_WORKSPACE_QUOTA_BYTES = 64 * GIB


class QuotaError(ValueError):
    """The request would exceed a disk bound; the message names it and what to do."""


def spec_bytes(spec: WorkloadSpec) -> tuple[int, int]:
    """(bytes of every buffer of every case, bytes a freeze writes: the inputs as they are and the
    outputs as float64 expected values), in Python ints (no overflow)."""
    buffers = frozen = 0
    for case in spec.cases:
        for p in spec.signature.buffers:
            count = math.prod(case_shape(p, case.scalars))
            size = count * p.dtype.itemsize
            buffers += size
            frozen += size if p.role != "out" else count * 8
            if p.role == "inout":
                frozen += count * 8
    return buffers, frozen


#: what a created or frozen workload's buffers cost the server
STORED = "inputs are kept on disk and expected outputs in memory"


def check_workload_bytes(spec: WorkloadSpec, what: str, limit: int, per_buffer: int, cost: str = STORED) -> int:
    """Refuse a workload with a buffer over ``per_buffer`` bytes or all its buffers over ``limit``
    (``cost``: what they cost the server, said in the refusal); return the total."""
    for case in spec.cases:
        for p in spec.signature.buffers:
            size = math.prod(case_shape(p, case.scalars)) * p.dtype.itemsize
            if size > per_buffer:
                raise QuotaError(f"case {case.name!r}: buffer {p.name!r} would be {size} bytes; the limit is "
                                 f"{per_buffer}")
    total, _ = spec_bytes(spec)
    if total > limit:
        raise QuotaError(
            f"the cases' buffers add up to {total / GIB:.2f} GiB; {what} may use at most {limit / GIB:g} GiB over "
            f"all cases ({cost}); use fewer or smaller performance cases, or start kernelopt-mcp with a larger "
            "--workload-max-gib"
        )
    return total


def tree_bytes(root: Path) -> int:
    """Bytes of the regular files under ``root`` (lstat sizes; symlinks are not followed, so a link
    to a large file outside counts as the link)."""
    total = 0
    stack = [root]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(Path(entry.path))
                        else:
                            total += entry.stat(follow_symlinks=False).st_size
                    except OSError:  # removed meanwhile
                        continue
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
    return total


class WorkspaceQuota:
    """The workspace's disk quota: measured usage plus in-flight reservations, under one lock."""

    def __init__(self, workspace: Path, limit: int) -> None:
        self.workspace = workspace
        self.limit = limit
        self._lock = threading.Lock()
        self._reserved = 0

    def usage(self) -> int:
        """Bytes the server keeps for clients now: what it wrote under workloads/, runs/ and clients/
        (each token's own workloads/ and runs/)."""
        return sum(tree_bytes(self.workspace / d) for d in ("workloads", "runs", "clients"))

    @contextlib.contextmanager
    def reserve(self, nbytes: int, what: str) -> Iterator[None]:
        """Hold ``nbytes`` of the quota while the caller writes ``what``; refuse if it does not fit.
        After the block the reservation ends (what was written is then counted from the files)."""
        self.claim(nbytes, what)
        try:
            yield
        finally:
            self.release(nbytes)

    def claim(self, nbytes: int, what: str) -> None:
        """Reserve ``nbytes`` for ``what`` (QuotaError if they do not fit); :meth:`release` ends it."""
        with self._lock:
            used = self.usage() + self._reserved
            if used + nbytes > self.limit:
                raise QuotaError(
                    f"{what} would write about {nbytes / GIB:.2f} GiB, and this server already keeps "
                    f"{used / GIB:.2f} GiB of created and frozen workloads (workspace quota {self.limit / GIB:g} GiB, "
                    f"--workspace-quota-gib): remove old runs under {self.workspace / 'runs'}, workloads under "
                    f"{self.workspace / 'workloads'}, or ask the operator for a larger quota"
                )
            self._reserved += nbytes

    def release(self, nbytes: int) -> None:
        with self._lock:
            self._reserved -= nbytes
