"""What a client may make the server read and write through freeze_workload, replay_requests and
the runs/ resource, tried as a hostile client on the pretend GPU (real MCP sessions):

- a data file (``{"generator": "file"}``) named a planted ``.env`` under a --root was copied into
  ``runs/frozen/<dir>/inputs/`` and served back by ``resources/read``; a wrong size echoed the
  file's real size. Now data files are refused unless the operator names a data root, and then
  only ``.bin``/``.npy`` files beneath it, opened without following links, regular, read no
  further than the case needs, with no size in any error; runs/ serves text records only;
- a FIFO, ``/dev/zero`` or a huge file as a data file pinned a thread, grew the server by
  gigabytes, or was read whole;
- ``directory`` under a --root or a client's root made the server write there as its own user;
- client roots were honoured on any loopback HTTP bind;
- ``replay_requests`` wrote a 64 MiB module per call outside the quota.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx2
import numpy as np
import pytest
from fakegpu import ADD_LAUNCH, in_memory_server, kernel, released_fifo, stop_server, wait_for_port
from fakegpu import tool_text as text
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ListRootsResult, Root
from test_server_freeze import freeze_args, frozen_spec
from test_server_freeze import setup as setup  # the fixture
from test_server_http import free_port, server_env

from kernelopt_mcp.server import build_server
from kernelopt_mcp.server.entry import build_parser

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parents[2]
SECRET = b"OPENAI_API_KEY=sk-planted-0123456789abc\n"  # 40 bytes: 10 float32
assert len(SECRET) == 40


def data_spec(a: dict[str, Any], n: int = 10) -> dict[str, Any]:
    """tiny_add with one case whose input `a` is the generator ``a`` (n float32)."""
    spec = frozen_spec()
    spec["cases"] = [{"name": "x", "kind": "correctness", "scalars": {"n": n}, "inputs": {"a": a}}]
    return spec


def data_args(run: Path, a: dict[str, Any], n: int = 10, **extra: Any) -> dict[str, Any]:
    args = {**freeze_args(run), "spec": data_spec(a, n), **extra}
    args.pop("directory")  # under <workspace>/runs/frozen, which kernelopt://runs/ serves
    return args


def no_sizes(message: str, *sizes: int) -> bool:
    return not any(str(s) in message for s in sizes)


def frozen_files(setup: dict[str, Any]) -> list[Path]:
    frozen = setup["tmp"] / "ws" / "runs" / "frozen"
    return sorted(p for p in frozen.rglob("*") if p.is_file()) if frozen.is_dir() else []


async def test_a_planted_secret_is_never_a_data_file_nor_served(setup: dict[str, Any]) -> None:
    run: Path = setup["run"]
    (run / ".env").write_bytes(SECRET)
    data_root = run / "data"
    data_root.mkdir()
    (data_root / ".env").write_bytes(SECRET)
    (data_root / "secret.txt").write_bytes(SECRET)
    plain = setup["config"]
    with_root = replace(plain, data_roots=(data_root.resolve(),))
    for config, names in ((plain, [str(run / ".env"), ".env"]),
                          (with_root, [".env", "secret.txt", str(data_root / ".env")])):
        async with in_memory_server(config, orchestrator=True) as (client, _):
            for name in names:
                for n in (1, 10):  # a wrong size used to echo the file's; the right one copied it
                    result = await client.call_tool("freeze_workload",
                                                    data_args(run, {"generator": "file", "path": name}, n))
                    assert result.is_error, text(result)
                    assert no_sizes(text(result), len(SECRET)) and "sk-planted" not in text(result), text(result)
    assert not any(p.suffix == ".bin" for p in frozen_files(setup))


async def test_runs_serves_text_records_never_inputs_expected_or_modules(setup: dict[str, Any]) -> None:
    async with in_memory_server(setup["config"], orchestrator=True) as (client, _):
        args = freeze_args(setup["run"])
        del args["directory"]
        frozen = await client.call_tool("freeze_workload", args)
        assert not frozen.is_error, text(frozen)
        replay = await client.call_tool("replay_requests",
                                        {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH})
        assert replay.structured_content["status"] == "ok", text(replay)
        where = Path(frozen.structured_content["directory"]).name
        listed = json.loads((await client.read_resource("kernelopt://runs")).contents[0].text)["files"]
        assert f"frozen/{where}/workload/tiny_add/workload.json" in listed
        assert not [f for f in listed if f.endswith((".bin", ".npy", ".cubin")) or "/expected/" in f], listed
        record = await client.read_resource(f"kernelopt://runs/frozen/{where}/input_cases.json")
        assert "sha256" in record.contents[0].text
        data = [p for p in frozen_files(setup) if p.suffix in (".bin", ".cubin") or "expected" in p.parts]
        assert ({"inputs", "expected", "modules"}
                <= {p.relative_to(setup["tmp"] / "ws" / "runs" / "frozen" / where).parts[0] for p in data})
        for path in data:
            uri = f"kernelopt://runs/{path.relative_to(setup['tmp'] / 'ws' / 'runs')}"
            with pytest.raises(Exception, match="not served"):
                await client.read_resource(uri)


def _data_root(setup: dict[str, Any]) -> tuple[Path, Any]:
    root = setup["tmp"] / "data root"
    root.mkdir()
    return root, replace(setup["config"], data_roots=(root.resolve(),))


async def test_data_files_beneath_a_data_root_are_copied_into_the_run(setup: dict[str, Any]) -> None:
    root, config = _data_root(setup)
    values = np.arange(10, dtype=np.float32) / 4
    hidden = values + 100
    (root / "sub").mkdir()
    values.tofile(root / "sub" / "a.bin")
    np.save(root / "a.npy", values)
    hidden.tofile(root / "hidden.bin")
    async with in_memory_server(config, orchestrator=True) as (client, _):
        for gen in ({"generator": "file", "path": "sub/a.bin", "hidden_path": "hidden.bin"},
                    {"generator": "file", "path": str(root / "a.npy")}):
            result = await client.call_tool("freeze_workload", data_args(setup["run"], gen))
            assert not result.is_error, text(result)
            directory = Path(result.structured_content["directory"])
            assert np.array_equal(np.fromfile(directory / "inputs" / "x" / "a.bin", dtype="<f4"), values)
            spec = json.loads((directory / "workload" / "tiny_add" / "workload.json").read_text())
            recorded = spec["cases"][0]["inputs"]["a"]
            if "hidden_path" in gen:  # the copy the hidden data sets read, in the run, not the client's path
                assert Path(recorded["hidden_path"]).parent == directory / "data"
                assert np.array_equal(np.fromfile(recorded["hidden_path"], dtype="<f4"), hidden)
            ok = await client.call_tool("validate", {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH})
            assert ok.structured_content["status"] == "ok", text(ok)


async def test_links_dot_dot_and_other_names_out_of_a_data_root_are_refused(setup: dict[str, Any]) -> None:
    root, config = _data_root(setup)
    outside = setup["tmp"] / "outside"
    outside.mkdir()
    (outside / "secret.bin").write_bytes(SECRET)
    (root / "link.bin").symlink_to(outside / "secret.bin")
    (root / "dirlink").symlink_to(outside)
    (root / "inner").mkdir()
    names = {
        "link.bin": "symlink", "dirlink/secret.bin": "symlink", str(root / "link.bin"): "symlink",
        "inner/../../outside/secret.bin": "without '..'", str(outside / "secret.bin"): "not under a data root",
        "missing.bin": "no such file",
    }
    async with in_memory_server(config, orchestrator=True) as (client, _):
        for name, why in names.items():
            result = await client.call_tool("freeze_workload",
                                            data_args(setup["run"], {"generator": "file", "path": name}))
            assert result.is_error and why in text(result), (name, text(result))
            assert no_sizes(text(result), len(SECRET)) and "sk-planted" not in text(result)
    assert not any(p.suffix == ".bin" for p in frozen_files(setup))



async def test_fifo_device_and_huge_data_files_fail_at_once(setup: dict[str, Any]) -> None:
    root, config = _data_root(setup)
    huge = root / "huge.bin"
    with open(huge, "wb") as f:
        f.truncate(4 * 2**40)  # 4 TiB, no disk: read whole it would never end
    zero = root / "zero.bin"
    try:
        os.mknod(zero, 0o600 | 0o020000, os.makedev(1, 5))  # /dev/zero's device (needs CAP_MKNOD)
    except OSError:
        zero = None  # type: ignore[assignment]
    names = ["fifo.bin", "huge.bin", *(["zero.bin"] if zero else [])]
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with released_fifo(root / "fifo.bin", SECRET):
        async with in_memory_server(config, orchestrator=True) as (client, _):
            for name in names:
                with anyio.fail_after(2.5):  # before the FIFO's writer comes (3 s)
                    result = await client.call_tool("freeze_workload",
                                                    data_args(setup["run"], {"generator": "file", "path": name}))
                assert result.is_error, text(result)
                expect = "does not hold the 40 bytes" if name == "huge.bin" else "not a regular file"
                assert expect in text(result) and no_sizes(text(result), 4 * 2**40), text(result)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 512 * 2**10  # KiB: under 512 MiB grown


LIBRARY_READ = """
import resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
from kernelopt_mcp.dtypes import DType
from kernelopt_mcp.errors import InputError
from kernelopt_mcp.evaluation.inputs import load_data_file
from kernelopt_mcp.workload import BufferParam, DataFile
try:
    load_data_file(DataFile(generator="file", path=sys.argv[1]), BufferParam(name="a", dtype=DType.float32, role="in",
                   shape=["n"]), (10,), "x", None)
except InputError as exc:
    print("InputError:", exc)
"""


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "huge"])
def test_the_library_reader_reads_only_regular_files_and_no_more_than_needed(tmp_path: Path, kind: str) -> None:
    """Every caller's reader (configured workloads too): a FIFO waited for a writer, /dev/zero grew the
    process until memory ran out, a huge file was read whole. Run in a child capped at 2 GiB."""
    path = tmp_path / "d.bin"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "huge":
        with open(path, "wb") as f:
            f.truncate(4 * 2**40)
    else:
        path = Path(kind)
    proc = subprocess.run([sys.executable, "-c", LIBRARY_READ, str(path)], capture_output=True, text=True, timeout=60,
                          cwd=REPO, env=server_env())
    expect = "does not hold the 40 bytes the case needs (10 float32)" if kind == "huge" else "not a regular file"
    assert f"InputError: case 'x': a: {path}: {expect}" in proc.stdout, proc.stdout + proc.stderr


def _roots(*dirs: Path) -> Any:
    async def list_roots(context: Any) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=d.resolve().as_uri(), name=d.name) for d in dirs])  # type: ignore[arg-type]
    return list_roots


async def test_freeze_writes_only_under_the_workspace_runs_or_an_output_root(setup: dict[str, Any]) -> None:
    """A --root, a client's root and the rest of the workspace are never written (a client used to
    freeze into any directory under its roots, as the server's user)."""
    run: Path = setup["run"]
    config = replace(setup["config"], output_roots=())  # run is a --root only
    shared = setup["tmp"] / "client root"
    shared.mkdir()
    (setup["tmp"] / "ws").mkdir(exist_ok=True)
    app, service = build_server(config, orchestrator=True)
    try:
        async with Client(app, list_roots_callback=_roots(shared)) as client:
            for target in (run, run / "sub", shared, shared / "sub", setup["tmp"] / "ws",
                           setup["tmp"] / "ws" / "elsewhere"):
                result = await client.call_tool("freeze_workload", freeze_args(run, directory=str(target)))
                assert result.is_error and "outside the directories this server may write" in text(result), text(result)
            inside = await client.call_tool("freeze_workload", freeze_args(run, directory="runs/mine"))
            assert not inside.is_error, text(inside)
    finally:
        service.close()
    assert not (run / "workload").exists() and not (run / "sub").exists() and list(shared.iterdir()) == []
    assert not (setup["tmp"] / "ws" / "workload").exists() and not (setup["tmp"] / "ws" / "elsewhere").exists()
    assert (setup["tmp"] / "ws" / "runs" / "mine" / "workload" / "tiny_add" / "workload.json").is_file()


def test_client_roots_are_trusted_over_stdio_or_by_the_operator_only() -> None:
    from kernelopt_mcp.server.entry import trust_client_roots

    parser = build_parser()
    assert trust_client_roots(parser.parse_args([]), {})
    assert not trust_client_roots(parser.parse_args(["--http"]), {})
    assert trust_client_roots(parser.parse_args(["--http", "--trust-client-roots"]), {})
    assert trust_client_roots(parser.parse_args(["--http"]), {"KERNELOPT_MCP_TRUST_CLIENT_ROOTS": "1"})


@pytest.mark.parametrize("trusted", [False, True])
def test_client_roots_over_loopback_http_need_the_operators_flag(tmp_path: Path, trusted: bool) -> None:
    """Any local user may reach a loopback port; its roots (file:///) named the server user's files."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "k.cu").write_text(kernel())
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelopt_mcp.server", "--http", "--port", str(port), "--workspace",
         str(tmp_path / "ws"), "--harness", "/nonexistent", *(["--trust-client-roots"] if trusted else [])],
        env=server_env(), cwd=REPO, stderr=subprocess.PIPE, text=True,
    )

    async def compile_from_root() -> Any:
        async with (
            httpx2.AsyncClient(timeout=60) as http,
            Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http),
                   list_roots_callback=_roots(shared)) as client,
        ):
            return await client.call_tool("compile", {"path": str(shared / "k.cu"), "arch": "sm_90"})

    try:
        wait_for_port(proc, port, lambda: proc.stderr.read() if proc.stderr else "")
        result = anyio.run(compile_from_root)
    finally:
        stop_server(proc)
    if trusted:
        assert not result.is_error and result.structured_content["status"] == "ok", text(result)
    else:
        assert result.is_error and "outside the directories" in text(result), text(result)


def big_module_kernel(mib: int) -> str:
    """The tiny_add kernel with an initialized __device__ array of ``mib`` MiB: NVRTC stores it in the module."""
    return kernel().replace('extern "C"', f'__device__ unsigned char table[{mib} << 20] = {{1}};\nextern "C"', 1) \
        .replace("c[i] =", "c[i] = table[i & 1023] +", 1)


async def test_replay_modules_are_capped_and_counted_before_they_are_written(setup: dict[str, Any]) -> None:
    assert "table[i & 1023]" in big_module_kernel(1)
    async with in_memory_server(setup["config"], orchestrator=True) as (client, service):
        args = freeze_args(setup["run"])
        del args["directory"]
        frozen = await client.call_tool("freeze_workload", args)
        assert not frozen.is_error, text(frozen)
        directory = Path(frozen.structured_content["directory"])
        modules = set((directory / "modules").glob("*"))
        capped = await client.call_tool("replay_requests", {"workload": "tiny_add", "source": big_module_kernel(17),
                                                           "launch": ADD_LAUNCH, "into": "big"})
        assert capped.structured_content["status"] == "error" and "at most 16 MiB" in text(capped), text(capped)
        service.state.quota.limit = service.state.quota.usage() + 2**20  # 1 MiB left
        over = await client.call_tool("replay_requests", {"workload": "tiny_add", "source": big_module_kernel(2),
                                                         "launch": ADD_LAUNCH, "into": "quota"})
        assert over.is_error and "workspace quota" in text(over), text(over)
        small = await client.call_tool("replay_requests",
                                       {"workload": "tiny_add", "source": kernel(), "launch": ADD_LAUNCH,
                                                          "into": "fits"})
        assert small.structured_content["status"] == "ok", text(small)
    assert not (directory / "big").exists() and not (directory / "quota").exists()
    assert all(p.stat().st_size < 2**20 for p in set((directory / "modules").glob("*")) - modules)


@pytest.mark.parametrize("openat2", [True, False])
def test_open_beneath_follows_no_link_with_or_without_openat2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              openat2: bool) -> None:
    """Kernels without openat2 (or a seccomp profile refusing it) get the O_NOFOLLOW walk: the same answers."""
    from kernelopt_mcp import data_files

    if not openat2:
        monkeypatch.setattr(data_files, "_openat2", lambda dir_fd, name: None)
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "ok.bin").write_bytes(b"1234")
    (tmp_path / "secret.bin").write_bytes(SECRET)
    (root / "link.bin").symlink_to(tmp_path / "secret.bin")
    (root / "dirlink").symlink_to(tmp_path)
    fd = data_files.open_beneath(root, data_files.PurePosixPath("sub/ok.bin"))
    assert os.read(fd, 10) == b"1234"
    os.close(fd)
    for name in ("link.bin", "dirlink/secret.bin", "../secret.bin", "sub/../link.bin"):
        with pytest.raises(OSError):
            data_files.open_beneath(root, data_files.PurePosixPath(name))
