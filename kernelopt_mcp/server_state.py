"""What every part of the MCP server's service shares: its configuration, the library's settings,
the compile cache, the waiting rooms of the long jobs, the workspace quota and the private
directory where sessions keep their inputs."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from . import app
from .admission import server_rooms
from .compile_report import CompileOutput
from .compiler import CompileResult
from .quota import WorkspaceQuota
from .server_config import CLIENT_ID, ServerConfig

T = TypeVar("T")


class ServerState:
    """The server's shared means (the parts of :class:`~kernelopt_mcp.service.KerneloptService`
    read ``config`` at each call: it may be replaced while the server runs)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        # the one cache location (Settings.from_env: KERNELOPT_CACHE, else the XDG cache directory);
        # settings built without it (a library caller, tests) keep a cache in the workspace
        self.settings = replace(config.settings, cache_dir=config.settings.cache_dir or config.workspace / "cache")
        app.warn_if_unconfined_compiles(self.settings)  # say it at start-up, not at the first compile
        self.compile_cache = app.compile_cache(self.settings)
        self.rooms = server_rooms(app.compile_concurrency(self.settings), config.queue_bounds)
        self.quota = WorkspaceQuota(config.workspace, config.workspace_quota_bytes)
        # Sessions keep inputs (and the seed) here: outside every root, and refused by confinement.
        self.private_dir = Path(tempfile.mkdtemp(prefix="kernelopt-mcp-")).resolve()

    async def run_long(self, kind: str, fn: Callable[[], T]) -> T:
        """``fn()`` as a long job of ``kind`` (admission.ROOMS): it waits for a turn in the event loop
        (cancellable), then runs on that kind's threads, never anyio's shared ones. Raises ServerBusy
        when the kind's queue is full for the calling client or in all."""
        return await self.rooms[kind].run(fn, CLIENT_ID.get())

    async def compile_text(
        self, text: str, arch: str, *, arch_from: str = "argument", options: list[str] | None = None,
        filename: str = "kernel.cu",
    ) -> tuple[CompileResult, CompileOutput]:
        """A compile: from the cache at once (a cheap lookup), else in its turn in the compile queue."""
        args: dict[str, Any] = {"arch_from": arch_from, "options": options or [], "filename": filename,
                                "cache": self.compile_cache}
        hit = await anyio.to_thread.run_sync(partial(app.cached_compile_source, self.settings, text, arch, **args))
        return (hit if hit is not None
                else await self.run_long("compile", partial(app.compile_source, self.settings, text, arch, **args)))

    def close(self) -> None:
        """Remove the private directory (the sessions' inputs and seeds)."""
        shutil.rmtree(self.private_dir, ignore_errors=True)
