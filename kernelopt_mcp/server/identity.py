"""Who is calling: one bearer token per HTTP client, the client id every request runs under, and
how many HTTP sessions one client may hold.

A server shared by several clients keeps their workloads, frozen runs, ``runs/`` and prepared
sessions apart by client id (:data:`kernelopt_mcp.server_config.CLIENT_ID`). The id comes from the
token the client authenticated with, never from anything the client writes in a request:

- ``--tokens-file FILE``: a JSON object ``{"client_id": "token", ...}``; ids match
  ``[A-Za-z0-9_-]{1,64}``, tokens are at least 16 characters, no token twice; the file must be a
  regular file that only its owner may read or write (like an ssh key).
- ``--token`` (or ``KERNELOPT_MCP_TOKEN``): one more client, named ``default``.
- Over stdio, and over loopback HTTP without any token, every request is the client ``local``:
  the server cannot tell such clients apart, so they share one namespace (the workspace's own
  ``workloads/`` and ``runs/``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.responses import JSONResponse

from ..server_config import CLIENT_ID, LOCAL_CLIENT

CLIENT_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
TOKEN_CLIENT = "default"  # the client that --token / KERNELOPT_MCP_TOKEN names
MIN_TOKEN_CHARS = 16
MAX_TOKENS_FILE_BYTES = 1 << 20


class TokensFileError(ValueError):
    """The tokens file cannot be used; the message says what to fix."""


def load_tokens_file(path: Path) -> dict[str, str]:
    """Client id -> token from a tokens file (see the module docstring).

    Raises:
        TokensFileError: unreadable, readable by others, not a JSON object of id -> token, an id
            that is not ``[A-Za-z0-9_-]{1,64}`` (or is the reserved ``local``), a token shorter
            than 16 characters or with whitespace, the same token for two clients, a repeated id.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise TokensFileError(f"--tokens-file {path}: cannot open ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TokensFileError(f"--tokens-file {path}: not a regular file")
        if st.st_mode & 0o077:
            raise TokensFileError(
                f"--tokens-file {path}: other users may read or change it (mode {stat.S_IMODE(st.st_mode):o}); "
                f"run `chmod 600 {path}`"
            )
        data = os.read(fd, MAX_TOKENS_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_TOKENS_FILE_BYTES:
        raise TokensFileError(f"--tokens-file {path}: larger than {MAX_TOKENS_FILE_BYTES} bytes")

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in items:
            if key in seen:
                raise TokensFileError(f"--tokens-file {path}: client id {key!r} appears twice")
            seen[key] = value
        return seen

    try:
        parsed = json.loads(data.decode("utf-8"), object_pairs_hook=pairs)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokensFileError(f'--tokens-file {path}: not JSON ({exc}); write {{"client_id": "token", ...}}') from None
    if not isinstance(parsed, dict) or not parsed:
        raise TokensFileError(f'--tokens-file {path}: write a non-empty JSON object {{"client_id": "token", ...}}')
    return check_tokens(parsed, f"--tokens-file {path}")


def check_tokens(tokens: Mapping[str, Any], where: str) -> dict[str, str]:
    """``tokens`` (client id -> token) checked: ids, token strength, no token shared by two clients."""
    owner: dict[str, str] = {}
    for client, token in tokens.items():
        if not CLIENT_ID_RE.match(client) or client == LOCAL_CLIENT:
            raise TokensFileError(
                f"{where}: client id {client!r} must match [A-Za-z0-9_-]{{1,64}} and not be {LOCAL_CLIENT!r} "
                "(the id of stdio and token-less clients)"
            )
        if not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
            raise TokensFileError(
                f"{where}: the token of {client!r} must be a string of at least {MIN_TOKEN_CHARS} characters "
                "without whitespace (e.g. `python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
            )
        if token in owner:
            raise TokensFileError(f"{where}: {owner[token]!r} and {client!r} have the same token; "
                                  "give each client its own")
        owner[token] = client
    return {client: str(token) for client, token in tokens.items()}


def client_tokens(token: str | None, tokens_file: Path | None) -> dict[str, str]:
    """Every client's token: the tokens file's, plus ``--token`` as the client ``default``."""
    tokens = load_tokens_file(tokens_file) if tokens_file is not None else {}
    if token:
        if TOKEN_CLIENT in tokens:
            raise TokensFileError(
                f"--tokens-file {tokens_file} names a client {TOKEN_CLIENT!r}, which is also --token's "
                "(KERNELOPT_MCP_TOKEN) client; rename it or drop --token"
            )
        if token in tokens.values():
            raise TokensFileError("--token (KERNELOPT_MCP_TOKEN) is also a client's token in --tokens-file "
                                  f"{tokens_file}")
        tokens[TOKEN_CLIENT] = token
    return tokens


class ClientTokens:
    """The bearer-token check: which client a token belongs to. Every known token is compared
    (constant time, over SHA-256 digests so lengths never matter), whichever matches."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._digests = [(client, hashlib.sha256(token.encode()).digest()) for client, token in tokens.items()]

    async def verify_token(self, token: str) -> AccessToken | None:
        offered = hashlib.sha256(token.encode()).digest()
        found: str | None = None
        for client, digest in self._digests:  # no early exit: the time does not say which one matched
            if hmac.compare_digest(offered, digest):
                found = client
        return AccessToken(token=token, client_id=found, scopes=[]) if found is not None else None


def request_client(ctx: ServerRequestContext[Any, Any]) -> str:
    """The client id of the request ``ctx`` serves: its authenticated token's client, else ``local``.

    Read from the HTTP request that carried the message (each message: a session is bound to
    the credential that opened it), else from the SDK's authentication context."""
    scope = getattr(getattr(ctx, "request", None), "scope", None)
    user = scope.get("user") if isinstance(scope, dict) else None
    token = user.access_token if isinstance(user, AuthenticatedUser) else get_access_token()
    client = token.client_id if token is not None else None
    return client if client and CLIENT_ID_RE.match(client) else LOCAL_CLIENT


class ClientIdentity:
    """Server middleware: every request (tool call, resource read, completion, prompt) runs with
    :data:`~kernelopt_mcp.server_config.CLIENT_ID` set to its client, so what the service keeps for
    clients is keyed by who asked, in one place for every handler."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        reset = CLIENT_ID.set(request_client(ctx))
        try:
            return await call_next(ctx)
        finally:
            CLIENT_ID.reset(reset)


def cap_sessions_per_client(manager: Any, cap: int) -> None:
    """Refuse a new HTTP session to a client that already holds ``cap`` open ones, so one token
    cannot take every session while others still get theirs.

    Enforced where the SDK admits sessions, under its session-creation lock, counting the sessions
    it keeps per credential (a refused admission answers 503, as at the server-wide limit); a
    request that would open one past the cap is answered 429 before that, with what to do next.
    Token-less clients are one client to the server and are bounded only by ``max_sessions``."""
    admit = manager._admit_session
    owners: dict[str, Any] = manager._session_owners
    serve = manager.asgi_app

    def holding(client: str) -> int:
        return sum(_owner(o) == client for o in owners.values())

    def admit_capped(requestor: Any) -> Any:
        client = _owner(requestor)
        if client is not None and holding(client) >= cap:
            return None
        return admit(requestor)

    async def asgi_app(scope: Any, receive: Any, send: Any) -> None:
        user = scope.get("user")
        client = user.access_token.client_id if isinstance(user, AuthenticatedUser) else None
        headers = dict(scope.get("headers", ()))
        version = headers.get(b"mcp-protocol-version", b"").decode("latin-1")
        # a session opens on a POST without a session id, on the protocols that have sessions
        opens = (scope.get("method") == "POST" and b"mcp-session-id" not in headers
                 and (not version or version in HANDSHAKE_PROTOCOL_VERSIONS))
        if client is not None and opens and holding(client) >= cap:
            message = (
                f"client {client!r} already holds {cap} open sessions, this server's limit per client "
                "(--max-sessions-per-client); end one (HTTP DELETE with its mcp-session-id) or let idle ones expire"
            )
            body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": message}}
            await JSONResponse(body, status_code=429, headers={"Retry-After": "60"})(scope, receive, send)
            return
        await serve(scope, receive, send)

    manager._admit_session = admit_capped
    manager.asgi_app = asgi_app


def _owner(requestor: Any) -> str | None:
    """The client id of a session's owner (the SDK's AuthorizationContext, a TypedDict)."""
    client = requestor.get("client_id") if isinstance(requestor, Mapping) else getattr(requestor, "client_id", None)
    return client if isinstance(client, str) else None


__all__ = [
    "CLIENT_ID_RE",
    "TOKEN_CLIENT",
    "ClientIdentity",
    "ClientTokens",
    "TokensFileError",
    "cap_sessions_per_client",
    "check_tokens",
    "client_tokens",
    "load_tokens_file",
    "request_client",
]
