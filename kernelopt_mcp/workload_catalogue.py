"""The MCP server's workloads: every one it knows by name (bundled, configured, created by the
calling client, frozen by it), where each came from, and the creation of new ones in the
calling client's part of the workspace (:mod:`kernelopt_mcp.workspace`, :mod:`kernelopt_mcp.torch_workspace`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from .compiler import CompileCache
from .config import Settings, bundled_workloads_dir, list_workloads
from .device_pool import DevicePool
from .errors import KerneloptError, did_you_mean
from .freeze import frozen_workloads
from .quota import WorkspaceQuota
from .results import CreatedWorkload, WorkloadDescription, WorkloadList, WorkloadSummary, author_of
from .results import describe as describe_workload
from .server_config import NAME_RE, ServerConfig
from .server_state import ServerState
from .workload import Workload, load_workload
from .workspace import RequestError, create_workload


class WorkloadCatalogue:
    """The workloads by name, their origin, and creating one (what
    :class:`~kernelopt_mcp.workspace.Workspace` needs)."""

    def __init__(self, state: ServerState, gpus: DevicePool) -> None:
        self.state = state
        self.gpus = gpus

    @property
    def config(self) -> ServerConfig:
        return self.state.config

    @property
    def settings(self) -> Settings:
        return self.state.settings

    @property
    def compile_cache(self) -> CompileCache:
        return self.state.compile_cache

    @property
    def quota(self) -> WorkspaceQuota:
        return self.state.quota

    def workloads(self) -> dict[str, Path]:
        """Every workload by name; those frozen through the server (freeze_workload) win."""
        return {**list_workloads(self.config.workload_settings), **frozen_workloads()}

    def origin(self, directory: Path) -> str:
        """Where the workload in ``directory`` came from: frozen, created, bundled or configured."""
        if directory.resolve() in {p.resolve() for p in frozen_workloads().values()}:
            return "frozen"
        parent = directory.resolve().parent
        if parent == self.config.created_dir.resolve():
            return "created"
        if parent == bundled_workloads_dir().resolve():
            return "bundled"
        return "configured"

    def load(self, name: str) -> Workload:
        """A workload by name (never by path: names are identifiers)."""
        known = self.workloads()
        if not NAME_RE.match(name) or name not in known:
            raise RequestError(
                f"no workload {name!r}{did_you_mean(name, known)} (known: {', '.join(sorted(known)) or 'none'}; "
                "list_workloads describes them; create_workload adds one)"
            )
        return load_workload(known[name])

    async def listing(self) -> WorkloadList:
        """Every workload with its description, prototype and case counts (see the list_workloads
        tool); one that does not load is an error line, not an exception."""
        return await anyio.to_thread.run_sync(self._listing)

    def _listing(self) -> WorkloadList:
        rows, errors = [], []
        for name, directory in self.workloads().items():
            try:
                wl = self.load(name)
            except (KerneloptError, ValueError) as exc:
                errors.append(f"{name}: {exc}")
                continue
            origin = self.origin(directory)
            rows.append(WorkloadSummary(
                name=name, origin=origin, author=author_of(origin), description=wl.spec.description,
                c_prototype=wl.signature.c_prototype(),
                correctness_cases=sum(c.kind == "correctness" for c in wl.spec.cases),
                performance_cases=len(wl.spec.performance_cases),
            ))
        return WorkloadList(workloads=rows, errors=errors)

    async def describe(self, name: str) -> WorkloadDescription:
        """Everything needed to write a kernel for the workload (see the describe_workload tool)."""
        wl = await anyio.to_thread.run_sync(self.load, name)
        return describe_workload(wl, self.origin(wl.root or Path()))

    async def create(
        self, spec: dict[str, Any], reference_cu: str | None, initial_cu: str | None, overwrite: bool,
        torch_problem: str | None = None,
    ) -> CreatedWorkload:
        """A workload stored from ``spec`` and its kernels, or imported from ``torch_problem``
        (see the create_workload tool), in its turn among the server's workload builds."""
        if torch_problem is not None:
            if reference_cu is not None:
                raise ValueError("torch_problem: the module (run by torch) is the reference; leave reference_cu out")
            launch = (spec.get("initial") or {}).get("launch") if isinstance(spec.get("initial"), dict) else None
            tolerance = spec.get("tolerance", "strict")
            return await self.state.run_long("build", lambda: self.create_torch_workload(
                spec.get("name"), torch_problem, initial_cu, launch, overwrite, tolerance,
            ))
        arch, _ = await self.gpus.target_arch(None)
        return await self.state.run_long("build",
                                         lambda: self.create_workload(spec, reference_cu, initial_cu, overwrite, arch))

    def create_workload(
        self, spec: dict[str, Any], reference_cu: str | None, initial_cu: str | None, overwrite: bool, arch: str
    ) -> CreatedWorkload:
        """Validate and store a workload in the workspace. Blocking (compiles, writes files)."""
        created = create_workload(self, spec, reference_cu, initial_cu, overwrite, arch)
        self.gpus.forget(Path(created.path))
        return created

    def create_torch_workload(
        self, name: str | None, problem: str, initial_cu: str | None, initial_launch: dict[str, Any] | None,
        overwrite: bool,
        tolerance: Any = "strict",
    ) -> CreatedWorkload:
        """Import a PyTorch problem into the workspace, where the operator allowed it (see torch_workspace).
        Blocking (runs the importer)."""
        from .torch_workspace import create_torch_workload

        settings = self.settings
        created = create_torch_workload(self, name, problem, initial_cu=initial_cu, initial_launch=initial_launch,
                                        overwrite=overwrite, allowed=settings.allow_torch_problems,
                                        compile_limits=settings.compile_limits(), tolerance=tolerance)
        self.gpus.forget(Path(created.path))
        return created
