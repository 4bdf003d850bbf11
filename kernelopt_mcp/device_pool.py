"""The MCP server's GPUs: a :class:`~kernelopt_mcp.gpu_queue.DeviceSlot` per device (its harness,
queue and prepared sessions), the input seed of each workload, and GPU jobs run on them.

- The devices are probed once (``--devices``, default every visible one; or one Ray actor per GPU
  of a cluster with ``--ray``): they do not change while the server runs.
- A job runs alone on the free device, else the least queued, in the calling client's turn
  (:func:`kernelopt_mcp.gpu_queue.run_on_device`: cancellable, with progress, stopped past the
  server's per-call cap); a lost Ray actor is dropped and the job runs again on another.
- One prepared :class:`~kernelopt_mcp.evaluation.session.Session` per (workload, device) in a
  small LRU, drawn from a seed fixed for the server's lifetime and never returned to a client
  (:func:`without_seed`), which therefore cannot choose inputs.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TypeVar

import anyio

from . import app
from .errors import KerneloptError
from .evaluation.device import DeviceInfo
from .evaluation.evaluate import prepare
from .evaluation.inputs import new_input_seed
from .evaluation.outcomes import EvaluationResult
from .evaluation.session import Session
from .gpu_queue import DeviceSlot, GpuQueue, Notify, ProgressFn, pick_device, run_on_device
from .results import GpuProperties, gpu_properties_output
from .server_config import CLIENT_ID, GPU_CALL_MAX_FLAG
from .server_state import ServerState
from .tune.workers import WorkerLost
from .workload import Workload

T = TypeVar("T")


class DevicePool:
    """The server's devices, their queues and prepared sessions, and the workloads' seeds."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.slots: dict[int, DeviceSlot] = {}
        self.seeds: dict[str, int] = {}
        self._arch_probe: tuple[str, str] | None = None
        self._infos: list[DeviceInfo] | None = None  # every device GPU jobs spread over, the first one primary
        self._probing = anyio.Lock()  # one device probe at a time: those waiting take its answer

    async def devices(self) -> list[DeviceInfo]:
        """Every device this server spreads GPU jobs over (``--devices``, default every visible one),
        one harness and queue each; probed until they answer once (devices do not change while the
        server runs). Raises DeviceUnavailable, ToolchainNotFound."""
        config, settings = self.state.config, self.state.settings
        async with self._probing:
            if self._infos is None and config.ray_address:
                from .ray_devices import ray_devices

                remote = await self.state.run_long("probe", partial(ray_devices, settings, config.ray_address))
                for i, device in enumerate(remote):
                    self.slots[i] = DeviceSlot(i, GpuQueue(config.queue_bounds), info=device.info, remote=device)
                self._infos = [device.info for device in remote]
            if self._infos is None:
                infos = await self.state.run_long("probe", partial(app.gpu_infos, settings))
                for info in infos:
                    self.slots[info.ordinal] = DeviceSlot(info.ordinal, GpuQueue(config.queue_bounds), info=info)
                self._infos = infos
        return self._infos

    async def device_info(self) -> DeviceInfo:
        """The first device's properties (the compile target and what gpu_info reports first)."""
        return (await self.devices())[0]

    async def properties(self) -> GpuProperties:
        """What the gpu_properties tool reports: the first device, and every device jobs spread over."""
        return gpu_properties_output(await self.device_info(), await self.devices())

    async def target_arch(self, arch: str | None) -> tuple[str, str]:
        """(arch, where it came from): the argument, the server setting, the GPU, or sm_90."""
        settings = self.state.settings
        if arch or settings.arch:
            return app.target_arch(settings, arch)
        async with self._probing:  # asked once: the GPU does not change while the server runs
            if self._arch_probe is None:
                self._arch_probe = await self.state.run_long("probe", partial(app.target_arch, settings, None))
        return self._arch_probe

    def seed(self, wl: Workload) -> tuple[str, int]:
        """(key, seed) of ``wl``'s inputs on every device: keyed by its directory, not its name, so two
        clients' workloads of one name (or a frozen one and the configured one it shadows) never share one."""
        key = _workload_key(wl)
        return key, self.seeds.setdefault(key, new_input_seed())

    async def run(self, fn: Callable[[DeviceSlot, ProgressFn], T], notify: Notify) -> T:
        """Run ``fn(device, progress)`` in a worker thread, alone on a device (the free one, else the
        least queued: :func:`kernelopt_mcp.gpu_queue.pick_device`; see
        :func:`kernelopt_mcp.gpu_queue.run_on_device`: queued in the calling client's turn,
        cancellable, with progress, stopped past the server's per-call cap)."""
        await self.devices()
        while True:
            dev = pick_device(list(self.slots.values()))
            try:
                return await run_on_device(
                    dev, partial(app.open_harness, replace(self.state.settings, device=dev.ordinal)), fn, notify,
                    client=CLIENT_ID.get(), max_s=self.state.config.gpu_call_max_s, cap_name=GPU_CALL_MAX_FLAG,
                )
            except WorkerLost as exc:  # a Ray actor died: forget it, run the job on another (none: the error)
                if len(self.slots) == 1:
                    raise KerneloptError(f"every Ray actor of this server was lost; the last: {exc}") from None
                self.slots.pop(dev.ordinal, None)
                await notify(f"{exc}; the job runs again on another GPU")

    def session(self, wl: Workload, info: DeviceInfo, dev: DeviceSlot, progress: ProgressFn) -> Session:
        """The workload's prepared session on this device (inputs, expected outputs, reference timed).
        Call it inside a job (:meth:`run`), on the job's device."""
        key, seed = self.seed(wl)
        session = dev.sessions.get(key)
        if session is not None and session.loaded != wl:
            # its files changed since it was prepared (e.g. kernelopt optimize regenerated a failing reference
            # in the run's configured copy): expected outputs from the old files would judge every candidate
            dev.sessions.pop(key, None)
            _discard(session)
            session = None
        if session is None:
            if dev.harness is None:
                raise KerneloptError("internal error: a GPU job runs without its device's harness")
            session = app.open_session(
                self.state.settings, wl, dev.harness, info, seed=seed,
                workdir=Path(tempfile.mkdtemp(prefix=f"{wl.name}-", dir=self.state.private_dir)),
                cache=self.state.compile_cache,
            )
            dev.sessions[key] = session
            while len(dev.sessions) > self.state.config.max_prepared:
                _, evicted = dev.sessions.popitem(last=False)
                _discard(evicted)
        dev.sessions.move_to_end(key)
        session.report_to(progress)
        if not session.prepared:  # say why the first call on a workload takes longer
            progress(f"preparing {wl.name}: inputs, expected outputs, timing the CUDA reference "
                     "(once per server session)", 0, 1)
            try:
                prepare(session)
            except BaseException:
                dev.sessions.pop(key, None)
                _discard(session)
                raise
        return session

    def forget(self, directory: Path) -> None:
        """Drop the prepared sessions and seed of the workload in ``directory`` (replaced on disk)."""
        key = str(directory.resolve())
        for dev in self.slots.values():
            session = dev.sessions.pop(key, None)
            if session is not None:
                _discard(session)
        self.seeds.pop(key, None)

    def close(self) -> None:
        """Stop every harness and actor and close the sessions."""
        for dev in self.slots.values():
            for session in dev.sessions.values():
                session.close()
            dev.sessions.clear()
            if dev.harness is not None:
                dev.harness.close()
            if dev.remote is not None:
                dev.remote.close()


def without_seed(result: EvaluationResult) -> EvaluationResult:
    """``result`` without its input seed: the server's seed is never shown to a client (tool
    results, resources, files under the roots), so the model cannot choose or predict inputs."""
    return result.model_copy(update={"seed": None})


def _workload_key(wl: Workload) -> str:
    """What prepared sessions and seeds are keyed by: the workload's directory (resolved)."""
    return str(wl.root.resolve()) if wl.root is not None else f"<inline>/{wl.name}"


def _discard(session: Session) -> None:
    session.close()
    shutil.rmtree(session.workdir, ignore_errors=True)
