"""The server's GPUs on a Ray cluster (``kernelopt-mcp --ray ADDRESS|auto``): one actor per GPU.

Each actor (``num_gpus=1``; Ray sets its CUDA_VISIBLE_DEVICES, so its GPU is ordinal 0 there) has
what a local device slot has: its own harness process, compile cache (in a temporary directory
of its node) and prepared sessions, one per workload, drawn from the server's seed for that
workload so that every GPU sees the same inputs. The server queues jobs per actor exactly as per
local device and records every answer itself; an actor that dies raises
:class:`~kernelopt_mcp.tune.workers.WorkerLost` and the server runs the job on another. The
seed goes to the actor's process (as it goes to a local session), never into a request the
candidate's harness gets beyond what a local harness gets, nor into a result returned to a client.

Validate and benchmark run on the actors; the autotune tool measures on the one actor its job was
handed (a tuning run across every actor is ``kernelopt tune --ray``); profiling needs a local GPU.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from . import app
from .config import Settings
from .evaluation.candidate import Candidate, EvaluateOptions
from .evaluation.device import DeviceInfo
from .evaluation.evaluate import prepare
from .evaluation.session import Session
from .results import CheckedEvaluation
from .torch_comparison import TorchComparison
from .tune.ray_workers import _ray, call_actor, connect
from .tune.spec import Tunable
from .tune.tuner import TuneResult
from .workload import Workload

__all__ = ["RayDevice", "ray_devices"]


class _Device:
    """The actor: a GPU's harness, compile cache and prepared sessions."""

    def __init__(self, settings: Settings) -> None:
        scratch = Path(tempfile.mkdtemp(prefix="kernelopt-ray-"))
        self.settings = replace(settings, device=0, devices=None, cache_dir=scratch / "cache")
        self.scratch = scratch
        self.info = app.gpu_info(self.settings)
        self.harness = app.open_harness(self.settings)
        self.cache = app.compile_cache(self.settings)
        self.sessions: dict[str, Session] = {}

    def describe(self) -> tuple[str, dict[str, Any]]:
        ray = _ray()
        ids = ",".join(str(g) for g in ray.get_gpu_ids())
        return f"ray {ray.util.get_node_ip_address()} GPU {ids}", self.info.model_dump(mode="json")

    def _session(self, wl: Workload, key: str, seed: int) -> Session:
        session = self.sessions.get(key)
        if session is None or session.loaded != wl:
            if session is not None:
                session.close()
            workdir = Path(tempfile.mkdtemp(prefix=f"{wl.name}-", dir=self.scratch))
            session = app.open_session(self.settings, wl, self.harness, self.info, seed=seed, workdir=workdir,
                                       cache=self.cache)
            self.sessions[key] = session
        prepare(session)
        return session

    def evaluate(
        self, wl: Workload, key: str, seed: int, candidate: Candidate, options: EvaluateOptions, benchmark: bool,
    ) -> CheckedEvaluation:
        return app.evaluate_kernel(self._session(wl, key, seed), candidate, options, benchmark=benchmark)

    def beside_pytorch(self, wl: Workload, options: EvaluateOptions,
                       checked: CheckedEvaluation) -> TorchComparison | None:
        return app.beside_pytorch(self.settings, wl, self.info, options, checked)

    def tune(self, wl: Workload, key: str, seed: int, tunable: Tunable, options: EvaluateOptions,
             kwargs: dict[str, Any]) -> TuneResult:
        return app.tune_kernel(self._session(wl, key, seed), tunable, options=options, **kwargs)

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()
        self.harness.close()


class RayDevice:
    """The server's handle on one actor (its calls block: the server makes them in the job's thread)."""

    def __init__(self, handle: Any, label: str, info: DeviceInfo) -> None:
        self.handle, self.label, self.info = handle, label, info

    def call(self, method: str, *args: Any) -> Any:
        """``method(*args)`` on the actor; WorkerLost when the actor (or its node) is gone."""
        return call_actor(self.handle, method, *args, label=self.label)

    def close(self) -> None:
        ray = _ray()
        try:
            ray.get(self.handle.close.remote())
        except ray.exceptions.RayActorError:
            pass
        ray.kill(self.handle)


def ray_devices(settings: Settings, address: str) -> list[RayDevice]:
    """One actor per GPU of the Ray cluster at ``address`` (KerneloptError: no Ray, no cluster, no GPU)."""
    ray = _ray()
    count = connect(address)
    actor = ray.remote(num_gpus=1, max_restarts=0, max_task_retries=0)(_Device)
    handles = [actor.remote(settings) for _ in range(count)]
    described = ray.get([h.describe.remote() for h in handles])
    return [RayDevice(h, label, DeviceInfo.model_validate(info))
            for h, (label, info) in zip(handles, described, strict=True)]
