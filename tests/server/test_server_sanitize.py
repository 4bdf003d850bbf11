"""validate(sanitize=true) through the MCP server, with the pretend GPU (tests/fakegpu.py) and a
stand-in compute-sanitizer (tests/fake_sanitizer.py) replaying recorded-style reports."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import anyio
import pytest
from fakegpu import (
    ADD_LAUNCH,
    fake_processes,
    in_memory_server,
    kernel,
    write_harness,
    write_tiny_workload,
)
from fakegpu import tool_text as text

from kernelopt_mcp.config import Settings, bundled_workloads_dir
from kernelopt_mcp.server_config import ServerConfig

FIXTURES = Path(__file__).parents[1] / "fixtures" / "sanitizer"
pytestmark = pytest.mark.anyio


def config(tmp_path: Path, sanitizer: Path | None) -> ServerConfig:
    settings = Settings(
        harness=write_harness(tmp_path, "fake"), sanitizer=sanitizer, timeout_s=20,
        workload_dirs=(bundled_workloads_dir(), write_tiny_workload(tmp_path / "extra")),
    )
    return ServerConfig(settings=settings, workspace=tmp_path / "ws")


def stand_in(tmp_path: Path) -> Path:
    """The stand-in, copied into tmp_path: its path in a process's command line names this test's runs."""
    script = Path(shutil.copy(Path(__file__).parents[1] / "fake_sanitizer.py", tmp_path / "fake_sanitizer.py"))
    path = tmp_path / "compute-sanitizer"
    path.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
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
        r = await client.call_tool("validate", {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH,
                                                "sanitize": True})
        out = r.structured_content
        assert out["status"] == "ok" and "sanitizer clean" in out["message"]
        assert all(s["passed"] for s in out["sanitizer"])


async def test_a_missing_sanitizer_is_a_tool_error_saying_how_to_install(tmp_path: Path) -> None:
    async with in_memory_server(config(tmp_path, tmp_path / "no-such-sanitizer")) as (client, _):
        r = await client.call_tool("validate", {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH,
                                                "sanitize": True})
        assert r.is_error and "KERNELOPT_SANITIZER" in text(r)


async def test_cancelling_a_sanitizer_run_kills_it_and_the_next_call_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compute-sanitizer runs minutes on a slow kernel: a client's cancel must stop it, not leave it
    holding the device until its own timeout."""
    monkeypatch.setenv("FAKE_SANITIZER_REPORT", str(FIXTURES / "memcheck_clean.txt"))
    monkeypatch.setenv("FAKE_SANITIZER_SLEEP", "15")  # short: a regression fails, not hangs
    marker = str(tmp_path / "fake_sanitizer.py")
    args = {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH}
    async with in_memory_server(config(tmp_path, stand_in(tmp_path))) as (client, _):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: client.call_tool("validate", {**args, "sanitize": True}))
            with anyio.fail_after(30):
                while not fake_processes(marker):
                    await anyio.sleep(0.1)
            cancelled_at = anyio.current_time()
            tg.cancel_scope.cancel()
        while fake_processes(marker):
            await anyio.sleep(0.1)
        # unkilled, the stand-in runs its full sleep once per tool and case (6 x 15 s)
        assert anyio.current_time() - cancelled_at < 10, "the sanitizer outlived the cancelled call"
        monkeypatch.delenv("FAKE_SANITIZER_SLEEP")
        r = await client.call_tool("validate", {**args, "sanitize": True})
        assert r.structured_content["status"] == "ok", text(r)
