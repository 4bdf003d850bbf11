"""The workloads frozen through a server (``freeze_workload``), seen by its tools' calls: the
state of an MCP client's session with this server (not an evaluation ``Session``, a prepared
workload on a GPU, nor the harness's session, its process's hold on a device).

The MCP protocol keeps no per-client state on the server (each request may arrive on a fresh
MCP session object), so frozen workloads belong to the server process, one registry per client id
(:data:`~kernelopt_mcp.server_config.CLIENT_ID`, from the caller's token): a client sees, replays into
and evicts (past MAX_FROZEN) only the workloads it froze itself. For a server with one client
(stdio, what ``kernelopt optimize`` starts) a frozen workload is found ahead of any other of its
name, so a run's frozen ``sgemm`` is what its benchmarks measure; a server that may have several
clients (HTTP) refuses to freeze under a name another workload has (see ``kernelopt_mcp.frozen_runs``)."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from mcp.server.mcpserver import Context, MCPServer

from ..freeze import FROZEN_WORKLOADS, FrozenWorkload
from ..server_config import CLIENT_ID

# server -> client id -> name -> frozen workload
_FROZEN: weakref.WeakKeyDictionary[MCPServer, dict[str, dict[str, FrozenWorkload]]] = weakref.WeakKeyDictionary()
# Servers that may have several clients at once (HTTP); see build_server.
SHARED: weakref.WeakSet[MCPServer] = weakref.WeakSet()


@contextmanager
def callers_frozen_workloads(ctx: Context) -> Iterator[None]:
    """While open, workload lookups see the workloads the calling client froze through this server first."""
    frozen = _FROZEN.setdefault(ctx.mcp_server, {}).setdefault(CLIENT_ID.get(), {})
    token = FROZEN_WORKLOADS.set(frozen)
    try:
        yield
    finally:
        FROZEN_WORKLOADS.reset(token)


def shared_server(ctx: Context) -> bool:
    return ctx.mcp_server in SHARED
