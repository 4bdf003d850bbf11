"""A tuning run's workers on a Ray cluster: one actor per GPU (``num_gpus=1``).

Ray (an optional extra: ``pip install "kernelopt-mcp[ray]"``) places each actor on a node with a
free GPU and sets its ``CUDA_VISIBLE_DEVICES`` to that GPU, so inside the actor the GPU is ordinal
0. Each actor builds what a local device has (``make``, from the application layer): its own
harness process, its own compile cache in a temporary directory of its node, and a session whose
inputs are made on its GPU from the run's seed. The actor's harness gets exactly the requests a
local harness gets; the seed stays in the actor's process, never in anything a candidate reads.
Answers come back to the driver, which records them in the one run directory. An actor that dies
(its process, or its node) raises :class:`~kernelopt_mcp.tune.workers.WorkerLost`: the
dispatcher retries its configuration on another actor, and no answer already recorded is lost.

The workload's files and the harness binary must be at the same paths on every node (a shared
file system, or the same install); the driver needs no GPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..errors import KerneloptError
from ..evaluation.candidate import Candidate, EvaluateOptions
from ..evaluation.device import DeviceInfo
from ..evaluation.outcomes import EvaluationResult
from .workers import Worker, WorkerLost

__all__ = ["RAY_MISSING", "RayWorker", "connect", "ray_workers"]

RAY_MISSING = (
    "--ray needs Ray, which is not installed: pip install \"kernelopt-mcp[ray]\" (or pip install ray), "
    "then start or join a cluster (ray start --head) and pass --ray auto or --ray HOST:PORT"
)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise KerneloptError(RAY_MISSING) from None
    return ray


def call_actor(handle: Any, method: str, *args: Any, label: str = "a Ray actor") -> Any:
    """``method(*args)`` on the actor ``handle``, waited for; WorkerLost when its process or node is gone
    (the caller retries the job elsewhere)."""
    ray = _ray()
    try:
        return ray.get(getattr(handle, method).remote(*args))
    except ray.exceptions.RayActorError as exc:
        raise WorkerLost(f"{label}: {type(exc).__name__}, the actor's process or node is gone") from None


def connect(address: str) -> int:
    """Join the Ray cluster at ``address`` ("auto": the one this machine belongs to), unless this
    process already joined one; returns the cluster's GPUs.

    Raises:
        KerneloptError: Ray missing, no cluster at ``address``, or a cluster without GPUs.
    """
    ray = _ray()
    if not ray.is_initialized():
        try:
            ray.init(address=address, log_to_driver=False, logging_level="WARNING")
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise KerneloptError(
                f"--ray {address}: cannot join a Ray cluster there ({exc}); start one with `ray start --head "
                "--num-gpus N` on the head node and `ray start --address HEAD:6379` on the others"
            ) from None
    gpus = int(ray.cluster_resources().get("GPU", 0))
    if gpus < 1:
        raise KerneloptError(
            f"the Ray cluster at {address} has no GPUs: start its nodes with GPUs (`ray start --num-gpus N`)"
        )
    return gpus


class _Evaluator:
    """The actor: a local worker on the GPU Ray gave it."""

    def __init__(self, make: Callable[[], Worker]) -> None:
        self.worker = make()

    def describe(self) -> tuple[str, str, dict[str, Any], int]:
        import ray

        info = getattr(getattr(self.worker, "session", None), "device", None)
        ids = ",".join(str(g) for g in ray.get_gpu_ids())
        label = f"ray {ray.util.get_node_ip_address()} GPU {ids}"
        return label, self.worker.model, info.model_dump(mode="json") if info is not None else {}, os.getpid()

    def prepare(self) -> float | None:
        return self.worker.prepare()

    def evaluate(self, candidate: Candidate, options: EvaluateOptions, beat_ms: float | None) -> EvaluationResult:
        return self.worker.evaluate(candidate, options, beat_ms)

    def close(self) -> None:
        self.worker.close()


class RayWorker:
    """The driver's handle on one actor."""

    def __init__(self, handle: Any, label: str, model: str, device: DeviceInfo | None, pid: int) -> None:
        self.handle, self.label, self.model, self.device, self.pid = handle, label, model, device, pid

    def _call(self, method: str, *args: Any) -> Any:
        return call_actor(self.handle, method, *args, label=self.label)

    def prepare(self) -> float | None:
        value: float | None = self._call("prepare")
        return value

    def evaluate(self, candidate: Candidate, options: EvaluateOptions, beat_ms: float | None) -> EvaluationResult:
        result: EvaluationResult = self._call("evaluate", candidate, options, beat_ms)
        return result

    def close(self) -> None:
        ray = _ray()
        try:
            ray.get(self.handle.close.remote())
        except ray.exceptions.RayActorError:
            pass  # already gone
        ray.kill(self.handle)


def ray_workers(make: Callable[[], Worker], count: int) -> list[RayWorker]:
    """``count`` actors, one GPU each, each running ``make()`` (picklable: a module function's
    partial) to build its worker. Started together; an actor that fails to start is an error."""
    ray = _ray()
    actor = ray.remote(num_gpus=1, max_restarts=0, max_task_retries=0)(_Evaluator)
    handles = [actor.remote(make) for _ in range(count)]
    workers = []
    for handle, (label, model, info, pid) in zip(handles, ray.get([h.describe.remote() for h in handles]), strict=True):
        workers.append(RayWorker(handle, label, model, DeviceInfo.model_validate(info) if info else None, pid))
    return workers
