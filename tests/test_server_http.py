"""The streamable HTTP transport: loopback by default, a bearer token for anything else, 401
without it, and the SDK's DNS-rebinding protection kept. Nothing here listens off loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from kernelopt_mcp.server import http_security, main

REPO = Path(__file__).resolve().parent.parent
TOKEN = "test-token-5f2c"
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}


def server_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KERNELOPT_MCP_TOKEN"}
    env["PYTHONPATH"] = str(REPO)
    return env | extra


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict, headers: dict[str, str]) -> int:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--host", "0.0.0.0"], "without a bearer token"),
        (["--host", "192.0.2.10"], "without a bearer token"),
        (["--host", "0.0.0.0", "--token", TOKEN], "--allowed-host"),
    ],
)
def test_non_loopback_bind_is_refused_without_what_it_needs(args: list[str], expect: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KERNELOPT_MCP_TOKEN", raising=False)
    assert main(["--http", "--workspace", str(tmp_path), *args]) == 2
    assert expect in capsys.readouterr().err


def test_the_console_entry_refuses_too(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kernelopt_mcp.server", "--http", "--host", "0.0.0.0", "--workspace", str(tmp_path)],
        capture_output=True, text=True, timeout=60, env=server_env(), cwd=REPO,
    )
    assert proc.returncode == 2 and "refusing to serve HTTP on 0.0.0.0" in proc.stderr


def test_dns_rebinding_protection_names_the_bind_address() -> None:
    sec = http_security("192.0.2.10", ["gpu-box.example"])
    assert sec.enable_dns_rebinding_protection
    assert {"192.0.2.10:*", "gpu-box.example:*", "127.0.0.1:*"} <= set(sec.allowed_hosts)
    assert "http://gpu-box.example:*" in sec.allowed_origins
    assert "0.0.0.0:*" not in http_security("0.0.0.0", ["gpu-box.example"]).allowed_hosts


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelopt_mcp.server", "--http", "--port", str(port), "--workspace", str(tmp_path),
         "--harness", "/nonexistent"],
        env=server_env(KERNELOPT_MCP_TOKEN=TOKEN), cwd=REPO, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"the server did not start: {proc.stderr.read() if proc.stderr else ''}") from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


def test_http_needs_the_token_and_keeps_dns_rebinding_protection(http_server: str) -> None:
    assert post(http_server, INITIALIZE, {}) == 401
    assert post(http_server, INITIALIZE, {"Authorization": "Bearer wrong"}) == 401
    assert post(http_server, INITIALIZE, {"Authorization": f"Bearer {TOKEN}", "Host": "evil.example:80"}) == 421
    assert post(http_server, INITIALIZE, {"Authorization": f"Bearer {TOKEN}"}) == 200


def test_sdk_client_over_http_with_the_token(http_server: str) -> None:
    async def session() -> None:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http:
            async with Client(streamable_http_client(http_server, http_client=http)) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                assert {"compile", "validate", "benchmark"} <= names
                r = await client.call_tool("compile", {"source": 'extern "C" __global__ void k(int* x) { x[0] = 1; }'})
                assert r.structured_content and r.structured_content["status"] == "ok"

    anyio.run(session)
