"""PyTorch as the reference of an imported problem: expected outputs from the module itself.

A workload with ``reference.torch`` (``kernelopt import-torch``) has no NumPy oracle and no CUDA
reference: its expected outputs are the module's own, computed by torch on the GPU on exactly the
inputs the harness drew. :func:`compute_expected` runs :mod:`._torch_reference_child` once per
preparation (a confined child: the problem file is code and never runs in this process) with one
job per (data set, case). Inputs drawn on the device (``input_draw``) are drawn again in the child by
the harness's own fill kernel under the harness's key (:mod:`.torch_fill`): no input crosses between
the processes. Inputs the harness reads from files (deterministic inputs, or a harness without
device draws) are read by the child from the same files.

Each output (forward's outputs, one file each) is written in its buffer's dtype next to the prepared
Session's other expected values; the harness compares against it on the device (``expected_dtype``),
and a host comparison reads it through a memory map, so a large output is never held in this
process's memory.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .confined_python import ChildLimits, check_plain_tree, read_child_file, run_torch_child
from .errors import WorkloadError
from .workload import Case, Workload, case_shape

__all__ = ["REFERENCE_TIMEOUT_S", "JobOutput", "TorchCheckPlan", "TorchJob", "compute_expected", "jobs_for"]

CHILD_MODULE = "kernelopt_mcp._torch_reference_child"
REFERENCE_TIMEOUT_S = 900.0


@dataclass
class JobOutput:
    """One output buffer of a job: where the child's values for it go, their dtype and shape."""

    name: str
    path: Path
    dtype: str
    shape: tuple[int, ...]


@dataclass
class TorchJob:
    """One (data set, case) for the child, and where its outputs go (forward's, in order)."""

    set_name: str
    case: Case
    request: dict[str, Any]
    outputs: list[JobOutput]


def jobs_for(workload: Workload, set_name: str, cases: list[Case], inputs: dict[str, Any],
             directory: Path) -> list[TorchJob]:
    """The child's jobs for ``cases`` of a data set whose :class:`~.evaluation.inputs.CaseInputs`
    are ``inputs``: each input buffer a device draw (the harness's key: draw 0 of its ``input_draw``
    seed, at its argument's position) or the file the harness reads."""
    imported = workload.spec.imported
    assert imported is not None and imported.outputs
    outs = [workload.signature.param(name) for name in imported.outputs]
    position = {p.name: i for i, p in enumerate(workload.signature.params)}
    jobs = []
    for case in cases:
        ci = inputs[case.name]
        buffers: dict[str, Any] = {}
        for p in workload.signature.inputs:
            entry: dict[str, Any] = {"dtype": p.dtype.value, "shape": list(ci.shapes[p.name])}
            if p.name in ci.draws:
                d = ci.draws[p.name]
                entry["draw"] = {"seed": d.seed, "draw": 0, "argument": position[p.name],
                                 "spec": d.model_dump(exclude={"seed"}, exclude_none=True)}
            else:
                entry["file"] = str(Path(ci.files[p.name]).resolve())
            buffers[p.name] = entry
        outputs = [JobOutput(out.name, directory / set_name / case.name / f"{out.name}.{out.dtype.value}",
                             out.dtype.value, case_shape(out, case.scalars))  # type: ignore[arg-type]
                   for out in outs]
        request = {
            "case": case.name, "set": set_name, "sizes": imported.sizes[case.name], "scalars": case.scalars,
            "buffers": buffers,
            "outputs": [{"name": o.name, "dtype": o.dtype, "elements": int(np.prod(o.shape, dtype=np.int64))}
                        for o in outputs],
        }
        jobs.append(TorchJob(set_name, case, request, outputs))
    return jobs


def compute_expected(
    workload: Workload, jobs: list[TorchJob], *, device: int | str, support: Path | None,
    limits: ChildLimits | None = None,
    workdir: Path | None = None,
) -> tuple[dict[tuple[str, str], dict[str, Any]], str]:
    """Run the child on ``jobs``: per (set, case) its answer, whose ``outputs`` hold per output buffer
    the figures of the values it wrote (``elements``, ``finite``, ``sum_sq``, and ``own_error`` where
    asked), and a line saying what computed them (torch's version, the device).

    Raises:
        WorkloadError: torch is missing, the child cannot be confined or start CUDA, or the module
            fails on a case (the problem's own error, in one line).
    """
    assert workload.torch_problem is not None
    staging = Path(tempfile.mkdtemp(prefix="torch-reference-", dir=workdir))
    try:
        answer_path = staging / "answer.json"
        problem = staging / "problem.py"
        shutil.copyfile(workload.torch_problem, problem)
        imported = workload.spec.imported
        assert imported is not None
        outputs = staging / "out"
        outputs.mkdir()
        for i, j in enumerate(jobs):  # written in the staging directory (the child's only writable one), moved after
            for k, o in enumerate(j.request["outputs"]):
                o["file"] = str(outputs / f"{i}.{k}.bin")
        request = {
            "problem": str(problem), "label": workload.torch_problem.name, "answer": str(answer_path), "device": device,
            "support": str(support.resolve()) if support is not None else None, "seed": imported.seed,
            "forward": imported.forward, "state": imported.state, "jobs": [j.request for j in jobs],
        }
        (staging / "request.json").write_text(json.dumps(request))
        largest = max((int(np.prod(o.shape, dtype=np.int64)) * 8 for j in jobs for o in j.outputs), default=0)
        limits = limits or ChildLimits(timeout_s=REFERENCE_TIMEOUT_S)
        # an output is written whole
        limits = dataclasses.replace(limits, fsize_mb=max(limits.fsize_mb, (largest >> 20) + 64))
        reads = {str(Path(b["file"]).parent) for j in jobs for b in j.request["buffers"].values() if "file" in b}
        if support is not None:
            reads.add(str(support.resolve()))
        result = run_torch_child(CHILD_MODULE, [str(staging / "request.json")], staging=staging, limits=limits,
                                 read=sorted(reads))
        if result.refused is not None:
            if result.missing == "torch":
                raise WorkloadError(f"{workload.name}: PyTorch is the reference of this problem and torch is not "
                                    "installed (pip install torch)")
            raise WorkloadError(f"{workload.name}: the PyTorch reference could not run: {result.refused}")
        try:
            answer = json.loads(read_child_file(answer_path))
        except (OSError, ValueError):
            tail = [line for line in result.stderr_tail.splitlines() if line.strip()]
            why = "timed out" if result.timed_out else f"exit {result.returncode}"
            raise WorkloadError(f"{workload.name}: the PyTorch reference gave no answer ({why}): "
                                f"{tail[-1].strip()[:300] if tail else 'no output'}") from None
        if answer.get("error"):
            raise WorkloadError(f"{workload.name}: the PyTorch reference failed: {answer['error']}")
        done = {(e["set"], e["case"]): e for e in answer.get("jobs", [])}
        for j in jobs:
            entry = done.get((j.set_name, j.case.name))
            if entry is None:
                why = "it timed out" if not answer.get("finished") else "it gave no answer for it"
                raise WorkloadError(f"{workload.name}: the PyTorch reference did not compute case "
                                    f"{j.case.name!r} ({why})")
            if entry["error"]:
                raise WorkloadError(f"{workload.name}: the module fails on case {j.case.name!r}: {entry['error']}")
            missing = [o.name for o in j.outputs if o.name not in (entry.get("outputs") or {})]
            if missing:
                raise WorkloadError(f"{workload.name}: the PyTorch reference wrote no {missing[0]!r} for case "
                                    f"{j.case.name!r}")
        try:  # the problem's code wrote them: plain files only, never a link to another file
            check_plain_tree(outputs)
        except OSError as exc:
            raise WorkloadError(f"{workload.name}: the PyTorch reference's outputs: {exc}") from None
        for i, j in enumerate(jobs):
            for k, o in enumerate(j.outputs):
                o.path.parent.mkdir(parents=True, exist_ok=True)
                os.replace(outputs / f"{i}.{k}.bin", o.path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    where = answer.get("device_name") or "the CPU"
    return done, f"PyTorch {answer.get('torch_version')} on {where}, from the problem file"


@dataclass
class TorchCheckPlan:
    """A performance case's timed launches checked against PyTorch (harness feature
    ``checked_expected``): a hidden seed for the case's timing requests' draws (``planned_seed``,
    sent as their ``fresh_seed`` instead of a new one per request), the measured
    ``samples`` whose outputs are checked and the expected outputs PyTorch computed for the draws
    those launches get (PROTOCOL.md "Checked launches against expected values": events mode, every
    timed launch drawn, sample s gets draw ``warmup + s``; the confirm launch the draw after the
    last measured one), made once per prepared Session and reused by every candidate's timing. Valid for
    timing requests of exactly ``warmup`` and ``iterations`` launches (:meth:`fits`)."""

    planned_seed: int
    warmup: int
    iterations: int
    samples: list[int]
    entries: list[Any]  # CheckedExpected of the samples, one per output each
    confirm: list[Any] = dataclasses.field(default_factory=list)  # CheckedExpected of the confirm launch, one
    # per output (none: a count the rule cannot tell)

    def fits(self, warmup: int | None, iterations: int, mode: str | None, fresh_every_launch: bool) -> bool:
        """Whether a timing request of these launches draws what the plan computed for (with an
        adaptive count, the first ``iterations`` samples are the same; the confirm launch's is not)."""
        return ((warmup, iterations) == (self.warmup, self.iterations) and (mode or "events") == "events"
                and fresh_every_launch)
