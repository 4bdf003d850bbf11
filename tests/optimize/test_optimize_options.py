"""What `kernelopt optimize` takes from the environment reaches its options (OptimizeOptions), and the
loop and the parts read it there: KERNELOPT_ARCH, and where --workload names are looked up
(KERNELOPT_WORKLOADS, KERNELOPT_MCP_WORKSPACE). The environment is injected, never os.environ."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakegpu import TINY_SPEC, write_tiny_workload

from kernelopt_agent.options import OptimizeOptions, OptionsError
from kernelopt_agent.parts import load_parts
from kernelopt_agent.resume import run_options as _options
from kernelopt_mcp.config import bundled_workloads_dir

NAME = TINY_SPEC["name"]


def build(tmp_path: Path, environ: dict[str, str], **flags: object) -> OptimizeOptions:
    return OptimizeOptions.build({"workload": NAME, **flags}, environ=environ, cwd=tmp_path)


def test_kernelopt_arch_reaches_the_options(tmp_path: Path) -> None:
    assert build(tmp_path, {"KERNELOPT_ARCH": "sm_80"}).arch == "sm_80"
    assert build(tmp_path, {}).arch is None  # the loop then takes the GPU's
    assert build(tmp_path, {"KERNELOPT_ARCH": "sm_80"}).as_json()["arch"] == "sm_80"  # saved with the run


def test_workload_lookup_follows_the_environment_and_the_workspace(tmp_path: Path) -> None:
    extra, home = write_tiny_workload(tmp_path / "extra"), tmp_path / "env-ws"
    opts = build(tmp_path, {"KERNELOPT_WORKLOADS": str(extra), "KERNELOPT_MCP_WORKSPACE": str(home)})
    assert opts.workload_dirs == (extra, bundled_workloads_dir(), home / "workloads")
    assert load_parts(opts).name == NAME  # found through the options alone
    # --workspace (a flag, or the config file) wins over KERNELOPT_MCP_WORKSPACE
    flag = build(tmp_path, {"KERNELOPT_MCP_WORKSPACE": str(home)}, workspace=str(tmp_path / "flag-ws"))
    assert flag.workload_dirs == (bundled_workloads_dir(), tmp_path / "flag-ws" / "workloads")
    # without the variables: the bundled workloads, then ~/.kernelopt's
    assert build(tmp_path, {}).workload_dirs == (bundled_workloads_dir(), Path.home() / ".kernelopt" / "workloads")
    with pytest.raises(Exception, match=f"no workload '{NAME}'"):
        load_parts(build(tmp_path, {}))
    assert opts.as_json()["workload_dirs"] == [str(p) for p in opts.workload_dirs]


def test_environment_only_options_are_not_config_options(tmp_path: Path) -> None:
    cfg = tmp_path / "c.json"
    for key in ("arch", "workload_dirs"):
        cfg.write_text(json.dumps({key: "sm_80"}))
        with pytest.raises(OptionsError, match=f"unknown option '{key}'"):
            build(tmp_path, {}, config=str(cfg))
    with pytest.raises(OptionsError, match="KERNELOPT_\\* environment variable cannot be read"):
        build(tmp_path, {"KERNELOPT_DEVICE": "first"})


def test_a_resumed_run_reads_the_environment_it_runs_in(tmp_path: Path) -> None:
    """arch and workload_dirs are recorded in config.json but, like the API key, a resumed run reads
    them from its own environment."""
    recorded = build(tmp_path, {"KERNELOPT_ARCH": "sm_80", "OPENAI_API_KEY": "sk-test"}).as_json()
    run = tmp_path / "results" / "run-001"
    extra = write_tiny_workload(tmp_path / "extra")
    environ = {"KERNELOPT_ARCH": "sm_90a", "KERNELOPT_WORKLOADS": str(extra), "OPENAI_API_KEY": "sk-test"}
    opts, changed = _options({"resume": "1"}, recorded, run, environ, tmp_path)
    assert (opts.arch, opts.workload_dirs[0], opts.api_key, changed) == ("sm_90a", extra, "sk-test", {})
    opts, _ = _options({"resume": "1", "workspace": str(tmp_path / "ws")}, recorded, run, {}, tmp_path)
    assert opts.arch is None and opts.workload_dirs[-1] == tmp_path / "ws" / "workloads"


def test_a_resumed_run_never_takes_its_whereabouts_from_the_run_directory(tmp_path: Path) -> None:
    """A run directory may come from elsewhere: its config.json's model URL (where the API key is
    sent) and harness binary (what is executed) are never used; this invocation's are, or the defaults."""
    recorded = build(tmp_path, {}).as_json() | {
        "base_url": "http://attacker.invalid/v1", "harness": "/tmp/not-the-harness.sh", "devices": "0,1",
    }
    run = tmp_path / "results" / "run-001"
    opts, _ = _options({"resume": "1"}, recorded, run, {"OPENAI_API_KEY": "sk-test"}, tmp_path)
    assert opts.base_url is None and opts.harness is None and opts.devices is None
    given = {"resume": "1", "base_url": "http://127.0.0.1:9/v1", "harness": str(tmp_path / "h")}
    opts, changed = _options(given, recorded, run, {}, tmp_path)
    assert opts.base_url == "http://127.0.0.1:9/v1" and str(opts.harness) == str(tmp_path / "h")
    assert set(changed) == {"base_url", "harness"}
