"""NumPy oracles run confined (kernelopt_mcp/evaluation/oracle_sandbox.py, _oracle_worker.py), tried as an attacker.

In `kernelopt optimize` description runs the oracle is model-written Python; these oracles try what
such Python could: read the server's environment (a planted API key), read files outside their
directory, write files, reach a loopback listener, start a shell, allocate 100 GB, loop forever,
segfault, return wrong or huge outputs, forge the worker's answer. Each is refused or contained
with a message that says what happened, and the same pool then runs a good oracle (this test
process stands for the server). The bundled workloads' oracles give what an in-process call gives.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import socket
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from kernelopt_mcp.errors import WorkloadError
from kernelopt_mcp.evaluation.inputs import materialize
from kernelopt_mcp.evaluation.oracle import run_oracle
from kernelopt_mcp.evaluation.oracle_sandbox import OracleLimits, OraclePool
from kernelopt_mcp.sandbox import landlock_abi
from kernelopt_mcp.workload import load_workload

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-planted-0f7c1e9d2b"
GOOD = """
import numpy as np

def reference(x, n):
    return {"out": x.astype(np.float64) * 2}
"""
LIMITS = OracleLimits(timeout_s=30, memory_mb=2048)

needs_landlock = pytest.mark.skipif(landlock_abi() < 1, reason="this kernel has no Landlock")


@pytest.fixture
def pool() -> Iterator[OraclePool]:
    p = OraclePool()
    yield p
    p.close()


def _oracle(tmp_path: Path, body: str, name: str = "reference.py") -> Path:
    directory = tmp_path / "oracle"
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(body))
    return path


def _call(pool: OraclePool, path: Path, limits: OracleLimits = LIMITS) -> dict[str, np.ndarray]:
    x = np.arange(16, dtype=np.float32)
    return pool.call(path, {"x": x}, {"n": 16}, {"out": (16,)}, case="c", limits=limits)


def _still_serves(pool: OraclePool, tmp_path: Path) -> None:
    """After an attack the pool (and this process) still runs a good oracle."""
    out = _call(pool, _oracle(tmp_path, GOOD, "good.py"))["out"]
    assert out.dtype == np.float64 and np.array_equal(out, np.arange(16) * 2.0)


def _refused(pool: OraclePool, path: Path, limits: OracleLimits = LIMITS) -> str:
    with pytest.raises(WorkloadError) as info:
        _call(pool, path, limits)
    return str(info.value)


@needs_landlock
def test_the_servers_environment_does_not_reach_the_oracle(
    pool: OraclePool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    path = _oracle(tmp_path, f"""
        import os
        def reference(x, n):
            seen = ["env=" + repr(sorted(k for k in os.environ if k != "LC_CTYPE"))]  # LC_CTYPE: Python's locale coercion
            for p in ("/proc/{os.getpid()}/environ", "/proc/self/environ", "/proc/%d/environ" % os.getppid()):
                try:
                    seen.append(p + "=" + open(p, "rb").read().decode(errors="replace"))
                except OSError as e:
                    seen.append(p + ": " + e.strerror)
            raise RuntimeError(" | ".join(seen))
        """)  # noqa: E501
    message = _refused(pool, path)
    assert SECRET not in message
    assert "RuntimeError: env=[] |" in message  # an empty environment
    assert f"/proc/{os.getpid()}/environ: Permission denied" in message
    _still_serves(pool, tmp_path)


@needs_landlock
def test_files_outside_the_oracles_directory_cannot_be_read(pool: OraclePool, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text(SECRET)
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "id_ed25519").write_text(SECRET)
    (tmp_path / "oracle").mkdir()
    (tmp_path / "oracle" / "table.txt").write_text("beside the oracle")
    targets = [tmp_path / "secret.txt", ssh / "id_ed25519", "/etc/passwd", "/etc/hostname"]
    path = _oracle(tmp_path, f"""
        import os
        def reference(x, n):
            seen = [open(os.path.join(os.path.dirname(__file__), "table.txt")).read()]
            for p in {[str(t) for t in targets]!r} + ["../secret.txt"]:
                try:
                    seen.append(p + "=" + open(p).read())
                except OSError as e:
                    seen.append(p + ": " + e.strerror)
            try:
                seen.append("listing=" + ",".join(os.listdir({str(tmp_path)!r})))
            except OSError as e:
                seen.append("listing: " + e.strerror)
            raise RuntimeError(" | ".join(seen))
        """)
    message = _refused(pool, path)
    assert SECRET not in message and "secret.txt," not in message
    assert "beside the oracle" in message  # its own directory is readable
    for t in targets:
        assert f"{t}: Permission denied" in message
    assert "listing: Permission denied" in message
    _still_serves(pool, tmp_path)


@needs_landlock
def test_the_oracle_writes_nowhere(pool: OraclePool, tmp_path: Path) -> None:
    targets = [tmp_path / "pwned.txt", tmp_path / "oracle" / "pwned.txt",
               Path("/tmp") / f"kernelopt-pwned-{os.getpid()}"]
    path = _oracle(tmp_path, f"""
        def reference(x, n):
            seen = []
            for p in {[str(t) for t in targets]!r}:
                try:
                    with open(p, "w") as f:
                        f.write("pwned")
                    seen.append(p + " written")
                except OSError as e:
                    seen.append(p + ": " + e.strerror)
            raise RuntimeError(" | ".join(seen))
        """)
    message = _refused(pool, path)
    for t in targets:
        assert f"{t}: Permission denied" in message
        assert not t.exists()
    _still_serves(pool, tmp_path)


SECCOMP = os.uname().machine in ("x86_64", "aarch64")


@pytest.mark.skipif(not SECCOMP, reason="the seccomp filter is written for x86_64 and aarch64")
def test_the_oracle_cannot_reach_a_listener(pool: OraclePool, tmp_path: Path) -> None:
    """TCP (Landlock ABI >= 4 too), a UNIX socket by path (an ssh-agent's, docker's: Landlock does
    not cover those) and UDP: no socket can be made at all."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp, socket.socket(socket.AF_UNIX) as unix, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(1)
        unix.bind(str(tmp_path / "agent.sock"))
        unix.listen(1)
        udp.bind(("127.0.0.1", 0))
        for s in (tcp, unix, udp):
            s.settimeout(0.5)
        path = _oracle(tmp_path, f"""
            import socket
            def reference(x, n):
                seen = []
                tries = [("tcp", lambda: socket.create_connection(("127.0.0.1", {tcp.getsockname()[1]}), timeout=5)),
                         ("unix", lambda: socket.socket(socket.AF_UNIX).connect({str(tmp_path / "agent.sock")!r})),
                         ("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(
                             b"exfiltrated", ("127.0.0.1", {udp.getsockname()[1]}))),
                         ("pair", lambda: socket.socketpair())]
                for name, attempt in tries:
                    try:
                        attempt()
                        seen.append(name + " reached")
                    except OSError as e:
                        seen.append(name + ": " + e.strerror)
                raise RuntimeError(" | ".join(seen))
            """)
        message = _refused(pool, path)
        for name in ("tcp", "unix", "udp", "pair"):
            assert f"{name}: Operation not permitted" in message
        for listener in (tcp, unix):
            with pytest.raises(TimeoutError):
                listener.accept()
        with pytest.raises(TimeoutError):
            udp.recv(100)
    _still_serves(pool, tmp_path)


@pytest.mark.skipif(not SECCOMP, reason="the seccomp filter is written for x86_64 and aarch64")
def test_the_oracle_cannot_signal_the_server(pool: OraclePool, tmp_path: Path) -> None:
    got: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
    try:
        path = _oracle(tmp_path, f"""
            import os, signal
            def reference(x, n):
                seen = []
                for sig in (0, signal.SIGUSR1):
                    try:
                        os.kill({os.getpid()}, sig)
                        seen.append("signalled")
                    except OSError as e:
                        seen.append("kill: " + e.strerror)
                raise RuntimeError(" | ".join(seen))
            """)
        message = _refused(pool, path)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert message.count("kill: Operation not permitted") == 2 and got == []
    _still_serves(pool, tmp_path)


@needs_landlock
def test_the_oracle_cannot_run_a_shell(pool: OraclePool, tmp_path: Path) -> None:
    target = tmp_path / "shell-ran"
    path = _oracle(tmp_path, f"""
        import os, subprocess
        def reference(x, n):
            seen = []
            try:
                subprocess.run(["/bin/sh", "-c", "echo pwned > {target}"], check=False)
                seen.append("ran")
            except OSError as e:
                seen.append("subprocess: " + e.strerror)
            seen.append("system: %d" % os.system("echo pwned > {target}"))
            raise RuntimeError(" | ".join(seen))
        """)
    message = _refused(pool, path)
    assert not target.exists()
    # exec is refused by Landlock; the fork already fails (RLIMIT_NPROC 0, root too)
    assert "subprocess: Permission denied" in message or "subprocess: Resource temporarily unavailable" in message
    assert "system: 0" not in message
    _still_serves(pool, tmp_path)


def test_the_oracle_starts_no_process_or_thread_root_too(pool: OraclePool, tmp_path: Path) -> None:
    """A fork bomb in an oracle ends at its first fork: RLIMIT_NPROC, which the kernel enforces for
    root too once the worker has moved to a uid of its own (sandbox.limit_tasks), and from there it
    cannot become root again."""
    path = _oracle(tmp_path, """
        import os, threading
        def reference(x, n):
            seen = []
            try:
                if os.fork() == 0:
                    os._exit(0)
                seen.append("forked")
            except OSError as e:
                seen.append("fork: " + e.strerror)
            try:
                threading.Thread(target=len, args=((),)).start()
                seen.append("thread started")
            except RuntimeError as e:
                seen.append("thread: " + str(e))
            try:
                os.setresuid(0, 0, 0)
                seen.append("root again")
            except OSError as e:
                seen.append("setresuid: " + e.strerror)
            raise RuntimeError(" | ".join(seen) + " | uid %d" % os.getuid())
        """)
    message = _refused(pool, path)
    assert "fork: Resource temporarily unavailable" in message and "thread: can't start new thread" in message
    assert "forked" not in message and "root again" not in message and "uid 0" not in message
    _still_serves(pool, tmp_path)


def test_100_gb_is_refused_as_out_of_memory(pool: OraclePool, tmp_path: Path) -> None:
    path = _oracle(tmp_path, """
        import numpy as np
        def reference(x, n):
            hog = np.ones(100 * 2**30 // 8)
            return {"out": hog[:16]}
        """)
    message = _refused(pool, path)
    assert "ran out of memory" in message and "MemoryError" in message and "2048 MiB" in message
    _still_serves(pool, tmp_path)


def test_an_endless_loop_is_killed_at_the_wall_time_limit(pool: OraclePool, tmp_path: Path) -> None:
    path = _oracle(tmp_path, """
        def reference(x, n):
            while True:
                pass
        """)
    start = time.monotonic()
    message = _refused(pool, path, OracleLimits(timeout_s=2, memory_mb=2048))
    assert time.monotonic() - start < 20
    assert "did not finish within 2 s on case 'c'" in message and "killed" in message
    _still_serves(pool, tmp_path)


def test_a_segfault_is_reported_as_a_crash(pool: OraclePool, tmp_path: Path) -> None:
    path = _oracle(tmp_path, """
        import ctypes
        def reference(x, n):
            ctypes.string_at(0)
        """)
    message = _refused(pool, path)
    assert "signal 11 (SIGSEGV)" in message and "crashed" in message
    _still_serves(pool, tmp_path)


@pytest.mark.parametrize(("returned", "expected"), [
    ("np.zeros(3)", "'out' has 3 elements on case 'c'; the signature says shape (16,)"),
    ("np.zeros(50_000_000)", "'out' has 50000000 elements on case 'c'"),
    ("np.array(['a'] * 16)", "'out' is an array of <U1"),
    ("np.array([object()] * 16)", "'out' is an array of object"),
])
def test_wrong_outputs_are_refused(pool: OraclePool, tmp_path: Path, returned: str, expected: str) -> None:
    path = _oracle(tmp_path, f"""
        import numpy as np
        def reference(x, n):
            return {{"out": {returned}}}
        """)
    assert expected in _refused(pool, path)
    _still_serves(pool, tmp_path)


def test_a_result_that_is_no_dict_or_misses_an_output_is_refused(pool: OraclePool, tmp_path: Path) -> None:
    assert ("reference() must return a dict, got list"
            in _refused(pool, _oracle(tmp_path, "def reference(x, n):\n    return [x]\n")))
    assert ("reference() returned no 'out'"
            in _refused(pool, _oracle(tmp_path, "def reference(x, n):\n    return {}\n", "b.py")))


def test_a_forged_answer_is_checked_before_anything_is_allocated(pool: OraclePool, tmp_path: Path) -> None:
    """The oracle writes a header announcing 10^12 float64s straight to the answer pipe: the
    parent refuses it from the header, without allocating 8 TB."""
    path = _oracle(tmp_path, """
        import json, os, stat, fcntl
        def reference(x, n):
            forged = json.dumps({"ok": True, "outputs": [{"name": "out", "dtype": "float64", "size": 10**12}]})
            for fd in range(3, 64):
                try:
                    if stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_WRONLY:
                        os.write(fd, forged.encode() + b"\\n")
                except OSError:
                    pass
            return {"out": x}
        """)
    message = _refused(pool, path)
    assert "broke the protocol" in message and "1000000000000 elements for 'out'" in message
    _still_serves(pool, tmp_path)


def test_import_failures_and_a_missing_reference_are_named(pool: OraclePool, tmp_path: Path) -> None:
    message = _refused(pool, _oracle(tmp_path, "print('loading')\nraise ValueError('broken at import')\n"))
    assert "importing the oracle failed: ValueError: broken at import" in message and "loading" in message
    assert "defines no function `reference`" in _refused(pool, _oracle(tmp_path, "x = 1\n", "b.py"))
    assert ("importing the oracle failed: SystemExit: 4"
            in _refused(pool, _oracle(tmp_path, "import sys\nsys.exit(4)\n", "c.py")))


def test_prints_do_not_break_the_protocol_and_show_in_errors(pool: OraclePool, tmp_path: Path) -> None:
    path = _oracle(tmp_path, """
        import sys
        import numpy as np
        def reference(x, n):
            print('{"ok": true}' * 1000)
            print("a long line", file=sys.stderr)
            if n < 0:
                raise ValueError("negative")
            return {"out": x.astype(np.float64) * 2}
        """)
    assert np.array_equal(_call(pool, path)["out"], np.arange(16) * 2.0)
    x = np.arange(16, dtype=np.float32)
    with pytest.raises(WorkloadError, match=r"ValueError: negative \(it printed, last: .*a long line"):
        pool.call(path, {"x": x}, {"n": -1}, {"out": (16,)}, case="c", limits=LIMITS)


def test_one_worker_serves_many_calls_until_the_oracle_changes(pool: OraclePool, tmp_path: Path) -> None:
    path = _oracle(tmp_path, GOOD)
    for _ in range(3):
        _call(pool, path)
    assert pool.started == 1
    path.write_text(GOOD.replace("* 2", "* 3"))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert np.array_equal(_call(pool, path)["out"], np.arange(16) * 3.0)
    assert pool.started == 2


def test_without_landlock_oracles_are_refused_unless_accepted(
    pool: OraclePool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = _oracle(tmp_path, GOOD)
    message = _refused(pool, path, OracleLimits(landlock=False))
    assert "refusing to run the NumPy oracle" in message and "KERNELOPT_UNCONFINED_COMPILER=1" in message
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    leak = _oracle(tmp_path,
                   "import os\ndef reference(x, n):\n    raise RuntimeError(repr(dict(os.environ)))\n", "leak.py")
    with caplog.at_level(logging.WARNING, logger="kernelopt.oracle"):
        accepted = OracleLimits(landlock=False, accept_unconfined=True)
        assert np.array_equal(_call(pool, path, accepted)["out"], np.arange(16) * 2.0)
        message = _refused(pool, leak, accepted)
    assert SECRET not in message and "OPENAI_API_KEY" not in message  # unconfined, but still no environment
    assert any("NumPy oracles run UNCONFINED (Landlock turned off" in r.getMessage() for r in caplog.records)


BUNDLED = sorted(p.parent.name for p in (REPO / "workloads").glob("*/reference.py"))


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_oracles_give_what_an_in_process_call_gives(name: str, tmp_path: Path) -> None:
    wl = load_workload(REPO / "workloads" / name)
    assert wl.oracle_path is not None
    spec = importlib.util.spec_from_file_location(f"in_process_{name}", wl.oracle_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    small = [c for c in wl.spec.cases if c.kind == "correctness"][:3]
    inputs = materialize(wl, 7, tmp_path, cases={c.name for c in small})
    for case in small:
        ci = inputs[case.name]
        sandboxed = run_oracle(wl, case.name, ci.arrays, ci.shapes)
        direct = module.reference(**{k: v.copy() for k, v in ci.arrays.items()}, **case.scalars)
        for out, array in sandboxed.items():
            expected = np.asarray(direct[out]).reshape(ci.shapes[out])
            assert array.dtype == expected.dtype and array.shape == expected.shape
            # bitwise where no BLAS call is involved; a float64 matmul (attention's) may sum in
            # another order in another process (threads, CPU dispatch): 1e-16-level differences
            if np.issubdtype(array.dtype, np.floating):
                np.testing.assert_allclose(array, expected, rtol=1e-12, atol=1e-12, equal_nan=True,
                                           err_msg=f"{name} {case.name} {out}")
            else:
                assert np.array_equal(array, expected), (name, case.name, out)
