"""The HTTP listener's own defenses, below the ASGI app and so before any token check: how long
a client may take to send a request, how many connections are kept, and the open-file limit
they draw on.

A connection is *waiting* while the server has no request of it in flight: its headers are
still arriving, or it idles between requests (keep-alive). It is *busy* from its complete
headers until the answer is sent, however long that takes (a tool call streaming progress over
SSE for minutes, a GET stream). The rules:

- headers must be complete within ``header_timeout_s`` of the connection being accepted (on a
  kept-alive connection, of the next request's first byte); trickling bytes does not extend it;
- a body must be complete within ``body_timeout_s`` of its headers (an MCP message is a small
  JSON document; the SDK refuses one over 4 MiB with 413);
- both answer 408 and close; nothing limits how long an answer takes to send while the client
  reads it, but an answer the client stops reading (none of it leaves the buffer for
  ``send_timeout_s``) closes the connection: pipelined requests that are never read would
  otherwise keep a connection busy forever, before any token check;
- at most ``max_connections`` are kept: when full, a new connection evicts the waiting one
  that has waited longest (the slowloris defense: half-open connections cannot crowd out a
  client); when every connection is busy, the newcomer is answered 503 and closed at once, so
  descriptors are never exhausted;
- the soft open-file limit is raised to the hard limit at start, and the connection limit
  leaves room below it for the harness, compile workers, oracle workers and files.

uvicorn has no header timeout of its own: :func:`guarded_protocol` subclasses its h11 protocol.
"""

from __future__ import annotations

import asyncio
import enum
import http
import logging
import resource
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 30.0  # 1.5 MiB (three 512 KiB sources) at 50 KiB/s
DEFAULT_SEND_TIMEOUT_S = 60.0
DEFAULT_MAX_CONNECTIONS = 1024
LISTEN_BACKLOG = 128  # also how many connections asyncio accepts in one go, before any is judged
FD_RESERVE = 256  # descriptors kept for the server itself: harness and worker pipes, files, logs
RETRY_AFTER_S = 5

log = logging.getLogger("uvicorn.error")


def open_files_needed(max_connections: int) -> int:
    """The open-file limit ``max_connections`` needs: the connections, ``FD_RESERVE``, and a
    burst of ``LISTEN_BACKLOG`` connections per event-loop turn for three turns (accepted, set
    up, then closed when judged surplus)."""
    return max_connections + 3 * LISTEN_BACKLOG + FD_RESERVE


def raise_open_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (an unprivileged process may); returns the
    soft limit now in force. Where the hard limit is unlimited or refused, the soft one stays."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft >= hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        return soft
    return hard


@dataclass(frozen=True)
class HttpLimits:
    """What the HTTP listener allows one connection and all of them (see the module docstring)."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S

    @classmethod
    def for_open_files(cls, open_files: int, header_timeout_s: float, body_timeout_s: float,
                       max_connections: int | None, send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S) -> HttpLimits:
        """Limits checked against the open-file limit ``open_files``: the default connection
        limit is ``DEFAULT_MAX_CONNECTIONS`` or what the open-file limit leaves room for.

        Raises:
            ValueError: a timeout that is not a positive number, or a connection limit below 1 or
                beyond what ``open_files`` leaves room for (the message says what to change).
        """
        for name, value in (("--header-timeout", header_timeout_s), ("--body-timeout", body_timeout_s),
                            ("--send-timeout", send_timeout_s)):
            if not (value > 0 and value != float("inf")):
                raise ValueError(f"{name} {value} must be a positive number of seconds")
        room = open_files - open_files_needed(0)
        if max_connections is None:
            max_connections = min(DEFAULT_MAX_CONNECTIONS, room)
            if max_connections < 1:
                raise ValueError(f"the open-file limit ({open_files}) leaves no room for HTTP connections: "
                                 f"raise it (ulimit -n) to at least {open_files_needed(16)}")
        elif max_connections < 1:
            raise ValueError(f"--max-connections {max_connections} must be at least 1")
        elif max_connections > room:
            raise ValueError(f"--max-connections {max_connections} needs an open-file limit of "
                             f"{open_files_needed(max_connections)}, and this process may open {open_files}: "
                             f"lower it to at most {max(room, 0)} or raise the hard limit (ulimit -Hn)")
        return cls(header_timeout_s, body_timeout_s, max_connections, send_timeout_s)


class _Evictable(Protocol):
    def evict(self) -> None: ...


class ConnectionTable:
    """The open connections of one listener, the waiting ones in the order they began to wait."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._waiting: OrderedDict[_Evictable, None] = OrderedDict()
        self._busy: set[_Evictable] = set()

    def __len__(self) -> int:
        return len(self._waiting) + len(self._busy)

    def admit(self, conn: _Evictable) -> bool:
        """Take ``conn`` in as waiting, evicting the longest-waiting connection when full; False
        (``conn`` not taken) when full of busy ones."""
        if len(self) >= self.capacity:
            if not self._waiting:
                return False
            oldest, _ = self._waiting.popitem(last=False)
            oldest.evict()
        self._waiting[conn] = None
        return True

    def mark(self, conn: _Evictable, *, busy: bool) -> None:
        """Record that ``conn`` has a request in flight (``busy``) or not; a connection that
        begins to wait goes to the back of the eviction order."""
        if busy and conn in self._waiting:
            del self._waiting[conn]
            self._busy.add(conn)
        elif not busy and conn in self._busy:
            self._busy.discard(conn)
            self._waiting[conn] = None

    def remove(self, conn: _Evictable) -> None:
        self._waiting.pop(conn, None)
        self._busy.discard(conn)


class _Phase(enum.Enum):
    HEADERS = "headers"  # a request's headers are arriving (or none yet, on a new connection)
    BODY = "body"  # its body is arriving
    SERVED = "served"  # the request is in; no deadline while it is served
    IDLE = "idle"  # keep-alive between requests: uvicorn's timeout_keep_alive applies


def plain_response(status: http.HTTPStatus, text: str, *, retry_after_s: int | None = None) -> bytes:
    """A complete ``Connection: close`` answer, written under h11 (which may not answer a request
    it has not read yet)."""
    body = text.encode() + b"\n"
    head = (f"HTTP/1.1 {status.value} {status.phrase}\r\ncontent-type: text/plain; charset=utf-8\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n")
    if retry_after_s is not None:
        head += f"retry-after: {retry_after_s}\r\n"
    return (head + "\r\n").encode() + body


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the deadlines and the connection table of the module docstring."""

    limits: HttpLimits
    table: ConnectionTable

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase = _Phase.HEADERS
        self._deadline: asyncio.TimerHandle | None = None
        self._refused = False
        self._stall: asyncio.TimerHandle | None = None
        self._unsent = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if not self.table.admit(self):
            self._refused = True
            log.info("refused a connection: all %d carry requests in flight", self.table.capacity)
            transport.write(plain_response(
                http.HTTPStatus.SERVICE_UNAVAILABLE,
                f"kernelopt-mcp: all {self.table.capacity} connections carry requests in flight; retry "
                f"in {RETRY_AFTER_S} s (the operator sets --max-connections)", retry_after_s=RETRY_AFTER_S))
            transport.close()
            return
        super().connection_made(transport)
        self._arm(self.limits.header_timeout_s, self._headers_late)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        self.table.remove(self)
        self._disarm()
        if self._stall is not None:
            self._stall.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._phase is _Phase.IDLE:  # the next request on a kept-alive connection begins
            self._phase = _Phase.HEADERS
            self._arm(self.limits.header_timeout_s, self._headers_late)
        super().data_received(data)
        self._follow()

    def pause_writing(self) -> None:
        super().pause_writing()
        self._unsent = self.transport.get_write_buffer_size()
        self._watch_stall()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def _watch_stall(self) -> None:
        self._stall = self.loop.call_later(self.limits.send_timeout_s, self._check_stall)

    def _check_stall(self) -> None:
        """Writing is paused (the buffer is over its high-water mark): close the connection
        unless the client read some of it since the last look."""
        if self.transport.is_closing():
            return
        unsent = self.transport.get_write_buffer_size()
        if unsent < self._unsent:
            self._unsent = unsent
            self._watch_stall()
            return
        log.info("closed a connection whose client read none of its answer for %g s", self.limits.send_timeout_s)
        self.transport.abort()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def evict(self) -> None:
        """Closed to make room for a new connection: it had no request in flight. Aborted, not
        closed: a client that does not read could hold a closing connection's unsent bytes."""
        log.info("closed a waiting connection to make room (--max-connections %d)", self.table.capacity)
        self._disarm()
        self.transport.abort()

    def _follow(self) -> None:
        """Move to the phase h11 says the connection is in, with that phase's deadline."""
        if self.transport.is_closing():
            self._disarm()
            return
        in_flight = self.cycle is not None and not self.cycle.response_complete
        self.table.mark(self, busy=in_flight)
        state = self.conn.their_state
        if state is h11.IDLE:
            if self._phase is not _Phase.HEADERS:
                self._phase = _Phase.IDLE
                self._disarm()
        elif state is h11.SEND_BODY:
            if self._phase is not _Phase.BODY:
                self._phase = _Phase.BODY
                self._arm(self.limits.body_timeout_s, self._body_late)
        elif self._phase is not _Phase.SERVED:
            self._phase = _Phase.SERVED
            self._disarm()

    def _headers_late(self) -> None:
        if self._phase is _Phase.HEADERS:
            self._refuse_request(http.HTTPStatus.REQUEST_TIMEOUT,
                                 f"kernelopt-mcp: the request's headers did not arrive within "
                                 f"{self.limits.header_timeout_s:g} s; send each request whole")

    def _body_late(self) -> None:
        if self._phase is _Phase.BODY:
            self._refuse_request(http.HTTPStatus.REQUEST_TIMEOUT,
                                 f"kernelopt-mcp: the request's body did not arrive within "
                                 f"{self.limits.body_timeout_s:g} s of its headers; send each request whole")

    def _refuse_request(self, status: http.HTTPStatus, text: str) -> None:
        """Answer ``status`` (unless this request's answer has begun) and close. The app, if it
        runs, is waiting for the body: closing hands it a disconnect."""
        self._disarm()
        if self.transport.is_closing():
            return
        log.info("%s: %s", status.phrase, text)
        if self._phase is _Phase.HEADERS or self.cycle is None or not self.cycle.response_started:
            self.transport.write(plain_response(status, text))  # else an answer was sent: no second one
        if self.transport.get_write_buffer_size():
            self.transport.abort()  # a client that does not read must not hold the descriptor
        else:
            self.transport.close()

    def _arm(self, delay_s: float, callback: Any) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(delay_s, callback)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None


def guarded_protocol(limits: HttpLimits) -> type[GuardedH11Protocol]:
    """A protocol class for ``uvicorn.Config(http=...)`` with its own connection table (one per
    listener)."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,),
                {"limits": limits, "table": ConnectionTable(limits.max_connections)})
