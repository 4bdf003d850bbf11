"""Resources (workload files, the workload schema, recorded runs), argument completion and the
optimize_kernel prompt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.server.mcpserver.resources import FunctionResource
from mcp_types import Completion, PromptReference, ResourceTemplateReference
from pydantic import Field

from ..errors import KerneloptError
from ..files import read_regular_bytes
from ..service import KerneloptService
from ..workload import Workload, json_schema
from .session import SHARED

RESOURCE_TEXT_SUFFIXES = {".json", ".cu", ".cuh", ".py", ".md", ".txt", ".csv", ".log", ".svg", ".ptx"}
MAX_RESOURCE_BYTES = 4 * 2**20
# Run directories' data, never served: drawn inputs, copies of data files, expected outputs (the answer
# key) and compiled modules. Only text records (requests, results, workload.json, sources) are.
RUN_DATA_DIRS = {"inputs", "data", "expected", "modules", "outputs"}


def servable_run_file(relative: Path) -> bool:
    """Whether kernelopt://runs/ serves the file at ``relative`` (under runs/): a text record, not data."""
    return relative.suffix in RESOURCE_TEXT_SUFFIXES and not RUN_DATA_DIRS.intersection(relative.parts[:-1])

def _workload_files(wl: Workload) -> list[str]:
    names = ["workload.json", wl.spec.reference.cuda, wl.spec.reference.python,
             wl.spec.initial.source if wl.spec.initial else None]
    names += _tunable_files(wl)
    return list(dict.fromkeys(n for n in names
                              if n and "/" not in n and (wl.root is not None and (wl.root / n).is_file())))


def _tunable_files(wl: Workload) -> list[str]:
    """tunable.json (what autotune tunes when given neither spec nor path), the other autotune
    specs beside it (tunable_<variant>.json: pass one as tunable_path), and the sources they name."""
    if wl.root is None:
        return []
    root = wl.root.resolve()
    # only regular files that are the workload's own: a link out of the directory is never served
    specs = sorted(p.name for p in wl.root.glob("tunable*.json")
                   if not p.is_symlink() and p.is_file() and p.resolve().parent == root)
    specs.sort(key=lambda n: n != "tunable.json")
    files: list[str] = []
    for name in specs:
        files.append(name)
        try:
            spec = json.loads(read_regular_bytes(wl.root / name, MAX_RESOURCE_BYTES))
        except (OSError, ValueError):
            continue
        source = spec.get("source") if isinstance(spec, dict) else None
        if isinstance(source, str):
            files.append(source)
    return files


def _title(file: str) -> str:
    return {
        "workload.json": "spec (workload.json)", "reference.cu": "CUDA reference", "reference.py": "NumPy oracle",
        "initial.cu": "starting kernel", "tunable.json": "autotune spec (tunable.json)",
    }.get(file, ("tunable kernel" if file.endswith(".cu") else f"autotune spec ({file})"
                 if file.startswith("tunable") else file))


def register_resources(app: MCPServer, service: KerneloptService) -> None:
    def read_workload_file(name: str, file: str) -> str:
        try:
            wl = service.catalogue.load(name)
        except (KerneloptError, ValueError) as exc:
            raise ResourceNotFoundError(str(exc)) from None
        if file not in _workload_files(wl) or wl.root is None:
            raise ResourceNotFoundError(f"workload {name!r} has no file {file!r}; it has "
                                        f"{', '.join(_workload_files(wl))}")
        return _read_resource(wl.root / file, f"{name}/{file}").decode("utf-8", errors="replace")

    app.resource(
        "kernelopt://workloads/{name}/{file}", name="workload file", title="Workload file", mime_type="text/plain",
        description="a workload's workload.json, reference.cu, reference.py, initial.cu, and where it has them "
        "tunable.json and its tunable kernel (what autotune tunes by default), and other autotune specs "
        "(tunable_<variant>.json, for autotune's tunable_path) with their kernels (read-only)",
    )(read_workload_file)

    shared = app in SHARED
    for name, directory in service.catalogue.workloads().items():
        if shared and service.catalogue.origin(directory) == "created":
            continue  # listed to every client, while only its creator may read it (the template serves that)
        try:
            files = _workload_files(service.catalogue.load(name))
        except (KerneloptError, ValueError):
            continue
        for file in files:
            app.add_resource(FunctionResource.from_function(
                fn=lambda name=name, file=file: read_workload_file(name, file),
                uri=f"kernelopt://workloads/{name}/{file}", name=f"{name}/{file}", title=f"{name}: {_title(file)}",
                mime_type="application/json" if file.endswith(".json") else "text/plain",
                description=f"{file} of the {name} workload (read-only)",
            ))

    @app.resource("kernelopt://schema/workload", name="workload schema", title="Workload JSON Schema",
                  mime_type="application/schema+json")
    def workload_schema() -> str:
        """The JSON Schema of workload.json (what create_workload's `spec` must follow)."""
        return json.dumps(json_schema(), indent=2)

    @app.resource("kernelopt://runs", name="recorded runs", title="Recorded runs", mime_type="application/json")
    def runs_index() -> str:
        """The files of recorded runs under the workspace's runs/ directory (read them as kernelopt://runs/<path>)."""
        root = service.config.runs_dir
        files = sorted(str(r) for p in root.rglob("*") if p.is_file() and servable_run_file(r := p.relative_to(root))) \
            if root.is_dir() else []
        return json.dumps({"root": str(root), "files": files[:1000], "files_not_listed": max(0, len(files) - 1000)})

    @app.resource("kernelopt://runs/{+path}", name="run artifact", title="Run artifact",
                  description="one text record of a recorded run (read-only; inputs, expected outputs and "
                  "modules are not served)")
    def run_file(path: str) -> str:
        root = service.config.runs_dir.resolve()
        real = (root / path).resolve()
        if not real.is_relative_to(root):
            raise ResourceNotFoundError(f"no file {path!r} under {root}")
        if not servable_run_file(real.relative_to(root)):
            raise ResourceNotFoundError(
                f"{path}: not served: kernelopt://runs/ serves a run's text records "
                f"({', '.join(sorted(RESOURCE_TEXT_SUFFIXES))}), never its data ({', '.join(sorted(RUN_DATA_DIRS))}"
                "/, .bin, .npy, .cubin)"
            )
        return _read_resource(real, path).decode("utf-8", errors="replace")


def _read_resource(path: Path, name: str) -> bytes:
    """A resource file's bytes: a regular file of at most MAX_RESOURCE_BYTES, opened non-blocking
    (a FIFO or device named like a run file fails at once instead of holding a worker thread).
    The SDK calls synchronous resource functions in worker threads, off the event loop."""
    try:
        return read_regular_bytes(path, MAX_RESOURCE_BYTES)
    except FileNotFoundError:
        raise ResourceNotFoundError(f"no file {name!r}") from None
    except OSError as exc:
        raise ResourceNotFoundError(
            f"{name}: cannot read ({exc.strerror or exc}); resources are regular files of at most "
            f"{MAX_RESOURCE_BYTES} bytes (read larger ones from disk)"
        ) from None


def register_completions(app: MCPServer, service: KerneloptService) -> None:
    """Completion of the prompt's `workload` and of the workload file template's `name` and `file`."""

    @app.completion()
    async def complete(ref: Any, argument: Any, context: Any) -> Completion | None:
        prefix = argument.value or ""
        names: Any  # workload names (a dict's keys) or file names
        if isinstance(ref, PromptReference) and ref.name == "optimize_kernel" and argument.name == "workload":
            names = await anyio.to_thread.run_sync(service.catalogue.workloads)
        elif isinstance(ref, ResourceTemplateReference) and ref.uri == "kernelopt://workloads/{name}/{file}":
            if argument.name == "name":
                names = await anyio.to_thread.run_sync(service.catalogue.workloads)
            elif argument.name == "file":
                workload = ((context.arguments if context is not None else None) or {}).get("name")
                if not workload:
                    return None
                try:
                    names = _workload_files(await anyio.to_thread.run_sync(service.catalogue.load, workload))
                except (KerneloptError, ValueError):
                    return None
            else:
                return None
        else:
            return None
        matches = sorted(n for n in names if n.startswith(prefix))
        return Completion(values=matches[:100], total=len(matches), has_more=len(matches) > 100)


def register_prompts(app: MCPServer) -> None:
    @app.prompt(name="optimize_kernel", title="Optimize a kernel")
    def optimize_kernel(workload: Annotated[str, Field(description="a workload name from list_workloads")]) -> str:
        """Run the kernel optimization loop on a workload with kernelopt's tools."""
        return f"""You are optimizing a CUDA kernel for the workload `{workload}` with the kernelopt tools.

1. Call gpu_properties once (SMs, shared memory, registers, peak bandwidth and FLOP/s) and
   describe_workload("{workload}") (the exact C prototype, cases, tolerances, cost model, the CUDA
   reference and the starting kernel with a valid launch configuration).
2. Write a kernel with exactly that prototype (extern "C" __global__, device code only) and a launch
   spec: {{"default": {{"grid": [...], "block": [...], "shared_bytes": 0}}}}, values as integers or
   expressions of the case scalars such as "ceil_div(n, 256)".
3. compile it; fix errors (they carry line numbers); check registers and spills.
4. validate it: every case, correctness and performance, must pass. Read mismatch details (indices,
   expected vs actual; NaN means an element was never written) and fix the kernel, not the tolerance.
5. benchmark it. The score is the geometric mean of the performance cases' median latencies (lower
   is better); the speedup is against the CUDA reference. Compare achieved bytes/s and FLOP/s with the
   GPU's peaks to see which bound you are near.
6. Iterate: one idea per step (tiling, vectorized and coalesced access, shared memory, warp
   shuffles, more work per thread, occupancy), keeping the best kernel that passes. A kernel that
   fails any case does not count, however fast.

Report the best kernel's source, its launch spec, its score and speedup, and what made it faster."""
