"""kernelopt-mcp: the GPU tools as an MCP server (the only package that imports ``mcp``).

Thin: each tool's arguments are checked by its schema, the service (``kernelopt_mcp.service``)
runs the library, and the tool returns a pydantic result plus a text rendering of it (clients
that show only text still get everything that matters). Kernel outcomes are results; exceptions
become ``ToolError`` text that says what was wrong and what to try next.

    kernelopt-mcp                                   stdio (what MCP clients launch)
    kernelopt-mcp --http [--port 8000]              streamable HTTP on 127.0.0.1
    kernelopt-mcp --http --host 10.0.0.5 --allowed-host gpu-box --token ...   (token required)

Modules:

    build.py            build_server: the server over one KerneloptService; INSTRUCTIONS
    toolkit.py          argument types, @tool, tool_result, progress notifications, tool_errors
    roots.py            the client's roots (readable like --root while a call is served)
    tools_evaluate.py   gpu_properties, compile, validate, benchmark
    tools_workloads.py  list_workloads, describe_workload, create_workload
    tools_analysis.py   ncu_profile, autotune, docs_search
    tools_freeze.py     freeze_workload, replay_requests (kernelopt optimize's run records)
    session.py          the workloads frozen through this server, seen by its tool calls
    resources.py        resources, completions, the optimize_kernel prompt
    transport.py        HTTP: bind_kind, http_security, the bearer-token check, http_app
    http_guard.py       HTTP connections: header/body/send deadlines, the connection limit, open files
    entry.py            argument parsing, config_from_args, main

Adding a tool: implement its work in the service's part of its concern (``kernel_checks``,
``kernel_analysis``, ``workload_catalogue``, ``frozen_runs``: one per tools module) over the
application layer, then register it in the tools module with ``@tool(app, name, title,
annotations)``: its docstring is the model's manual, its return type ``Annotated[CallToolResult,
Model]`` its output schema, its body one call of the service.
"""

from __future__ import annotations

from .build import INSTRUCTIONS, build_server
from .entry import build_parser, config_from_args, main
from .toolkit import tool_errors
from .transport import bind_kind, http_app, http_security

__all__ = [
    "INSTRUCTIONS",
    "bind_kind",
    "build_parser",
    "build_server",
    "config_from_args",
    "http_app",
    "http_security",
    "main",
    "tool_errors",
]
