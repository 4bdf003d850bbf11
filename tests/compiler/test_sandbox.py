"""NVRTC is confined by the operating system (Landlock), not by reading the source.

The repros of issue 13 (a carriage return before ``#``, a C++14 digit separator that fools a
scanner) made NVRTC quote /etc/passwd and /proc/self/environ in its log. Here they are run
against the real NVRTC with the source scanner switched off, so only the sandbox stands
between the kernel and the files. Where this machine's kernel has no Landlock, compiles must be
refused unless the user accepted an unconfined compiler.
"""

from __future__ import annotations

import errno
import logging
import secrets
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelopt_mcp import compile_pool, compiler
from kernelopt_mcp.compile_options import CompileLimits
from kernelopt_mcp.compile_pool import UNCONFINED, UnconfinedCompilerRefused
from kernelopt_mcp.compiler import CompileCache, compile_kernel
from kernelopt_mcp.config import Settings
from kernelopt_mcp.sandbox import landlock_abi

KERNEL = 'extern "C" __global__ void k(float* x) { x[0] = 1; }\n'
CR_REPRO = '\r#include "PATH"\n' + KERNEL
DIGIT_SEPARATOR_REPRO = ("__device__ int a = 1'2; __device__ const char* b = \"'/*\";\n#include \"PATH\"\n// */\n"
                         + KERNEL)

SANDBOX_PY = str(Path(compile_pool.__file__).with_name("sandbox.py"))  # loaded by path, as the workers do
needs_landlock = pytest.mark.skipif(landlock_abi() < 1, reason="this kernel has no Landlock (see "
                                    "test_without_landlock_*)")


def everything(result: compiler.CompileResult) -> str:
    """All a client could see of a compile result."""
    return "\n".join([result.model_dump_json(), result.log, result.summary(), result.ptx or "",
                      repr(result.cubin or b"")])


@pytest.fixture
def no_scanner(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the operating system confines NVRTC: the source scanner lets everything through."""
    monkeypatch.setattr(compiler, "include_problem", lambda source: None)


@pytest.fixture
def secret_file(tmp_path: Path) -> tuple[Path, str]:
    """A file outside every directory the compiler may read, holding a random token that
    would compile as a declaration (so NVRTC, could it read it, would include it silently)."""
    token = "SECRET_" + secrets.token_hex(16)
    path = tmp_path / "outside" / "secret.h"
    path.parent.mkdir()
    path.write_text(f"// {token}\n#error {token}\n")
    return path, token


@needs_landlock
@pytest.mark.parametrize("repro", [CR_REPRO, DIGIT_SEPARATOR_REPRO], ids=["carriage-return", "digit-separator"])
@pytest.mark.parametrize("target", ["/etc/passwd", "/proc/self/environ", "secret"])
def test_the_repros_cannot_open_files_outside_the_headers(
    no_scanner: None, repro: str, target: str, secret_file: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, token = secret_file
    monkeypatch.setenv("KERNELOPT_TEST_SECRET", token)  # in the server's environment
    result = compile_kernel(repro.replace("PATH", str(path) if target == "secret" else target), cache=CompileCache())
    assert not result.ok
    assert "Permission denied" in result.log and "cannot open source file" in result.log, result.log
    seen = everything(result)
    assert token not in seen
    assert "root:x:0" not in seen and "/bin/bash" not in seen
    assert result.confinement == f"landlock abi {landlock_abi()}"


def test_the_scanner_still_refuses_the_repros_first(secret_file: tuple[Path, str]) -> None:
    path, token = secret_file
    for repro in (CR_REPRO, DIGIT_SEPARATOR_REPRO):
        result = compile_kernel(repro.replace("PATH", str(path)), cache=CompileCache())
        assert not result.ok and "is not allowed" in result.summary(), result.log
        assert token not in everything(result)


@needs_landlock
def test_headers_still_compile_confined() -> None:
    src = ("#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <cooperative_groups.h>\n"
           "#include <cuda/std/atomic>\n")
    src += 'extern "C" __global__ void k(__half* h) { h[0] = __float2half(1.0f); }\n'
    result = compile_kernel(src, cache=CompileCache())
    assert result.ok, result.log
    assert result.confinement == f"landlock abi {landlock_abi()}"


def test_the_worker_gets_an_empty_environment(no_scanner: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Even unconfined (accepted), /proc/self/environ of the worker holds nothing of the server's."""
    token = "SECRET_" + secrets.token_hex(16)
    monkeypatch.setenv("KERNELOPT_TEST_SECRET", token)
    limits = CompileLimits(landlock=False, accept_unconfined=True)
    nv = compiler._load_nvrtc()
    # the raw log, before any filtering: NVRTC includes the worker's environ (empty) and compiles
    out = compile_pool.default_pool().compile(
        '#include "/proc/self/environ"\n' + KERNEL, "kernel.cu", ["--gpu-architecture=sm_90"], limits, nv.toolchain
    )
    assert token not in out.log and out.ok, out.log
    assert out.confinement == UNCONFINED


def test_without_landlock_compiles_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compile_pool, "landlock_abi", lambda: 0)  # a kernel without Landlock
    with pytest.raises(UnconfinedCompilerRefused, match="no Landlock") as info:
        compile_kernel(KERNEL + "// a\n", cache=CompileCache(), limits=CompileLimits())
    assert "--unconfined-compiler" in str(info.value) and "KERNELOPT_UNCONFINED_COMPILER=1" in str(info.value)
    with pytest.raises(UnconfinedCompilerRefused, match="turned off by the settings"):
        compile_kernel(KERNEL + "// b\n", cache=CompileCache(), limits=CompileLimits(landlock=False))


def test_without_landlock_an_accepted_unconfined_compiler_warns_once_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(compile_pool, "_warned_unconfined", False)
    limits = CompileLimits(landlock=False, accept_unconfined=True)
    with caplog.at_level(logging.WARNING, logger="kernelopt.compile"):
        first = compile_kernel(KERNEL + "// c\n", cache=CompileCache(), limits=limits)
        second = compile_kernel(KERNEL + "// d\n", cache=CompileCache(), limits=limits)
    assert first.ok and second.ok
    assert first.confinement == second.confinement == "unconfined (accepted)"
    warnings = [r for r in caplog.records if "UNCONFINED" in r.getMessage()]
    assert len(warnings) == 1 and "--unconfined-compiler" in warnings[0].getMessage()


def test_an_accepted_unconfined_compiler_is_announced_at_start_up(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(compile_pool, "_warned_unconfined", False)
    with caplog.at_level(logging.WARNING, logger="kernelopt.compile"):
        compile_pool.warn_if_unconfined(Settings(compile_landlock=False, unconfined_compiler=True).compile_limits())
    assert any("UNCONFINED" in r.getMessage() for r in caplog.records)


@needs_landlock
def test_the_unconfined_path_leaks_no_file_through_the_log(no_scanner: None, secret_file: tuple[Path, str]) -> None:
    """Unconfined, NVRTC reads the file, but the log quotes only the kernel's own lines."""
    path, token = secret_file
    path.write_text(f"int {token} = ;\n")  # a syntax error located in the secret file
    limits = CompileLimits(landlock=False, accept_unconfined=True)
    result = compile_kernel(f'#include "{path}"\n' + KERNEL, cache=CompileCache(), limits=limits)
    assert not result.ok
    assert token not in everything(result)
    assert f"{path}(1): error" in result.log and "withheld" in result.log


def test_settings_and_environment() -> None:
    s = Settings.from_env({"KERNELOPT_UNCONFINED_COMPILER": "1", "KERNELOPT_COMPILE_LANDLOCK": "0"})
    limits = s.compile_limits()
    assert limits.accept_unconfined and not limits.landlock
    default = Settings.from_env({}).compile_limits()
    assert default.landlock and not default.accept_unconfined
    assert Settings.from_env({}, unconfined_compiler=True).compile_limits().accept_unconfined


@needs_landlock
def test_restrict_confines_files_network_and_children(tmp_path: Path) -> None:
    """sandbox.restrict in a fresh process: reads beneath the allowed directories only, writes
    in the scratch directory only, no TCP connect, and a child inherits all of it."""
    allowed, scratch, outside = tmp_path / "allowed", tmp_path / "scratch", tmp_path / "outside"
    for d in (allowed, scratch, outside):
        d.mkdir()
    (allowed / "ok.h").write_text("fine")
    (outside / "secret").write_text("no")
    code = textwrap.dedent(f"""
        import importlib.util, socket, subprocess, sys
        spec = importlib.util.spec_from_file_location("sb", {SANDBOX_PY!r})
        sb = importlib.util.module_from_spec(spec); sys.modules["sb"] = sb; spec.loader.exec_module(sb)
        listener = socket.socket(); listener.bind(("127.0.0.1", 0)); listener.listen(); port = listener.getsockname()[1]
        done = sb.restrict(read=[{str(allowed)!r}], write=[{str(scratch)!r}])
        print("abi", done.abi)
        print(open({str(allowed / "ok.h")!r}).read())
        open({str(scratch / "new")!r}, "w").write("x"); print("wrote scratch")
        for what, fn in [("read outside", lambda: open({str(outside / "secret")!r}).read()),
                         ("read passwd", lambda: open("/etc/passwd").read()),
                         ("write allowed", lambda: open({str(allowed / "x")!r}, "w")),
                         ("environ", lambda: open("/proc/self/environ").read())]:
            try:
                fn(); print(what, "OPENED")
            except PermissionError:
                print(what, "denied")
        if done.abi >= 4:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2); print("connect OPENED")
            except PermissionError:
                print("connect denied")
        try:
            child = subprocess.run(["/bin/cat", "/etc/hostname"], capture_output=True)
            print("child", child.returncode)
        except PermissionError:
            print("child denied")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=scratch)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"abi {landlock_abi()}" and "fine" in lines and "wrote scratch" in lines
    for what in ("read outside", "read passwd", "write allowed", "environ"):
        assert f"{what} denied" in lines, (what, lines)
    if landlock_abi() >= 4:
        assert "connect denied" in lines
    # nothing outside the rules can be executed, and what could be would inherit the rules
    assert "child denied" in lines, lines


@pytest.mark.parametrize("unix_sockets", [False, True])
def test_the_seccomp_filter_lets_a_cuda_child_make_a_unix_socket_that_reaches_nothing(tmp_path: Path,
                                                                                      unix_sockets: bool) -> None:
    """restrict_syscalls: no socket at all by default; for a child that runs CUDA (the driver makes
    a UNIX socket as it starts, and fails with error 304 without one) a UNIX socket may be made,
    but it cannot connect to a listener by path (an ssh agent's, docker's) nor send to one, and
    TCP, UDP and socketpair stay refused."""
    path = tmp_path / "agent.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen()
    code = textwrap.dedent(f"""
        import importlib.util, socket, sys
        spec = importlib.util.spec_from_file_location("sb", {SANDBOX_PY!r})
        sb = importlib.util.module_from_spec(spec); sys.modules["sb"] = sb; spec.loader.exec_module(sb)
        print(sb.restrict_syscalls(unix_sockets={unix_sockets!r}))
        def attempt(what, fn):
            try:
                fn(); print(what, "ok")
            except OSError as exc:
                print(what, exc.errno)
        attempt("unix", lambda: socket.socket(socket.AF_UNIX))
        attempt("tcp", lambda: socket.socket(socket.AF_INET))
        attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        attempt("pair", lambda: socket.socketpair())
        s = socket.socket(socket.AF_UNIX) if {unix_sockets!r} else None
        if s is not None:
            attempt("connect", lambda: s.connect({str(path)!r}))
            d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            attempt("sendto", lambda: d.sendto(b"x", {str(path)!r}))
    """)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    finally:
        listener.close()
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    eperm, enoent = errno.EPERM, errno.ENOENT
    assert f"tcp {eperm}" in lines and f"udp {eperm}" in lines and f"pair {eperm}" in lines, lines
    if unix_sockets:
        assert "unix ok" in lines and f"connect {enoent}" in lines and f"sendto {enoent}" in lines, lines
        assert lines[0] == "seccomp: no sockets but unconnected UNIX ones, no signals out"
    else:
        assert f"unix {eperm}" in lines and lines[0] == "seccomp: no sockets, no signals out", lines


@pytest.mark.skipif(sys.platform != "linux" or __import__("os").uname().machine != "x86_64",
                    reason="the probe calls x86_64 system call numbers")
def test_the_seccomp_filter_refuses_every_way_to_signal_or_reach_another_process(tmp_path: Path) -> None:
    """restrict_syscalls alone (no Landlock: a kernel older than Landlock ABI 6 does not scope
    signals): a process started beside the confined one survives kill, tkill, tgkill,
    rt_sigqueueinfo, rt_tgsigqueueinfo and pidfd_send_signal (the filter once checked only kill
    and tgkill: rt_sigqueueinfo and a pidfd killed it), and the confined process can neither
    ptrace it, read its memory (process_vm_readv) nor take its descriptors (pidfd_getfd).
    Signals to itself still work."""
    victim = subprocess.Popen(["sleep", "60"])
    code = textwrap.dedent(f"""
        import ctypes, importlib.util, os, signal, sys
        spec = importlib.util.spec_from_file_location("sb", {SANDBOX_PY!r})
        sb = importlib.util.module_from_spec(spec); sys.modules["sb"] = sb; spec.loader.exec_module(sb)
        libc = ctypes.CDLL(None, use_errno=True)
        victim = {victim.pid}
        pidfd = os.pidfd_open(victim)  # opened before the filter: what a pidfd could do is refused too
        print(sb.restrict_syscalls())
        info = (ctypes.c_int * 32)(signal.SIGKILL, 0, -1)  # siginfo: si_signo, si_errno, si_code SI_QUEUE
        iov = (ctypes.c_void_p * 2)(ctypes.addressof(ctypes.create_string_buffer(8)), 8)
        calls = {{
            "kill": (62, victim, signal.SIGKILL), "tkill": (200, victim, signal.SIGKILL),
            "tgkill": (234, victim, victim, signal.SIGKILL),
            "rt_sigqueueinfo": (129, victim, signal.SIGKILL, ctypes.byref(info)),
            "rt_tgsigqueueinfo": (297, victim, victim, signal.SIGKILL, ctypes.byref(info)),
            "pidfd_send_signal": (424, pidfd, signal.SIGKILL, None, 0),
            "pidfd_getfd": (438, pidfd, 0, 0),
            "process_vm_readv": (310, victim, ctypes.byref(iov), 1, ctypes.byref(iov), 1, 0),
            "ptrace": (101, 16, victim, 0, 0),  # PTRACE_ATTACH, last: it would stop the victim
        }}
        for name, (nr, *args) in calls.items():
            r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
            print(name, "ok" if r >= 0 else ctypes.get_errno())
        os.kill(os.getpid(), 0)
        print("self ok")
    """)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        alive = victim.poll() is None
    finally:
        victim.kill()
        victim.wait()
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "seccomp: no sockets, no signals out", lines
    for name in ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_send_signal", "ptrace",
                 "process_vm_readv", "pidfd_getfd"):
        assert f"{name} {errno.EPERM}" in lines, (name, lines)
    assert "self ok" in lines and alive, lines
