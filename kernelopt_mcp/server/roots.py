"""The client's roots: directories an MCP client shares, from which a tool call may read a kernel
source (`path`, `tunable_path`) while it is served (asked for on each such call). Honoured over
stdio, where the client started the server as its own user; over HTTP only when the operator
passes --trust-client-roots, since any client that reaches the port could otherwise name this
user's files. Never writable and never data roots (freeze_workload does not ask for them)."""

from __future__ import annotations

import urllib.parse
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

from mcp.server.mcpserver import Context, ListRoots, MCPServer, Resolve
from mcp_types import ListRootsResult

from ..server_config import CLIENT_ROOTS

# Servers that ignore their clients' roots (HTTP without --trust-client-roots); see build_server.
ROOTS_OFF: weakref.WeakSet[MCPServer] = weakref.WeakSet()


def _root_path(uri: str) -> Path | None:
    """A ``file://`` root's directory (absolute, resolved), else None."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        return None
    path = Path(urllib.parse.unquote(parsed.path))
    if not path.is_absolute():
        return None
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return None


def _ask_roots(ctx: Context, wanted: bool) -> ListRoots | None:
    """Ask the client for its roots (the SDK sends roots/list, or an input request on protocols that
    batch them) when the call names a path and the client declared the capability."""
    caps = ctx.client_capabilities
    if not wanted or caps is None or caps.roots is None or ctx.mcp_server in ROOTS_OFF:
        return None
    return ListRoots()


def _roots_for_path(ctx: Context, path: str | None = None) -> ListRoots | None:
    return _ask_roots(ctx, bool(path))


def _roots_for_tunable(ctx: Context, tunable_path: str | None = None) -> ListRoots | None:
    return _ask_roots(ctx, bool(tunable_path))


# A tool parameter the SDK fills with the client's roots (never part of the tool's input schema).
SharedRoots = Annotated[ListRootsResult | None, Resolve(_roots_for_path)]
SharedRootsForTunable = Annotated[ListRootsResult | None, Resolve(_roots_for_tunable)]


@contextmanager
def shared_roots(listed: ListRootsResult | None) -> Iterator[None]:
    """While open, confine() also accepts paths under the client's file roots, as under --root."""
    roots = tuple(p for p in (_root_path(str(r.uri)) for r in listed.roots) if p is not None) if listed else ()
    token = CLIENT_ROOTS.set(roots)
    try:
        yield
    finally:
        CLIENT_ROOTS.reset(token)
