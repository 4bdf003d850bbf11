"""Many concurrent HTTP clients against one server on the pretend GPU (tests/server_load.py says
what runs and what must hold; tests/gpu/test_server_load_gpu.py is the same on the real GPU)."""

from __future__ import annotations

from pathlib import Path

import anyio
from fakegpu import write_harness, write_tiny_workload
from server_load import LoadPlan, http_server, run_load, still_serves


def test_concurrent_clients_on_one_server(tmp_path: Path) -> None:
    extra = write_tiny_workload(tmp_path / "extra")
    plan = LoadPlan(workload="tiny_add", agree_within=0.0, budget_s=200.0)  # the pretend GPU's times are exact
    harness = write_harness(tmp_path, "fake")
    env = {"KERNELOPT_WORKLOADS": str(extra), "KERNELOPT_TIMEOUT": "5"}
    with http_server(tmp_path / "ws", "--harness", str(harness), env=env) as url:
        async def load() -> None:
            await run_load(url, plan)
            await still_serves(url, plan)

        anyio.run(load)
