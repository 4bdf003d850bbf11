"""Tools that freeze a workload for a run and write its replay requests: freeze_workload,
replay_requests (what ``kernelopt optimize`` records; the library side is ``kernelopt_mcp.freeze``)."""

from __future__ import annotations

import contextlib
import re
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import Field

from .. import app
from ..compiler import MAX_SOURCE_BYTES
from ..config import LAUNCH_DEFAULTS, bundled_workloads_dir
from ..data_files import STAGED_DIR, stage_data_files, staged_bytes
from ..errors import KerneloptError
from ..freeze import (
    FreezeError,
    FrozenOutput,
    FrozenWorkload,
    ReplayOutput,
    check_oracle,
    frozen_named,
    frozen_output,
    frozen_workloads,
    output_directory,
    remember,
    write_replay,
)
from ..quota import QuotaError, spec_bytes
from ..server_config import MAX_ITERATIONS, MAX_WARMUP
from ..service import KerneloptService
from ..workload import parse_spec
from ..workspace import check_spec_size
from .roots import SharedRoots, shared_roots
from .session import callers_frozen_workloads, shared_server
from .toolkit import CompileOptions, Launch, Source, SourcePath, WorkloadName, tool, tool_errors, tool_result

WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


def register_freeze_tools(app: MCPServer, service: KerneloptService) -> None:
    @tool(app, "freeze_workload", "Freeze a workload's inputs and expected outputs", WRITES)
    async def freeze(
        spec: Annotated[dict[str, Any], Field(description="a workload.json object, as for create_workload (data files only beneath the server's --data-root directories)")],
        reference_cu: Annotated[str, Field(max_length=MAX_SOURCE_BYTES, description="CUDA source of the reference kernel")],
        ctx: Context,
        initial_cu: Annotated[str | None, Field(max_length=MAX_SOURCE_BYTES, description="CUDA source of the starting kernel (needs spec.initial.launch)")] = None,
        oracle_path: Annotated[str | None, Field(max_length=4096, description="a NumPy oracle (reference.py with reference()) under a workload directory or a --root directory of the server")] = None,
        directory: Annotated[str | None, Field(max_length=4096, description="where to write (a run directory): under the workspace's runs/ (absolute, or relative to the workspace) or an --output-root of the server; default: a new directory under the workspace's runs/frozen/")] = None,
        seed: Annotated[int | None, Field(ge=0, lt=2**63, description="seed of the recorded inputs (repeat a freeze with its answer's seed to get the same inputs); default: a fresh one")] = None,
        warmup: Annotated[int | None, Field(ge=0, le=MAX_WARMUP, description=f"untimed launches per performance case in replay requests (default: the server's, {LAUNCH_DEFAULTS.warmup} unless configured)")] = None,
        iterations: Annotated[int | None, Field(ge=1, le=MAX_ITERATIONS, description=f"timed launches per performance case in replay requests (default: the server's, {LAUNCH_DEFAULTS.iterations} unless configured)")] = None,
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
        allowed directories, the oracle failing."""
        with callers_frozen_workloads(ctx), tool_errors():
            # the same bound as create_workload, before anything is written: a client's freeze makes the
            # server draw and keep every buffer of every case on disk (uncapped, one call wrote 31 GB);
            # and what it writes is reserved in the workspace's quota (repeated calls add up)
            parsed = parse_spec(spec, "spec")
            check_spec_size(parsed, "a frozen workload", service.config.workload_max_bytes)
            _, writes = spec_bytes(parsed)
            writes += staged_bytes(spec)  # the copies of the data files, if any (refused below without data roots)
            target = await anyio.to_thread.run_sync(partial(_directory, service, directory, spec))
            if shared_server(ctx):
                await anyio.to_thread.run_sync(partial(_check_name_free, service, spec, target))
            oracle = await anyio.to_thread.run_sync(partial(_oracle, service, oracle_path))
            arch, _ = await service.target_arch(None)
            try:
                info = await service.device_info()
            except KerneloptError:  # no GPU here: the requests are still written (for sm_90 unless configured)
                info = None
            frozen: FrozenWorkload = await service.run_long("build", partial(
                _freeze_within_quota, service, writes, spec, reference_cu, initial_cu, target, oracle=oracle,
                seed=seed, device=info, arch=arch, cache=service.compile_cache,
                warmup=warmup, iterations=iterations,
            ))
            remember(frozen)
            out = frozen_output(frozen)
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
        into: Annotated[str, Field(max_length=200, description="a directory under the frozen one, e.g. replay (default) or replay/reference")] = "replay",
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
            frozen = frozen_named(workload)
            text, _ = await service.source_text(source, path)
            written, problem = await anyio.to_thread.run_sync(partial(
                write_replay, frozen, text, launch, list(compile_options or []), into,
                reserve=service.quota.reserve,
            ))
            out = ReplayOutput(status="error" if problem else "ok", workload=frozen.name, directory=str(frozen.directory),
                               requests=written, message=problem or "")
        return tool_result(out, out.text())


def _freeze_within_quota(
    service: KerneloptService, writes: int, spec: dict[str, Any], reference_cu: str, initial_cu: str | None,
    target: Path, **kwargs: Any,
) -> FrozenWorkload:
    """freeze_workload with its ``writes`` bytes reserved in the workspace's quota (QuotaError if they do
    not fit), the client's data files first copied beneath the data roots (data_files.py): the frozen
    workload reads only those copies. Blocking: measures the workspace's usage, reads and writes files."""
    try:
        service.quota.claim(writes, f"freezing {spec.get('name')!r}")
    except QuotaError:
        if target.parent == service.config.runs_dir / "frozen":
            with contextlib.suppress(OSError):
                target.rmdir()  # the new empty directory _directory made for this call
        raise
    try:
        staged = stage_data_files(spec, list(service.config.data_roots), target)
        return app.freeze_workload(
            service.settings, staged, reference_cu, initial_cu, target, data_path=partial(_staged, target), **kwargs
        )
    finally:
        service.quota.release(writes)


def _staged(target: Path, raw: str) -> Path:
    """The one kind of data file a frozen spec names after staging: a copy the server wrote."""
    path = Path(raw)
    if not path.is_relative_to(target / STAGED_DIR):
        raise FreezeError(f"internal error: data file {raw!r} was not staged")
    return path


def _directory(service: KerneloptService, raw: str | None, spec: dict[str, Any]) -> Path:
    """The output directory: under the workspace's runs/ (where the quota counts it) or an operator's
    --output-root, never a --root, a client's root or a workload directory; or a new one under runs/frozen/.
    Blocking (resolves paths, makes directories)."""
    config = service.config
    if raw is None:
        runs = config.runs_dir / "frozen"
        runs.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"\W", "_", str(spec.get("name") or "workload"), flags=re.ASCII)[:48]
        return Path(tempfile.mkdtemp(prefix=f"{time.strftime('%Y%m%d-%H%M%S')}-{name}-", dir=runs)).resolve()
    if "\0" in raw or not raw.strip():
        raise FreezeError("directory is empty or contains a NUL byte")
    path = Path(raw).expanduser()
    try:
        real = (path if path.is_absolute() else config.client_home() / path).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop, a name too long
        raise FreezeError(f"{raw}: cannot resolve the path ({exc})") from None
    cache = config.settings.cache_dir or config.workspace / "cache"
    refused = [*config.settings.workload_dirs, config.created_dir, bundled_workloads_dir(), cache, service.private_dir]
    writable = [config.runs_dir, *config.output_roots]  # the caller's own runs/ (its home's, over HTTP with a token)
    target = output_directory(real, writable=[p.resolve() for p in writable], refused=[p.resolve() for p in refused])
    target.mkdir(parents=True, exist_ok=True)
    return target


def _check_name_free(service: KerneloptService, spec: dict[str, Any], target: Path) -> None:
    """On a server with several clients a frozen workload may not take another workload's name
    (it would change what that name measures for everyone); re-freezing into its directory may."""
    name = spec.get("name")
    known = service.workloads()
    if not isinstance(name, str) or name not in known:
        return
    mine = frozen_workloads().get(name)
    if mine is None or mine.parent.parent != target:
        raise FreezeError(
            f"{name!r} is already a {service.origin(known[name])} workload of this server, which other clients may "
            "use; freeze under another name (spec.name)"
        )


def _oracle(service: KerneloptService, raw: str | None) -> Path | None:
    if raw is None:
        return None
    real = service.confine(raw)
    trusted = [*service.settings.workload_dirs, bundled_workloads_dir(), *service.config.extra_roots]
    return check_oracle(real, [p.resolve() for p in trusted])
