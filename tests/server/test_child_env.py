"""What the server's environment lets through to the children that run GPU code or NVIDIA's
tools (executables.child_env): the harness (every invocation), ncu and compute-sanitizer get an
allowlist, never the server's bearer token, API keys or any other variable."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from fakegpu import ADD_LAUNCH, in_memory_server, kernel, write_harness, write_tiny_workload

from kernelopt_mcp.executables import child_env

SECRETS = {
    "KERNELOPT_MCP_TOKEN": "planted-token-7f3a", "OPENAI_API_KEY": "sk-planted-9c1e", "SECRET_X": "planted-x-42d0",
    "CUDA_API_KEY": "planted-cuda-key",  # a CUDA_ name that is a credential: dropped too
}
FIXTURES = Path(__file__).parents[1] / "fixtures" / "sanitizer"

STUB_NCU = r'''
import json, os, sys
with open(os.environ["KO_NCU_ENV_LOG"], "a") as log:
    log.write(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ)}) + "\n")
if sys.argv[1:2] == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2099.1.0.0 (build stub)")
    sys.exit(0)
print("==ERROR== the stub profiles nothing")
sys.exit(1)
'''


def test_child_env_keeps_the_allowlist_and_drops_everything_else() -> None:
    environ = {
        **SECRETS, "PATH": "/usr/bin", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "HOME": "/home/u",
        "CUDA_VISIBLE_DEVICES": "1", "CUDA_CACHE_PATH": "/c", "NVIDIA_TF32_OVERRIDE": "0",
        "NVIDIA_API_KEY": "nv-secret",
        "KERNELOPT_LIBCUDA": "/l/libcuda.so.1", "KERNELOPT_HARNESS_REPORT_STAGED": "1", "PYTHONPATH": "/p",
        "LD_PRELOAD": "/evil.so", "AWS_SECRET_ACCESS_KEY": "aws",
    }
    env = child_env(environ=environ)
    assert env == {
        "PATH": "/usr/bin", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "HOME": "/home/u", "CUDA_VISIBLE_DEVICES": "1",
        "CUDA_CACHE_PATH": "/c", "NVIDIA_TF32_OVERRIDE": "0", "KERNELOPT_LIBCUDA": "/l/libcuda.so.1",
        "KERNELOPT_HARNESS_REPORT_STAGED": "1",
    }
    # the operator's additions: names and NAME_* prefixes; extra values last
    named = child_env({"HOME": "/private"}, environ={**environ, "KERNELOPT_CHILD_ENV": "SECRET_X, NSIGHT_*",
                                                     "NSIGHT_A": "a"})
    assert named["SECRET_X"] == "planted-x-42d0" and named["NSIGHT_A"] == "a" and named["HOME"] == "/private"
    assert "OPENAI_API_KEY" not in named


def _no_secret(seen: dict[str, str], who: str) -> None:
    leaked = {k for k, v in seen.items() if k in SECRETS or v in SECRETS.values()}
    assert not leaked, f"{who} saw {sorted(leaked)}"
    assert seen.get("PATH") and seen.get("CUDA_VISIBLE_DEVICES") == "0", f"{who} lost the allowlisted variables"


@pytest.mark.anyio
async def test_the_harness_ncu_and_compute_sanitizer_never_see_the_servers_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kernelopt_mcp.config import Settings, bundled_workloads_dir
    from kernelopt_mcp.server_config import ServerConfig

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    harness = write_harness(tmp_path, "fake")
    sanitizer = tmp_path / "compute-sanitizer"
    sanitizer.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).parents[1] / 'fake_sanitizer.py'} \"$@\"\n")
    sanitizer.chmod(0o755)
    (tmp_path / "stub_ncu.py").write_text(STUB_NCU)
    ncu = tmp_path / "ncu"
    ncu.write_text(f"#!/bin/sh\nKO_NCU_ENV_LOG='{tmp_path / 'ncu-env.jsonl'}' exec {sys.executable} "
                   f"{tmp_path / 'stub_ncu.py'} \"$@\"\n")
    ncu.chmod(0o755)
    monkeypatch.setenv("FAKE_SANITIZER_REPORT", str(FIXTURES / "memcheck_clean.txt"))
    monkeypatch.setenv("FAKE_SANITIZER_ENV", str(tmp_path / "sanitizer-env.json"))
    settings = Settings(harness=harness, sanitizer=sanitizer, ncu=ncu, timeout_s=20,
                        workload_dirs=(bundled_workloads_dir(), write_tiny_workload(tmp_path / "extra")))
    async with in_memory_server(ServerConfig(settings=settings, workspace=tmp_path / "ws")) as (client, _):
        args = {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH}
        r = await client.call_tool("validate", {**args, "sanitize": True})
        assert not r.is_error and r.structured_content["status"] == "ok", r.content[0].text
        await client.call_tool("ncu_profile", args)  # the stub fails the profile: its environment is what counts

    runs = [json.loads(line) for line in (tmp_path / "harness-env.jsonl").read_text().splitlines()]
    assert {"--device-info", "serve", "run"} <= {arg for r in runs for arg in r["argv"][:1]}  # every way it is started
    for run in runs:
        _no_secret(run["env"], f"the harness ({' '.join(run['argv'][:1])})")
    _no_secret(json.loads((tmp_path / "sanitizer-env.json").read_text()), "compute-sanitizer")
    ncu_runs = [json.loads(line) for line in (tmp_path / "ncu-env.jsonl").read_text().splitlines()]
    assert ncu_runs
    for run in ncu_runs:
        _no_secret(run["env"], f"ncu ({' '.join(run['argv'][:1])})")
