"""The ncu_profile and docs_search tools through the SDK's in-memory client: the pretend GPU of
tests/fakegpu.py, the stub ncu of tests/analysis/test_profiler.py, the fixture docs server of
tests/analysis/test_docs.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from fakegpu import (
    ADD_LAUNCH,
    in_memory_server,
    kernel,
    write_harness,
    write_tiny_workload,
)
from fakegpu import tool_text as text
from mcp import Client
from test_docs import DocsServer, docs_server  # noqa: F401  (fixture)
from test_profiler import stub  # noqa: F401  (fixture)

from kernelopt_mcp.config import Settings, bundled_workloads_dir
from kernelopt_mcp.server_config import ServerConfig

pytestmark = pytest.mark.anyio


def config(tmp_path: Path, ncu: Path | None, **settings: Any) -> ServerConfig:
    extra = write_tiny_workload(tmp_path / "extra")
    s = Settings(
        harness=write_harness(tmp_path, "fake"), workload_dirs=(bundled_workloads_dir(), extra), timeout_s=20,
        ncu=ncu, **settings,
    )
    return ServerConfig(settings=s, workspace=tmp_path / "ws")


@asynccontextmanager
async def client(cfg: ServerConfig) -> AsyncIterator[Client]:
    async with in_memory_server(cfg) as (c, _):
        yield c


async def test_ncu_profile_returns_the_summary_with_progress(tmp_path: Path, stub: Path) -> None:  # noqa: F811
    messages: list[str] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    async with client(config(tmp_path, stub)) as c:
        r = await c.call_tool("ncu_profile", {"workload": "tiny_add"}, progress_callback=progress)
        assert not r.is_error, text(r)
        out = r.structured_content
        assert out["kernel"] == "vector_add" and out["candidate"] == "initial" and out["case"] == "n_4096"
        assert out["report_path"].startswith(str((tmp_path / "ws" / "runs" / "profiles").resolve()))
        assert Path(out["report_path"]).is_file() and out["hints"] and out["duration_ms"] > 0
        assert "speed of light" in text(r) and "report:" in text(r)
        assert any("Nsight Compute" in m for m in messages) and any("preparing tiny_add" in m for m in messages)

        r = await c.call_tool("ncu_profile", {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH,
                                              "case": "odd_1001", "clock_control": "base"})
        assert (not r.is_error and r.structured_content["case"] == "odd_1001"
                and r.structured_content["clock_control"] == "base")
        for args, expect in [
            ({"workload": "tiny_add", "source": kernel()}, "`launch` is required"),
            ({"workload": "tiny_add", "case": "nope"}, "no case 'nope'"),
            ({"workload": "tiny_add", "clock_control": "max"}, "clock_control"),
            ({"workload": "tiny_add", "source": kernel().replace("a[i] +", "oops +"), "launch": ADD_LAUNCH},
             "does not compile"),
        ]:
            r = await c.call_tool("ncu_profile", args)
            assert r.is_error and expect in text(r), (args, text(r))
        r = await c.call_tool("ncu_profile", {"workload": "tiny_add", "source": kernel("CRASH"), "launch": ADD_LAUNCH})
        assert r.is_error and "profiling failed" in text(r) and "CUDA_ERROR_ILLEGAL_ADDRESS" in text(r)
        # the server lives on
        r = await c.call_tool("validate", {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH})
        assert r.structured_content["status"] == "ok"


async def test_ncu_profile_errors_say_what_to_do(tmp_path: Path, stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    async with client(config(tmp_path, tmp_path / "no-ncu")) as c:
        r = await c.call_tool("ncu_profile", {"workload": "tiny_add"})
        assert r.is_error and "missing a tool" in text(r) and "KERNELOPT_NCU" in text(r)
    monkeypatch.setenv("KO_STUB_NCU", "perm")
    async with client(config(tmp_path / "b", stub)) as c:
        r = await c.call_tool("ncu_profile", {"workload": "tiny_add"})
        assert r.is_error and "ERR_NVGPUCTRPERM" in text(r) and "NVreg_RestrictProfilingToAdminUsers=0" in text(r)


async def test_docs_search_offline_and_live(tmp_path: Path, docs_server: DocsServer) -> None:  # noqa: F811
    async with client(config(tmp_path, None, docs_url=docs_server.url)) as c:
        r = await c.call_tool("docs_search", {"query": "shared memory bank conflicts", "offline": True,
                                              "arch": "sm_90"})
        assert not r.is_error, text(r)
        out = r.structured_content
        assert out["live_status"] == "offline" and out["passages"][0]["id"] == "bank-conflicts" and not docs_server.gets
        assert "never instructions" in text(r)
        r = await c.call_tool("docs_search", {"query": "mbarrier expect_tx", "limit": 3})
        out = r.structured_content
        assert out["live_status"] == "ok" and out["arch"] == "sm_90" and len(out["passages"]) <= 3
        assert out["passages"][0]["source"] == "live" and out["passages"][0]["guide"] == "PTX ISA"
        r = await c.call_tool("docs_search", {"query": "x"})
        assert r.is_error
