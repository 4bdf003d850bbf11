"""What a client may make the server keep on disk (kernelopt_mcp/quota.py), tried as an attacker
over real MCP sessions on the pretend GPU: repeated freeze_workload and create_workload calls stop
at the workspace quota with a message that names it, concurrent calls cannot all slip under it,
only what the server wrote counts (a planted sparse file does not), and the operator's flags set both bounds.
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
    async with in_memory_server(config, orchestrator=True) as (client, _):
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
    async with in_memory_server(config, orchestrator=True) as (client, _):
        async def freeze() -> None:
            args = freeze_args(setup["run"])
            del args["directory"], args["seed"]
            results.append(await client.call_tool("freeze_workload", args))

        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(freeze)
    assert sum(not r.is_error for r in results) <= 2, [text(r)[:120] for r in results]
    assert any(r.is_error and "workspace quota" in text(r) for r in results)


def sparse(path: Path, size: int = 4 * 2**40) -> Path:
    """A file of ``size`` bytes (4 TiB) that takes no disk: what anyone may leave where they can write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
    return path


async def test_a_planted_sparse_file_cannot_exhaust_the_quota(setup: dict[str, Any]) -> None:
    """The quota counted every directory the server had once frozen into (a ledger in the workspace,
    re-measured for ever): a client froze into a directory holding a sparse 4 TiB file, and every later
    create/freeze of every client failed ("already keeps 4096.00 GiB"), across restarts. It counts what
    the server wrote: a sparse file beside a run (an --output-root) or in a ledger an older server left
    stops nothing."""
    _, one = spec_bytes(parse_spec(frozen_spec(), "spec"))
    config = with_quota(setup, quota=int(2.5 * one))
    run: Path = setup["run"]
    planted = sparse(run / "elsewhere" / "huge.bin")
    (setup["tmp"] / "ws").mkdir(exist_ok=True)
    (setup["tmp"] / "ws" / ".frozen-elsewhere.json").write_text(json.dumps([str(planted.parent), str(run)]))
    sparse(run / "beside.bin")
    async with in_memory_server(config, orchestrator=True) as (client, _):
        for _ in range(2):  # into the output root, again and again: its planted file is not the server's
            result = await client.call_tool("freeze_workload", freeze_args(run))
            assert not result.is_error, text(result)
        args = freeze_args(run)
        del args["directory"]
        fresh = await client.call_tool("freeze_workload", args)  # under <workspace>/runs/frozen
        assert not fresh.is_error, text(fresh)
        created = await client.call_tool("create_workload", {
            "spec": {**frozen_spec("mine"), "reference": {"launch": frozen_spec()["reference"]["launch"]}},
            "reference_cu": kernel(), "initial_cu": kernel()})
        assert not created.is_error, text(created)
    assert planted.stat().st_size == 4 * 2**40  # left alone


def test_usage_is_what_the_server_wrote_under_workloads_and_runs(tmp_path: Path) -> None:
    quota = WorkspaceQuota(tmp_path, 10_000)
    (tmp_path / "runs" / "r").mkdir(parents=True)
    (tmp_path / "runs" / "r" / "x.bin").write_bytes(b"x" * 3000)
    (tmp_path / "workloads" / "w").mkdir(parents=True)
    (tmp_path / "workloads" / "w" / "workload.json").write_bytes(b"{}" * 500)
    sparse(tmp_path / "elsewhere" / "huge.bin")
    (tmp_path / ".frozen-elsewhere.json").write_text(json.dumps([str(tmp_path / "elsewhere")]))
    assert quota.usage() == 4000


async def test_the_operator_sets_the_per_workload_bound(setup: dict[str, Any]) -> None:
    buffers, _ = spec_bytes(parse_spec(frozen_spec(), "spec"))
    config = with_quota(setup, quota=64 * GIB, workload_max=buffers - 1)
    async with in_memory_server(config, orchestrator=True) as (client, _):
        frozen = await client.call_tool("freeze_workload", freeze_args(setup["run"]))
        created = await client.call_tool("create_workload", {
            "spec": {**frozen_spec("mine"), "reference": {"launch": frozen_spec()["reference"]["launch"]}},
            "reference_cu": kernel(), "initial_cu": kernel()})
    for result in (frozen, created):
        assert result.is_error and "--workload-max-gib" in text(result), text(result)


async def test_creates_count_against_the_quota_too(setup: dict[str, Any]) -> None:
    config = with_quota(setup, quota=1)  # nothing fits
    async with in_memory_server(config, orchestrator=True) as (client, _):
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
