"""create_workload under concurrency (issue 13, item 6): 12 concurrent calls with one new name and
overwrite=false returned OK 7 times (last writer wins) and failed 5 times with an unhandled
``OSError: Directory not empty``. Now exactly one creates the name, the others get a clear
error, and overwrite=true under concurrency leaves one whole workload. Threads and processes."""

from __future__ import annotations

import json
import multiprocessing
import threading
from pathlib import Path
from typing import Any

from fakegpu import TINY_SPEC, kernel

from kernelopt_mcp.config import Settings, bundled_workloads_dir
from kernelopt_mcp.server_config import ServerConfig
from kernelopt_mcp.service import KerneloptService
from kernelopt_mcp.workload import load_workload
from kernelopt_mcp.workspace import RequestError

NAME = "raced_add"
CALLS = 12


def _spec(writer: int) -> dict[str, Any]:
    spec = json.loads(json.dumps(TINY_SPEC))
    spec.update(name=NAME, description=f"written by writer {writer}")
    spec.pop("initial")
    return spec


def _config(workspace: Path) -> ServerConfig:
    return ServerConfig(settings=Settings(workload_dirs=(bundled_workloads_dir(),), harness=Path("/nonexistent")),
                        workspace=workspace)


def _create(service: KerneloptService, writer: int, overwrite: bool) -> str:
    """'ok', or 'refused: <message>' for a RequestError; anything else propagates."""
    try:
        service.catalogue.create_workload(_spec(writer), kernel(), None, overwrite, "sm_90")
    except RequestError as exc:
        return f"refused: {exc}"
    return "ok"


def _create_in_process(workspace: str, writer: int, overwrite: bool, start: Any, results: Any) -> None:
    service = KerneloptService(_config(Path(workspace)))
    try:
        start.wait()
        results.put((writer, _create(service, writer, overwrite)))
    except BaseException as exc:  # noqa: BLE001 (reported to the parent, which fails the test)
        results.put((writer, f"{type(exc).__name__}: {exc}"))
    finally:
        service.close()


def _in_threads(workspace: Path, overwrite: bool) -> list[str]:
    service = KerneloptService(_config(workspace))
    start = threading.Barrier(CALLS)
    outcomes: list[str] = [""] * CALLS

    def run(writer: int) -> None:
        start.wait()
        try:
            outcomes[writer] = _create(service, writer, overwrite)
        except BaseException as exc:  # noqa: BLE001 (asserted below: no raw exception may escape)
            outcomes[writer] = f"{type(exc).__name__}: {exc}"

    try:
        threads = [threading.Thread(target=run, args=(w,)) for w in range(CALLS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        service.close()
    return outcomes


def _in_processes(workspace: Path, overwrite: bool, count: int = 6) -> list[str]:
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(count)
    results = ctx.Queue()
    procs = [ctx.Process(target=_create_in_process, args=(str(workspace), w, overwrite, start, results))
             for w in range(count)]
    for p in procs:
        p.start()
    outcomes = dict(results.get(timeout=240) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    return [outcomes[w] for w in range(count)]


def _stored_writer(workspace: Path) -> int:
    wl = load_workload(workspace / "workloads" / NAME)
    return int(wl.spec.description.rsplit(" ", 1)[1])


def _check_one_winner(workspace: Path, outcomes: list[str]) -> None:
    winners = [w for w, o in enumerate(outcomes) if o == "ok"]
    assert len(winners) == 1, outcomes
    for o in outcomes:
        assert o == "ok" or (o.startswith("refused:") and "already exists" in o), outcomes
    assert _stored_writer(workspace) == winners[0]
    _check_clean(workspace)


def _check_clean(workspace: Path) -> None:
    left = sorted(p.name for p in (workspace / "workloads").iterdir() if not p.name.endswith(".lock"))
    assert left == [NAME], f"staging or old directories left behind: {left}"


def test_concurrent_creates_in_threads_have_one_winner(tmp_path: Path) -> None:
    _check_one_winner(tmp_path, _in_threads(tmp_path, overwrite=False))


def test_concurrent_creates_in_processes_have_one_winner(tmp_path: Path) -> None:
    _check_one_winner(tmp_path, _in_processes(tmp_path, overwrite=False))


def test_concurrent_overwrites_leave_one_whole_workload(tmp_path: Path) -> None:
    outcomes = _in_threads(tmp_path, overwrite=True)
    assert outcomes == ["ok"] * CALLS
    assert 0 <= _stored_writer(tmp_path) < CALLS
    _check_clean(tmp_path)
    outcomes = _in_processes(tmp_path, overwrite=True, count=4)
    assert outcomes == ["ok"] * 4
    assert 0 <= _stored_writer(tmp_path) < 4
    _check_clean(tmp_path)
