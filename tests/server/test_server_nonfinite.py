"""A kernel that writes nothing leaves the harness's NaN poison in its outputs: the MCP tools
report it as a mismatch whose non-finite numbers are JSON strings ("nan", "inf"), never a tool
error (the adversarial suite's vector_add_writes_nothing.cu, on the pretend GPU)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fakegpu import ADD_LAUNCH, in_memory_server, kernel, write_harness, write_tiny_workload
from mcp import Client

from kernelopt_mcp.config import Settings, bundled_workloads_dir
from kernelopt_mcp.server_config import ServerConfig

pytestmark = pytest.mark.anyio


@pytest.fixture
async def fake(tmp_path: Path) -> AsyncIterator[Client]:
    settings = Settings(harness=write_harness(tmp_path, "fake"), timeout_s=20,
                        workload_dirs=(bundled_workloads_dir(), write_tiny_workload(tmp_path / "extra")))
    async with in_memory_server(ServerConfig(settings=settings, workspace=tmp_path / "ws")) as (client, _):
        yield client


@pytest.mark.parametrize("tool", ["validate", "benchmark"])
async def test_unwritten_outputs_are_a_mismatch_with_json_safe_numbers(fake: Client, tool: str) -> None:
    r = await fake.call_tool(tool, {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel("NAN")})
    assert not r.is_error, r.content
    out = r.structured_content
    assert out["status"] == "mismatch"
    json.dumps(out, allow_nan=False)  # strict JSON
    check = next(c for c in out["cases"] if c["outputs"])["outputs"][0]
    assert check["nonfinite"] == check["mismatches"] > 0
    assert check["max_abs_error"] == "inf"
    assert check["first_mismatches"] and all(m["actual"] == "nan" for m in check["first_mismatches"])
