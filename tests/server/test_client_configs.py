"""The ready client configs: the scripted example client runs against the server, and the configs for
MCP clients (clients/) name the console script. Split from test_server.py, whose fixtures they use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fakegpu import write_harness
from test_server import REPO, tiny_dir  # noqa: F401  (tiny_dir is a fixture)


def test_scripted_example_validates_and_benchmarks(tmp_path: Path, tiny_dir: Path) -> None:  # noqa: F811
    harness = write_harness(tmp_path, "fake")
    proc = subprocess.run(
        [sys.executable, str(REPO / "clients" / "scripted_example.py"), "--workload", "tiny_add", "--iterations", "3",
         "--", "--harness", str(harness), "--workspace", str(tmp_path / "ws")],
        capture_output=True, text=True, timeout=180, cwd=REPO,
        env={**os.environ, "KERNELOPT_WORKLOADS": str(tiny_dir), "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "validate tiny_add" in proc.stdout and "benchmark tiny_add" in proc.stdout and "speedup" in proc.stdout
    assert "timing n_4096" in proc.stderr


def test_client_configs_name_the_console_script() -> None:
    import tomllib

    clients = REPO / "clients"
    assert (json.loads((clients / "mcp_servers.json").read_text())["mcpServers"]["kernelopt"]["command"]
            == "kernelopt-mcp")
    codex = tomllib.loads((clients / "codex_config.toml").read_text())["mcp_servers"]["kernelopt"]
    assert codex["command"] == "kernelopt-mcp" and codex["tool_timeout_sec"] >= 600
    assert "claude mcp add --scope user kernelopt -- kernelopt-mcp" in (clients / "claude_code.sh").read_text()
    agents = (clients / "openai_agents_sdk.py").read_text()
    compile(agents, "openai_agents_sdk.py", "exec")
    assert "client_session_timeout_seconds=900" in agents
