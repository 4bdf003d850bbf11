"""What a client sees of the tools: the compact default tools/list, the manuals behind it, and the
full listing of a server started for kernelopt optimize (--orchestrator)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fakegpu import ADD_LAUNCH, in_memory_server, kernel, write_tiny_workload
from fakegpu import tool_text as text
from mcp import Client
from mcp.shared.exceptions import MCPError
from test_server import TOOLS, WRITERS, make_config

pytestmark = pytest.mark.anyio

ORCHESTRATOR_TOOLS = {"freeze_workload", "replay_requests"}  # listed only for kernelopt optimize (--orchestrator)
TOOLS_LIST_MAX_BYTES = 30_000


@pytest.fixture
def tiny_dir(tmp_path: Path) -> Path:
    return write_tiny_workload(tmp_path / "extra")


@pytest.fixture
async def nogpu(tmp_path: Path, tiny_dir: Path) -> AsyncIterator[Client]:
    async with in_memory_server(make_config(tmp_path, tiny_dir, "nogpu")) as (client, _):
        yield client


async def test_tools_are_listed_with_schemas_descriptions_and_honest_annotations(
    tmp_path: Path, tiny_dir: Path
) -> None:
    """The full listing kernelopt optimize gets: every tool, its whole manual and its output schema."""
    async with in_memory_server(make_config(tmp_path, tiny_dir, "nogpu"), orchestrator=True) as (client, _):
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOLS | ORCHESTRATOR_TOOLS
    for tool in tools.values():
        assert tool.description and len(tool.description) > 200 and not tool.description.startswith(" ")
        assert tool.output_schema and tool.output_schema["type"] == "object"
        # only docs_search reaches outside (it fetches NVIDIA's documentation)
        assert tool.annotations and tool.annotations.open_world_hint is (tool.name == "docs_search")
    for name in (TOOLS | ORCHESTRATOR_TOOLS) - WRITERS - {"ncu_profile", "autotune"}:
        assert tools[name].annotations.read_only_hint is True and tools[name].annotations.destructive_hint is False
    for name in WRITERS:
        assert tools[name].annotations.read_only_hint is False and tools[name].annotations.destructive_hint is True
    # autotune writes its table and cache into the workspace, changing nothing that exists
    assert (tools["autotune"].annotations.read_only_hint is False
            and tools["autotune"].annotations.destructive_hint is False)
    # ncu_profile writes a report into the workspace but changes nothing that exists
    assert (tools["ncu_profile"].annotations.read_only_hint is False
            and tools["ncu_profile"].annotations.destructive_hint is False)


async def test_the_default_tool_list_is_small_and_keeps_what_an_agent_needs(nogpu: Client) -> None:
    """Every agent session loads tools/list before it starts: at most 30 KB of JSON, with the
    argument schemas intact, a short manual per tool and the rest one resource read away."""
    listed = await nogpu.list_tools()
    size = len(listed.model_dump_json(by_alias=True, exclude_none=True).encode())
    assert size <= TOOLS_LIST_MAX_BYTES, size
    tools = {t.name: t for t in listed.tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description and 80 < len(tool.description) < 1000, (tool.name, tool.description)
        assert f"kernelopt://docs/tools/{tool.name}" in tool.description
        assert tool.output_schema is None and tool.annotations is not None
        assert "title" not in tool.input_schema.get("properties", {}).get("workload", {})
    bench = {name: next(a for a in p.get("anyOf", [p]) if a.get("type") == "integer")  # optional: or null
             for name, p in tools["benchmark"].input_schema["properties"].items() if name in ("warmup", "iterations")}
    assert (bench["warmup"]["maximum"] == 100 and bench["iterations"]["maximum"] == 1000
            and bench["iterations"]["minimum"] == 1)
    assert set(tools["validate"].input_schema["required"]) == {"workload", "launch"}
    launch = tools["validate"].input_schema["$defs"]["LaunchConfig"]
    assert launch["required"] == ["grid", "block"] and launch["additionalProperties"] is False
    # the whole manual and the result's schema are a resource
    manual = (await nogpu.read_resource("kernelopt://docs/tools/benchmark")).contents[0].text
    assert "score_ms" in manual and "L2 cache flushed" in manual and '"speedup"' in manual
    schema = json.loads((await nogpu.read_resource("kernelopt://schema/launch")).contents[0].text)
    assert "box" in json.dumps(schema) and "TMA" in json.dumps(schema)


async def test_the_orchestrators_tools_are_hidden_and_refused_by_default(nogpu: Client) -> None:
    for name in ORCHESTRATOR_TOOLS:
        r = await nogpu.call_tool(name, {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel()})
        assert r.is_error and "--orchestrator" in text(r), text(r)
    with pytest.raises(MCPError):
        await nogpu.read_resource("kernelopt://docs/tools/freeze_workload")
