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
from fakegpu import stop_server, wait_for_port
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from kernelopt_mcp.server import bind_kind, build_parser, build_server, config_from_args, http_app, http_security, main
from kernelopt_mcp.server_config import DEFAULT_SESSION_IDLE_TIMEOUT_S, ServerConfig

REPO = Path(__file__).resolve().parents[2]
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
        # every spelling of "all interfaces" (issue 13 item 7: these started without --allowed-host)
        (["--host", "0", "--token", TOKEN], "--allowed-host"),
        (["--host", "::0", "--token", TOKEN], "--allowed-host"),
        (["--host", "0000:0000::0", "--token", TOKEN], "--allowed-host"),
        (["--host", "0x0", "--token", TOKEN], "--allowed-host"),
        (["--host", "0.0", "--token", TOKEN], "--allowed-host"),
        (["--host", "::ffff:0.0.0.0", "--token", TOKEN], "--allowed-host"),
        (["--host", "[::]", "--token", TOKEN], "--allowed-host"),
        (["--host", "0"], "without a bearer token"),
        (["--host", "::0"], "without a bearer token"),
    ],
)
def test_non_loopback_bind_is_refused_without_what_it_needs(
    args: list[str], expect: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
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
    for wildcard in ("0", "::0", "0x0", "0000:0000::0"):
        hosts = http_security(wildcard, ["gpu-box.example"]).allowed_hosts
        assert wildcard not in hosts and f"[{wildcard}]" not in hosts


@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("0", "wildcard"), ("0x0", "wildcard"), ("0.0", "wildcard"), ("000.000.000.000", "wildcard"),
        ("0.0.0.0", "wildcard"), ("::", "wildcard"), ("::0", "wildcard"), ("0000:0000::0", "wildcard"),
        ("[::]", "wildcard"), ("::ffff:0.0.0.0", "wildcard"), ("", "wildcard"),
        ("127.0.0.1", "loopback"), ("127.1", "loopback"), ("::1", "loopback"), ("localhost", "loopback"),
        ("192.0.2.10", "other"), ("2001:db8::1", "other"), ("no-such-host.invalid", "other"),
    ],
)
def test_bind_kind_sees_through_spellings(host: str, kind: str) -> None:
    assert bind_kind(host) == kind


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelopt_mcp.server", "--http", "--port", str(port), "--workspace", str(tmp_path),
         "--harness", "/nonexistent"],
        env=server_env(KERNELOPT_MCP_TOKEN=TOKEN), cwd=REPO, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_for_port(proc, port, lambda: proc.stderr.read() if proc.stderr else "")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop_server(proc)


def test_http_needs_the_token_and_keeps_dns_rebinding_protection(http_server: str) -> None:
    assert post(http_server, INITIALIZE, {}) == 401
    assert post(http_server, INITIALIZE, {"Authorization": "Bearer wrong"}) == 401
    assert post(http_server, INITIALIZE, {"Authorization": f"Bearer {TOKEN}", "Host": "evil.example:80"}) == 421
    assert post(http_server, INITIALIZE, {"Authorization": f"Bearer {TOKEN}"}) == 200


def test_sdk_client_over_http_with_the_token(http_server: str) -> None:
    async def session() -> None:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http,
            Client(streamable_http_client(http_server, http_client=http)) as client,
        ):
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"compile", "validate", "benchmark"} <= names
            r = await client.call_tool("compile", {"source": 'extern "C" __global__ void k(int* x) { x[0] = 1; }'})
            assert r.structured_content and r.structured_content["status"] == "ok"

    anyio.run(session)


def _rpc(url: str, body: dict, session: str | None = None) -> tuple[int, str | None]:
    """POST one JSON-RPC message; (HTTP status, the mcp-session-id header of the answer)."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "mcp-protocol-version": "2025-06-18"}
    if session:
        headers["mcp-session-id"] = session
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
            return response.status, response.headers.get("mcp-session-id")
    except urllib.error.HTTPError as exc:
        return exc.code, None


def test_idle_http_sessions_expire_and_active_ones_survive(tmp_path: Path) -> None:
    """HTTP sessions used to live forever (3000 sessions: +111 MiB). With a 1 s idle timeout an
    idle session is closed: its id answers 404 and the server holds nothing of it; a session
    that keeps making requests survives."""
    import gc
    import threading
    import weakref

    import uvicorn

    args = build_parser().parse_args(["--workspace", str(tmp_path), "--harness", "/nonexistent",
                                      "--session-idle-timeout", "1"])
    config = config_from_args(args, environ={})
    assert config.session_idle_timeout_s == 1.0
    app, service = build_server(config)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(http_app(app, config, "127.0.0.1", []), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        sessions = {}
        for name in ("idle", "active"):
            status, sessions[name] = _rpc(url, INITIALIZE)
            assert status == 200 and sessions[name]
            assert _rpc(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sessions[name])[0] == 202
        live = app.session_manager._server_instances
        assert set(sessions.values()) <= set(live)
        idle_transport = weakref.ref(live[sessions["idle"]])
        until = time.monotonic() + 3.0  # three idle timeouts
        while time.monotonic() < until:
            assert _rpc(url, {"jsonrpc": "2.0", "id": 2, "method": "ping"}, sessions["active"])[0] == 200
            time.sleep(0.2)
        assert _rpc(url, {"jsonrpc": "2.0", "id": 3, "method": "ping"}, sessions["idle"])[0] == 404
        assert _rpc(url, {"jsonrpc": "2.0", "id": 4, "method": "ping"}, sessions["active"])[0] == 200
        assert sessions["idle"] not in live and sessions["active"] in live
        gc.collect()
        assert idle_transport() is None, "the expired session's transport is still referenced"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        service.close()


def test_session_limits_come_from_flags_and_environment(tmp_path: Path) -> None:
    parse = build_parser().parse_args
    config = config_from_args(parse(["--workspace", str(tmp_path)]), environ={})
    assert config.session_idle_timeout_s == DEFAULT_SESSION_IDLE_TIMEOUT_S == 1800
    env = {"KERNELOPT_MCP_SESSION_IDLE_TIMEOUT": "60", "KERNELOPT_MCP_MAX_SESSIONS": "5"}
    config = config_from_args(parse(["--workspace", str(tmp_path)]), environ=env)
    assert (config.session_idle_timeout_s, config.max_sessions) == (60.0, 5)
    config = config_from_args(parse(["--workspace", str(tmp_path), "--session-idle-timeout", "7", "--max-sessions",
                                     "9"]), environ=env)
    assert (config.session_idle_timeout_s, config.max_sessions) == (7.0, 9)
    for bad in (["--session-idle-timeout", "0"], ["--session-idle-timeout", "inf"], ["--max-sessions", "0"]):
        with pytest.raises(SystemExit, match="kernelopt-mcp"):
            config_from_args(parse(["--workspace", str(tmp_path), *bad]), environ={})
    assert isinstance(config, ServerConfig)
