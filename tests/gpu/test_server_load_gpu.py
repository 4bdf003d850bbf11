"""The load test of tests/server_load.py on the real GPU: many concurrent HTTP clients against
one kernelopt-mcp server with the real harness (issue 13, item 8: 8 clients benchmarking one
kernel, plus a hang, a trap and a client that disconnects, crashed one benchmark in 1 of 3 runs).
Run with --run-gpu; repeated three times, as the H200 run that found the crash was."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from server_load import LoadPlan, http_server, run_load, still_serves

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("run", range(3))
@pytest.mark.timeout(600)
def test_concurrent_clients_on_one_server_gpu(tmp_path: Path, harness_binary: Path, run: int) -> None:
    # identical work agrees on the GPU within run-to-run noise (the H200 run: 0.15% CV)
    plan = LoadPlan(workload="vector_add", agree_within=0.10, budget_s=500.0)
    env = {"KERNELOPT_TIMEOUT": "15"}
    with http_server(tmp_path / "ws", "--harness", str(harness_binary), env=env) as url:
        async def load() -> None:
            await run_load(url, plan)
            await still_serves(url, plan)

        anyio.run(load)
