"""freeze_workload and replay_requests over real MCP sessions (in-memory and stdio) on the
pretend GPU of tests/fakegpu.py: what a frozen run records, that the server then evaluates those
very inputs under the frozen name (for the freezing session only), that the recorded files keep
the generator they were drawn from, that the replay requests run on the harness alone, and
where the tool refuses to write or to read an oracle from.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakegpu import ADD_LAUNCH, TINY_SPEC, in_memory_server, kernel, stdio_server, write_harness, write_tiny_workload
from fakegpu import tool_text as text
from mcp import Client

from kernelopt_mcp.config import Settings, bundled_workloads_dir
from kernelopt_mcp.server import build_server
from kernelopt_mcp.server_config import ServerConfig

pytestmark = pytest.mark.anyio

ORACLE = "import numpy as np\n\ndef reference(a, b, n):\n    return {'c': a.astype(np.float64) + b}\n"


def frozen_spec(name: str = "tiny_add") -> dict[str, Any]:
    spec = json.loads(json.dumps(TINY_SPEC))
    spec["name"] = name
    spec["cases"].append({"name": "big", "kind": "performance", "scalars": {"n": 5000}})
    return spec


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Any]:
    """A server config with the tiny_add workload configured, and a run directory, a --root that holds
    the oracle and an --output-root the server freezes into (as kernelopt optimize starts its server)."""
    extra = write_tiny_workload(tmp_path / "extra")
    run = tmp_path / "results" / "run-001"
    run.mkdir(parents=True)
    (run / "reference.py").write_text(ORACLE)
    harness = write_harness(tmp_path, "fake")
    settings = Settings(harness=harness, workload_dirs=(bundled_workloads_dir(), extra), timeout_s=20)
    config = ServerConfig(settings=settings, workspace=tmp_path / "ws", extra_roots=(run,),
                          output_roots=(run.resolve(),))
    return {"config": config, "run": run, "harness": harness, "tmp": tmp_path}


def freeze_args(run: Path, **extra: Any) -> dict[str, Any]:
    return {"spec": frozen_spec(), "reference_cu": kernel(), "initial_cu": kernel(),
            "oracle_path": str(run / "reference.py"), "directory": str(run), "seed": 1234, "warmup": 2,
            "iterations": 7, **extra}


async def test_freeze_records_inputs_expected_outputs_and_a_frozen_workload(setup: dict[str, Any]) -> None:
    run: Path = setup["run"]
    async with in_memory_server(setup["config"], orchestrator=True) as (client, _):
        result = await client.call_tool("freeze_workload", freeze_args(run))
        assert not result.is_error, text(result)
        out = result.structured_content
        assert out["name"] == "tiny_add" and out["directory"] == str(run) and out["seed"] == 1234
        assert out["cases"] == ["one", "odd_1001", "n_4096", "big"] and out["performance_cases"] == ["n_4096", "big"]
        assert out["expected_cases"] == out["cases"] and "NumPy oracle" in out["expected_from"]
        assert "nvrtc_version" in out

        # the recorded files: inputs with their hashes and generators, expected outputs = a + b
        manifest = json.loads((run / "input_cases.json").read_text())
        assert manifest["seed"] == 1234
        expected = json.loads((run / "expected" / "manifest.json").read_text())
        for case in manifest["cases"]:
            arrays = {}
            for buf, gen in case["inputs"].items():
                data = (run / gen["path"]).read_bytes()
                assert hashlib.sha256(data).hexdigest() == gen["sha256"]
                # hidden redraws stay possible
                assert gen["drawn_from"]["generator"] == {"a": "uniform", "b": "normal"}[buf]
                arrays[buf] = np.frombuffer(data, dtype="<f4")
            entry = expected[case["name"]]["c"]
            want = np.fromfile(run / entry["path"], dtype="<f8").reshape(entry["shape"])
            np.testing.assert_array_equal(want, arrays["a"].astype(np.float64) + arrays["b"])
        frozen = json.loads((run / "workload" / "tiny_add" / "workload.json").read_text())
        assert frozen["inputs"] == {} and frozen["reference"]["cuda"] == "reference.cu"
        first = frozen["cases"][0]["inputs"]["a"]
        assert first["generator"] == "file" and Path(first["path"]) == run / "inputs" / "one" / "a.bin"
        assert (run / "workload" / "tiny_add" / "reference.cu").read_text() == kernel()

        # this session now evaluates the frozen workload under its name, ahead of the configured one
        described = await client.call_tool("describe_workload", {"name": "tiny_add"})
        assert described.structured_content["origin"] == "frozen"
        assert [c["name"] for c in described.structured_content["cases"]] == out["cases"]
        listed = {w["name"]: w for w in (await client.call_tool("list_workloads", {})).structured_content["workloads"]}
        assert listed["tiny_add"]["origin"] == "frozen" and listed["tiny_add"]["performance_cases"] == 2
        bench = await client.call_tool("benchmark", {"workload": "tiny_add", "source": kernel("MS:big=0.02;"),
                                                     "launch": ADD_LAUNCH, "warmup": 1, "iterations": 3})
        assert not bench.is_error and bench.structured_content["status"] == "ok", text(bench)
        assert {c["name"] for c in bench.structured_content["cases"]} == set(out["cases"])
        wrong = await client.call_tool("validate",
                                       {"workload": "tiny_add", "source": kernel("WRONG"), "launch": ADD_LAUNCH})
        assert wrong.structured_content["status"] == "mismatch"

        # replay requests: the harness alone reproduces the expected outputs from the recorded inputs
        replay = await client.call_tool("replay_requests",
                                        {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH})
        assert not replay.is_error and replay.structured_content["status"] == "ok", text(replay)
        requests = replay.structured_content["requests"]
        assert requests == {c: f"replay/{c}.json" for c in out["cases"]}
        reqs = [json.loads((run / requests[c]).read_text()) for c in out["cases"]]
        assert reqs[3]["cases"][0]["timing"] == {"warmup": 2, "iterations": 7} and "timing" not in reqs[0]["cases"][0]
        proc = subprocess.run([str(setup["harness"]), "serve"], input="".join(json.dumps(r) + "\n" for r in reqs),
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert all(json.loads(line)["cases"][0]["status"] == "ok" for line in proc.stdout.splitlines())
        for case in out["cases"]:
            got = np.fromfile(run / "replay" / "outputs" / case / "c.bin", dtype="<f4")
            entry = expected[case]["c"]
            np.testing.assert_allclose(got, np.fromfile(run / entry["path"], dtype="<f8"), rtol=1e-6)
        ref = await client.call_tool("replay_requests", {"workload": "tiny_add", "source": kernel(),
                                                         "launch": ADD_LAUNCH, "into": "replay/reference"})
        assert set(ref.structured_content["requests"].values()) == {f"replay/reference/{c}.json" for c in out["cases"]}
        broken = await client.call_tool("replay_requests", {"workload": "tiny_add", "source": "oops",
                                                            "launch": ADD_LAUNCH, "into": "replay/broken"})
        assert broken.structured_content["status"] == "error" and broken.structured_content["requests"] == {}


async def test_a_frozen_name_shadows_others_on_a_one_client_server_only(setup: dict[str, Any]) -> None:
    """stdio serves one client: its frozen tiny_add is what it measures. A server with several
    clients (HTTP) refuses to freeze under a name another workload has; its frozen workloads are
    the server's, seen by every client."""
    run: Path = setup["run"]
    app, service = build_server(setup["config"], single_client=False, orchestrator=True)
    try:
        async with Client(app) as client, Client(app) as other:
            taken = await client.call_tool("freeze_workload", freeze_args(run))
            assert taken.is_error and "'tiny_add' is already a configured workload" in text(taken)
            assert not (run / "workload").exists()
            result = await client.call_tool("freeze_workload", {**freeze_args(run), "spec": frozen_spec("only_here")})
            assert not result.is_error, text(result)
            again = await client.call_tool("freeze_workload", {**freeze_args(run), "spec": frozen_spec("only_here")})
            assert not again.is_error, text(again)  # the same directory may re-freeze its own workload
            elsewhere = setup["tmp"] / "ws" / "runs" / "other-run"
            moved = await client.call_tool("freeze_workload", {**freeze_args(run), "spec": frozen_spec("only_here"),
                                                               "directory": str(elsewhere)})
            assert moved.is_error and "already a frozen workload" in text(moved)
            ok = await other.call_tool("validate", {"workload": "only_here", "source": kernel(), "launch": ADD_LAUNCH})
            assert ok.structured_content["status"] == "ok", text(ok)
            described = await other.call_tool("describe_workload", {"name": "tiny_add"})
            assert described.structured_content["origin"] == "configured"
    finally:
        service.close()
    app, service = build_server(setup["config"], orchestrator=True)
    try:
        async with Client(app) as client:
            replay = await client.call_tool("replay_requests",
                                            {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH})
            assert replay.is_error and "call freeze_workload first" in text(replay)
            assert not (await client.call_tool("freeze_workload", freeze_args(run))).is_error
            described = await client.call_tool("describe_workload", {"name": "tiny_add"})
            assert (described.structured_content["origin"] == "frozen"
                    and len(described.structured_content["cases"]) == 4)
            # re-freezing with the answer's seed gives the same recorded inputs
            before = (run / "inputs" / "big" / "a.bin").read_bytes()
            again = await client.call_tool("freeze_workload", freeze_args(run))
            assert (again.structured_content["seed"] == 1234
                    and (run / "inputs" / "big" / "a.bin").read_bytes() == before)
    finally:
        service.close()


async def test_without_directory_or_oracle_it_freezes_under_the_workspace(setup: dict[str, Any]) -> None:
    async with in_memory_server(setup["config"], orchestrator=True) as (client, _):
        args = freeze_args(setup["run"])
        del args["directory"], args["oracle_path"], args["seed"]
        result = await client.call_tool("freeze_workload", args)
        assert not result.is_error, text(result)
        out = result.structured_content
        where = Path(out["directory"])
        assert where.parent == (setup["tmp"] / "ws" / "runs" / "frozen").resolve()
        assert (where / "workload" / "tiny_add" / "workload.json").is_file() and not (where / "expected").exists()
        assert "no NumPy oracle" in out["expected_from"] and out["expected_cases"] == []
        assert isinstance(out["seed"], int)
        ok = await client.call_tool("validate", {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH})
        assert ok.structured_content["status"] == "ok", text(ok)


@pytest.mark.parametrize("change, message", [
    ({"directory": "/etc/kernelopt-frozen"}, "outside the directories"),
    ({"directory": "WORKLOAD"}, "inside a workload directory"),
    ({"oracle_path": "WS_ORACLE"}, "must lie under a workload directory or a --root"),
    ({"oracle_path": "RUN_NOT_PY"}, "must be an existing .py file"),
    ({"spec": "DATAFILE"}, "not accepted by this server: its operator has named no data root"),
    ({"spec": "NO_REFERENCE"}, "spec.reference must be an object"),
    ({"initial_cu": None}, "initial_cu is missing"),
    # a client's freeze makes the server keep every buffer on disk: bounded like create_workload
    ({"spec": "HUGE"}, "a frozen workload may use at most 4 GiB"),
])
async def test_refusals(setup: dict[str, Any], change: dict[str, Any], message: str) -> None:
    run: Path = setup["run"]
    args = freeze_args(run, **change)
    ws = setup["tmp"] / "ws"
    ws.mkdir(exist_ok=True)
    if args["directory"] == "WORKLOAD":
        args["directory"] = str(setup["tmp"] / "extra" / "tiny_add")
    if args["oracle_path"] == "WS_ORACLE":  # the workspace is readable, but a client could have put files there
        (ws / "reference.py").write_text(ORACLE)
        args["oracle_path"] = str(ws / "reference.py")
    if args["oracle_path"] == "RUN_NOT_PY":
        (run / "oracle.txt").write_text(ORACLE)
        args["oracle_path"] = str(run / "oracle.txt")
    if args["spec"] == "DATAFILE":
        args["spec"] = frozen_spec()
        args["spec"]["inputs"]["a"] = {"generator": "file", "path": "/etc/passwd"}
    if args["spec"] == "HUGE":  # 60 cases of 3 x 256 MiB buffers: 45 GiB
        args["spec"] = frozen_spec()
        args["spec"]["cases"] += [{"name": f"c{i}", "kind": "performance", "scalars": {"n": 2**26}} for i in range(60)]
    if args["spec"] == "NO_REFERENCE":
        args["spec"] = {k: v for k, v in frozen_spec().items() if k != "reference"}
    async with in_memory_server(setup["config"], orchestrator=True) as (client, _):
        result = await client.call_tool("freeze_workload", args)
        assert result.is_error and message in text(result), text(result)
        bad_into = await client.call_tool("replay_requests",
                                          {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH,
                                           "into": "../escape"})
        assert bad_into.is_error
    assert not (run / "workload").exists() and not (Path("/etc/kernelopt-frozen")).exists()


async def test_freeze_over_stdio(setup: dict[str, Any]) -> None:
    """The tool over a real pipe, as kernelopt optimize calls it (a server it starts
    with --root RUN --output-root RUN)."""
    run: Path = setup["run"]
    config: ServerConfig = setup["config"]
    extra = setup["tmp"] / "extra"
    args = ["--orchestrator", "--workspace", str(config.workspace), "--harness", str(setup["harness"]), "--root",
            str(run), "--output-root", str(run)]
    async with stdio_server(*args, env={"KERNELOPT_WORKLOADS": str(extra)}) as client:
        result = await client.call_tool("freeze_workload", freeze_args(run))
        assert not result.is_error, text(result)
        assert result.structured_content["expected_cases"] == ["one", "odd_1001", "n_4096", "big"]
        bench = await client.call_tool("benchmark", {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH,
                                                     "warmup": 1, "iterations": 3})
        assert bench.structured_content["status"] == "ok", text(bench)
        assert "big" in {c["name"] for c in bench.structured_content["cases"]}
    assert (run / "workload" / "tiny_add" / "workload.json").is_file()


async def test_freezing_needs_no_gpu(setup: dict[str, Any]) -> None:
    """Freezing and writing replay requests compile and write files only: they work on a machine
    without a driver (requests for sm_90); evaluating the frozen workload then says there is no GPU."""
    run: Path = setup["run"]
    config: ServerConfig = setup["config"]
    (setup["tmp"] / "nogpu").mkdir()
    nogpu = replace(config, settings=replace(config.settings, harness=write_harness(setup["tmp"] / "nogpu", "nogpu")))
    async with in_memory_server(nogpu, orchestrator=True) as (client, _):
        result = await client.call_tool("freeze_workload", freeze_args(run))
        assert not result.is_error, text(result)
        replay = await client.call_tool("replay_requests",
                                        {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH})
        assert replay.structured_content["status"] == "ok", text(replay)
        assert (json.loads((run / "replay" / "big.json").read_text())["cases"][0]["timing"]
                == {"warmup": 2, "iterations": 7})
        bench = await client.call_tool("benchmark", {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH})
        assert bench.is_error and "need a GPU" in text(bench)
