"""The MCP server assembled: instructions, tools, resources, prompts and completions over one
:class:`~kernelopt_mcp.service.KerneloptService`."""

from __future__ import annotations

from collections.abc import Mapping

from .. import __version__
from ..server_config import ServerConfig
from ..service import KerneloptService
from .identity import TOKEN_CLIENT, ClientIdentity
from .listing import KerneloptMCPServer, register_manuals
from .resources import register_completions, register_prompts, register_resources
from .roots import ROOTS_OFF
from .session import SHARED
from .tools_analysis import register_analysis_tools
from .tools_evaluate import register_evaluate_tools
from .tools_freeze import register_freeze_tools
from .tools_workloads import register_workload_tools
from .transport import token_auth

INSTRUCTIONS = """\
kernelopt: trustworthy GPU tools for writing fast CUDA kernels. The loop: list_workloads ->
describe_workload (prototype, cases, reference and starting kernel) -> write a kernel -> compile
(fix errors, watch registers and spills) -> validate (every case must pass) -> benchmark (score =
geometric mean of the performance cases' median latencies; speedup vs the CUDA reference) ->
iterate. ncu_profile says why a kernel is slow (hardware counters and hints); docs_search finds
CUDA optimization guidance. autotune searches the values of a kernel's tunable parameters (tile
sizes, block sizes) once its structure is right. A failing kernel is a result with a status and details, \
never a server error. The
prompt optimize_kernel primes this loop."""


def build_server(
    config: ServerConfig, *, token: str | None = None, log_level: str = "WARNING", client_roots: bool = True,
    single_client: bool = True, tokens: Mapping[str, str] | None = None, orchestrator: bool = False,
) -> tuple[KerneloptMCPServer, KerneloptService]:
    """The MCP server and the service behind it (close the service when done).

    ``client_roots``: kernel sources under the roots a client advertises are readable. Off for
    HTTP unless the operator trusts its clients (--trust-client-roots): a client there may be any
    local user, or name its own machine's paths. ``single_client``: the transport serves one client (stdio), so a
    workload frozen through it may shadow another of its name; off for HTTP. ``tokens``: client id
    -> bearer token for HTTP (``token`` is one more, the client ``default``); each request then runs
    as its token's client (identity.py), and what clients create is kept apart by that id.
    ``orchestrator``: serve ``kernelopt optimize`` (listing.py): its plumbing tools are listed and
    callable, and every tool is listed in full."""
    service = KerneloptService(config)
    app = KerneloptMCPServer(
        "kernelopt", orchestrator=orchestrator, title="kernelopt: GPU kernel tools", version=__version__,
        instructions=INSTRUCTIONS,
        log_level=log_level,  # one of --log-level's choices
        middleware=[ClientIdentity()], **token_auth({**(tokens or {}), **({TOKEN_CLIENT: token} if token else {})}),
    )
    if not client_roots:
        ROOTS_OFF.add(app)
    if not single_client:
        SHARED.add(app)
    register_evaluate_tools(app, service)
    register_workload_tools(app, service)
    register_analysis_tools(app, service)
    register_freeze_tools(app, service)
    register_resources(app, service)
    register_manuals(app)
    register_prompts(app)
    register_completions(app, service)
    return app, service
