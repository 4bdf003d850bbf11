"""validate(sanitize=true) through the MCP server, with the pretend GPU (tests/fakegpu.py) and a
stand-in compute-sanitizer (tests/fake_sanitizer.py) replaying recorded-style reports."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fakegpu import (
    ADD_LAUNCH,
    in_memory_server,
    kernel,
    write_harness,
    write_tiny_workload,
)
from fakegpu import tool_text as text

from kernelopt_mcp.config import Settings, bundled_workloads_dir
from kernelopt_mcp.service import ServerConfig

FIXTURES = Path(__file__).parent / "fixtures" / "sanitizer"
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def config(tmp_path: Path, sanitizer: Path | None) -> ServerConfig:
    settings = Settings(
        harness=write_harness(tmp_path, "fake"), sanitizer=sanitizer, timeout_s=20,
        workload_dirs=(bundled_workloads_dir(), write_tiny_workload(tmp_path / "extra")),
    )
    return ServerConfig(settings=settings, workspace=tmp_path / "ws")


def stand_in(tmp_path: Path) -> Path:
    path = tmp_path / "compute-sanitizer"
    path.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).with_name('fake_sanitizer.py')} \"$@\"\n")
    path.chmod(0o755)
    return path



async def test_a_sanitizer_error_fails_a_passing_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SANITIZER_REPORT", str(FIXTURES / "memcheck_oob_read.txt"))
    async with in_memory_server(config(tmp_path, stand_in(tmp_path))) as (client, _):
        args = {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH}
        plain = await client.call_tool("validate", args)
        assert plain.structured_content["status"] == "ok" and "sanitizer" not in plain.structured_content
        r = await client.call_tool("validate", {**args, "sanitize": True})
        assert not r.is_error, text(r)
        out = r.structured_content
        assert out["status"] == "sanitizer_error"
        assert out["message"].startswith("sanitizer_error:") and "kernel.cu:4" in out["message"]
        # every tool on each of the two correctness cases; the stand-in reports the same errors for each
        assert {(s["tool"], s["case"]) for s in out["sanitizer"]} == {
            (t, c) for t in ("memcheck", "racecheck", "initcheck") for c in ("one", "odd_1001")
        }
        first = out["sanitizer"][0]["findings"][0]
        assert first["line"] == 4 and first["thread"] == [64, 0, 0] and first["block"] == [3, 0, 0]
        assert "sanitizer memcheck on one: 3 error(s)" in text(r)
        again = await client.call_tool("validate", args)  # the server keeps answering
        assert again.structured_content["status"] == "ok"


async def test_clean_reports_keep_ok(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SANITIZER_REPORT", str(FIXTURES / "memcheck_clean.txt"))
    async with in_memory_server(config(tmp_path, stand_in(tmp_path))) as (client, _):
        r = await client.call_tool("validate", {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH, "sanitize": True})
        out = r.structured_content
        assert out["status"] == "ok" and "sanitizer clean" in out["message"]
        assert all(s["passed"] for s in out["sanitizer"])


async def test_a_missing_sanitizer_is_a_tool_error_saying_how_to_install(tmp_path: Path) -> None:
    async with in_memory_server(config(tmp_path, tmp_path / "no-such-sanitizer")) as (client, _):
        r = await client.call_tool("validate", {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH, "sanitize": True})
        assert r.is_error and "KERNELOPT_SANITIZER" in text(r)
