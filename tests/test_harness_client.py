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
from kernelopt_mcp.harness import MAX_STDERR_BYTES, HarnessProcess, find_harness

FAKE = Path(__file__).with_name("fake_harness.py")


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
    total = len(r.stderr) + r.stderr_truncated + len(r2.stderr) + r2.stderr_truncated
    assert total == 2000 * len("printf from a kernel " * 10 + "\n")
    assert len(r.stderr) <= MAX_STDERR_BYTES


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
