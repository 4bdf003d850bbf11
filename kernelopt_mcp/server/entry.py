"""``kernelopt-mcp``: argument parsing, the server's configuration from flags and environment
(the only place the server reads ``os.environ``), and :func:`main` (stdio or streamable HTTP)."""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import __version__
from ..admission import DEFAULT_MAX_WAITING, DEFAULT_MAX_WAITING_PER_CLIENT, QueueBounds
from ..config import Settings, parse_devices
from ..quota import DEFAULT_WORKLOAD_MAX_BYTES, DEFAULT_WORKSPACE_QUOTA_BYTES, GIB
from ..server_config import (
    DEFAULT_GPU_CALL_MAX_S,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_SESSIONS_PER_CLIENT,
    DEFAULT_SESSION_IDLE_TIMEOUT_S,
    ServerConfig,
)
from .build import build_server
from .http_guard import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_SEND_TIMEOUT_S,
    LISTEN_BACKLOG,
    HttpLimits,
    guarded_protocol,
    raise_open_file_limit,
)
from .identity import TokensFileError, client_tokens
from .transport import bind_kind, http_app


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kernelopt-mcp",
                                description="kernelopt's GPU tools as an MCP server (stdio by default).")
    p.add_argument("--version", action="version", version=f"kernelopt-mcp {__version__}")
    p.add_argument("--workspace", help="created workloads and runs (default ~/.kernelopt; env "
                   "KERNELOPT_MCP_WORKSPACE); caches are in KERNELOPT_CACHE, else $XDG_CACHE_HOME/kernelopt or "
                   "~/.cache/kernelopt (see `kernelopt cache info`)")
    p.add_argument("--root", action="append", default=[], help="another directory `path` arguments may read, "
                   "repeatable (env KERNELOPT_MCP_ROOTS, ':'-separated)")
    p.add_argument("--data-root", action="append", default=[], help="a directory whose .bin/.npy files clients may "
                   "name as data files in freeze_workload, repeatable (env KERNELOPT_MCP_DATA_ROOTS, ':'-separated; "
                   "default none: data files are refused)")
    p.add_argument("--output-root", action="append", default=[], help="a directory besides <workspace>/runs that "
                   "freeze_workload may write into, repeatable (env KERNELOPT_MCP_OUTPUT_ROOTS, ':'-separated)")
    p.add_argument("--trust-client-roots", action="store_true", default=None, help="over HTTP, read `path` kernel "
                   "sources under the roots a client shares, as over stdio: any client then reads this user's files "
                   "there (env KERNELOPT_MCP_TRUST_CLIENT_ROOTS=1)")
    p.add_argument("--harness", help="kernelopt-harness binary (default: the installed one; env KERNELOPT_HARNESS)")
    p.add_argument("--device", type=int,
                   help="run on this CUDA device ordinal alone (env KERNELOPT_DEVICE; default: see --devices)")
    p.add_argument("--devices", help="CUDA device ordinals to spread GPU jobs over, e.g. 0,1,2,3: one harness process "
                   "and queue each, a job goes to a free one (env KERNELOPT_DEVICES; default every visible device)")
    p.add_argument("--arch", help="compile target override, e.g. sm_90 (env KERNELOPT_ARCH)")
    p.add_argument("--ray", metavar="ADDRESS", help="run GPU jobs on a Ray cluster's GPUs, one actor each: auto (this "
                   "machine's cluster) or HOST:PORT; needs pip install \"kernelopt-mcp[ray]\" (env KERNELOPT_RAY)")
    p.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1; any other needs a token)")
    p.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
    p.add_argument("--token", help="bearer token clients must send over HTTP, the client `default` (prefer env "
                   "KERNELOPT_MCP_TOKEN: flags show in ps)")
    p.add_argument("--tokens-file", help='one bearer token per HTTP client: a JSON object {"client_id": "token", ...}, '
                   'mode 600; each client sees only its own created and frozen workloads and runs (env '
                   'KERNELOPT_MCP_TOKENS_FILE)')
    p.add_argument("--allowed-host", action="append", default=[],
                   help="Host name clients use to reach a non-loopback bind, repeatable")
    p.add_argument("--session-idle-timeout", type=float, help="seconds an HTTP session may stay idle (no request in "
                   f"flight) before it is closed and its id answers 404 (default {DEFAULT_SESSION_IDLE_TIMEOUT_S:.0f}; "
                   "env KERNELOPT_MCP_SESSION_IDLE_TIMEOUT)")
    p.add_argument("--max-sessions", type=int, help="open HTTP sessions at most; beyond, a new one gets 503 until "
                   f"others end or expire (default {DEFAULT_MAX_SESSIONS}; env KERNELOPT_MCP_MAX_SESSIONS)")
    p.add_argument("--max-sessions-per-client", type=int, help="open HTTP sessions one client token may hold; beyond, "
                   "its new one gets 429 while other clients still get theirs (default "
                   f"{DEFAULT_MAX_SESSIONS_PER_CLIENT}; env KERNELOPT_MCP_MAX_SESSIONS_PER_CLIENT)")
    p.add_argument("--header-timeout", type=float, help="seconds a client may take to send a request's headers before "
                   f"its connection is closed (default {DEFAULT_HEADER_TIMEOUT_S:g}; env KERNELOPT_MCP_HEADER_TIMEOUT)")
    p.add_argument("--body-timeout", type=float, help="seconds a client may take to send a request's body after its "
                   f"headers (default {DEFAULT_BODY_TIMEOUT_S:g}; env KERNELOPT_MCP_BODY_TIMEOUT)")
    p.add_argument("--send-timeout", type=float, help="seconds an answer may wait with the client reading none of it "
                   f"before its connection is closed (default {DEFAULT_SEND_TIMEOUT_S:g}; env "
                   "KERNELOPT_MCP_SEND_TIMEOUT)")
    p.add_argument("--max-connections", type=int, help="open HTTP connections at most; when full, a new one closes "
                   "the one that has waited longest without a request in flight, or gets 503 if all have one (default "
                   f"{DEFAULT_MAX_CONNECTIONS}, less where the open-file limit is low; env "
                   "KERNELOPT_MCP_MAX_CONNECTIONS)")
    p.add_argument("--workload-max-gib", type=float, help="the most a workload created or frozen by a client may "
                   f"hold, all buffers of all cases (default {DEFAULT_WORKLOAD_MAX_BYTES / GIB:g}; env "
                   "KERNELOPT_MCP_WORKLOAD_MAX_GIB)")
    p.add_argument("--workspace-quota-gib", type=float, help="the most the workspace may hold of created and frozen "
                   "workloads and runs; a create or freeze past it is refused (default "
                   f"{DEFAULT_WORKSPACE_QUOTA_BYTES / GIB:g}; env KERNELOPT_MCP_WORKSPACE_QUOTA_GIB)")
    p.add_argument("--max-waiting-per-client", type=int, help="jobs of one kind (compiles, GPU jobs, workload builds) "
                   "one client may have waiting; beyond, a call is refused at once with 'busy, retry in N s' (default "
                   f"{DEFAULT_MAX_WAITING_PER_CLIENT}; env KERNELOPT_MCP_MAX_WAITING_PER_CLIENT)")
    p.add_argument("--max-waiting", type=int, help="jobs of one kind all clients together may have waiting (default "
                   f"{DEFAULT_MAX_WAITING}; env KERNELOPT_MCP_MAX_WAITING)")
    p.add_argument("--gpu-call-max-s", type=float, help="seconds one call may hold the GPU before it is stopped, 0 "
                   f"for no cap; autotune's budget_s is capped to fit (default {DEFAULT_GPU_CALL_MAX_S:g} with --http, "
                   "none over stdio; env KERNELOPT_MCP_GPU_CALL_MAX_S)")
    p.add_argument("--unconfined-compiler", action="store_true", default=None,
                   help="where the kernel has no Landlock, compile WITHOUT confining NVRTC: a kernel could read this "
                   "user's files into a compile log (trusted clients only; env KERNELOPT_UNCONFINED_COMPILER=1)")
    p.add_argument("--orchestrator", action="store_true",
                   help="serve `kernelopt optimize` (which passes it): list and accept its run-recording tools "
                   "(freeze_workload, replay_requests) and list every tool in full")
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--completion", choices=("bash", "zsh", "tcsh"), metavar="SHELL",
                   help="print a shell completion script for kernelopt-mcp (bash, zsh or tcsh) and exit")
    return p


def config_from_args(args: argparse.Namespace, environ: dict[str, str] | None = None) -> ServerConfig:
    env = dict(os.environ if environ is None else environ)
    try:
        devices = parse_devices(args.devices) if getattr(args, "devices", None) else None
        settings = Settings.from_env(
            env, harness=args.harness, device=args.device, devices=devices, arch=args.arch,
            unconfined_compiler=getattr(args, "unconfined_compiler", None),
        )
    except ValueError as exc:
        raise SystemExit(f"kernelopt-mcp: {exc}") from None
    if settings.devices is None and (args.device is not None or env.get("KERNELOPT_DEVICE")):
        settings = replace(settings, devices=(settings.device,))  # one device named: that one alone
    if settings.arch and not re.fullmatch(r"sm_\d{2,3}[a-z]?", settings.arch):
        raise SystemExit(f"kernelopt-mcp: --arch {settings.arch!r} is not of the form sm_90")
    workspace = Path(args.workspace or env.get("KERNELOPT_MCP_WORKSPACE") or Path.home() / ".kernelopt").expanduser()
    roots = [*args.root, *(r for r in env.get("KERNELOPT_MCP_ROOTS", "").split(os.pathsep) if r)]
    data_roots = _dirs(getattr(args, "data_root", []), env, "KERNELOPT_MCP_DATA_ROOTS")
    output_roots = _dirs(getattr(args, "output_root", []), env, "KERNELOPT_MCP_OUTPUT_ROOTS")
    idle = _flag_or_env(getattr(args, "session_idle_timeout", None), env, "KERNELOPT_MCP_SESSION_IDLE_TIMEOUT", float,
                        DEFAULT_SESSION_IDLE_TIMEOUT_S)
    sessions = _flag_or_env(getattr(args, "max_sessions", None), env, "KERNELOPT_MCP_MAX_SESSIONS", int,
                            DEFAULT_MAX_SESSIONS)
    if not (math.isfinite(idle) and idle > 0):
        raise SystemExit(f"kernelopt-mcp: --session-idle-timeout {idle} must be a positive number of seconds")
    per_client = _flag_or_env(getattr(args, "max_sessions_per_client", None), env,
                              "KERNELOPT_MCP_MAX_SESSIONS_PER_CLIENT", int, DEFAULT_MAX_SESSIONS_PER_CLIENT)
    if sessions < 1:
        raise SystemExit(f"kernelopt-mcp: --max-sessions {sessions} must be at least 1")
    if per_client < 1:
        raise SystemExit(f"kernelopt-mcp: --max-sessions-per-client {per_client} must be at least 1")
    disk = {}
    for flag, var, default in (("workload_max_gib", "KERNELOPT_MCP_WORKLOAD_MAX_GIB", DEFAULT_WORKLOAD_MAX_BYTES),
                               ("workspace_quota_gib", "KERNELOPT_MCP_WORKSPACE_QUOTA_GIB",
                                DEFAULT_WORKSPACE_QUOTA_BYTES)):
        gib = _flag_or_env(getattr(args, flag, None), env, var, float, default / GIB)
        if not (math.isfinite(gib) and gib > 0):
            raise SystemExit(f"kernelopt-mcp: --{flag.replace('_', '-')} {gib} must be a positive number of GiB")
        disk[flag] = int(gib * GIB)
    waiting = [_flag_or_env(getattr(args, flag, None), env, var, int, default) for flag, var, default in (
        ("max_waiting_per_client", "KERNELOPT_MCP_MAX_WAITING_PER_CLIENT", DEFAULT_MAX_WAITING_PER_CLIENT),
        ("max_waiting", "KERNELOPT_MCP_MAX_WAITING", DEFAULT_MAX_WAITING),
    )]
    if min(waiting) < 1:
        raise SystemExit(f"kernelopt-mcp: --max-waiting-per-client {waiting[0]} and --max-waiting "
                         f"{waiting[1]} must be at least 1")
    # one user's stdio server may hold its GPU as long as it likes; a shared server caps each call
    gpu_max = _flag_or_env(getattr(args, "gpu_call_max_s", None), env, "KERNELOPT_MCP_GPU_CALL_MAX_S", float,
                           DEFAULT_GPU_CALL_MAX_S if getattr(args, "http", False) else 0.0)
    if not (math.isfinite(gpu_max) and gpu_max >= 0):
        raise SystemExit(f"kernelopt-mcp: --gpu-call-max-s {gpu_max} must be a number of seconds (0: no cap)")
    return ServerConfig(
        settings=settings, workspace=workspace.resolve(),
        extra_roots=tuple(Path(r).expanduser().resolve() for r in roots),
        data_roots=data_roots, output_roots=output_roots, session_idle_timeout_s=idle, max_sessions=sessions,
        max_sessions_per_client=per_client,
        workload_max_bytes=disk["workload_max_gib"], workspace_quota_bytes=disk["workspace_quota_gib"],
        queue_bounds=QueueBounds(*waiting), gpu_call_max_s=gpu_max,
        ray_address=getattr(args, "ray", None) or env.get("KERNELOPT_RAY") or None,
    )


def _dirs(flags: list[str], env: dict[str, str], var: str) -> tuple[Path, ...]:
    """Directories from repeated flags and a ':'-separated variable, resolved (each must exist)."""
    dirs = tuple(Path(d).expanduser().resolve()
                 for d in [*flags, *(r for r in env.get(var, "").split(os.pathsep) if r)])
    for d in dirs:
        if not d.is_dir():
            raise SystemExit(f"kernelopt-mcp: {d} ({var} or its flag) is not a directory")
    return dirs


def trust_client_roots(args: argparse.Namespace, environ: dict[str, str] | None = None) -> bool:
    """Whether a client's roots are honoured: always over stdio (the client started the server as
    its own user); over HTTP only when the operator says so, since a client there may be anyone
    who reaches the port, not the server's user."""
    env = os.environ if environ is None else environ
    return not args.http or bool(args.trust_client_roots) or env.get("KERNELOPT_MCP_TRUST_CLIENT_ROOTS") == "1"


def http_limits_from_args(args: argparse.Namespace, open_files: int,
                          environ: dict[str, str] | None = None) -> HttpLimits:
    """The HTTP listener's limits from flags and environment, checked against ``open_files``
    (the soft open-file limit the server runs with)."""
    env = dict(os.environ if environ is None else environ)
    header = _flag_or_env(getattr(args, "header_timeout", None), env, "KERNELOPT_MCP_HEADER_TIMEOUT", float,
                          DEFAULT_HEADER_TIMEOUT_S)
    body = _flag_or_env(getattr(args, "body_timeout", None), env, "KERNELOPT_MCP_BODY_TIMEOUT", float,
                        DEFAULT_BODY_TIMEOUT_S)
    send = _flag_or_env(getattr(args, "send_timeout", None), env, "KERNELOPT_MCP_SEND_TIMEOUT", float,
                        DEFAULT_SEND_TIMEOUT_S)
    connections = _flag_or_env(getattr(args, "max_connections", None), env, "KERNELOPT_MCP_MAX_CONNECTIONS", int, None)
    try:
        return HttpLimits.for_open_files(open_files, header, body, connections, send)
    except ValueError as exc:
        raise SystemExit(f"kernelopt-mcp: {exc}") from None


def _flag_or_env(flag: Any, env: dict[str, str], var: str, convert: Callable[[str], Any], default: Any) -> Any:
    if flag is not None:
        return flag
    if env.get(var):
        try:
            return convert(env[var])
        except ValueError:
            raise SystemExit(f"kernelopt-mcp: {var}={env[var]!r} is not a {convert.__name__}") from None
    return default


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.completion:
        from ..completion import completion_script

        sys.stdout.write(completion_script(parser, args.completion, "kernelopt-mcp"))
        return 0
    token = args.token or os.environ.get("KERNELOPT_MCP_TOKEN") or None
    tokens_file = args.tokens_file or os.environ.get("KERNELOPT_MCP_TOKENS_FILE") or None
    try:
        tokens = client_tokens(token, Path(tokens_file).expanduser() if tokens_file else None) if args.http else {}
    except TokensFileError as exc:
        print(f"kernelopt-mcp: {exc}", file=sys.stderr)
        return 2
    kind = bind_kind(args.host) if args.http else "loopback"
    if kind != "loopback":
        if not tokens:
            print(
                f"kernelopt-mcp: refusing to serve HTTP on {args.host} without a bearer token: anyone who can reach "
                "it could run code on this GPU. Set KERNELOPT_MCP_TOKEN (or --token) or --tokens-file, "
                "or bind to 127.0.0.1.",
                file=sys.stderr,
            )
            return 2
        if kind == "wildcard" and not args.allowed_host:
            print(
                f"kernelopt-mcp: binding to {args.host} (every interface) needs --allowed-host NAME for each host "
                "name clients use (DNS-rebinding protection answers only known Host headers).",
                file=sys.stderr,
            )
            return 2
    config = config_from_args(args)
    # before anything starts: a limit the open files cannot carry stops the server here
    limits = http_limits_from_args(args, raise_open_file_limit()) if args.http else HttpLimits()
    config.workspace.mkdir(parents=True, exist_ok=True)
    app, service = build_server(
        config, tokens=tokens, log_level=args.log_level, client_roots=trust_client_roots(args),
        single_client=not args.http, orchestrator=args.orchestrator,
    )
    try:
        if not args.http:
            def terminate(signum: int, frame: Any) -> None:
                # stopped by the client: stop the harness, remove the private files, and exit now
                # (a worker thread blocked reading stdin would otherwise hold the process open)
                service.close()
                os._exit(128 + signum)

            signal.signal(signal.SIGTERM, terminate)
            app.run("stdio")
            return 0
        import uvicorn

        starlette_app = http_app(app, config, args.host, args.allowed_host)
        print(
            f"kernelopt-mcp: streamable HTTP on http://{args.host}:{args.port}/mcp"
            + (f" (bearer token required; {len(tokens)} client(s))" if tokens else ""),
            file=sys.stderr, flush=True,
        )
        uvicorn.Server(uvicorn.Config(
            starlette_app, host=args.host, port=args.port, log_level=args.log_level.lower(),
            http=guarded_protocol(limits), ws="none", backlog=LISTEN_BACKLOG,  # MCP has no WebSocket transport
        )).run()
        return 0
    finally:
        service.close()
