"""Tools about workloads: list_workloads, describe_workload, create_workload."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import Field

from ..compiler import MAX_SOURCE_BYTES
from ..results import CreatedWorkload, WorkloadDescription, WorkloadList
from ..service import KerneloptService
from .session import callers_frozen_workloads
from .toolkit import WorkloadName, tool, tool_errors, tool_result

# Parameter descriptions too long for their line (each is part of the tool's manual).
_CREATE_WORKLOAD_REFERENCE_CU = "CUDA source of the reference kernel; it defines correct outputs"
_CREATE_WORKLOAD_INITIAL_CU = "CUDA source of a starting kernel (needs spec.initial.launch)"
_CREATE_WORKLOAD_TORCH_PROBLEM = ("source of a KernelBench-style PyTorch problem (class Model, get_inputs, "
                                  "get_init_inputs) to import instead of a spec: spec is then {name} (plus initial "
                                  "{launch} with initial_cu, tolerance 'strict' or 'kernelbench'); only where the "
                                  "server's operator allowed it")


def register_workload_tools(app: MCPServer, service: KerneloptService) -> None:
    @tool(app, "list_workloads", "List workloads")
    async def list_workloads(ctx: Context) -> Annotated[CallToolResult, WorkloadList]:
        """The workloads kernels are validated and benchmarked against: bundled ones, configured ones,
        those made with create_workload and those you froze with freeze_workload, each with
        its description, kernel prototype and number of correctness and performance cases. Cheap, no
        GPU. Next: describe_workload(name)."""
        with callers_frozen_workloads(ctx):
            out = await service.catalogue.listing()
        return tool_result(out, out.text())

    @tool(app, "describe_workload", "Describe a workload")
    async def describe_workload(name: WorkloadName, ctx: Context) -> Annotated[CallToolResult, WorkloadDescription]:
        """Everything needed to write a kernel for a workload: its exact C prototype, cases, tolerances,
        cost model, CUDA reference and a starting kernel with a valid launch. Cheap, no GPU.

        Everything needed to write a kernel for a workload: the exact C prototype (entry name,
        parameter order and types), each parameter's dtype, role (in: read-only, checked unchanged;
        out: written; inout: both) and shape; every case with its kind (correctness: small, odd
        sizes and edge cases; performance: timed and scored), scalars and buffer shapes; the input
        generators; the tolerances; the cost model (FLOPs and bytes per case); the CUDA reference
        (reference_cu: what speedups are measured against); and the starting kernel (initial_cu)
        with initial_launch, a valid `launch` argument to start from. Cheap, no GPU."""
        with callers_frozen_workloads(ctx), tool_errors():
            out = await service.catalogue.describe(name)
        return tool_result(out, out.text())

    @tool(
        app, "create_workload", "Create a workload",
        ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False),
    )
    async def create_workload(
        spec: Annotated[dict[str, Any], Field(description="a workload.json object (see the tool description)")],
        reference_cu: Annotated[str | None, Field(max_length=MAX_SOURCE_BYTES,
                                                  description=_CREATE_WORKLOAD_REFERENCE_CU)] = None,
        initial_cu: Annotated[str | None, Field(max_length=MAX_SOURCE_BYTES,
                                                description=_CREATE_WORKLOAD_INITIAL_CU)] = None,
        overwrite: Annotated[bool, Field(description="replace a workload created earlier under the same name")] = False,
        torch_problem: Annotated[str | None, Field(max_length=MAX_SOURCE_BYTES,
                                                   description=_CREATE_WORKLOAD_TORCH_PROBLEM)] = None,
    ) -> Annotated[CallToolResult, CreatedWorkload]:
        """Store a new workload (a workload.json `spec`, see kernelopt://schema/workload, plus the CUDA
        reference `reference_cu`) so validate and benchmark can name it; or make one from a PyTorch
        problem (`torch_problem`). Checked and compiled before anything is stored; no GPU needed.

        Store a new workload in the server's workspace so validate and benchmark can name it.
        `spec` is a workload.json object (JSON Schema: resource kernelopt://schema/workload; example:
        kernelopt://workloads/vector_add/workload.json): name, description, signature {entry, params:
        buffers {"kind": "buffer", name, dtype, role in|out|inout, shape: integers or expressions of
        scalars} and scalars {"kind": "scalar", name, dtype}}, inputs (a generator per input buffer:
        uniform, normal, randint, choice, arange or constant), cases (1-64 of {name, kind: correctness |
        performance, scalars}), tolerance per output {rtol, atol}, reference {launch} (the launch of
        reference_cu), initial {launch} (with initial_cu), cost {flops, bytes} expressions.
        reference_cu is required (unless overwrite keeps the stored one): its outputs define correct,
        and nothing checks it independently (a NumPy oracle cannot be created through this server),
        so keep it simple and obviously right. Limits: 64 cases, 8 GiB per buffer, 4 GiB of buffers
        over all cases; data files are refused. The spec is validated (errors name the field) and
        the sources are compiled and checked against the signature before anything is stored.
        Bundled names are refused; a created workload is replaced only with overwrite=true. No GPU
        needed: the reference first runs on the next validate. With torch_problem (a PyTorch
        problem's source, as `kernelopt import-torch` takes it) the server runs the problem with
        torch to make the signature, cases and generators; the module itself, run by torch on the GPU,
        is the reference of every evaluation (spec.tolerance "strict", the
        default, by the output's dtype, or "kernelbench", atol = rtol = 1e-2); it is refused unless the
        server was started with KERNELOPT_ALLOW_TORCH_PROBLEMS=1 (it runs the client's Python)."""
        with tool_errors():
            out = await service.catalogue.create(spec, reference_cu, initial_cu, overwrite, torch_problem)
        return tool_result(out, out.text())
