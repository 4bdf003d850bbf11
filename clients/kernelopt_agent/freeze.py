"""The run's frozen workload, made by the server: the orchestrator writes the parts to the run
directory and calls kernelopt-mcp's ``freeze_workload`` tool, which draws the inputs once, computes
the expected outputs with the NumPy oracle and writes them, with a workload directory whose inputs
are those very files, into the run directory; from then on the server evaluates that workload by
name, so what it checks and times is what the run records. Replay requests for the best candidate
and the reference come from its ``replay_requests`` tool, written as soon as either changes (an
interrupted run keeps them). Nothing here imports the evaluation library: a server on another
machine would do the same work (its files then stay in its workspace).

What the server writes (see ``kernelopt_mcp.freeze``): ``workload/<name>/``, ``inputs/``,
``input_cases.json``, ``expected/`` (with an oracle) and ``replay/``. Each recorded input file
keeps the generator it was drawn from (``drawn_from``), so the server's hidden data sets are still
drawn from a seed nobody sees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from kernelopt_mcp.errors import WorkloadError
from kernelopt_mcp.launch import LaunchSpec
from kernelopt_mcp.workload import DataFile, Workload, parse_spec

from .parts import Parts, launch_path
from .rundir import RunDir

if TYPE_CHECKING:
    from .records import CandidateRecord
    from .toolbox import Toolbox

REPLAY = "replay"
REPLAY_REFERENCE = "replay/reference"


@dataclass
class FrozenWorkload:
    run: RunDir
    workload: Workload  # the parts as a workload: what the prompts describe
    reference_file: str
    seed: int
    expected_from: str
    expected_cases: list[str]
    nvrtc_version: str | None = None
    directory: Path | None = None  # where the server wrote the files (the run directory when it is local)
    replays: dict[str, dict[str, str]] = field(default_factory=dict)  # into -> {case: request file}
    replay_labels: dict[str, str] = field(default_factory=dict)  # into -> the candidate they replay
    replay_problems: dict[str, str] = field(default_factory=dict)  # into -> why none could be written
    _lock: anyio.Lock = field(default_factory=anyio.Lock)

    @property
    def name(self) -> str:
        return self.workload.name

    @property
    def case_names(self) -> list[str]:
        return [c.name for c in self.workload.spec.cases]

    @property
    def performance_cases(self) -> list[str]:
        return [c.name for c in self.workload.spec.performance_cases]

    async def keep_replays(self, tools: Toolbox, best: CandidateRecord | None, reference: CandidateRecord | None) -> None:
        """Replay requests for the best candidate (replay/) and the reference (replay/reference/),
        asked of the server whenever either changed; finalize lists the newest."""
        async with self._lock:  # lanes finish concurrently: one writer at a time, the newest best wins
            for into, rec in ((REPLAY, best), (REPLAY_REFERENCE, reference)):
                if rec is None or self.replay_labels.get(into) == rec.label:
                    continue
                written, problem = await self.write_replay(tools, rec.source, rec.launch, rec.compile_options, into)
                if problem is not None:
                    self.replay_problems[into] = f"{rec.label}: {problem}"
                    continue
                self.replays[into], self.replay_labels[into] = written, rec.label
                self.replay_problems.pop(into, None)

    async def write_replay(
        self, tools: Toolbox, source: str, launch: dict[str, Any] | LaunchSpec, options: list[str], into: str
    ) -> tuple[dict[str, str], str | None]:
        """Harness requests for every case under ``into`` (outputs to ``into/outputs/<case>/``), by the server.

        Returns ({case: request path relative to the run}, None), or ({}, problem).
        """
        launch_json = launch.model_dump(mode="json", exclude_none=True) if isinstance(launch, LaunchSpec) else launch
        args: dict[str, Any] = {"workload": self.name, "source": source, "launch": launch_json, "into": into}
        if options:
            args["compile_options"] = list(options)
        result = await tools.call("replay_requests", args)
        if result.is_error or result.status != "ok":
            return {}, result.structured.get("message") or result.text or "the server wrote no replay requests"
        base = Path(str(result.structured.get("directory") or self.run.path))
        return {case: self.run.relative(base / path) for case, path in result.structured["requests"].items()}, None


def shared_dirs(parts: Parts | None) -> list[Path]:
    """Directories the server must read besides the run directory: those of the parts' data files."""
    if parts is None or parts.cases is None:
        return []
    gens = [*parts.cases.inputs.values(), *(g for c in parts.cases.cases for g in c.inputs.values())]
    dirs = [Path(p).parent for g in gens if isinstance(g, DataFile) for p in (g.path, g.hidden_path) if p]
    return list(dict.fromkeys(d.resolve() for d in dirs))


async def freeze(
    parts: Parts, run: RunDir, tools: Toolbox, *, seed: int | None = None,
    warmup: int | None = None, iterations: int | None = None,
) -> FrozenWorkload:
    """Write the parts to the run directory and have the server freeze them there.

    Raises:
        WorkloadError: the parts do not make a workload the server accepts, a data file is missing
            or changed, the oracle fails (the server's message).
    """
    assert parts.signature is not None and parts.cases is not None and parts.reference_cu is not None
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

    spec = parts.spec(reference_path="reference.cu", initial_path="initial.cu" if parts.initial_cu is not None else None,
                      oracle_path=None)
    args: dict[str, Any] = {"spec": spec, "reference_cu": parts.reference_cu, "directory": str(run.path)}
    if parts.initial_cu is not None:
        args["initial_cu"] = parts.initial_cu
    if oracle is not None:
        args["oracle_path"] = str(oracle)
    for key, value in (("seed", seed), ("warmup", warmup), ("iterations", iterations)):
        if value is not None:
            args[key] = value
    result = await tools.call("freeze_workload", args)
    if result.is_error:
        raise WorkloadError(f"kernelopt-mcp could not freeze the workload: {result.text}")
    out = result.structured
    workload = Workload(spec=parse_spec(spec, "the frozen workload"), reference_cu=parts.reference_cu, initial_cu=parts.initial_cu,
                        oracle_path=oracle, origin="frozen")
    return FrozenWorkload(
        run, workload, ref_file, int(out["seed"]), str(out["expected_from"]), list(out.get("expected_cases") or []),
        nvrtc_version=out.get("nvrtc_version"), directory=Path(str(out.get("directory") or run.path)),
    )


def _write_launch(run: RunDir, source_name: str, launch: LaunchSpec | None, options: list[str]) -> None:
    if launch is None:
        return
    data: dict[str, Any] = {"launch": launch.model_dump(mode="json", exclude_none=True), "compile_options": list(options)}
    run.write_json(launch_path(Path(source_name)), data)

