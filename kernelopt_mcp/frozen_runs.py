"""The MCP server's recorded runs: a workload frozen for a client (its inputs and expected outputs
written once, :mod:`kernelopt_mcp.freeze`) and a kernel's replay requests beside it, with the
server's policy around them: where a client may have them written, which names a frozen workload
may take on a server with several clients, where an oracle may come from, and what the
workspace's quota lets it keep."""

from __future__ import annotations

import contextlib
import re
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from . import app
from .client_files import ClientFiles
from .config import bundled_workloads_dir
from .data_files import STAGED_DIR, stage_data_files, staged_bytes
from .device_pool import DevicePool
from .errors import KerneloptError
from .freeze import (
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
from .launch import LaunchSpec
from .quota import QuotaError, spec_bytes
from .server_state import ServerState
from .workload import parse_spec
from .workload_catalogue import WorkloadCatalogue
from .workspace import check_spec_size


@dataclass(eq=False)  # a service part: identity, not value
class FrozenRuns:
    """The freeze_workload and replay_requests tools' work."""

    state: ServerState
    files: ClientFiles
    catalogue: WorkloadCatalogue
    gpus: DevicePool

    async def freeze(
        self, spec: dict[str, Any], reference_cu: str, initial_cu: str | None, *, oracle_path: str | None = None,
        directory: str | None = None, seed: int | None = None, warmup: int | None = None, iterations: int | None = None,
        shared: bool = False,
    ) -> FrozenOutput:
        """Freeze ``spec`` for a recorded run (see the freeze_workload tool) and remember it for the
        calling client. ``shared``: the server may have several clients, so the workload may not
        take a name another workload has."""
        # the same bound as create_workload, before anything is written: a client's freeze makes the
        # server draw and keep every buffer of every case on disk (uncapped, one call wrote 31 GB);
        # and what it writes is reserved in the workspace's quota (repeated calls add up)
        parsed = parse_spec(spec, "spec")
        check_spec_size(parsed, "a frozen workload", self.state.config.workload_max_bytes)
        _, writes = spec_bytes(parsed)
        writes += staged_bytes(spec)  # the copies of the data files, if any (refused below without data roots)
        target = await anyio.to_thread.run_sync(partial(self._directory, directory, spec))
        if shared:
            await anyio.to_thread.run_sync(partial(self._check_name_free, spec, target))
        oracle = await anyio.to_thread.run_sync(partial(self._oracle, oracle_path))
        arch, _ = await self.gpus.target_arch(None)
        try:
            info = await self.gpus.device_info()
        except KerneloptError:  # no GPU here: the requests are still written (for sm_90 unless configured)
            info = None
        frozen: FrozenWorkload = await self.state.run_long("build", partial(
            self._freeze_within_quota, writes, spec, reference_cu, initial_cu, target, oracle=oracle,
            seed=seed, device=info, arch=arch, cache=self.state.compile_cache, warmup=warmup, iterations=iterations,
        ))
        remember(frozen)
        return frozen_output(frozen)

    async def replay(
        self, workload: str, source: str | None, path: str | None, launch: LaunchSpec,
        compile_options: list[str] | None,
        into: str = "replay",
    ) -> ReplayOutput:
        """Write a kernel's replay requests beside a workload the calling client froze (see the
        replay_requests tool); a kernel that does not compile or launch is the answer's error."""
        frozen = frozen_named(workload)
        text, _ = await self.files.source_text(source, path)
        written, problem = await anyio.to_thread.run_sync(partial(
            write_replay, frozen, text, launch, list(compile_options or []), into, reserve=self.state.quota.reserve,
        ))
        return ReplayOutput(status="error" if problem else "ok", workload=frozen.name, directory=str(frozen.directory),
                            requests=written, message=problem or "")

    def _freeze_within_quota(
        self, writes: int, spec: dict[str, Any], reference_cu: str, initial_cu: str | None, target: Path, **kwargs: Any,
    ) -> FrozenWorkload:
        """freeze_workload with its ``writes`` bytes reserved in the workspace's quota (QuotaError if they do
        not fit), the client's data files first copied beneath the data roots (data_files.py): the frozen
        workload reads only those copies. Blocking: measures the workspace's usage, reads and writes files."""
        quota, config = self.state.quota, self.state.config
        try:
            quota.claim(writes, f"freezing {spec.get('name')!r}")
        except QuotaError:
            if target.parent == config.runs_dir / "frozen":
                with contextlib.suppress(OSError):
                    target.rmdir()  # the new empty directory _directory made for this call
            raise
        try:
            staged = stage_data_files(spec, list(config.data_roots), target)
            return app.freeze_workload(
                self.state.settings, staged, reference_cu, initial_cu, target,
                data_path=partial(_staged, target), **kwargs
            )
        finally:
            quota.release(writes)

    def _directory(self, raw: str | None, spec: dict[str, Any]) -> Path:
        """The output directory: under the workspace's runs/ (where the quota counts it) or an operator's
        --output-root, never a --root, a client's root or a workload directory; or a new one under runs/frozen/.
        Blocking (resolves paths, makes directories)."""
        config = self.state.config
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
        refused = [*config.settings.workload_dirs, config.created_dir, bundled_workloads_dir(), cache,
                   self.state.private_dir]
        # the caller's own runs/ (its home's, over HTTP with a token)
        writable = [config.runs_dir, *config.output_roots]
        target = output_directory(real, writable=[p.resolve() for p in writable],
                                  refused=[p.resolve() for p in refused])
        target.mkdir(parents=True, exist_ok=True)
        return target

    def _check_name_free(self, spec: dict[str, Any], target: Path) -> None:
        """On a server with several clients a frozen workload may not take another workload's name
        (it would change what that name measures for everyone); re-freezing into its directory may."""
        name = spec.get("name")
        known = self.catalogue.workloads()
        if not isinstance(name, str) or name not in known:
            return
        mine = frozen_workloads().get(name)
        if mine is None or mine.parent.parent != target:
            raise FreezeError(
                f"{name!r} is already a {self.catalogue.origin(known[name])} workload of this server, which other "
                "clients may use; freeze under another name (spec.name)"
            )

    def _oracle(self, raw: str | None) -> Path | None:
        """The NumPy oracle at ``raw``: under a directory the operator named, never one a client shares."""
        if raw is None:
            return None
        real = self.files.confine(raw)
        trusted = [*self.state.settings.workload_dirs, bundled_workloads_dir(), *self.state.config.extra_roots]
        return check_oracle(real, [p.resolve() for p in trusted])


def _staged(target: Path, raw: str) -> Path:
    """The one kind of data file a frozen spec names after staging: a copy the server wrote."""
    path = Path(raw)
    if not path.is_relative_to(target / STAGED_DIR):
        raise FreezeError(f"internal error: data file {raw!r} was not staged")
    return path
