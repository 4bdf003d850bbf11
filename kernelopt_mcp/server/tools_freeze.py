"""Tools that freeze a workload for a run and write its replay requests: freeze_workload,
replay_requests (what ``kernelopt optimize`` records; the library side is ``kernelopt_mcp.freeze``)."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import Field

from ..compiler import MAX_SOURCE_BYTES
from ..config import LAUNCH_DEFAULTS
from ..freeze import FrozenOutput, ReplayOutput
from ..server_config import MAX_ITERATIONS, MAX_WARMUP
from ..service import KerneloptService
from .roots import SharedRoots, shared_roots
from .session import callers_frozen_workloads, shared_server
from .toolkit import CompileOptions, Launch, Source, SourcePath, WorkloadName, tool, tool_errors, tool_result

WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


# Parameter descriptions too long for their line (each is part of the tool's manual).
_FREEZE_SPEC = ("a workload.json object, as for create_workload (data files only beneath the server's --data-root "
                "directories)")
_FREEZE_REFERENCE_CU = "CUDA source of the reference kernel"
_FREEZE_INITIAL_CU = "CUDA source of the starting kernel (needs spec.initial.launch)"
_FREEZE_ORACLE_PATH = ("a NumPy oracle (reference.py with reference()) under a workload directory or a --root "
                       "directory of the server")
_FREEZE_DIRECTORY = ("where to write (a run directory): under the workspace's runs/ (absolute, or relative to the "
                     "workspace) or an --output-root of the server; default: a new directory under the workspace's "
                     "runs/frozen/")
_FREEZE_SEED = ("seed of the recorded inputs (repeat a freeze with its answer's seed to get the same inputs); "
                "default: a fresh one")
_FREEZE_WARMUP = ("untimed launches per performance case in replay requests (default: the server's, "
                  f"{LAUNCH_DEFAULTS.warmup} unless configured)")
_FREEZE_ITERATIONS = ("timed launches per performance case in replay requests (default: the server's, "
                      f"{LAUNCH_DEFAULTS.iterations} unless configured)")
_REPLAY_REQUESTS_INTO = "a directory under the frozen one, e.g. replay (default) or replay/reference"


def register_freeze_tools(app: MCPServer, service: KerneloptService) -> None:
    @tool(app, "freeze_workload", "Freeze a workload's inputs and expected outputs", WRITES)
    async def freeze(
        spec: Annotated[dict[str, Any], Field(description=_FREEZE_SPEC)],
        reference_cu: Annotated[str, Field(max_length=MAX_SOURCE_BYTES, description=_FREEZE_REFERENCE_CU)],
        ctx: Context,
        initial_cu: Annotated[str | None, Field(max_length=MAX_SOURCE_BYTES, description=_FREEZE_INITIAL_CU)] = None,
        oracle_path: Annotated[str | None, Field(max_length=4096, description=_FREEZE_ORACLE_PATH)] = None,
        directory: Annotated[str | None, Field(max_length=4096, description=_FREEZE_DIRECTORY)] = None,
        seed: Annotated[int | None, Field(ge=0, lt=2**63, description=_FREEZE_SEED)] = None,
        warmup: Annotated[int | None, Field(ge=0, le=MAX_WARMUP, description=_FREEZE_WARMUP)] = None,
        iterations: Annotated[int | None, Field(ge=1, le=MAX_ITERATIONS, description=_FREEZE_ITERATIONS)] = None,
    ) -> Annotated[CallToolResult, FrozenOutput]:
        """Freeze a workload for a recorded run: draw every case's inputs once from `seed` and write
        them as files (inputs/<case>/<buffer>.bin, listed with their sha256 in input_cases.json),
        compute the expected outputs with the NumPy oracle when there is one (expected/<case>/<out>.bin,
        float64, with expected/manifest.json; cases whose outputs exceed 1 GiB are left to the CUDA
        reference), and write a workload directory (workload/<name>/: workload.json whose inputs are
        those files, reference.cu, initial.cu) under `directory`. The workload is then known by its
        name to validate, benchmark, ncu_profile, autotune and replay_requests until the server stops:
        over stdio (one client) ahead of any workload of the same name; over HTTP (clients may be
        several) its name must be one no other workload has. Every input file records the
        generator it was drawn from, so evaluations still draw their hidden inputs from a seed nobody
        sees: the recorded files are for auditing and replay, not what the timed launches are checked on.
        `spec` is a workload.json object (kernelopt://schema/workload); its reference.cuda,
        initial.source and reference.python are replaced by `reference_cu`, `initial_cu` and
        `oracle_path`. Data files ("generator": "file") are refused unless the server's operator
        named data roots (--data-root): then each is a .bin or .npy file relative to (or absolute
        under) one, regular, no symlink on the way, holding exactly the bytes its cases need; it is
        copied into the frozen directory. The oracle is Python run inside the server, so it must lie under a directory the
        server's operator named (a workload directory or --root), never one a client shares.
        Cost: drawing inputs and running the oracle, seconds to a minute for large cases; no GPU.
        Tool errors: an invalid spec (the message names the field), a directory or file outside the
        allowed directories, the oracle failing."""  # noqa: E501 (the tool's manual, served as written)
        with callers_frozen_workloads(ctx), tool_errors():
            out = await service.frozen.freeze(
                spec, reference_cu, initial_cu, oracle_path=oracle_path, directory=directory, seed=seed, warmup=warmup,
                iterations=iterations, shared=shared_server(ctx),
            )
        return tool_result(out, out.text(), drop_nulls=False)

    @tool(app, "replay_requests", "Write a kernel's replay requests", WRITES)
    async def replay_requests(
        workload: WorkloadName,
        launch: Launch,
        ctx: Context,
        shared: SharedRoots,
        source: Source = None,
        path: SourcePath = None,
        compile_options: CompileOptions = None,
        into: Annotated[str, Field(max_length=200, description=_REPLAY_REQUESTS_INTO)] = "replay",
    ) -> Annotated[CallToolResult, ReplayOutput]:
        """Write self-contained harness requests for a kernel on a workload you froze
        (freeze_workload): one JSON file per case under <directory>/<into>/, naming the frozen input
        files, the compiled CUBIN and output files under <into>/outputs/<case>/; `kernelopt-harness
        run FILE` replays one case without Python or this server (performance cases with the
        freeze's warmup and iterations). Nothing is launched here. Result status ok with the request
        paths, or error with why (the kernel does not compile, its launch is invalid for a case).
        Cost: one compile (cached) and a file per case. Tool errors: a workload you did not freeze,
        bad arguments."""
        with shared_roots(shared), callers_frozen_workloads(ctx), tool_errors():
            out = await service.frozen.replay(workload, source, path, launch, compile_options, into)
        return tool_result(out, out.text())

