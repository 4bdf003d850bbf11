"""What every tool shares: argument types (their descriptions are part of each tool's manual),
the registration decorator, the result shape (structured content plus its text rendering),
progress notifications, and the one place library exceptions become ``ToolError`` text."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from ..compiler import MAX_SOURCE_BYTES
from ..errors import (
    DeviceUnavailable,
    HarnessCancelled,
    HarnessError,
    KerneloptError,
    ProfilerError,
    ToolchainNotFound,
    WorkloadError,
)
from ..gpu_queue import Step
from ..launch import LaunchSpec
from ..server_config import NAME_RE

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)

# --- argument types (their descriptions are part of each tool's manual) -------------------

WorkloadName = Annotated[str, Field(pattern=NAME_RE.pattern, max_length=64,
                                    description="a workload name from list_workloads")]
Source = Annotated[
    str | None,
    Field(max_length=MAX_SOURCE_BYTES,
          description="the kernel's CUDA C++ source (device code only); give this or `path`"),
]
SourcePath = Annotated[
    str | None,
    Field(
        max_length=4096,
        description="a .cu file instead of `source`: absolute, or relative to the server's workspace; it "
        "must lie under the workspace, a workload directory or a --root directory (symlinks resolved)",
    ),
]
CompileOptions = Annotated[
    list[Annotated[str, Field(max_length=200)]] | None,
    Field(
        max_length=32,
        description="NVRTC options from a whitelist: -DNAME[=VALUE], -UNAME, -std=c++17|20, --use_fast_math, "
        "--ftz=, --prec-div=, --prec-sqrt=, --fmad=, --maxrregcount=N, --extra-device-vectorization, "
        "-Xptxas=-O0..3, -Xptxas=-dlcm=ca|cg, -arch=sm_90a (Hopper's arch-specific instructions: wgmma, setmaxnreg; "
        "an sm_90 GPU only). Never another -arch, -rdc or -I: the target is chosen for you",
    ),
]
Launch = Annotated[
    LaunchSpec,
    Field(
        description='per-case launch configuration: {"default": {"grid": [x, y, z], "block": [x, y, z], '
        '"shared_bytes": n}, "cases": {"<case>": {...}}}; every value an integer or an expression of the '
        'case\'s scalars such as "ceil_div(n, 256)" (SM_COUNT names the device\'s multiprocessors); missing '
        'dimensions are 1; a bare {"grid", "block"} object applies to every case; optional "tensor_maps": TMA '
        'tensor maps the harness encodes over the case\'s buffers, passed after the signature\'s parameters'
    ),
]


# --- errors --------------------------------------------------------------------------------


@contextmanager
def tool_errors() -> Iterator[None]:
    """Turn the library's exceptions into ToolError text a model can act on."""
    try:
        yield
    except DeviceUnavailable as exc:
        raise ToolError(
            f"{exc}. validate and benchmark need a GPU; compile, list_workloads, describe_workload and "
            "create_workload work without one."
        ) from exc
    except ToolchainNotFound as exc:
        raise ToolError(f"the server is missing a tool: {exc}") from exc
    except HarnessError as exc:
        raise ToolError(
            f"the GPU harness failed: {exc}. The next call starts a fresh harness; if this repeats, the "
            "server's stderr and `kernelopt-harness --version` have details."
        ) from exc
    except WorkloadError as exc:
        raise ToolError(f"workload problem: {exc}") from exc
    except HarnessCancelled as exc:
        raise ToolError(str(exc)) from exc
    except ProfilerError as exc:
        raise ToolError(f"profiling failed: {exc}") from exc
    except (KerneloptError, ValueError) as exc:  # RequestError, OptionError, ExpressionError, library checks
        raise ToolError(str(exc)) from exc


def tool_result(model: BaseModel, text: str, *, drop_nulls: bool = True) -> CallToolResult:
    """Structured content plus its text rendering; nulls are dropped where every nullable field has a default."""
    structured = model.model_dump(mode="json", exclude_none=drop_nulls)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


def notifier(ctx: Context) -> Callable[[str], Awaitable[None]]:
    """Progress notifications: each one a step further (MCP's progress must increase) with the
    message saying what happens. Where a message is a :class:`~kernelopt_mcp.gpu_queue.Step` of a
    phase whose size is known (cases validated or timed, configurations tried), ``total`` is the
    steps so far plus the phase's steps still to come; heartbeats keep that estimate."""
    step = 0
    remaining: int | None = None

    async def notify(message: str) -> None:
        nonlocal step, remaining
        step += 1
        if isinstance(message, Step):
            remaining = max(message.total - message.done, 0) if message.total > 0 else None
        await ctx.report_progress(step, None if remaining is None else step + remaining, str(message))

    return notify


def tool(app: MCPServer, name: str, title: str, annotations: ToolAnnotations = READ_ONLY) -> Callable[[Any], Any]:
    """Register a tool whose docstring, dedented, is its description (the model's manual)."""

    def register(fn: Any) -> Any:
        app.add_tool(fn, name=name, title=title, description=inspect.cleandoc(fn.__doc__ or ""),
                     annotations=annotations)
        return fn

    return register
