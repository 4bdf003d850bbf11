"""The launch defaults (warm-up and measured launches per performance case) are written once,
``config.LAUNCH_DEFAULTS``; every default, help text and manual that states them reads it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from fakegpu import ADD_LAUNCH, in_memory_server, kernel, write_harness, write_tiny_workload

from kernelopt_mcp.baselines import DEFAULT_TIMING
from kernelopt_mcp.config import LAUNCH_DEFAULTS, Settings, bundled_workloads_dir
from kernelopt_mcp.evaluation.candidate import EvaluateOptions
from kernelopt_mcp.server_config import ServerConfig

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [ROOT / "kernelopt_mcp", ROOT / "clients"]
ROLES = {"warmup", "iterations", "--warmup", "--iterations"}
VALUES = {LAUNCH_DEFAULTS.warmup, LAUNCH_DEFAULTS.iterations}
# the one place: the line that assigns LAUNCH_DEFAULTS
_HOME_LINE = next(i for i, line in enumerate((ROOT / "kernelopt_mcp" / "config.py").read_text().splitlines(), 1)
                  if line.startswith("LAUNCH_DEFAULTS"))
HOME = [f"config.py:{_HOME_LINE} warmup=10", f"config.py:{_HOME_LINE} iterations=100"]
# Prose stating a launch count as a default: "(default 10)", "the server's, 100", "10 + 100".
PROSE = re.compile(
    r"(warm-?up|launches|iterations)[^.;()]*\((?:server )?default:?(?: the server's,)? (\d+)\)"
    r"|\b(\d+) warm-up(?: and|,) (\d+) measured|\b(\d+) \+ (\d+)\b"
)


def _is_default_count(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value in VALUES


def _stray(path: Path) -> list[str]:
    """Where ``path`` writes a launch default as a literal: a keyword, a field, a parameter's or an
    option's default, or prose stating one."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.keyword) and node.arg in ROLES and _is_default_count(node.value):
            found.append(f"{where} {node.arg}={node.value.value}")  # type: ignore[attr-defined]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in ROLES:
            if _is_default_count(node.value):
                found.append(f"{where} {node.target.id} = literal")
        elif isinstance(node, ast.arguments):
            positional = node.posonlyargs + node.args
            pairs = list(zip(positional[len(positional) - len(node.defaults):], node.defaults, strict=True))
            pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if d is not None]
            found += [f"{where} {a.arg}=literal" for a, d in pairs if a.arg in ROLES and _is_default_count(d)]
        elif isinstance(node, ast.Call) and any(isinstance(a, ast.Constant) and a.value in ROLES for a in node.args):
            found += [f"{where} add_argument default" for k in node.keywords
                      if k.arg == "default" and _is_default_count(k.value)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for m in PROSE.finditer(node.value):
                if {int(n) for n in m.groups() if n and n.isdigit()} & VALUES:
                    found.append(f"{where} text {m.group(0)!r}")
    return found


def test_the_launch_defaults_are_written_once() -> None:
    stray = [hit for package in PACKAGES for path in sorted(package.rglob("*.py")) for hit in _stray(path)]
    assert stray == HOME


def test_the_check_has_teeth(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f(warmup: int = 10, *, iterations=100): ...\n"
        "class O:\n    warmup: int = 10\n"
        "T = dict(warmup=10, iterations=100)\n"
        "p.add_argument('--iterations', type=int, default=100, help='measured launches (default 100)')\n"
        "H = 'timed launches per case (default: the server\\'s, 10)'\n"
        "U = 'the seed\\'s 10 + 100 protocol'\n"
        "ok = dict(warmup=5, iterations=40)  # calibration's own counts\n"
    )
    hits = _stray(sample)
    assert len(hits) == 9, hits


def test_every_default_reads_the_constant() -> None:
    assert (LAUNCH_DEFAULTS.warmup, LAUNCH_DEFAULTS.iterations) == (10, 100)
    assert (Settings().warmup, Settings().iterations) == (10, 100)
    assert (EvaluateOptions().warmup, EvaluateOptions().iterations) == (10, 100)
    assert (DEFAULT_TIMING.warmup, DEFAULT_TIMING.iterations) == (10, 100)


@pytest.mark.anyio
async def test_benchmark_without_counts_follows_the_servers_settings(tmp_path: Path) -> None:
    """A server configured with other counts times with them when benchmark is given none (its
    arguments say the default is the server's); counts given to the call are taken as they are."""
    settings = Settings(harness=write_harness(tmp_path, "fake"), timeout_s=20, warmup=3, iterations=7,
                        workload_dirs=(bundled_workloads_dir(), write_tiny_workload(tmp_path / "extra")))
    assert (settings.warmup, settings.iterations) != (LAUNCH_DEFAULTS.warmup, LAUNCH_DEFAULTS.iterations)
    call = {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": kernel("FAST")}
    async with in_memory_server(ServerConfig(settings=settings, workspace=tmp_path / "ws"),
                                orchestrator=True) as (client, _):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        args = tools["benchmark"].input_schema["properties"]
        assert all("default: the server's" in args[a]["description"] and args[a].get("default") is None
                   for a in ("warmup", "iterations"))
        timings = []
        for given in ({}, {"warmup": 1}, {"iterations": 5}):
            r = await client.call_tool("benchmark", {**call, **given})
            assert not r.is_error and r.structured_content["status"] == "ok", r.content
            perf = next(c for c in r.structured_content["cases"] if c["kind"] == "performance")
            timings.append((perf["timing"]["warmup"], perf["timing"]["iterations"]))
    assert timings == [(3, 7), (1, 7), (3, 5)]
