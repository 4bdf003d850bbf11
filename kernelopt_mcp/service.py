"""The MCP server's engine room, with no MCP in it: configuration, path confinement, the GPU
queue, prepared sessions, created and frozen workloads, and the compact results the tools return.

The server package maps this onto MCP tools; tests can drive it directly. The work itself is the
application layer's (:mod:`kernelopt_mcp.app`, shared with the CLI), synchronous; here it runs
in worker threads (:func:`anyio.to_thread.run_sync`) so the event loop keeps answering while a
kernel runs:

- One GPU job at a time per device, clients taking turns; a job learns its queue position
  (:mod:`kernelopt_mcp.gpu_queue`), and on a shared server runs at most ``gpu_call_max_s``.
- Every other long job (compiles, workload builds, documentation fetches, device probes) waits
  for a turn of its own kind in the event loop and then runs on threads of its own
  (:mod:`kernelopt_mcp.admission`), so anyio's shared worker threads stay free for cheap calls.
  Each queue is bounded per client and in all; past a bound a call is refused with "busy, retry".
- One persistent harness process per device. Cancelling a call kills it (and keeps it from
  restarting until the job has unwound), so nothing is left running on the GPU.
- One prepared :class:`~kernelopt_mcp.evaluation.session.Session` per workload (a small LRU),
  drawn from a seed fixed for the server's lifetime and never returned to the model, which
  therefore cannot choose inputs.

:class:`KerneloptService` puts the parts together, one per concern, each a tools module's work:

    state       server_state.ServerState: configuration, settings, compile cache, waiting rooms,
                quota, the private directory (what every part shares)
    gpus        device_pool.DevicePool: devices, their queues and prepared sessions, the seeds
    files       client_files.ClientFiles: path confinement, a client's sources and tunable specs
    catalogue   workload_catalogue.WorkloadCatalogue: list, describe, create (tools_workloads)
    checks      kernel_checks.KernelChecks: compile, validate, benchmark (tools_evaluate)
    analysis    kernel_analysis.KernelAnalysis: ncu_profile, autotune, docs_search (tools_analysis)
    frozen      frozen_runs.FrozenRuns: freeze_workload, replay_requests (tools_freeze)
"""

from __future__ import annotations

from .client_files import ClientFiles
from .device_pool import DevicePool
from .frozen_runs import FrozenRuns
from .kernel_analysis import KernelAnalysis
from .kernel_checks import KernelChecks
from .server_config import ServerConfig
from .server_state import ServerState
from .workload_catalogue import WorkloadCatalogue


class KerneloptService:
    """The tools' implementations, independent of MCP: one part per concern over a shared state."""

    def __init__(self, config: ServerConfig) -> None:
        self.state = ServerState(config)
        self.gpus = DevicePool(self.state)
        self.files = ClientFiles(self.state)
        self.catalogue = WorkloadCatalogue(self.state, self.gpus)
        self.checks = KernelChecks(self.state, self.files, self.catalogue, self.gpus)
        self.analysis = KernelAnalysis(self.state, self.files, self.catalogue, self.gpus)
        self.frozen = FrozenRuns(self.state, self.files, self.catalogue, self.gpus)

    @property
    def config(self) -> ServerConfig:
        """The server's configuration; every part reads it at each call (replacing it here is seen by all)."""
        return self.state.config

    @config.setter
    def config(self, config: ServerConfig) -> None:
        self.state.config = config

    def close(self) -> None:
        """Stop every harness and remove the sessions' temporary files."""
        self.gpus.close()
        self.state.close()
