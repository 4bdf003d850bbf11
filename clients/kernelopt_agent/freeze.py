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

A workload whose reference is its PyTorch module (``reference.torch``, ``kernelopt import-torch``) is
not frozen: PyTorch computes the expected outputs inside the server on each evaluation's own fresh
draws, which a frozen copy of drawn inputs would replace. The orchestrator (the user's process)
copies the directory the user named, workload.json and the files it names (problem.py, small data
files), to ``workload/<name>/`` in the run directory before it starts the server, and the server
finds that copy as a configured workload (``KERNELOPT_WORKLOADS``), never through a client's spec:
``freeze_workload`` and ``create_workload`` clear ``reference.torch``. Such a run has no replay
requests (the harness alone cannot compute PyTorch's outputs): a candidate is replayed by evaluating
it on the copy (``kernelopt evaluate workload/<name> best.cu``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import anyio

from kernelopt_mcp.errors import WorkloadError
from kernelopt_mcp.launch import LaunchSpec
from kernelopt_mcp.workload import DataFile, Workload, load_workload, parse_spec

from .parts import Parts, launch_path
from .rundir import RunDir

if TYPE_CHECKING:
    from kernelopt_mcp.result_view import EvaluationView

    from .records import CandidateRecord
    from .toolbox import Toolbox

REPLAY = "replay"
REPLAY_REFERENCE = "replay/reference"
WORKLOAD_DIR = "workload"  # the run's workload/<name>/: frozen, or the copy of a PyTorch-reference workload
# what a PyTorch-reference workload may hold for the run to copy it: workload.json, the module and
# small data files (an import never writes anything of full size)
TORCH_COPY_MAX_BYTES = 64 * 2**20
TORCH_EXPECTED = "PyTorch (the workload's module) on each evaluation's own draws, inside kernelopt-mcp"


@dataclass
class FrozenWorkload:
    run: RunDir
    workload: Workload  # the parts as a workload: what the prompts describe
    reference_file: str
    seed: int | None  # None: PyTorch-reference runs draw hidden inputs afresh at every evaluation
    expected_from: str
    expected_cases: list[str]
    nvrtc_version: str | None = None
    directory: Path | None = None  # where the server wrote the files (the run directory when it is local)
    replays: dict[str, dict[str, str]] = field(default_factory=dict)  # into -> {case: request file}
    replay_labels: dict[str, str] = field(default_factory=dict)  # into -> the candidate they replay
    replay_problems: dict[str, str] = field(default_factory=dict)  # into -> why none could be written
    torch: bool = False  # PyTorch is the reference: a copy of the workload, no drawn inputs, no replay requests
    _lock: anyio.Lock = field(default_factory=anyio.Lock)

    @property
    def name(self) -> str:
        return self.workload.name

    def heard(self, result: EvaluationView) -> None:
        """What an evaluation's result says of a PyTorch-reference workload: how the server's PyTorch
        computed the expected outputs, and the NVRTC that compiled (a frozen one has both from the freeze)."""
        if self.torch:
            self.expected_from = result.expected_from or self.expected_from
            self.nvrtc_version = (result.compile.nvrtc_version if result.compile else None) or self.nvrtc_version

    @property
    def case_names(self) -> list[str]:
        return [c.name for c in self.workload.spec.cases]

    @property
    def performance_cases(self) -> list[str]:
        return [c.name for c in self.workload.spec.performance_cases]

    async def keep_replays(self, tools: Toolbox, best: CandidateRecord | None,
                           reference: CandidateRecord | None) -> None:
        """Replay requests for the best candidate (replay/) and the reference (replay/reference/),
        asked of the server whenever either changed; finalize lists the newest. None for a PyTorch-reference
        run: the harness alone cannot replay what PyTorch computes (evaluate on the run's copy instead)."""
        if self.torch:
            return
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
    """Directories the server must read besides the run directory: those of the parts' data files
    (none for a PyTorch-reference workload: the server reads the run's copy of it)."""
    if parts is None or parts.cases is None or parts.torch_reference:
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

    spec = parts.spec(reference_path="reference.cu",
                      initial_path="initial.cu" if parts.initial_cu is not None else None, oracle_path=None)
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
    workload = Workload(spec=parse_spec(spec, "the frozen workload"), reference_cu=parts.reference_cu,
                        initial_cu=parts.initial_cu, oracle_path=oracle, origin="frozen")
    return FrozenWorkload(
        run, workload, ref_file, int(out["seed"]), str(out["expected_from"]), list(out.get("expected_cases") or []),
        nvrtc_version=out.get("nvrtc_version"), directory=Path(str(out.get("directory") or run.path)),
    )


def torch_copy(run_path: Path) -> Path | None:
    """The run's copy of a PyTorch-reference workload (``workload/<name>/`` whose workload.json has
    ``reference.torch``), or None for a run with a frozen workload."""
    for spec in sorted((run_path / WORKLOAD_DIR).glob("*/workload.json")):
        try:
            data = json.loads(spec.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(data, dict) and isinstance(data.get("reference"), dict) and data["reference"].get("torch"):
            return spec.parent
    return None


def workload_dirs(run_path: Path) -> list[Path]:
    """Workload directories the run's server must know besides its configured ones: the parent of the
    run's PyTorch-reference copy (the server finds it there by name, as any configured workload)."""
    return [run_path / WORKLOAD_DIR] if torch_copy(run_path) is not None else []


def copy_torch_workload(parts: Parts, run: RunDir) -> Path:
    """Copy the PyTorch-reference workload the user named into ``workload/<name>/`` of the run: its
    workload.json and the files it names (the module, the references, the initial kernel, data files).
    Done by the orchestrator (the user's process) before the run's server starts; the server then
    evaluates this copy by name, so a later edit of the user's directory does not change the run.

    Raises:
        WorkloadError: the workload no longer loads, names a file outside its directory, or is larger
            than TORCH_COPY_MAX_BYTES (an import writes nothing of full size).
    """
    assert parts.torch_workload is not None
    source = parts.torch_workload
    wl = load_workload(source)  # as it is now: the files copied are the ones checked
    if wl.torch_problem is None:
        raise WorkloadError(f"{source}: its workload.json no longer has reference.torch; start the run again")
    files = _named_files(wl, source)
    total = sum((source / f).stat().st_size for f in files)
    if total > TORCH_COPY_MAX_BYTES:
        raise WorkloadError(
            f"{source}: the workload's files add up to {total / 2**20:.1f} MiB; a PyTorch-reference workload is copied "
            f"into the run and may hold at most {TORCH_COPY_MAX_BYTES // 2**20} MiB (inputs are drawn from generators, "
            "not stored): re-import the problem with `kernelopt import-torch`"
        )
    target = Path(WORKLOAD_DIR) / wl.name
    for name in files:
        run.write_bytes(target / name, (source / name).read_bytes())
    return run.path / target


def _named_files(wl: Workload, root: Path) -> list[str]:
    """workload.json and every file it names, as paths relative to ``root``."""
    spec = wl.spec
    names = ["workload.json", *(n for n in (spec.reference.torch, spec.reference.python, spec.reference.cuda) if n)]
    if spec.initial is not None:
        names.append(spec.initial.source)
    gens = [*spec.inputs.values(), *(g for c in spec.cases for g in c.inputs.values())]
    names += [p for g in gens if isinstance(g, DataFile) for p in (g.path, g.hidden_path) if p]
    real = root.resolve()
    for name in names:
        path = PurePosixPath(name)
        if path.is_absolute() or not (root / name).resolve().is_relative_to(real) or not (root / name).is_file():
            raise WorkloadError(
                f"{root / 'workload.json'}: {name!r} is not a file inside the workload's directory; a "
                "PyTorch-reference workload is copied into the run with the files it names, which must lie beside "
                "workload.json: re-import the problem with `kernelopt import-torch`"
            )
    return list(dict.fromkeys(names))


def torch_workload(parts: Parts, run: RunDir) -> FrozenWorkload:
    """The run's workload where PyTorch is the reference: the copy in the run directory, evaluated by
    name with fresh hidden draws at each evaluation (nothing is drawn to files, no seed is recorded).
    The initial kernel, if any, is written beside it as a frozen run writes it (initial.cu).

    Raises:
        WorkloadError: the run directory holds no copy (copy_torch_workload makes it).
    """
    copy = torch_copy(run.path)
    if copy is None:
        raise WorkloadError(f"{run.path}: no copy of the PyTorch-reference workload under {WORKLOAD_DIR}"
                            "/; start a new run")
    if parts.initial_cu is not None:
        run.write_text("initial.cu", parts.initial_cu)
        _write_launch(run, "initial.cu", parts.initial_launch, parts.initial_options)
    workload = load_workload(copy)
    reference = run.relative(copy / str(workload.spec.reference.torch))
    return FrozenWorkload(run, workload, reference, None, TORCH_EXPECTED, [], directory=run.path, torch=True)


def _write_launch(run: RunDir, source_name: str, launch: LaunchSpec | None, options: list[str]) -> None:
    if launch is None:
        return
    data: dict[str, Any] = {"launch": launch.model_dump(mode="json", exclude_none=True),
                            "compile_options": list(options)}
    run.write_json(launch_path(Path(source_name)), data)

