"""What a client may make the server keep on disk (kernelopt_mcp/quota.py), tried as an attacker
over real MCP sessions on the pretend GPU: repeated freeze_workload and create_workload calls stop
at the workspace quota with a message that names it, concurrent calls cannot all slip under it,
directories frozen outside the workspace still count, and the operator's flags set both bounds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakegpu import in_memory_server, kernel
from fakegpu import tool_text as text
from test_server_freeze import freeze_args, frozen_spec
from test_server_freeze import setup as setup  # the fixture

from kernelopt_mcp.quota import GIB, QuotaError, WorkspaceQuota, spec_bytes, tree_bytes
from kernelopt_mcp.server.entry import build_parser, config_from_args
from kernelopt_mcp.workload import parse_spec

pytestmark = pytest.mark.anyio


def with_quota(setup: dict[str, Any], quota: int, workload_max: int | None = None) -> Any:
    config = setup["config"]
    return type(config)(**{**config.__dict__, "workspace_quota_bytes": quota,
                           **({"workload_max_bytes": workload_max} if workload_max else {})})


def test_spec_bytes_counts_buffers_and_float64_expected_outputs() -> None:
    spec = parse_spec(frozen_spec(), "spec")  # a (f32 in), b (f32 in), c (f32 out); n over the cases
    ns = [c.scalars["n"] for c in spec.cases]
    buffers, frozen = spec_bytes(spec)
    assert buffers == sum(3 * 4 * n for n in ns)
    assert frozen == sum(2 * 4 * n + 8 * n for n in ns)  # inputs as drawn, the output as float64


def test_tree_bytes_counts_files_not_what_links_point_to(tmp_path: Path) -> None:
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "x.bin").write_bytes(b"1" * 1000)
    (tmp_path / "d" / "e" / "y.bin").write_bytes(b"2" * 500)
    big = tmp_path / "big.bin"
    big.write_bytes(b"3" * 100_000)
    (tmp_path / "d" / "link").symlink_to(big)
    (tmp_path / "d" / "dirlink").symlink_to(tmp_path)  # a loop, were links followed
    links = len(str(big)) + len(str(tmp_path))
    assert tree_bytes(tmp_path / "d") == 1500 + links
    assert tree_bytes(tmp_path / "missing") == 0


def test_reservations_add_up_under_the_lock(tmp_path: Path) -> None:
    quota = WorkspaceQuota(tmp_path, 10_000)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "f").write_bytes(b"x" * 4000)
    with quota.reserve(5000, "first"):
        with pytest.raises(QuotaError, match=r"second would write about .*quota"), quota.reserve(2000, "second"):
            pass  # 4000 on disk + 5000 held + 2000 > 10000
        with quota.reserve(1000, "third"):
            pass
    with quota.reserve(6000, "after the first ended"):
        pass


async def test_repeated_freezes_stop_at_the_workspace_quota(setup: dict[str, Any]) -> None:
    """The attack of session 5 (one freeze of 45 GiB) is bounded per call; this one is not bounded by
    the per-call limit: many small freezes, each a new directory under runs/frozen."""
    _, one = spec_bytes(parse_spec(frozen_spec(), "spec"))
    config = with_quota(setup, quota=int(3.5 * one))
    async with in_memory_server(config) as (client, _):
        outcomes = []
        for _ in range(6):
            args = freeze_args(setup["run"])
            del args["directory"], args["seed"]  # each call: a new directory under <workspace>/runs/frozen
            result = await client.call_tool("freeze_workload", args)
            outcomes.append(result)
            if result.is_error:
                break
    ok = [r for r in outcomes if not r.is_error]
    assert 1 <= len(ok) <= 3, [text(r)[:200] for r in outcomes]
    refused = outcomes[-1]
    assert refused.is_error and "workspace quota" in text(refused) and "--workspace-quota-gib" in text(refused)
    frozen_dirs = list((setup["tmp"] / "ws" / "runs" / "frozen").iterdir())
    assert len(frozen_dirs) == len(ok)  # the refused call wrote nothing
    assert tree_bytes(setup["tmp"] / "ws") <= config.workspace_quota_bytes


async def test_concurrent_freezes_cannot_all_pass_the_check(setup: dict[str, Any]) -> None:
    _, one = spec_bytes(parse_spec(frozen_spec(), "spec"))
    config = with_quota(setup, quota=int(2.5 * one))
    results: list[Any] = []
    async with in_memory_server(config) as (client, _):
        async def freeze() -> None:
            args = freeze_args(setup["run"])
            del args["directory"], args["seed"]
            results.append(await client.call_tool("freeze_workload", args))

        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(freeze)
    assert sum(not r.is_error for r in results) <= 2, [text(r)[:120] for r in results]
    assert any(r.is_error and "workspace quota" in text(r) for r in results)


async def test_a_directory_frozen_outside_the_workspace_still_counts(setup: dict[str, Any]) -> None:
    """The run directory is a --root outside the workspace: it goes into the ledger, so freezing there
    again and again (or elsewhere) cannot escape the quota."""
    _, one = spec_bytes(parse_spec(frozen_spec(), "spec"))
    config = with_quota(setup, quota=int(1.5 * one))
    run: Path = setup["run"]
    async with in_memory_server(config) as (client, _):
        first = await client.call_tool("freeze_workload", freeze_args(run))
        assert not first.is_error, text(first)
        other = run / "again"  # a new directory under the --root
        other.mkdir()
        second = await client.call_tool("freeze_workload", freeze_args(run, directory=str(other)))
    assert second.is_error and "workspace quota" in text(second), text(second)
    ledger = json.loads((setup["tmp"] / "ws" / ".frozen-elsewhere.json").read_text())
    assert str(run.resolve()) in ledger or str(run) in ledger


async def test_the_operator_sets_the_per_workload_bound(setup: dict[str, Any]) -> None:
    buffers, _ = spec_bytes(parse_spec(frozen_spec(), "spec"))
    config = with_quota(setup, quota=64 * GIB, workload_max=buffers - 1)
    async with in_memory_server(config) as (client, _):
        frozen = await client.call_tool("freeze_workload", freeze_args(setup["run"]))
        created = await client.call_tool("create_workload", {
            "spec": {**frozen_spec("mine"), "reference": {"launch": frozen_spec()["reference"]["launch"]}},
            "reference_cu": kernel(), "initial_cu": kernel()})
    for result in (frozen, created):
        assert result.is_error and "--workload-max-gib" in text(result), text(result)


async def test_creates_count_against_the_quota_too(setup: dict[str, Any]) -> None:
    config = with_quota(setup, quota=1)  # nothing fits
    async with in_memory_server(config) as (client, _):
        result = await client.call_tool("create_workload", {
            "spec": {**frozen_spec("mine"), "reference": {"launch": frozen_spec()["reference"]["launch"]}},
            "reference_cu": kernel(), "initial_cu": kernel()})
    assert result.is_error and "workspace quota" in text(result), text(result)
    assert not (setup["tmp"] / "ws" / "workloads" / "mine").exists()


def test_flags_and_environment_set_the_bounds(tmp_path: Path) -> None:
    parser = build_parser()
    config = config_from_args(parser.parse_args(["--workspace", str(tmp_path)]), {})
    assert config.workload_max_bytes == 4 * GIB and config.workspace_quota_bytes == 64 * GIB
    config = config_from_args(parser.parse_args(["--workspace", str(tmp_path), "--workload-max-gib", "16"]),
                              {"KERNELOPT_MCP_WORKSPACE_QUOTA_GIB": "0.5"})
    assert config.workload_max_bytes == 16 * GIB and config.workspace_quota_bytes == GIB // 2
    for bad in (["--workload-max-gib", "0"], ["--workspace-quota-gib", "nan"], ["--workspace-quota-gib", "-1"]):
        with pytest.raises(SystemExit, match="must be a positive number of GiB"):
            config_from_args(parser.parse_args(["--workspace", str(tmp_path), *bad]), {})
