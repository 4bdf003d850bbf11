"""The import graph, read from the source with ``ast``: no cycles, no upward arrows.

Counts top-level and function-level imports alike (an import moved into a function to dodge
a cycle is still a cycle) and resolves relative imports. ``if TYPE_CHECKING:`` imports are
counted too: they are the same dependency, only deferred.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "kernelopt_mcp": ROOT / "kernelopt_mcp",
    "kernelopt_agent": ROOT / "clients" / "kernelopt_agent",
}
# Modules of kernelopt_mcp that may import mcp: the server package and the command line that starts it.
MCP_ALLOWED = {"kernelopt_mcp.cli", "kernelopt_mcp.__main__"}
MCP_PACKAGE = "kernelopt_mcp.server"


def _module_name(package: str, root: Path, path: Path) -> str:
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    modules = {}
    for package, root in PACKAGES.items():
        for path in sorted(root.rglob("*.py")):
            modules[_module_name(package, root, path)] = path
    return modules


def _imported_names(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every dotted name ``module`` imports, relative imports resolved to absolute ones.

    ``from package import name`` is an import of the submodule ``package.name`` where there is
    one, else of ``package`` itself (a name its ``__init__`` defines or re-exports).
    """
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                names.add(submodule if submodule in modules else source)
    return names


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(edges between the project's modules, every name each module imports)."""
    modules = _modules()
    edges: dict[str, set[str]] = {}
    imported: dict[str, set[str]] = {}
    for module, path in modules.items():
        names = _imported_names(module, path, modules)
        imported[module] = names
        targets = set()
        for name in names:
            # The longest project module that the name is or lies inside.
            parts = name.split(".")
            for end in range(len(parts), 0, -1):
                candidate = ".".join(parts[:end])
                if candidate in modules:
                    if candidate != module:
                        targets.add(candidate)
                    break
        edges[module] = targets
    return edges, imported


def _cycles(edges: dict[str, set[str]], prefix: str) -> list[list[str]]:
    """The strongly connected components of more than one module under ``prefix`` (Tarjan)."""
    nodes = [n for n in edges if n == prefix or n.startswith(prefix + ".")]
    sub = {n: sorted(t for t in edges[n] if t in nodes) for n in nodes}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sub[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return components


def test_no_cycles_in_kernelopt_mcp() -> None:
    edges, _ = _graph()
    assert _cycles(edges, "kernelopt_mcp") == []


def test_no_cycles_in_kernelopt_agent() -> None:
    edges, _ = _graph()
    assert _cycles(edges, "kernelopt_agent") == []


def test_library_never_imports_the_client_or_openai() -> None:
    _, imported = _graph()
    upward = {
        module: sorted(n for n in names if n.split(".")[0] in {"kernelopt_agent", "openai"})
        for module, names in imported.items()
        if module.startswith("kernelopt_mcp")
    }
    assert {m: n for m, n in upward.items() if n} == {}
    # nor loads it by name (importlib, entry points): no string in the library names the client package
    named = sorted(
        module for module, path in _modules().items() if module.startswith("kernelopt_mcp")
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "kernelopt_agent" in node.value
    )
    assert named == []


def test_only_the_server_and_cli_import_mcp() -> None:
    _, imported = _graph()
    users = sorted(
        module
        for module, names in imported.items()
        if module.startswith("kernelopt_mcp")
        and module not in MCP_ALLOWED
        and not (module == MCP_PACKAGE or module.startswith(MCP_PACKAGE + "."))
        and any(n == "mcp" or n.startswith("mcp.") for n in names)
    )
    assert users == []


# What the orchestrator (clients/kernelopt_agent) may import of the library: its data layer only.
# Everything that evaluates, compiles, runs the harness or serves MCP is reached through the MCP
# server's tools (freeze_workload, replay_requests, benchmark, ...), so the orchestrator could drive
# a server on another machine.
CLIENT_MAY_IMPORT = {
    "kernelopt_mcp.workload",   # the workload schema (specs, signatures, input cases), read_json
    "kernelopt_mcp.launch",     # launch specs
    "kernelopt_mcp.tune.spec",  # tunable specs (what a proposal's tunables must be)
    "kernelopt_mcp.errors",     # the exception tree
    "kernelopt_mcp.config",     # where workloads are found (Settings, bundled_workloads_dir, find_workload)
    "kernelopt_mcp.files",      # atomic writes of the run's records
    "kernelopt_mcp.status",     # the result statuses: meaning and cheat verdicts
    "kernelopt_mcp.result_view",  # the benchmark and validate tools' result, typed as the client reads it
    "kernelopt_mcp.report_page",  # the self-contained HTML page and inline SVG figures (the suite's report too)
}
CLIENT_MAY_IMPORT_FROM_PACKAGE = {"__version__"}
# The one exception: the `kernelopt` console script (entry.py) hands every command but the
# orchestrator's to the library's command line. No other client module may import it.
CLIENT_ENTRY, LIBRARY_CLI = "kernelopt_agent.entry", "kernelopt_mcp.cli"
CLIENT_NEVER = ("evaluation", "compiler", "harness", "service", "server", "oracle", "inputs", "evaluate", "freeze")


def _client_library_imports() -> dict[str, set[str]]:
    """Each client module's imports of kernelopt_mcp: module names, and ``kernelopt_mcp:<name>`` for
    names taken from the package itself (``from kernelopt_mcp import __version__``)."""
    out: dict[str, set[str]] = {}
    root = PACKAGES["kernelopt_agent"]
    for path in sorted(root.rglob("*.py")):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.split(".")[0] == "kernelopt_mcp")
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                if node.module == "kernelopt_mcp":
                    found.update(f"kernelopt_mcp:{a.name}" for a in node.names)
                elif node.module.startswith("kernelopt_mcp."):
                    found.add(node.module)
        out[_module_name("kernelopt_agent", root, path)] = found
    return out


def test_the_client_imports_only_the_library_data_layer() -> None:
    imports = _client_library_imports()
    assert imports[CLIENT_ENTRY] == {LIBRARY_CLI}
    imports[CLIENT_ENTRY] = set()
    allowed = CLIENT_MAY_IMPORT | {f"kernelopt_mcp:{n}" for n in CLIENT_MAY_IMPORT_FROM_PACKAGE}
    beyond = {module: sorted(names - allowed) for module, names in imports.items() if names - allowed}
    assert beyond == {}
    never = {
        module: sorted(n for n in names if set(n.replace(":", ".").split(".")[1:2]) & set(CLIENT_NEVER))
        for module, names in imports.items()
    }
    assert {m: n for m, n in never.items() if n} == {}
    # the rule has teeth: the orchestrator does use the data layer
    assert ({"kernelopt_mcp.workload", "kernelopt_mcp.launch", "kernelopt_mcp:__version__"}
            <= set().union(*imports.values()))


# The library's layers, lowest first (ARCHITECTURE.md draws them). A module may import its own
# layer and those below it, never one above; a new module must be given a layer here.
LAYERS: dict[str, set[str]] = {
    "data": {
        "errors", "dtypes", "expr", "files", "data_files", "launch", "workload", "workload_parts",
        "compile_options", "config",
        "status", "tune", "tune.space", "tune.spec", "torch_store", "result_view", "input_structure", "input_choice",
        "report_page", "_version",
    },
    "compiler": {
        "compile_log", "compile_pool", "compiler", "cuda_headers", "sandbox", "executables", "source_policy",
        "_compile_worker", "confined_python", "_confined_child", "_cuda_probe", "cgroups", "compile_report",
    },
    "evaluation": {"evaluation", "_oracle_worker", "torch_reference"},  # and every evaluation.* module
    "tools": {
        "profiler", "ncu_report", "sanitizer", "tune.cache", "tune.output", "tune.prefetch", "tune.report",
        "tune.strategies", "tune.tuner", "tune.dispatch", "tune.workers", "tune.ray_workers", "freeze", "baselines",
        "torch_import", "torch_problem", "torch_source", "torch_trace", "torch_cases", "torch_baseline",
        "torch_comparison", "torch_fit", "_torch_baseline_child",
        "_torch_reference_child", "_child_answer", "torch_fill",
        "suite_table", "suite_report",
        "suite", "suite_imports", "docs", "docs.bm25",
        "docs.live", "docs.search", "results", "caches",
    },
    "app": {"app", "", "ray_devices", "workflows"},  # "": the package's __init__ (the public API, loaded lazily)
    "service": {
        "service", "server_config", "server_state", "gpu_queue", "admission", "quota", "workspace", "torch_workspace",
        "device_pool", "client_files", "workload_catalogue", "kernel_checks", "kernel_analysis", "frozen_runs",
    },
    "entry": {
        "cli", "cli_io", "cli_parser", "completion", "progress_bar", "render", "torch_cli", "kernelbench_cli",
        "__main__", "server",
    },  # and every server.* module
}


def _layer(module: str) -> int:
    short = module.removeprefix("kernelopt_mcp").removeprefix(".")
    for rank, members in enumerate(LAYERS.values()):
        if short in members or short.split(".")[0] in members & {"evaluation", "server"}:
            return rank
    raise AssertionError(f"{module} has no layer: add it to LAYERS in tests/repo/test_import_graph.py")


def test_every_import_points_down_the_layers() -> None:
    edges, _ = _graph()
    names = list(LAYERS)
    upward = sorted(
        f"{module} ({names[_layer(module)]}) -> {target} ({names[_layer(target)]})"
        for module, targets in edges.items() if module.startswith("kernelopt_mcp")
        for target in targets if target.startswith("kernelopt_mcp") and _layer(target) > _layer(module)
    )
    assert upward == []


def test_the_layer_check_has_teeth() -> None:
    assert (_layer("kernelopt_mcp.workload") < _layer("kernelopt_mcp.compiler")
            < _layer("kernelopt_mcp.evaluation.session"))
    assert (_layer("kernelopt_mcp.evaluation.device") < _layer("kernelopt_mcp.app")
            < _layer("kernelopt_mcp.server.build"))
    try:
        _layer("kernelopt_mcp.not_a_module")
    except AssertionError as exc:
        assert "no layer" in str(exc)
    else:
        raise AssertionError("an unknown module must be refused")


# The front ends stay thin (arguments -> one application call -> result): what a request needs
# before the work (a candidate, the profiler and sanitizer found, options checked) and the server's
# policy (confinement, quotas, names) live below them, in app.py, workflows.py and the service's
# parts. How many project modules each imports, at any depth of the file, keeps that true.
FRONT_END_MAX_IMPORTS = {"kernelopt_mcp.cli": 12, "kernelopt_mcp.service": 12}


def test_the_front_ends_import_few_project_modules() -> None:
    edges, _ = _graph()
    counts = {module: sorted(edges[module]) for module in FRONT_END_MAX_IMPORTS}
    over = {m: names for m, names in counts.items() if len(names) > FRONT_END_MAX_IMPORTS[m]}
    assert over == {}, f"front ends importing more than {FRONT_END_MAX_IMPORTS}: {over}"
    # the count has teeth: the command line imports app only inside its commands, and that is counted
    assert "kernelopt_mcp.app" in counts["kernelopt_mcp.cli"]
