"""The server's private input seeds never reach a client (issue 13, item 2).

After autotune, kernelopt://runs/tune/<dir>/tune.json carried .best.seed and .untuned.seed equal
to the session's private seed, and `compile {"path": "cache/tune/tune.jsonl"}` printed it in its
log (the tune cache lives in the workspace, which is a root). Here every tool runs on the pretend
GPU (tests/fakegpu.py), and after each one every resource (listed, and every instance of every
template), every tool output and every file under the roots is searched for the seeds, in decimal
and in hex.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from fakegpu import ADD_LAUNCH, TINY_SPEC, in_memory_server, kernel, write_harness, write_tiny_workload
from fakegpu import tool_text as text
from mcp import Client
from test_profiler import stub  # noqa: F401  (fixture: a stub ncu)

from kernelopt_mcp.config import Settings, bundled_workloads_dir
from kernelopt_mcp.server_config import ServerConfig
from kernelopt_mcp.service import KerneloptService

TUNE = Path(__file__).resolve().parents[1] / "fixtures" / "tune"
pytestmark = pytest.mark.anyio


def _config(tmp_path: Path, ncu: Path) -> ServerConfig:
    settings = Settings(
        harness=write_harness(tmp_path, "fake"), ncu=ncu, timeout_s=20, iterations=5, warmup=1,
        workload_dirs=(bundled_workloads_dir(), write_tiny_workload(tmp_path / "extra")),
    )
    return ServerConfig(settings=settings, workspace=tmp_path / "ws", extra_roots=(TUNE,))


def private_seeds(service: KerneloptService) -> set[int]:
    """Every input seed the server holds: each workload's, and each session's hidden ones."""
    seeds = set(service.gpus.seeds.values())
    for dev in service.gpus.slots.values():
        for ev in dev.sessions.values():
            seeds.add(ev.seed)
            for data in vars(ev).values():  # the hidden data sets (timed check, ...) carry their own
                seed = getattr(data, "seed", None)
                if isinstance(seed, int) and not isinstance(seed, bool):
                    seeds.add(seed)
    return seeds


def needles(seeds: set[int]) -> list[str]:
    """The spellings of the seeds to look for (lower-case text is searched)."""
    return sorted({spelling for s in seeds for spelling in (str(s), f"{s:x}", f"{s:#x}")})


async def everything_readable(client: Client) -> dict[str, str]:
    """uri -> text of every resource: the listed ones and every instance of every template."""
    out: dict[str, str] = {}

    async def read(uri: str) -> None:
        try:
            result = await client.read_resource(uri)
        except Exception as exc:  # noqa: BLE001 (an unreadable resource is content too: its error text)
            out[uri] = f"error: {exc}"
            return
        parts = []
        for c in result.contents:
            if getattr(c, "text", None) is not None:
                parts.append(c.text)
            elif getattr(c, "blob", None) is not None:
                parts.append(base64.b64decode(c.blob).decode("latin-1"))
        out[uri] = "\n".join(parts)

    for r in (await client.list_resources()).resources:
        await read(str(r.uri))
    templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
    assert {"kernelopt://workloads/{name}/{file}", "kernelopt://runs/{+path}"} <= set(templates), templates
    workloads = (await client.call_tool("list_workloads", {})).structured_content["workloads"]
    for wl in workloads:
        for file in ("workload.json", "reference.cu", "reference.py", "initial.cu", "tunable.json", "tunable.cu"):
            await read(f"kernelopt://workloads/{wl['name']}/{file}")
    runs = json.loads(out["kernelopt://runs"])
    for path in runs["files"]:
        await read(f"kernelopt://runs/{path}")
    return out


def files_under_roots(config: ServerConfig) -> dict[str, str]:
    """path -> content of every file a `path` argument could name."""
    out = {}
    for root in config.roots():
        for p in root.rglob("*"):
            if p.is_file():
                out[str(p)] = p.read_bytes().decode("latin-1")
    return out


async def test_no_private_seed_in_any_output_resource_or_file(tmp_path: Path, stub: Path) -> None:  # noqa: F811
    config = _config(tmp_path, stub)
    created = json.loads(json.dumps(TINY_SPEC))
    created.update(name="made_here")
    created.pop("initial")
    calls: list[tuple[str, dict[str, Any]]] = [
        ("list_workloads", {}),
        ("gpu_properties", {}),
        ("describe_workload", {"name": "tiny_add"}),
        ("compile", {"source": kernel()}),
        ("validate", {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH}),
        ("benchmark", {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH, "warmup": 1, "iterations": 5}),
        ("validate", {"workload": "tiny_add", "source": kernel("WRONG"), "launch": ADD_LAUNCH}),
        ("autotune", {"workload": "tiny_add", "tunable_path": str(TUNE / "add.json"), "budget_evals": 50}),
        ("autotune", {"workload": "tiny_add", "tunable_path": str(TUNE / "add.json"), "budget_evals": 50}),  # cached
        ("create_workload", {"spec": created, "reference_cu": kernel()}),
        ("validate", {"workload": "made_here", "source": kernel(), "launch": ADD_LAUNCH}),
        ("ncu_profile", {"workload": "tiny_add"}),
        ("docs_search", {"query": "shared memory bank conflicts", "offline": True}),
        # the records the workspace holds, named as kernel sources: refused, and nothing quoted
        ("compile", {"path": "cache/tune/tune.jsonl"}),
        ("validate", {"workload": "tiny_add", "path": "cache/tune/tune.jsonl", "launch": ADD_LAUNCH}),
        ("autotune", {"workload": "tiny_add", "tunable_path": "cache/tune/tune.jsonl"}),
        # a frozen workload (under the workspace's runs/frozen/): its recorded inputs, and what evaluates it
        ("freeze_workload", {"spec": {**TINY_SPEC, "name": "frozen_here"}, "reference_cu": kernel(),
                             "initial_cu": kernel()}),
        ("benchmark", {"workload": "frozen_here", "source": kernel(), "launch": ADD_LAUNCH, "warmup": 1,
                       "iterations": 5}),
        ("replay_requests", {"workload": "frozen_here", "source": kernel(), "launch": ADD_LAUNCH}),
    ]
    seen: dict[str, str] = {}
    async with in_memory_server(config, orchestrator=True) as (client, service):
        for i, (name, args) in enumerate(calls):
            result = await client.call_tool(name, args)
            body = text(result) + json.dumps(result.structured_content)
            # a crash reads "Error executing tool <name>" and nothing more (its text stays on the server)
            assert text(result).strip() != f"Error executing tool {name}", (name, args)
            seen[f"{i}:{name}"] = body
            for uri, content in (await everything_readable(client)).items():
                seen[f"after {i}:{name}: {uri}"] = content
        seeds = private_seeds(service)
        seen.update(files_under_roots(config))
    assert seeds, "the evaluations ran with no seed?"
    assert any("tune.json" in where for where in seen), "autotune left no tune.json to check"
    leaks = [(where, n) for where, content in seen.items() for n in needles(seeds) if n in content.lower()]
    assert leaks == [], f"private seeds reached a client: {leaks[:10]}"
    assert "not a kernel source" in seen["13:compile"] and ".cu" in seen["13:compile"]
    assert "not a tunable spec" in seen["15:autotune"]
    assert "froze 'frozen_here'" in seen["16:freeze_workload"] and '"status": "ok"' in seen["18:replay_requests"]
    assert any("runs/frozen/" in where and where.endswith("input_cases.json") for where in seen)
