"""The streamable-HTTP transport: what a bind address exposes, DNS-rebinding protection, the
bearer-token check (one token per client: identity.py), and the ASGI app with expiring sessions (see SECURITY.md)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from typing import Any, Literal

from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from ..server_config import ServerConfig
from .identity import ClientTokens, cap_sessions_per_client

BindKind = Literal["loopback", "wildcard", "other"]


def bind_kind(host: str) -> BindKind:
    """What binding ``host`` exposes, judged from the addresses the socket would get: resolved
    like the bind resolves it (getaddrinfo), so every spelling counts: ``0``, ``0x0``, ``0.0``,
    ``::0``, ``0000:0000::0``, ``::ffff:0.0.0.0`` and names that resolve to them are all
    ``wildcard`` (every interface); ``127.1`` and ``localhost`` are ``loopback`` only when every
    address they resolve to is; anything else, or a name that does not resolve, is ``other``."""
    name = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not name.strip():
        return "wildcard"  # an empty host binds every interface
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError):
        return "other"
    addresses = []
    for *_, sockaddr in infos:
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        addresses.append(ip)
    if any(ip.is_unspecified for ip in addresses):
        return "wildcard"
    if addresses and all(ip.is_loopback for ip in addresses):
        return "loopback"
    return "other"


def http_security(host: str, allowed_hosts: list[str]) -> TransportSecuritySettings:
    """DNS-rebinding protection: only these Host (and Origin) names are answered."""
    names = ["127.0.0.1", "localhost", "[::1]", *allowed_hosts]
    if bind_kind(host) == "other":  # a wildcard is no name a client sends
        names.append(f"[{host}]" if ":" in host and not host.startswith("[") else host)
    names = list(dict.fromkeys(names))
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*names, *(f"{n}:*" for n in names)],
        allowed_origins=[f"{scheme}://{n}{port}" for n in names for scheme in ("http", "https") for port in ("", ":*")],
    )


def http_app(app: MCPServer, config: ServerConfig, host: str, allowed_hosts: list[str]) -> Any:
    """The streamable-HTTP ASGI app: DNS-rebinding protection for ``host``, sessions that expire
    after ``config.session_idle_timeout_s`` without a request in flight (their id then answers
    404 and the SDK drops them), at most ``config.max_sessions`` open at once and
    ``config.max_sessions_per_client`` per client token."""
    starlette_app = app.streamable_http_app(
        host=host, transport_security=http_security(host, allowed_hosts),
        session_idle_timeout=config.session_idle_timeout_s, max_sessions=config.max_sessions,
    )
    cap_sessions_per_client(app.session_manager, config.max_sessions_per_client)
    return starlette_app


def token_auth(tokens: Mapping[str, str]) -> dict[str, Any]:
    """MCPServer keyword arguments that require ``Authorization: Bearer <token>`` with one of
    ``tokens`` (client id -> token; none: no check), the request then running as that client."""
    if not tokens:
        return {}
    return {
        "auth": AuthSettings(issuer_url="http://127.0.0.1", resource_server_url=None),
        "token_verifier": ClientTokens(tokens),
    }
