"""The MCP server as a client sees it (issue 19): tunable files as resources, titles, completion
of the prompt's and the resource template's arguments, and the client's roots as readable paths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakegpu import kernel, write_harness
from fakegpu import tool_text as text
from mcp import Client
from mcp_types import ListRootsResult, PromptReference, ResourceTemplateReference, Root

from kernelopt_mcp.config import Settings, bundled_workloads_dir
from kernelopt_mcp.server import build_server
from kernelopt_mcp.server_config import ServerConfig

pytestmark = pytest.mark.anyio


@pytest.fixture
def config(tmp_path: Path) -> ServerConfig:
    settings = Settings(harness=write_harness(tmp_path, "nogpu"),
                        workload_dirs=(bundled_workloads_dir(),), timeout_s=20)
    return ServerConfig(settings=settings, workspace=tmp_path / "ws")


async def test_tunable_files_are_resources_and_every_resource_has_a_title(config: ServerConfig) -> None:
    app, service = build_server(config)
    try:
        async with Client(app) as client:
            resources = (await client.list_resources()).resources
            by_uri = {str(r.uri): r for r in resources}
            assert "kernelopt://workloads/sgemm/tunable.json" in by_uri
            assert "kernelopt://workloads/sgemm/tunable.cu" in by_uri
            # the other autotune specs beside tunable.json, and their kernels, with titles that say so
            assert (by_uri["kernelopt://workloads/sgemm/tunable_3xtf32.json"].title == "sgemm: autotune spec "
                    "(tunable_3xtf32.json)")
            assert by_uri["kernelopt://workloads/sgemm/tunable_3xtf32.cu"].title == "sgemm: tunable kernel"
            assert all(r.title for r in resources), [r.name for r in resources if not r.title]
            templates = (await client.list_resource_templates()).resource_templates
            assert templates and all(t.title for t in templates)
            spec = json.loads((await client.read_resource("kernelopt://workloads/sgemm/tunable.json")).contents[0].text)
            assert spec["source"] == "tunable.cu" and "params" in spec
            cu = (await client.read_resource("kernelopt://workloads/sgemm/tunable.cu")).contents[0].text
            assert "#ifndef" in cu
            # through the template too
            doc = await client.read_resource("kernelopt://workloads/softmax/tunable.json")
            assert "params" in json.loads(doc.contents[0].text)
    finally:
        service.close()


async def test_completion_of_the_prompts_workload_and_the_templates_arguments(config: ServerConfig) -> None:
    app, service = build_server(config)
    try:
        async with Client(app) as client:
            done = await client.complete(PromptReference(type="ref/prompt", name="optimize_kernel"),
                                         {"name": "workload", "value": "s"})
            assert done.completion.values == ["sgemm", "softmax"]
            everything = await client.complete(PromptReference(type="ref/prompt", name="optimize_kernel"),
                                               {"name": "workload", "value": ""})
            assert {"vector_add", "transpose", "layernorm"} <= set(everything.completion.values)
            ref = ResourceTemplateReference(type="ref/resource", uri="kernelopt://workloads/{name}/{file}")
            assert (await client.complete(ref, {"name": "name", "value": "vec"})).completion.values == ["vector_add"]
            files = await client.complete(ref, {"name": "file", "value": "t"}, {"name": "sgemm"})
            assert files.completion.values == ["tunable.cu", "tunable.json", "tunable_3xtf32.cu", "tunable_3xtf32.json"]
    finally:
        service.close()


def _roots_callback(*dirs: Path) -> Any:
    async def list_roots(context: Any) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=d.resolve().as_uri(), name=d.name) for d in dirs])  # type: ignore[arg-type]
    return list_roots


async def test_paths_under_the_clients_roots_are_readable(config: ServerConfig, tmp_path: Path) -> None:
    shared = tmp_path / "shared project"  # a space: the root's URI is percent-encoded
    shared.mkdir()
    (shared / "k.cu").write_text(kernel())
    (shared / "notes.txt").write_text("not a kernel")
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "secret.cu").write_text(kernel())
    (shared / "link.cu").symlink_to(outside / "secret.cu")
    app, service = build_server(config)
    try:
        async with Client(app) as client:  # no roots: the file is outside the server's directories
            r = await client.call_tool("compile", {"path": str(shared / "k.cu"), "arch": "sm_90"})
            assert r.is_error and "outside the directories" in text(r)
        async with Client(app, list_roots_callback=_roots_callback(shared)) as client:
            r = await client.call_tool("compile", {"path": str(shared / "k.cu"), "arch": "sm_90"})
            assert not r.is_error, text(r)
            assert r.structured_content is not None and r.structured_content["status"] == "ok"
            # the --root rules still hold: .cu files only, symlinks resolved (out of the root: refused)
            r = await client.call_tool("compile", {"path": str(shared / "notes.txt"), "arch": "sm_90"})
            assert r.is_error and ".cu" in text(r)
            r = await client.call_tool("compile", {"path": str(shared / "link.cu"), "arch": "sm_90"})
            assert r.is_error and "outside the directories" in text(r)
    finally:
        service.close()


def shared_dir(tmp_path: Path) -> Path:
    """A folder a client shares, holding one kernel k.cu."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "k.cu").write_text(kernel())
    return shared

async def test_roots_are_not_used_when_turned_off(config: ServerConfig, tmp_path: Path) -> None:
    shared = shared_dir(tmp_path)
    app, service = build_server(config, client_roots=False)  # HTTP on a non-loopback address
    try:
        async with Client(app, list_roots_callback=_roots_callback(shared)) as client:
            r = await client.call_tool("compile", {"path": str(shared / "k.cu"), "arch": "sm_90"})
            assert r.is_error and "outside the directories" in text(r)
    finally:
        service.close()


async def test_roots_over_the_legacy_handshake(config: ServerConfig, tmp_path: Path) -> None:
    """Clients on protocol revisions before 2026-07-28 answer roots/list over the back-channel."""
    shared = shared_dir(tmp_path)
    app, service = build_server(config)
    try:
        async with Client(app, mode="legacy", list_roots_callback=_roots_callback(shared)) as client:
            r = await client.call_tool("compile", {"path": str(shared / "k.cu"), "arch": "sm_90"})
            assert not r.is_error, text(r)
    finally:
        service.close()
