"""Every GPU of a machine: the server runs one harness per device, hands each job to a free one, and
every result names the device it ran on.

The pretend GPU (tests/fakegpu.py) stands in for a machine of two H200s (``KO_FAKE_DEVICES=2``):
``--device-info --device K`` answers for ordinal K with its own UUID, and every request it serves
is logged with the device it named, so the test sees which device did the work.
"""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path

import pytest
from fakegpu import spread_over_devices, stdio_server, write_harness
from fakegpu import tool_text as text

from kernelopt_mcp.config import Settings, parse_devices
from kernelopt_mcp.gpu_queue import DeviceSlot, GpuQueue, pick_device
from kernelopt_mcp.server.entry import build_parser, config_from_args

pytestmark = pytest.mark.anyio


def served(tmp_path: Path) -> list[int]:
    """The device of every request the pretend harnesses served, in order."""
    log = tmp_path / "harness-requests.jsonl"
    return [json.loads(line)["device"] for line in log.read_text().splitlines()] if log.exists() else []



@pytest.mark.parametrize("args", [("--devices", "0,1"), ()], ids=["--devices 0,1", "every visible device"])
async def test_jobs_run_on_both_devices_and_results_name_theirs(tmp_path: Path, args: tuple[str, ...]) -> None:
    results, _ = await spread_over_devices(tmp_path, *args)
    assert all(r["status"] == "ok" for r in results), results
    ordinals = {r["device_ordinal"] for r in results}
    assert ordinals == {0, 1}, results  # each device took some of the jobs
    uuids = {r["device_ordinal"]: r["device_uuid"] for r in results}
    assert uuids[0] != uuids[1] and all(uuids.values()), uuids
    assert all(r["device"] == "NVIDIA H200 (fake)" for r in results)
    assert set(served(tmp_path)) == {0, 1}  # the harness really got requests for both


async def test_one_device_named_runs_there_alone(tmp_path: Path) -> None:
    results, _ = await spread_over_devices(tmp_path, "--device", "1")
    assert {r["device_ordinal"] for r in results} == {1}, results
    assert set(served(tmp_path)) == {1}


async def test_a_device_that_does_not_exist_is_named_in_the_error(tmp_path: Path) -> None:
    harness = write_harness(tmp_path, "fake", devices=2)
    env = {"KERNELOPT_HARNESS": str(harness), "KERNELOPT_CACHE": str(tmp_path / "cache")}
    async with stdio_server("--workspace", str(tmp_path / "ws"), "--devices", "0,5", env=env) as client:
        r = await client.call_tool("gpu_properties", {})
    assert r.is_error
    assert "device 5 does not exist" in text(r) and "2 CUDA device(s)" in text(r), text(r)


def test_devices_from_flags_and_environment() -> None:
    parse = build_parser().parse_args
    assert config_from_args(parse(["--devices", "0,2"]), {}).settings.devices == (0, 2)
    assert config_from_args(parse([]), {"KERNELOPT_DEVICES": "1,3"}).settings.devices == (1, 3)
    assert config_from_args(parse([]), {}).settings.devices is None  # every visible device
    assert config_from_args(parse(["--device", "3"]), {}).settings.devices == (3,)
    with pytest.raises(SystemExit, match="ordinals separated by commas"):
        config_from_args(parse(["--devices", "0;1"]), {})
    with pytest.raises(SystemExit, match="named twice"):
        config_from_args(parse(["--devices", "1,1"]), {})
    assert parse_devices(" 0, 1 ") == (0, 1)
    assert Settings.from_env({"KERNELOPT_DEVICES": "2"}).devices == (2,)


def test_a_job_goes_to_a_free_device_else_the_least_queued() -> None:
    slots = [DeviceSlot(i, GpuQueue()) for i in range(3)]
    assert pick_device(slots).ordinal == 0
    slots[0].queue._busy = True
    assert pick_device(slots).ordinal == 1
    for slot in slots:
        slot.queue._busy = True
    slots[0].queue._waiting["a"] = deque([object()])  # type: ignore[list-item]
    assert pick_device(slots).ordinal == 1


async def test_a_heartbeat_due_as_the_device_is_handed_over_does_not_fail_the_job(monkeypatch) -> None:
    """The waiting job's heartbeat and the running job's end fall due together (the event loop was
    blocked past both): the running job resumes first (its deadline is earlier) and hands the device
    over, and the heartbeat then runs before the waiting job can stop it. It must find its ticket gone
    and say nothing, not fail the job (seen under CI load: 'ValueError: _Ticket(...) is not in list')."""
    import time

    import anyio

    from kernelopt_mcp import gpu_queue

    monkeypatch.setattr(gpu_queue, "HEARTBEAT_S", 0.05)
    queue = GpuQueue()
    notes: list[str] = []
    ran: list[str] = []

    async def notify(message: str) -> None:
        notes.append(message)

    async def job(client: str, hold_s: float) -> None:
        async with queue.turn(notify, client):
            ran.append(client)
            await anyio.sleep(hold_s)

    async def block_the_loop() -> None:
        await anyio.sleep(0.02)
        time.sleep(0.15)  # both timers expire meanwhile: they resume in deadline order

    async with anyio.create_task_group() as tg:
        tg.start_soon(job, "a", 0.05)
        await anyio.sleep(0)  # "a" holds the device and sleeps to its deadline
        tg.start_soon(job, "b", 0)  # "b" waits; its heartbeat's deadline comes just after "a"'s
        tg.start_soon(block_the_loop)
    assert ran == ["a", "b"] and notes and all("queued for the GPU: 1 job(s) ahead" in n for n in notes)
