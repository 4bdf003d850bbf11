"""What a client sees of the tools: a ``tools/list`` an agent can afford to load in every session.

Every agent session pays for the whole tool list before it starts, so the default listing keeps
what a model needs to choose and call a tool, and nothing it can fetch when it needs it:

- a tool's description is its docstring's first paragraph (when to use it, what it costs, what a
  failure looks like); the whole docstring and the JSON Schema of the structured result are the
  resource ``kernelopt://docs/tools/<name>``;
- input schemas lose pydantic's generated titles and the nested models' own descriptions (the
  argument descriptions stay; a launch spec's field documentation is ``kernelopt://schema/launch``);
- no output schemas: MCP makes them optional, and every result still carries its complete
  structured content plus a text summary;
- the orchestrator's plumbing tools (``freeze_workload``, ``replay_requests``) are listed, and
  callable, only when the server was started for ``kernelopt optimize`` (``--orchestrator``),
  which also gets the full listing its prompts were written against.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp_types import Tool
from pydantic import ValidationError

from ..launch import LaunchSpec
from ..workload import format_validation_error

ORCHESTRATOR_TOOLS = frozenset({"freeze_workload", "replay_requests"})
DOCS_URI = "kernelopt://docs/tools/{name}"


def _without(value: Any, key: str) -> Any:
    """``value`` with every string-valued ``key`` removed (a property named ``key`` is a dict and stays)."""
    if isinstance(value, dict):
        return {k: _without(v, key) for k, v in value.items() if not (k == key and isinstance(v, str))}
    if isinstance(value, list):
        return [_without(v, key) for v in value]
    return value


def compact_input_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The input schema without generated titles or nested models' descriptions; it accepts the
    same arguments (titles and descriptions are annotations, never constraints)."""
    out: dict[str, Any] = _without(schema, "title")
    if "$defs" in out:
        out["$defs"] = _without(out["$defs"], "description")
    return out


def summary(description: str) -> str:
    """A docstring's first paragraph."""
    return description.strip().split("\n\n", 1)[0]


def compact_tool(tool: Tool) -> Tool:
    """The default listing's view of a tool (see the module docstring)."""
    description = (summary(tool.description or "") + "\nFull manual and result schema: "
                   f"{DOCS_URI.format(name=tool.name)}")
    return tool.model_copy(update={
        "description": description, "input_schema": compact_input_schema(tool.input_schema), "output_schema": None,
    })


def tool_manual(tool: Tool) -> str:
    """A tool's whole manual: its docstring, then the JSON Schema of its structured result."""
    parts = [f"# {tool.name}: {tool.title or ''}".rstrip(": "), (tool.description or "").strip()]
    if tool.output_schema:
        parts.append("## Result (structured content), JSON Schema\n" + json.dumps(tool.output_schema, indent=1))
    return "\n\n".join(parts) + "\n"


def argument_error(name: str, exc: ValidationError) -> str:
    """Arguments that failed validation, one line per problem naming the argument's field."""
    return format_validation_error(exc, f"{name} arguments")


class KerneloptMCPServer(MCPServer):
    """An MCPServer whose default ``tools/list`` is the compact one; ``orchestrator`` lists and
    serves everything in full."""

    def __init__(self, *args: Any, orchestrator: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.orchestrator = orchestrator

    async def full_tools(self) -> list[Tool]:
        """Every registered tool as registered (full descriptions, output schemas)."""
        return await super().list_tools()

    async def list_tools(self) -> list[Tool]:
        tools = await self.full_tools()
        if self.orchestrator:
            return tools
        return [compact_tool(t) for t in tools if t.name not in ORCHESTRATOR_TOOLS]

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None) -> Any:
        if name in ORCHESTRATOR_TOOLS and not self.orchestrator:
            raise ToolError(
                f"{name} records runs for `kernelopt optimize`, which starts its own server with --orchestrator; "
                "this server was started without it"
            )
        try:
            result = await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(argument_error(name, exc.__cause__)) from exc.__cause__
            raise
        return result


def register_manuals(app: KerneloptMCPServer) -> None:
    """The resources the compact listing points to: each tool's manual and the launch spec's schema."""

    @app.resource(DOCS_URI, name="tool manual", title="Tool manual", mime_type="text/markdown",
                  description="a tool's whole manual and the JSON Schema of its structured result")
    async def manual(name: str) -> str:
        tools = {t.name: t for t in await app.full_tools() if app.orchestrator or t.name not in ORCHESTRATOR_TOOLS}
        if name not in tools:
            raise ResourceNotFoundError(f"no tool {name!r}; the tools are {', '.join(sorted(tools))}")
        return tool_manual(tools[name])

    @app.resource("kernelopt://schema/launch", name="launch schema", title="Launch spec JSON Schema",
                  mime_type="application/schema+json")
    def launch_schema() -> str:
        """The JSON Schema of a `launch` argument (validate, benchmark, ncu_profile), with every field's documentation."""  # noqa: E501 (the resource's description, served as written)
        return json.dumps(LaunchSpec.model_json_schema(), indent=1)
