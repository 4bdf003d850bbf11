"""The harness client's process handling, against a GPU-free stand-in (tests/fake_harness.py).

The real harness under the same client is exercised by the gpu tests.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from kernelopt_mcp.errors import HarnessError, ToolchainNotFound
from kernelopt_mcp.evaluation.harness import MAX_STDERR_BYTES, HarnessProcess, find_harness

FAKE = Path(__file__).parents[1] / "fake_harness.py"


@pytest.fixture
def fake(tmp_path: Path) -> HarnessProcess:
    script = tmp_path / "kernelopt-harness"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n")
    script.chmod(0o755)
    return HarnessProcess(script)


def test_one_process_serves_many_requests(fake: HarnessProcess) -> None:
    with fake:
        a = fake.request({"entry": "ok"}, 10)
        b = fake.request({"entry": "ok"}, 10)
    assert a.answer and b.answer and a.answer["pid"] == b.answer["pid"]
    assert not a.fatal and fake.restarts == 0


def test_hang_is_killed_at_the_deadline_and_the_next_request_gets_a_fresh_process(fake: HarnessProcess) -> None:
    with fake:
        first = fake.request({"entry": "ok"}, 10)
        start = time.monotonic()
        hung = fake.request({"entry": "hang"}, 1.0)
        assert hung.timed_out and hung.answer is None and hung.fatal
        assert time.monotonic() - start < 5
        after = fake.request({"entry": "ok"}, 10)
    assert after.answer and after.answer["pid"] != first.answer["pid"]  # type: ignore[index]
    assert fake.restarts == 1


def test_timeout_kills_the_whole_process_group(fake: HarnessProcess, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    with fake:
        r = fake.request({"entry": "hang_child", "module": str(pid_file)}, 1.5)
    assert r.timed_out
    child = int(pid_file.read_text())
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the harness's child survived the timeout")


def test_fatal_exit_returns_the_answer_then_restarts(fake: HarnessProcess) -> None:
    with fake:
        crashed = fake.request({"entry": "crash"}, 10)
        assert crashed.answer and crashed.answer["cases"][0]["status"] == "runtime_error"
        assert crashed.exit_code == 5 and crashed.fatal
        again = fake.request({"entry": "ok"}, 10)
    assert again.answer and again.exit_code is None
    assert fake.restarts == 1


def test_exit_without_answer_reports_the_code(fake: HarnessProcess) -> None:
    with fake:
        r = fake.request({"entry": "die"}, 10)
    assert r.answer is None and r.exit_code == 3


def test_stderr_is_capped_and_the_cut_is_counted(fake: HarnessProcess) -> None:
    with fake:
        r = fake.request({"entry": "spam"}, 10)
        time.sleep(0.2)
        # stderr is drained by a thread; the next request collects anything left
        r2 = fake.request({"entry": "ok"}, 10)
    kept = [reply.stderr.split("\n", 1)[1] if reply.stderr_truncated else reply.stderr for reply in (r, r2)]
    total = len(kept[0]) + r.stderr_truncated + len(kept[1]) + r2.stderr_truncated
    assert total == 2000 * len("printf from a kernel " * 10 + "\n")
    assert len(kept[0]) <= MAX_STDERR_BYTES
    if r.stderr_truncated:
        assert r.stderr.startswith(f"[... {r.stderr_truncated} bytes dropped]\n")


def test_a_printf_flood_keeps_a_bounded_tail_with_a_marker(fake: HarnessProcess) -> None:
    """16 MiB of kernel printf: the reply holds the last 64 KiB after a line saying how much was
    dropped; the process's memory does not grow with the flood; the harness keeps answering."""
    import resource

    line = "printf from a kernel " * 10 + "\n"
    sent = 16 * 1024 * 1024 // len(line) * len(line)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with fake:
        r = fake.request({"entry": "flood", "megabytes": 16}, 30)
        time.sleep(0.3)
        r2 = fake.request({"entry": "ok"}, 10)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert r.answer is not None and r.answer["status"] == "ok" and r2.answer is not None
    dropped = r.stderr_truncated + r2.stderr_truncated
    assert dropped > 15 * 1024 * 1024
    first = r if r.stderr_truncated else r2
    marker, kept = first.stderr.split("\n", 1)
    assert marker == f"[... {first.stderr_truncated} bytes dropped]"
    assert len(kept.encode()) <= MAX_STDERR_BYTES and kept.endswith(line)
    kept_total = sum(len(x.stderr.split("\n", 1)[1] if x.stderr_truncated else x.stderr) for x in (r, r2))
    assert kept_total + dropped == sent
    assert grown_kib < 8 * 1024, f"the client's peak memory grew by {grown_kib} KiB"


def test_invalid_json_answer_is_a_harness_error(fake: HarnessProcess) -> None:
    with fake, pytest.raises(HarnessError, match="invalid JSON"):
        fake.request({"entry": "garbage"}, 10)


def test_missing_harness_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(ToolchainNotFound, match="pip install"):
        find_harness(tmp_path / "nope")


def test_cancel_kills_and_blocks_restart_until_rearmed(fake: HarnessProcess) -> None:
    import threading

    from kernelopt_mcp.errors import HarnessCancelled

    with fake:
        replies = []
        t = threading.Thread(target=lambda: replies.append(fake.request({"entry": "hang"}, 30)))
        t.start()
        time.sleep(0.5)
        fake.cancel()
        t.join(timeout=10)
        assert not t.is_alive(), "cancel did not unblock the request in flight"
        assert replies and replies[0].answer is None and replies[0].fatal
        assert fake.cancelled
        with pytest.raises(HarnessCancelled):
            fake.request({"entry": "ok"}, 10)
        fake.rearm()
        assert fake.request({"entry": "ok"}, 10).answer
