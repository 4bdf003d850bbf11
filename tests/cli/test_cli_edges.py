"""The command line's edges: a broken workload among good ones, "did you mean" for workload names
(CLI and MCP), usage errors as JSON under --json, a missing output folder named as such, and
compile's help without GPU flags."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from fakegpu import in_memory_server, tool_text, write_harness

from kernelopt_mcp.cli import build_parser, main
from kernelopt_mcp.config import Settings, bundled_workloads_dir, find_workload
from kernelopt_mcp.errors import WorkloadError
from kernelopt_mcp.server_config import ServerConfig

GOOD_KERNEL = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n'


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def broken_workloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """KERNELOPT_WORKLOADS naming a directory with one workload whose workload.json is bad JSON."""
    extra = tmp_path / "extra"
    (extra / "broken").mkdir(parents=True)
    (extra / "broken" / "workload.json").write_text('{"name": "broken",\n  "signature": 3,}\n')
    monkeypatch.setenv("KERNELOPT_WORKLOADS", str(extra))
    return extra


def test_one_broken_workload_does_not_empty_the_listing(
    broken_workloads: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["workloads"]) == 1
    out, err = capsys.readouterr()
    assert "sgemm" in out and "vector_add" in out
    assert "broken" in err and "workload.json: line 2" in err and "invalid JSON" in err
    assert main(["workloads", "--json"]) == 1
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert "description" in rows["sgemm"] and "error" not in rows["sgemm"]
    assert "invalid JSON" in rows["broken"]["error"]


def test_a_misspelled_workload_name_gets_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(WorkloadError, match=r"no workload 'sgem'; did you mean 'sgemm'\?"):
        find_workload("sgem", Settings.from_env())
    with pytest.raises(WorkloadError) as far:
        find_workload("zzzzzz", Settings.from_env())
    assert "did you mean" not in str(far.value) and "known: " in str(far.value)
    assert main(["evaluate", "vectr_add", "--json"]) == 2
    assert "did you mean 'vector_add'?" in json.loads(capsys.readouterr().out)["message"]


@pytest.mark.anyio
async def test_mcp_tools_say_did_you_mean_too(tmp_path: Path) -> None:
    settings = Settings(harness=write_harness(tmp_path, "nogpu"), workload_dirs=(bundled_workloads_dir(),))
    async with in_memory_server(ServerConfig(settings=settings, workspace=tmp_path / "ws")) as (client, _):
        r = await client.call_tool("describe_workload", {"name": "sgem"})
    assert r.is_error and "no workload 'sgem'; did you mean 'sgemm'?" in tool_text(r)


def test_usage_errors_are_json_under_json(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["evaluate", "sgemm", "--json", "--bogus"])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    error = json.loads(out)
    assert error["status"] == "error" and error["error"] == "UsageError" and "--bogus" in error["message"]
    assert err == ""
    with pytest.raises(SystemExit) as exit_:
        main(["compile", "--json"])  # a missing positional, reported by the subcommand's parser
    assert exit_.value.code == 2 and "file" in json.loads(capsys.readouterr().out)["message"]
    with pytest.raises(SystemExit):
        main(["evaluate", "sgemm", "--bogus"])  # without --json: argparse's usage text on stderr
    out, err = capsys.readouterr()
    assert out == "" and "unrecognized arguments: --bogus" in err


def test_an_output_in_a_missing_folder_says_the_folder_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "k.cu"
    source.write_text(GOOD_KERNEL)
    missing = tmp_path / "missing" / "dir"
    assert main(["compile", str(source), "--ptx", str(missing / "x.ptx")]) == 2
    err = capsys.readouterr().err
    assert "folder" in err and str(missing) in err and "does not exist" in err and "file not found" not in err
    assert main(["schema", "-o", str(missing / "schema.json"), ]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["compile", str(tmp_path / "absent.cu")]) == 2  # a missing input is still a missing file
    assert "not found" in capsys.readouterr().err


def test_compile_help_has_no_gpu_flags() -> None:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    flags = {f for a in sub.choices["compile"]._actions for f in a.option_strings}
    assert "--harness" not in flags and "--device" not in flags
    assert "--arch" in flags and "--unconfined-compiler" in flags
