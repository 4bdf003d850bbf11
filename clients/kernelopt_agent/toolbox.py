"""The GPU side: ``kernelopt-mcp`` started over stdio and used through its tools, like any client.

Everything that touches the GPU or the evaluation library goes through here (benchmark, validate,
gpu_properties, ncu_profile, freezing the run's workload and its replay requests); so do the
compile checks of generated parts. Each call is recorded in the run
directory (``tools/NNNN-<tool>.json``) with its arguments, result and duration. The server's
stderr goes to ``server.log`` in the run directory.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import TextContent
from pydantic import BaseModel, ConfigDict

from .options import OptimizeOptions
from .rundir import RunDir

MODEL_TEXT_LIMIT = 8000  # characters of a tool's text a model sees
TOOL_TIMEOUT_S = 3600.0


REQUIRED_TOOLS = {"gpu_properties", "compile", "benchmark", "freeze_workload", "replay_requests"}


class DeviceInfo(BaseModel):
    """The GPU as gpu_properties describes it (its ``device`` object): the fields the run reads;
    the others are kept as they came."""

    model_config = ConfigDict(extra="allow")

    name: str
    arch: str
    driver_version_str: str
    uuid: str | None = None


class ToolboxError(RuntimeError):
    """The server cannot be started or a tool it needs is missing; the message says what to do."""


@dataclass
class ToolResult:
    name: str
    number: int
    is_error: bool
    structured: dict[str, Any]
    text: str
    seconds: float

    @property
    def status(self) -> str | None:
        return self.structured.get("status")


#: "no bound" for the disk limits of the run's own server (1 PiB)
UNBOUNDED_GIB = 2**20


def server_command(opts: OptimizeOptions) -> list[str]:
    """``kernelopt-mcp`` of this Python (else on PATH, else ``python -m kernelopt_mcp.server``)."""
    if opts.server_command:
        return list(opts.server_command)
    beside = Path(sys.executable).parent / "kernelopt-mcp"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    found = shutil.which("kernelopt-mcp")
    if found and "shims" not in found:  # a version manager's shim may pick another interpreter
        return [found]
    return [sys.executable, "-m", "kernelopt_mcp.server"]


@dataclass
class Toolbox:
    """A live session with kernelopt-mcp."""

    client: Client
    run: RunDir
    tools: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    on_progress: Callable[[str], None] | None = None

    @classmethod
    @asynccontextmanager
    async def start(
        cls, opts: OptimizeOptions, run: RunDir, shared: list[Path], on_progress: Callable[[str], None] | None = None,
        *, workloads: list[Path] | None = None,
    ) -> AsyncIterator[Toolbox]:
        """Start the server with the run directory as a --root (it reads the oracle copied there) and an
        --output-root (its freeze_workload writes there), and the ``shared`` directories (the parts'
        data files) as --data-root directories. ``workloads``: directories of workloads the server is to
        know by name ahead of its configured ones (KERNELOPT_WORKLOADS), such as the run's copy of a
        PyTorch-reference workload: configured by this process, never named by a client."""
        command = server_command(opts)
        roots = [str(run.path)]
        data_roots = [str(d) for d in shared]
        args = [*command[1:], "--orchestrator", "--root", str(run.path), "--output-root", str(run.path),
                *(a for root in data_roots for a in ("--data-root", root))]
        if opts.workspace:
            args += ["--workspace", str(opts.workspace)]
        if opts.harness:
            args += ["--harness", str(opts.harness)]
        if opts.device is not None:
            args += ["--device", str(opts.device)]
        if opts.devices:
            args += ["--devices", opts.devices]
        if opts.ray:
            args += ["--ray", opts.ray]
        # This server serves this run alone and writes only its frozen workload, into the run directory
        # (the user's results): the workspace quota, meant for shared servers, would count every past run.
        # A workload the user names is theirs at any size; a generated one keeps the default bound.
        args += ["--workspace-quota-gib", str(UNBOUNDED_GIB)]
        if opts.workload:
            args += ["--workload-max-gib", str(UNBOUNDED_GIB)]
        # The server gets this process's environment (CUDA, PATH for ncu, KERNELOPT_*) but no OpenAI settings.
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
        workload_dirs = [str(d) for d in workloads or []]
        if workload_dirs:
            env["KERNELOPT_WORKLOADS"] = os.pathsep.join([*workload_dirs,
                                                          *filter(None, [env.get("KERNELOPT_WORKLOADS")])])
        params = StdioServerParameters(command=command[0], args=args, env=env)
        run.write_json("server.json", {"command": [command[0], *args], "roots": roots, "data_roots": data_roots,
                                       "workload_dirs": workload_dirs})
        log = open(run.path / "server.log", "a", encoding="utf-8")  # noqa: SIM115 (the subprocess writes to it)
        async with AsyncExitStack() as stack:
            stack.callback(log.close)
            client = Client(stdio_client(params, errlog=log), read_timeout_seconds=TOOL_TIMEOUT_S)
            try:
                await stack.enter_async_context(client)
                tools = (await client.list_tools()).tools
            except Exception as exc:
                raise ToolboxError(
                    f"could not start the MCP server `{' '.join([command[0], *args])}`: {type(exc).__name__}: {exc}; "
                    f"see {run.path / 'server.log'}"
                ) from None
            box = cls(client, run, on_progress=on_progress)
            box.tools = {t.name: t for t in tools}
            missing = REQUIRED_TOOLS - set(box.tools)
            if missing:
                raise ToolboxError(
                    f"the MCP server lacks the tools {sorted(missing)}; is it kernelopt-mcp, and as new as this "
                    "kernelopt optimize?"
                )
            yield box

    def has(self, name: str) -> bool:
        return name in self.tools

    def openai_tools(self, names: list[str]) -> list[dict[str, Any]]:
        """The named server tools as Chat Completions function tools (those the server has)."""
        out = []
        for name in names:
            tool = self.tools.get(name)
            if tool is None:
                continue
            out.append({"type": "function", "function": {
                "name": tool.name, "description": (tool.description or "")[:4000],
                "parameters": tool.input_schema or {"type": "object", "properties": {}},
            }})
        return out

    async def call(self, name: str, arguments: dict[str, Any], *, caller: str = "orchestrator") -> ToolResult:
        """Call a tool; tool errors are results (is_error), never exceptions."""
        number = self.run.next_number("tools")
        start = time.monotonic()

        async def progress(progress: float, total: float | None, message: str | None) -> None:  # mcp's ProgressFnT
            if message and self.on_progress is not None:
                self.on_progress(message)

        try:
            result = await self.client.call_tool(name, arguments, progress_callback=progress)
            text = "\n".join(c.text for c in result.content if isinstance(c, TextContent))
            out = ToolResult(name, number, bool(result.is_error), dict(result.structured_content or {}), text,
                             time.monotonic() - start)
        except Exception as exc:  # the transport or the SDK failed: still a recorded result
            out = ToolResult(name, number, True, {}, f"the call failed: {type(exc).__name__}: {exc}",
                             time.monotonic() - start)
        self.seconds += out.seconds
        self.run.write_json(f"tools/{number:04d}-{name}.json", {
            "number": number, "tool": name, "caller": caller, "arguments": arguments, "is_error": out.is_error,
            "seconds": round(out.seconds, 3), "structured": out.structured, "text": out.text,
        })
        return out


def model_text(result: ToolResult) -> str:
    """What a model sees of a tool result: its text rendering, capped."""
    text = result.text or str(result.structured)
    if len(text) > MODEL_TEXT_LIMIT:
        text = text[:MODEL_TEXT_LIMIT] + f"\n[... {len(text) - MODEL_TEXT_LIMIT} more characters cut]"
    return ("tool error: " if result.is_error else "") + text
