"""The HTTP listener's own defenses (server/http_guard.py), against the real server as a
subprocess on loopback: half-open connections cannot lock the token holder out, headers and
bodies must arrive in time, the open-file limit is raised, and none of it cuts a long tool call
streaming its progress."""

from __future__ import annotations

import json
import os
import resource
import select
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

import anyio
import httpx2
import pytest
from fakegpu import ADD_LAUNCH, kernel, stop_server, wait_for_port, write_harness, write_tiny_workload
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from kernelopt_mcp.server import build_parser
from kernelopt_mcp.server.entry import http_limits_from_args
from kernelopt_mcp.server.http_guard import ConnectionTable, HttpLimits, open_files_needed

REPO = Path(__file__).resolve().parents[2]
TOKEN = "guard-token-71be"
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
HALF_OPEN = 1100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server(tmp_path: Path, *args: str, nofile: tuple[int, int] | None = None,
           env: dict[str, str] | None = None) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    """kernelopt-mcp --http on loopback with a token (and ``nofile`` as its RLIMIT_NOFILE at
    exec); yields (port, process)."""
    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELOPT_MCP_")}
    full_env |= {"PYTHONPATH": str(REPO), "KERNELOPT_MCP_TOKEN": TOKEN, **(env or {})}

    def limit_files() -> None:
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, nofile)

    log = open(tmp_path / f"server-{port}.log", "w+")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelopt_mcp.server", "--http", "--port", str(port), "--workspace",
         str(tmp_path / "ws"), *args],
        env=full_env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True, preexec_fn=limit_files,
    )
    try:
        wait_for_port(proc, port, lambda: (log.seek(0), log.read()[-4000:])[1])
        yield port, proc
        assert proc.poll() is None, "the server died"
    finally:
        stop_server(proc, 20)
        log.close()


def rpc(port: int, body: dict, session: str | None = None, timeout_s: float = 30) -> tuple[int, str | None]:
    """POST one JSON-RPC message as the token holder; (HTTP status, the answer's session id)."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "Authorization": f"Bearer {TOKEN}", "mcp-protocol-version": "2025-06-18"}
    if session:
        headers["mcp-session-id"] = session
    request = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=json.dumps(body).encode(),
                                     method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            response.read()
            return response.status, response.headers.get("mcp-session-id")
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except OSError as exc:
        raise AssertionError(f"the token holder got no answer: {exc!r}") from exc


def token_holder_is_answered(port: int) -> None:
    """initialize, then tools/list in that session: both answered 200."""
    status, session = rpc(port, INITIALIZE, timeout_s=20)
    assert status == 200 and session, status
    assert rpc(port, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)[0] == 202
    assert rpc(port, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session, timeout_s=20)[0] == 200


def half_open(port: int) -> socket.socket:
    """A connection that sends a request line and Host, and nothing more."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    with suppress(OSError):  # the server may have closed it already: it is then not half-open
        s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    return s


def readable(s: socket.socket, timeout_s: float) -> bool:
    poll = select.poll()  # not select(): the descriptors of the many-connection test pass 1024
    poll.register(s, select.POLLIN)
    return bool(poll.poll(timeout_s * 1000))


def body_pending(port: int) -> socket.socket:
    """A request of the token holder's whose headers are complete and whose body has only begun."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Accept: application/json, text/event-stream\r\nAuthorization: Bearer " + TOKEN.encode()
              + b"\r\nContent-Length: 1000\r\n\r\n{")
    return s


def closed_by_server(s: socket.socket, budget_s: float = 20, trickle: Callable[[], bytes] | None = None) -> bytes:
    """Wait (at most ``budget_s``, sending ``trickle()`` every 0.2 s meanwhile) until the server
    closes ``s``; returns what it sent. Fails when it is still open at the end."""
    received = b""
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        if trickle is not None:
            with suppress(OSError):
                s.sendall(trickle())
        if readable(s, 0.2):
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                return received
            if not chunk:
                return received
            received += chunk
    raise AssertionError(f"the server kept the connection open {budget_s} s; it sent {received[:200]!r}")


def is_closed(s: socket.socket) -> bool:
    """Whether the server has closed ``s`` (without waiting)."""
    timeout = s.gettimeout()
    s.setblocking(False)
    try:
        return s.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    finally:
        s.settimeout(timeout)


def raise_own_open_files(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"this test opens {need} sockets; the hard open-file limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def server_open_files(pid: int) -> tuple[int, int]:
    """(soft RLIMIT_NOFILE, descriptors open) of process ``pid``."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft = int(line.split()[3])
    return soft, len(os.listdir(f"/proc/{pid}/fd"))


def test_half_open_connections_do_not_lock_out_the_token_holder(tmp_path: Path) -> None:
    """1,100 connections that send a request line and Host only, against a server allowed 1,024
    open files (hard limit): it used to run out of descriptors (`Too many open files`) and never
    answer the token holder. The header timeout is set long, so what frees room is the
    connection limit evicting the longest-waiting half-open connections."""
    raise_own_open_files(HALF_OPEN + 256)
    with (
        server(tmp_path, "--harness", "/nonexistent", nofile=(1024, 1024),
               env={"KERNELOPT_MCP_HEADER_TIMEOUT": "600"}) as (port, proc),
        ExitStack() as sockets,
    ):
        opened = [sockets.enter_context(half_open(port)) for _ in range(HALF_OPEN)]
        token_holder_is_answered(port)
        soft, open_now = server_open_files(proc.pid)
        assert soft == 1024 and open_now < 1024 - 128, (soft, open_now)
        assert is_closed(opened[0]) and not is_closed(opened[-1]), "the oldest half-open ones go first"


def test_the_soft_open_file_limit_is_raised_to_the_hard_limit(tmp_path: Path) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.skip(f"the hard open-file limit is {hard}: nothing to raise to")
    target = 1024 if hard == resource.RLIM_INFINITY else hard
    with server(tmp_path, "--harness", "/nonexistent", nofile=(256, target)) as (_, proc):
        assert server_open_files(proc.pid)[0] == target


def test_the_connection_limit_evicts_the_longest_waiting_or_refuses_when_all_are_busy(tmp_path: Path) -> None:
    limits = {"KERNELOPT_MCP_MAX_CONNECTIONS": "4", "KERNELOPT_MCP_HEADER_TIMEOUT": "600",
              "KERNELOPT_MCP_BODY_TIMEOUT": "600"}
    with server(tmp_path, "--harness", "/nonexistent", env=limits) as (port, _):
        with ExitStack() as sockets:
            waiting = [sockets.enter_context(half_open(port)) for _ in range(4)]
            time.sleep(0.5)  # all four are in the table before the token holder comes
            token_holder_is_answered(port)  # each of its connections evicts the longest-waiting
            assert is_closed(waiting[0]) and not is_closed(waiting[3]), "the longest-waiting goes first"
        with ExitStack() as sockets:
            busy = [sockets.enter_context(body_pending(port)) for _ in range(4)]
            time.sleep(0.5)
            newcomer = sockets.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))
            answer = closed_by_server(newcomer)
            assert (answer.startswith(b"HTTP/1.1 503 ") and b"retry-after: 5" in answer
                    and b"--max-connections" in answer)
            assert not any(is_closed(s) for s in busy), "a request in flight was cut"
        deadline = time.monotonic() + 20
        while True:  # the busy ones' closes reach the server; then it answers again
            try:
                token_holder_is_answered(port)
                break
            except AssertionError:
                assert time.monotonic() < deadline, "no room again after the busy connections closed"
                time.sleep(0.2)


def test_headers_that_never_complete_get_408_and_close(tmp_path: Path) -> None:
    """A client trickling header lines forever (slowloris): the deadline runs from the request's
    first byte, so new bytes do not extend it."""
    with (
        server(tmp_path, "--harness", "/nonexistent", env={"KERNELOPT_MCP_HEADER_TIMEOUT": "1"}) as (port, _),
        half_open(port) as s,
    ):
        lines = iter(range(1000))
        answer = closed_by_server(s, trickle=lambda: f"X-Slow-{next(lines)}: 1\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 408 ") and b"within 1 s" in answer
        token_holder_is_answered(port)


def test_a_slow_body_gets_408_and_close(tmp_path: Path) -> None:
    with (
        server(tmp_path, "--harness", "/nonexistent", env={"KERNELOPT_MCP_BODY_TIMEOUT": "1"}) as (port, _),
        body_pending(port) as s,
    ):
        answer = closed_by_server(s, trickle=lambda: b" ")
        assert answer.startswith(b"HTTP/1.1 408 ") and b"body did not arrive within 1 s" in answer
        token_holder_is_answered(port)


def test_a_client_that_never_reads_its_answers_loses_the_connection(tmp_path: Path) -> None:
    """Requests pipelined without the token and never read: the 401 answers fill the buffers,
    the next answer waits for room, and the connection stayed busy forever (before the token
    check); two of them filled a two-connection server. Now each is closed once its client
    has read nothing for the send timeout, and the token holder is answered."""
    limits = {"KERNELOPT_MCP_MAX_CONNECTIONS": "2", "KERNELOPT_MCP_SEND_TIMEOUT": "1"}
    request = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
    with server(tmp_path, "--harness", "/nonexistent", env=limits) as (port, _), ExitStack() as sockets:
        stuck = []
        for _ in range(2):
            s = sockets.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.setblocking(False)
            stuck.append(s)
        closed = [False, False]
        deadline = time.monotonic() + 30
        while not all(closed) and time.monotonic() < deadline:
            for i, s in enumerate(stuck):
                try:
                    s.send(request * 100)  # blocks (BlockingIOError) once the server stops reading
                except BlockingIOError:
                    pass
                except OSError:  # reset: the server closed it
                    closed[i] = True
            time.sleep(0.05)
        assert all(closed), "a client that reads nothing kept its connection"
        token_holder_is_answered(port)


def test_long_tool_calls_and_idle_sessions_outlive_the_read_timeouts(tmp_path: Path) -> None:
    """The timeouts are for receiving a request: a benchmark streaming progress over SSE for
    several header and body timeouts finishes, and the session (its GET stream, kept-alive
    connections) still works after sitting idle as long."""
    harness = write_harness(tmp_path, "fake")
    extra = write_tiny_workload(tmp_path / "extra")
    env = {"KERNELOPT_WORKLOADS": str(extra), "KERNELOPT_MCP_HEADER_TIMEOUT": "1", "KERNELOPT_MCP_BODY_TIMEOUT": "1"}
    with server(tmp_path, "--harness", str(harness), env=env) as (port, _):
        async def session() -> None:
            progress: list[str] = []

            async def heard(done: float, total: float | None, message: str | None) -> None:
                progress.append(message or "")

            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as http,
                Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)) as client,
            ):
                started = time.monotonic()
                r = await client.call_tool("benchmark", {"workload": "tiny_add", "launch": ADD_LAUNCH,
                                                         "source": kernel("SLOW")}, progress_callback=heard)
                assert not r.is_error and r.structured_content["status"] == "ok", r.content
                assert time.monotonic() - started > 2.5 and progress, "not a call longer than the timeouts"
                await anyio.sleep(2.5)
                assert {"benchmark"} <= {t.name for t in (await client.list_tools()).tools}

        anyio.run(session)


class _Conn:
    def __init__(self) -> None:
        self.evicted = False

    def evict(self) -> None:
        self.evicted = True


def test_the_table_evicts_the_longest_waiting_and_never_a_busy_one() -> None:
    table = ConnectionTable(3)
    a, b, c, d, e = (_Conn() for _ in range(5))
    for conn in (a, b, c):
        assert table.admit(conn)
    table.mark(a, busy=True)
    table.mark(a, busy=False)  # a waits again: now after b and c
    assert table.admit(d) and b.evicted and not a.evicted
    for conn in (a, c, d):
        table.mark(conn, busy=True)
    assert not table.admit(e) and len(table) == 3
    table.remove(c)
    assert table.admit(e) and not any(x.evicted for x in (a, c, d))


def test_limits_fit_the_open_file_limit() -> None:
    assert HttpLimits.for_open_files(1 << 20, 10, 30, None).max_connections == 1024
    low = HttpLimits.for_open_files(1024, 10, 30, None).max_connections
    assert low >= 16 and open_files_needed(low) <= 1024
    with pytest.raises(ValueError, match="lower it to at most"):
        HttpLimits.for_open_files(1024, 10, 30, 1000)
    for bad in ((0, 30, None), (10, float("inf"), None), (10, 30, 0)):
        with pytest.raises(ValueError, match="--"):
            HttpLimits.for_open_files(4096, *bad)


def test_limits_come_from_flags_and_environment() -> None:
    parse = build_parser().parse_args
    assert http_limits_from_args(parse(["--http"]), 1 << 16, environ={}) == HttpLimits(10.0, 30.0, 1024, 60.0)
    env = {"KERNELOPT_MCP_HEADER_TIMEOUT": "5", "KERNELOPT_MCP_BODY_TIMEOUT": "7", "KERNELOPT_MCP_MAX_CONNECTIONS": "9",
           "KERNELOPT_MCP_SEND_TIMEOUT": "11"}
    assert http_limits_from_args(parse(["--http"]), 1 << 16, environ=env) == HttpLimits(5.0, 7.0, 9, 11.0)
    flags = ["--http", "--header-timeout", "2", "--body-timeout", "3", "--max-connections", "4", "--send-timeout", "6"]
    assert http_limits_from_args(parse(flags), 1 << 16, environ=env) == HttpLimits(2.0, 3.0, 4, 6.0)
    with pytest.raises(SystemExit, match="kernelopt-mcp: --max-connections 5000 needs an open-file limit"):
        http_limits_from_args(parse(["--http", "--max-connections", "5000"]), 4096, environ={})
