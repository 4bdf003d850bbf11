"""The MCP server's configuration and who is calling: the limits and defaults clients are held to,
:class:`ServerConfig` (built once at the entry point: flags > environment > defaults), and the
per-request context the server layer sets for each call (the calling client's id, the roots it
shares), from which each client's own part of the workspace follows."""

from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from pathlib import Path

from .admission import QueueBounds
from .config import Settings
from .quota import DEFAULT_WORKLOAD_MAX_BYTES, DEFAULT_WORKSPACE_QUOTA_BYTES

MAX_WARMUP = 100
MAX_ITERATIONS = 1000
MAX_TUNE_EVALS = 1000
MAX_TUNE_SECONDS = 4 * 3600.0
DEFAULT_PREPARED_WORKLOADS = 3
DEFAULT_SESSION_IDLE_TIMEOUT_S = 30 * 60.0  # an HTTP session with no request in flight this long is closed
DEFAULT_MAX_SESSIONS = 1000  # open HTTP sessions (the SDK's 10 000 would hold ~370 MiB)
DEFAULT_MAX_SESSIONS_PER_CLIENT = 100  # of those, what one client token may hold
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SOURCE_SUFFIXES = (".cu", ".cuh")  # what a `path` argument may name
CLIENTS_DIR = "clients"  # <workspace>/clients/<id>/: what a client with a token keeps
DEFAULT_GPU_CALL_MAX_S = 600.0  # a shared (HTTP) server's cap on one call's GPU time; stdio: none
GPU_CALL_MAX_FLAG = "--gpu-call-max-s / KERNELOPT_MCP_GPU_CALL_MAX_S"
TUNE_SHARE_OF_CAP = 0.75  # autotune's budget_s under a cap: the rest is for preparing and the last configuration

# Who the request being served comes from: the client id its HTTP bearer token maps to, or
# LOCAL_CLIENT (stdio: the one client that started the server). The server layer sets it per call;
# what the service keeps for clients (created and frozen workloads, runs, queue shares) is keyed by it.
LOCAL_CLIENT = "local"
CLIENT_ID: ContextVar[str] = ContextVar("kernelopt_client_id", default=LOCAL_CLIENT)


@dataclass(frozen=True)
class ServerConfig:
    """Everything the server needs, built once at the entry point (flags > environment > defaults)."""

    settings: Settings = field(default_factory=Settings)
    workspace: Path = field(default_factory=lambda: Path.home() / ".kernelopt")
    extra_roots: tuple[Path, ...] = ()
    # directories a client's data files (freeze_workload's "generator": "file") may be read from,
    # opened beneath without following links; none: data files are refused (data_files.py)
    data_roots: tuple[Path, ...] = ()
    # directories besides <workspace>/runs that freeze_workload may write into (an operator's run
    # directories, e.g. kernelopt optimize's); never a client's word
    output_roots: tuple[Path, ...] = ()
    max_prepared: int = DEFAULT_PREPARED_WORKLOADS
    session_idle_timeout_s: float = DEFAULT_SESSION_IDLE_TIMEOUT_S  # streamable HTTP only
    max_sessions: int = DEFAULT_MAX_SESSIONS  # streamable HTTP only
    max_sessions_per_client: int = DEFAULT_MAX_SESSIONS_PER_CLIENT  # streamable HTTP only, per client token
    # what clients may make the server keep on disk (quota.py): one workload's buffers over all
    # cases, and everything created or frozen through the server
    workload_max_bytes: int = DEFAULT_WORKLOAD_MAX_BYTES
    workspace_quota_bytes: int = DEFAULT_WORKSPACE_QUOTA_BYTES
    # jobs that may wait, per client and in all, in each long job's queue (GPU, compiles, ...)
    queue_bounds: QueueBounds = field(default_factory=QueueBounds)
    # seconds one call may hold the GPU (0: no cap); the entry point sets DEFAULT_GPU_CALL_MAX_S over HTTP
    gpu_call_max_s: float = 0.0
    # a Ray cluster ("auto" or HOST:PORT) whose GPUs run the GPU jobs, one actor each; None: this machine's
    ray_address: str | None = None

    def client_home(self, client: str | None = None) -> Path:
        """Where ``client`` (default: the calling one, CLIENT_ID) keeps its created workloads and runs:
        the workspace itself for LOCAL_CLIENT (stdio, token-less HTTP), else ``clients/<id>/`` in it.
        Ids are ``[A-Za-z0-9_-]{1,64}`` (checked where tokens are loaded), so never a path."""
        client = CLIENT_ID.get() if client is None else client
        return self.workspace if client == LOCAL_CLIENT else self.workspace / CLIENTS_DIR / client

    @property
    def clients_dir(self) -> Path:
        return self.workspace / CLIENTS_DIR

    @property
    def created_dir(self) -> Path:
        """The calling client's created workloads (a client never sees another's)."""
        return self.client_home() / "workloads"

    @property
    def runs_dir(self) -> Path:
        """The calling client's recorded runs (frozen runs, profiles, tune outputs)."""
        return self.client_home() / "runs"

    @property
    def workload_settings(self) -> Settings:
        """The library's settings with the created workloads searched last (never shadowing)."""
        return replace(self.settings, workload_dirs=(*self.settings.workload_dirs, self.created_dir))

    def roots(self) -> list[Path]:
        """Directories that ``path`` arguments of the calling client may name files under (symlinks
        resolved): its home (the workspace for LOCAL_CLIENT), the workload directories and --root."""
        roots = [self.client_home(), *self.settings.workload_dirs, *self.extra_roots]
        return list(dict.fromkeys(r.expanduser().resolve() for r in roots))


# Directories the connected MCP client shares (its roots), for the request being served: server/roots.py
# sets them per tool call; confine() accepts paths under them as under --root directories.
CLIENT_ROOTS: ContextVar[tuple[Path, ...]] = ContextVar("kernelopt_client_roots", default=())
