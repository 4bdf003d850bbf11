"""A configured workload whose files change while the server runs is prepared afresh: expected outputs
from the old reference must not judge candidates (kernelopt optimize rewrites its run's configured copy
when it regenerates a failing reference; a person may edit a configured workload). On the pretend GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakegpu import ADD_LAUNCH, TINY_SPEC, in_memory_server, kernel, write_harness

from kernelopt_mcp.config import Settings
from kernelopt_mcp.server_config import ServerConfig

pytestmark = pytest.mark.anyio


async def test_a_changed_reference_is_prepared_again(tmp_path: Path) -> None:
    wl = tmp_path / "extra" / "tiny_cuda"
    wl.mkdir(parents=True)
    spec = {**TINY_SPEC, "name": "tiny_cuda",
            "reference": {"python": None, "cuda": "reference.cu", **TINY_SPEC["reference"]}}
    (wl / "workload.json").write_text(json.dumps(spec))
    (wl / "initial.cu").write_text(kernel())
    (wl / "reference.cu").write_text(kernel("WRONG"))  # no NumPy oracle: the CUDA reference defines correct
    settings = Settings(harness=write_harness(tmp_path, "fake"), workload_dirs=(tmp_path / "extra",), timeout_s=20)
    args = {"workload": "tiny_cuda", "source": kernel(), "launch": ADD_LAUNCH, "iterations": 3, "warmup": 1}
    async with in_memory_server(ServerConfig(settings=settings, workspace=tmp_path / "ws")) as (client, _):
        first = await client.call_tool("benchmark", args)
        assert not first.is_error, first.content
        assert first.structured_content["status"] == "mismatch"  # judged by the wrong reference's outputs
        (wl / "reference.cu").write_text(kernel())
        second = await client.call_tool("benchmark", args)
        assert second.structured_content["status"] == "ok", second.structured_content.get("message")
