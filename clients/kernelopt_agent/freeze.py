"""The run's frozen workload: parts written to the run directory, inputs drawn once, expected
outputs from the NumPy oracle, and a workload directory for kernelopt-mcp whose inputs are
those very files, so that what the server checks and times is what the run records and what
its replay requests feed the harness. Each frozen file records the generator it was drawn from
(``drawn_from``, written by :func:`~kernelopt_mcp.inputs.materialize`): a file ignores the seed,
so without it the evaluator's hidden data sets would be these very bytes; with it, they (and the
harness's fresh inputs for timed launches) are drawn again from the generator.

Replay requests are built by the library's :class:`~kernelopt_mcp.evaluate.Evaluator`
(``request_for``) over the frozen workload without its references: building a request
compiles (NVRTC, no GPU) and writes files; nothing is launched here. Every launch happens in
the server, through its tools.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kernelopt_mcp.compiler import CompileCache
from kernelopt_mcp.errors import HarnessError
from kernelopt_mcp.evaluation.evaluate import Candidate, EvaluateOptions, Evaluator
from kernelopt_mcp.gpu import DeviceInfo
from kernelopt_mcp.evaluation.inputs import fresh_seed
from kernelopt_mcp.launch import LaunchSpec
from kernelopt_mcp.evaluation.oracle import run_oracle
from kernelopt_mcp.workload import Workload, load_workload

from .parts import Parts, launch_path
from .rundir import RunDir

MAX_ORACLE_OUTPUT_BYTES = 2**30  # expected outputs of larger cases are left to the CUDA reference


class _NoHarness:
    """Stands in for the harness where requests are only written (replay files), never sent."""

    def __init__(self, device: int) -> None:
        self.device = device

    def request(self, *args: Any, **kwargs: Any) -> Any:
        raise HarnessError("internal error: the orchestrator builds harness requests but never runs them")


@dataclass
class FrozenWorkload:
    run: RunDir
    workload: Workload
    builder: Evaluator
    reference_file: str
    seed: int
    expected_from: str
    expected_cases: list[str]

    @property
    def name(self) -> str:
        return self.workload.name

    @property
    def case_names(self) -> list[str]:
        return [c.name for c in self.workload.spec.cases]

    @property
    def performance_cases(self) -> list[str]:
        return [c.name for c in self.workload.spec.performance_cases]

    def write_replay(self, source: str, launch: LaunchSpec, options: list[str], directory: str) -> tuple[dict[str, str], str | None]:
        """Harness requests for every case under ``directory`` (outputs to ``directory/outputs/<case>/``).

        Returns ({case: request path relative to the run}, None), or ({}, problem).
        """
        candidate = Candidate(source, launch, list(options), Path(directory).name)
        written: dict[str, str] = {}
        for case in self.workload.spec.cases:
            out_dir = self.run.path / directory / "outputs" / case.name
            request, _, problem = self.builder.request_for(
                candidate, case.name, out_dir, timing=case.kind == "performance"
            )
            if request is None:
                return {}, problem or "the candidate cannot be built"
            path = self.run.write_json(Path(directory) / f"{case.name}.json", request)
            written[case.name] = self.run.relative(path)
        return written, None


def freeze(
    parts: Parts, run: RunDir, device: DeviceInfo, arch: str, *, ordinal: int = 0, seed: int | None = None,
    warmup: int | None = None, iterations: int | None = None,
) -> FrozenWorkload:
    """Write the parts, draw the inputs, compute expected outputs; returns the frozen workload.

    Raises:
        WorkloadError, InputError: the parts do not make a loadable workload, a data file is
            missing or changed, the oracle fails.
    """
    assert parts.signature is not None and parts.cases is not None and parts.reference_cu is not None
    seed = fresh_seed() if seed is None else seed
    ref_file = "reference.cu" if parts.reference_generated else "supplied-reference.cu"
    run.write_text(ref_file, parts.reference_cu)
    _write_launch(run, ref_file, parts.reference_launch, parts.reference_options)
    if parts.initial_cu is not None:
        run.write_text("initial.cu", parts.initial_cu)
        _write_launch(run, "initial.cu", parts.initial_launch, parts.initial_options)
    oracle = None
    if parts.oracle is not None:
        oracle = run.write_text("reference.py", parts.oracle.read_text(encoding="utf-8"))
    run.write_json("signature.json", parts.signature_json())

    wl_dir = run.path / "workload" / parts.name
    spec = parts.spec(
        reference_path=str(run.path / ref_file),
        initial_path=str(run.path / "initial.cu") if parts.initial_cu is not None else None,
        oracle_path=str(oracle) if oracle else None,
    )
    run.write_json(wl_dir.relative_to(run.path) / "workload.json", spec)
    drawn = load_workload(wl_dir)
    builder = Evaluator(
        dataclasses.replace(drawn, reference_cu=None, oracle_path=None), _NoHarness(ordinal), device,  # type: ignore[arg-type]
        workdir=run.path, seed=seed, arch=arch, compile_cache=CompileCache(),
        options=EvaluateOptions(warmup=10 if warmup is None else warmup, iterations=100 if iterations is None else iterations),
    )
    builder.prepare(time_reference=False)  # materializes inputs/<case>/<buffer>.bin and a manifest

    manifest_path = run.path / "inputs" / "input_cases.json"
    manifest = json.loads(manifest_path.read_text())
    frozen_cases = []
    for case in manifest["cases"]:
        inputs = {name: {**gen, "path": str(run.path / "inputs" / gen["path"])} for name, gen in case["inputs"].items()}
        frozen_cases.append({**case, "inputs": inputs})
        for gen in case["inputs"].values():
            gen["path"] = f"inputs/{gen['path']}"
    run.write_json("input_cases.json", manifest)
    manifest_path.unlink()
    run.write_json(wl_dir.relative_to(run.path) / "workload.json", {**spec, "inputs": {}, "cases": frozen_cases})
    frozen = load_workload(wl_dir)

    expected_cases: list[str] = []
    expected_manifest: dict[str, dict[str, Any]] = {}
    if frozen.oracle_path is not None:
        for case in frozen.spec.cases:
            ci = builder.inputs[case.name]
            out_bytes = sum(int(np.prod(ci.shapes[p.name], dtype=np.int64)) * 8 for p in frozen.signature.outputs)
            if out_bytes > MAX_ORACLE_OUTPUT_BYTES:
                continue
            # raw little-endian float64, like the inputs: readable without numpy's .npy parser
            for name, array in run_oracle(frozen, case.name, ci.arrays, ci.shapes).items():
                data = np.ascontiguousarray(array, dtype="<f8")
                path = run.write_bytes(Path("expected") / case.name / f"{name}.bin", data.tobytes())
                expected_manifest.setdefault(case.name, {})[name] = {
                    "path": run.relative(path), "dtype": "float64", "shape": list(data.shape),
                }
            expected_cases.append(case.name)
        run.write_json("expected/manifest.json", expected_manifest)
    expected_from = (
        f"NumPy oracle (reference.py) on {len(expected_cases)} of {len(frozen.spec.cases)} cases, in expected/"
        if frozen.oracle_path is not None else
        "no NumPy oracle: expected outputs come from the CUDA reference inside kernelopt-mcp "
        "(replay/reference/<case>.json writes them with the harness alone)"
    )
    return FrozenWorkload(run, frozen, builder, ref_file, seed, expected_from, expected_cases)


def _write_launch(run: RunDir, source_name: str, launch: LaunchSpec | None, options: list[str]) -> None:
    if launch is None:
        return
    data: dict[str, Any] = {"launch": launch.model_dump(mode="json", exclude_none=True), "compile_options": list(options)}
    run.write_json(launch_path(Path(source_name)), data)
