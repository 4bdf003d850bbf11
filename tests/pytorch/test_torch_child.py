"""The PyTorch import child of create_workload(torch_problem) (torch_workspace.py, confined_python.py):
an allowlisted environment, ``python -I``, confined by Landlock and seccomp, its whole process tree
reaped, its pipes read to a deadline; refused at once where torch is missing. torch is not needed:
a stand-in ``torch`` package on the child's path lets the problem's module-level code run (the
importer executes the problem before it calls anything of torch's)."""

from __future__ import annotations

import errno
import importlib.metadata
import importlib.util
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_torch_workspace import FakeWorkspace

from kernelopt_mcp._confined_child import SYSTEM_TMP
from kernelopt_mcp.confined_python import ChildLimits, installed_requirements, run_confined_python
from kernelopt_mcp.sandbox import landlock_abi
from kernelopt_mcp.torch_workspace import create_torch_workload
from kernelopt_mcp.workspace import RequestError

needs_landlock = pytest.mark.skipif(landlock_abi() < 1, reason="this kernel has no Landlock")
SECRETS = {"KERNELOPT_MCP_TOKEN": "planted-token-7f3a", "OPENAI_API_KEY": "sk-planted-9c1e",
           "SECRET_X": "planted-x-42d0"}

PROBE = '''
import json, os, socket, sys, time
import torch

class Model:
    pass

def get_inputs():
    return []

def _try(fn):
    try:
        return "ok: " + str(fn())[:40]
    except OSError as exc:
        return type(exc).__name__

found = {
    "read": _try(lambda: open(SECRET).read()),
    "write": _try(lambda: open(OUTSIDE, "w").write("escaped")),
    "staging": _try(lambda: open("written-in-staging.txt", "w").write("fine")),
    "socket": _try(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)),
    "signal": _try(lambda: os.kill(os.getppid(), 0)),
    "env": sorted(os.environ),
    "cwd_on_path": os.getcwd() in sys.path or "" in sys.path,
}
try:
    found["daemon"] = daemon()
except OSError as exc:  # the import child starts threads only
    found["daemon"] = type(exc).__name__
raise RuntimeError("PROBE" + json.dumps(found))
'''
#: leaves a daemon behind: double-forked, a session of its own, holding the child's stdout and stderr; its pid
DAEMON = '''
import os, time

def daemon():
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(w, str(os.getpid()).encode())
            time.sleep(300)
            os._exit(0)
        os._exit(0)
    os.waitpid(middle, 0)
    os.close(w)
    return int(os.read(r, 32))
'''


def probe_package(tmp_path: Path, name: str, main: str) -> Path:
    """A package ``name`` under ``tmp_path/pkg`` whose ``__main__`` is ``main``: a module for a
    confined child to run (``python_path=[package.parent]``, ``read=[package]``)."""
    package = tmp_path / "pkg" / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(main)
    return package


def run_jobs_probe(tmp_path: Path, name: str, main: str, limits: ChildLimits) -> dict[str, Any]:
    """``main`` run as the PyTorch timing child runs (``each_job``: it may import kernelopt_mcp to
    hand out jobs), in ``tmp_path/staging``; the JSON object it printed last."""
    import kernelopt_mcp

    package = probe_package(tmp_path, name, main)
    ours = Path(kernelopt_mcp.__file__).resolve().parent
    staging = tmp_path / "staging"
    staging.mkdir()
    result = run_confined_python(name, [], staging=staging, python_path=[str(package.parent), str(ours.parent)],
                                 read=[str(package), str(ours)], limits=limits, each_job=True)
    assert result.returncode == 0, result.stderr_tail
    out: dict[str, Any] = json.loads(result.stdout.decode().strip().splitlines()[-1])
    out["stderr"] = result.stderr_tail
    return out


def stand_in_torch(directory: Path) -> Path:
    """A site directory holding a ``torch`` package of the few names the confined children use before
    the problem's code runs: its version, ``set_num_threads`` and ``overrides.TorchFunctionMode``."""
    (directory / "torch").mkdir(parents=True)
    (directory / "torch" / "__init__.py").write_text(
        '__version__ = "0.0+stand-in"\ndef set_num_threads(n):\n    pass\n')
    (directory / "torch" / "overrides.py").write_text(
        "class TorchFunctionMode:\n    def __enter__(self):\n        return self\n"
        "    def __exit__(self, *exc):\n        return False\n")
    return directory


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_without_torch_the_import_is_refused_and_a_problem_named_torch_never_runs(tmp_path: Path) -> None:
    ws = FakeWorkspace(tmp_path)
    ran = tmp_path / "ran.txt"
    problem = (f"open({str(ran)!r}, 'w').write('the problem ran as torch')\nclass Model:\n    pass\ndef get_inputs():\n"
               "    return []\n")
    with pytest.raises(RequestError, match=r"has no torch.*pip install torch"):
        create_torch_workload(ws, "torch", problem, allowed=True)
    assert not ran.exists(), "the problem was imported as torch"
    assert [p.name for p in ws.config.created_dir.iterdir() if not p.name.endswith(".lock")] == []


@needs_landlock
def test_the_import_child_is_confined_gets_no_secret_and_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    secret = tmp_path / "secret.txt"
    secret.write_text("OPENAI_API_KEY=sk-planted-file")
    outside = tmp_path / "escaped.txt"
    site = stand_in_torch(tmp_path / "site")
    ws = FakeWorkspace(tmp_path)
    problem = f"SECRET = {str(secret)!r}\nOUTSIDE = {str(outside)!r}\n{DAEMON}{PROBE}"
    start = time.monotonic()
    with pytest.raises(RequestError, match="PROBE") as caught:
        create_torch_workload(ws, "probe", problem, allowed=True, python_path=[str(site)], timeout_s=120)
    assert time.monotonic() - start < 120, "the server waited for the daemon"
    # the import wraps it in its own words
    found, _ = json.JSONDecoder().raw_decode(str(caught.value).split("PROBE", 1)[1])
    assert found["read"] == "PermissionError" and found["write"] == "PermissionError" and not outside.exists()
    assert found["staging"].startswith("ok")
    assert found["socket"] == "PermissionError" and found["signal"] == "PermissionError"
    assert not set(found["env"]) & set(SECRETS) and "sk-planted" not in str(caught.value)
    assert found["env"] and not found["cwd_on_path"]
    assert found["daemon"] == "PermissionError"  # threads only: no process to leave behind
    assert [p.name for p in ws.config.created_dir.iterdir() if not p.name.endswith(".lock")] == []


@needs_landlock
def test_a_problem_that_never_finishes_is_killed_at_the_deadline(tmp_path: Path) -> None:
    site = stand_in_torch(tmp_path / "site")
    ws = FakeWorkspace(tmp_path)
    endless = "import torch\nclass Model:\n    pass\ndef get_inputs():\n    return []\nwhile True:\n    pass\n"
    with pytest.raises(RequestError, match="did not finish within 5 s"):
        create_torch_workload(ws, "loop", endless, allowed=True, python_path=[str(site)], timeout_s=5)
    assert not (ws.config.created_dir / "loop").exists()


@needs_landlock
def test_run_confined_python_runs_a_module_that_writes_only_its_staging_directory(tmp_path: Path) -> None:
    """The runner on its own (a reference run will use it too): a module from a directory it may
    read, output on stdout, files in its staging directory, a refusal where a module is missing."""
    package = probe_package(tmp_path, "probe_mod",
        "import json, os, sys\nopen('out.txt', 'w').write(sys.argv[1])\n"
        "print(json.dumps({'home': os.environ['HOME'], 'tmp': os.environ['TMPDIR'], 'args': sys.argv[1:]}))\n"
    )
    staging = tmp_path / "staging"
    staging.mkdir()
    result = run_confined_python("probe_mod", ["hello"], staging=staging, python_path=[str(package.parent)],
                                 read=[str(package)], limits=ChildLimits(timeout_s=60))
    assert result.returncode == 0 and not result.timed_out, result.stderr_tail
    answer = json.loads(result.stdout)
    assert answer["args"] == ["hello"] and (staging / "out.txt").read_text() == "hello"
    assert answer["home"].startswith(str(staging.resolve()))
    # TMPDIR: a directory of its own that any user may reach (access(2) for a child's own uid), gone after
    assert answer["tmp"].startswith(f"{SYSTEM_TMP}/kernelopt-child-") and not Path(answer["tmp"]).exists()

    missing = run_confined_python("probe_mod", [], staging=staging, python_path=[str(package.parent)],
                                  read=[str(package)], requires=["no_such_module_here"])
    assert missing.missing == "no_such_module_here" and missing.refused and missing.returncode == 125
    off = run_confined_python("probe_mod", [], staging=staging, limits=ChildLimits(landlock=False))
    assert off.refused and "--unconfined-compiler" in off.refused and off.returncode is None
    assert sys.executable  # the child ran this interpreter


def fake_distribution(site: Path, name: str, requires: list[str], main: str = "") -> Path:
    """``name`` as ``pip install --target site`` leaves it: a package and its .dist-info."""
    module = name.replace("-", "_")
    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text("")
    if main:
        (site / module / "__main__.py").write_text(main)
    info = site / f"{module}-1.0.dist-info"
    info.mkdir()
    lines = [f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0"] + [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    files = ([str(f.relative_to(site)) for f in (site / module).iterdir()]
             + [f"{info.name}/METADATA", f"{info.name}/RECORD"])
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))
    return site


@needs_landlock
def test_requirements_installed_in_a_target_directory_reach_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on the GPU machine: the package and its requirements installed with ``pip install
    --target DIR`` and found through PYTHONPATH, which the child's ``python -I`` ignores. Its
    package directory alone leaves the child without its requirements (what failed there:
    "No module named 'pydantic'"); :func:`installed_requirements` names every directory, extras
    left out, and opens only the distributions' own files in them: a secret planted beside a
    package (metadata found in a checkout's working directory) stays closed."""
    main = ("import ko_probe_dep, os\nprint('imported', ko_probe_dep.__name__)\n"
            "try:\n    open(os.environ['KO_SECRET']).read()\n    print('secret read')\nexcept OSError as exc:\n"
            "    print('secret closed', type(exc).__name__)\n")
    top = fake_distribution(tmp_path / "site-a", "ko-probe-top",
                            ["ko-probe-dep>=1", "ko-probe-extra; extra == 'more'"], main=main)
    dep = fake_distribution(tmp_path / "site-b", "ko-probe-dep", [])
    extra = fake_distribution(tmp_path / "site-c", "ko-probe-extra", [])
    secret = top / ".env"
    secret.write_text("OPENAI_API_KEY=sk-planted-beside")
    for site in (top, dep, extra):
        monkeypatch.syspath_prepend(str(site))
    installed = installed_requirements("ko_probe_top")
    assert installed.path == (str(top.resolve()), str(dep.resolve()))
    assert (str(top.resolve() / "ko_probe_top") in installed.read
            and str(dep.resolve() / "ko_probe_dep") in installed.read)
    assert (not any(r.startswith(str(extra.resolve())) for r in installed.read)
            and str(secret.resolve()) not in installed.read)
    # this package's own: the installed distribution's name is not the package's (kernelopt)
    pydantic_home = Path(str(importlib.metadata.distribution("pydantic").locate_file(""))).resolve()
    assert str(pydantic_home) in installed_requirements("kernelopt_mcp").path
    assert str(pydantic_home / "pydantic") in installed_requirements("kernelopt_mcp").read
    staging = tmp_path / "staging"
    staging.mkdir()
    result = run_confined_python("ko_probe_top", [], staging=staging, python_path=installed.path, read=installed.read,
                                 env={"KO_SECRET": str(secret)}, limits=ChildLimits(timeout_s=60))
    assert result.returncode == 0, result.stderr_tail
    assert result.stdout.split(b"\n")[:2] == [b"imported ko_probe_dep", b"secret closed PermissionError"], result.stdout
    alone = run_confined_python("ko_probe_top", [], staging=staging, python_path=[str(top)],
                                read=[str(top / "ko_probe_top")], limits=ChildLimits(timeout_s=60))
    assert alone.returncode != 0 and "No module named 'ko_probe_dep'" in alone.stderr_tail


@pytest.mark.anyio
@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
async def test_the_create_workload_tool_says_torch_is_missing(tmp_path: Path) -> None:
    from fakegpu import in_memory_server
    from test_torch_workspace import _config

    ran = tmp_path / "ran.txt"
    problem = f"open({str(ran)!r}, 'w').write('ran')\nclass Model:\n    pass\ndef get_inputs():\n    return []\n"
    async with in_memory_server(_config(tmp_path, allow=True)) as (client, _):
        r = await client.call_tool("create_workload", {"spec": {"name": "torch"}, "torch_problem": problem})
        assert r.is_error and "has no torch" in r.content[0].text
        listed = await client.call_tool("list_workloads", {})  # the server keeps answering
        assert not listed.is_error
    assert not ran.exists()


@needs_landlock
def test_a_gpu_child_names_its_own_threads_and_makes_an_unconnected_unix_socket_only(tmp_path: Path) -> None:
    """What the CUDA driver needs as it starts, and no more (on the H200 cuInit failed with error 304
    without them): a GPU child may write its own threads' names (/proc/self/task/<tid>/comm) but
    no other process's (/proc/<parent>/comm) nor /proc/sys, and may make a UNIX socket that cannot
    connect to a listener by path; without gpu neither."""
    package = probe_package(tmp_path, "gpu_probe",
        "import json, os, socket, sys, threading\n"
        "out = {}\n"
        "def attempt(what, fn):\n"
        "    try:\n        fn(); out[what] = 'ok'\n    except OSError as exc:\n        out[what] = exc.errno\n"
        "def name_thread():\n"
        "    attempt('own thread', lambda: open(f'/proc/self/task/{threading.get_native_id()}/comm', "
        "'w').write('ko-test'))\n"
        "t = threading.Thread(target=name_thread); t.start(); t.join()\n"
        "attempt('parent', lambda: open(f'/proc/{os.getppid()}/comm', 'w').write('x'))\n"
        "attempt('proc sys', lambda: open('/proc/sys/kernel/hostname', 'w').write('x'))\n"
        "attempt('unix', lambda: socket.socket(socket.AF_UNIX))\n"
        "attempt('connect', lambda: socket.socket(socket.AF_UNIX).connect(sys.argv[1]))\n"
        "print(json.dumps(out))\n"
    )
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "agent.sock"))
    listener.listen()
    staging = tmp_path / "staging"
    staging.mkdir()
    answers = {}
    try:
        for gpu in (True, False):
            result = run_confined_python("gpu_probe", [str(tmp_path / "agent.sock")], staging=staging,
                                         python_path=[str(package.parent)], read=[str(package)],
                                         limits=ChildLimits(timeout_s=60), gpu=gpu)
            assert result.returncode == 0, result.stderr_tail
            answers[gpu] = json.loads(result.stdout)
    finally:
        listener.close()
    assert answers[True]["own thread"] == "ok" and answers[True]["unix"] == "ok", answers
    assert answers[True]["connect"] == errno.ENOENT and answers[True]["parent"] == errno.EACCES, answers
    assert answers[True]["proc sys"] in (errno.EACCES, errno.EROFS), answers
    assert answers[False]["own thread"] == errno.EACCES and answers[False]["unix"] == errno.EPERM, answers


@needs_landlock
def test_a_confined_child_does_not_outlive_a_caller_killed_outright(tmp_path: Path) -> None:
    """A caller SIGKILLed mid-run (a CLI run out of its time limit) cannot reap its children: the
    supervisor sees its parent gone within a second and kills the whole confined tree, long before
    its own deadline."""
    import signal
    import subprocess
    import time

    package = probe_package(tmp_path, "sleeper", "import os, time\nopen('pid', 'w').write(str(os.getpid()))\n"
                            "time.sleep(1000)\n")
    staging = tmp_path / "staging"
    staging.mkdir()
    caller = subprocess.Popen([sys.executable, "-c", (
        "from pathlib import Path\nfrom kernelopt_mcp.confined_python import ChildLimits, run_confined_python\n"
        f"run_confined_python('sleeper', [], staging=Path({str(staging)!r}), python_path=[{str(package.parent)!r}], "
        f"read=[{str(package)!r}], limits=ChildLimits(timeout_s=600))\n")])
    try:
        deadline = time.monotonic() + 60
        while not (staging / "pid").is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        child = int((staging / "pid").read_text())
        os.kill(caller.pid, signal.SIGKILL)
        caller.wait()

        def alive() -> list[int]:
            return [int(d) for d in os.listdir("/proc") if d.isdigit() and _cmdline(int(d)).find(str(staging)) >= 0]

        deadline = time.monotonic() + 15
        while (alive() or Path(f"/proc/{child}").exists()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not Path(f"/proc/{child}").exists() and alive() == [], "the confined tree outlived its caller"
    finally:
        caller.kill()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


JOBS = '''
import json, os, signal, sys, time
from pathlib import Path
from kernelopt_mcp._confined_child import run_confined_job

staging = Path.cwd()
jobs = {name: staging / name for name in ("hostile", "slow", "raises", "honest")}
for d in jobs.values():
    d.mkdir()
(staging / "answer.json").write_text("the parent's")


def attempt(tries, what, fn):
    try:
        fn()
        tries[what] = "ok"
    except OSError as exc:
        tries[what] = exc.errno


def hostile():
    tries = {}
    attempt(tries, "write another job's answer", lambda: (jobs["honest"] / "result.txt").write_text("faked"))
    attempt(tries, "write the parent's answer", lambda: (staging / "answer.json").write_text("faked"))
    attempt(tries, "read the parent's answer", lambda: (staging / "answer.json").read_text())
    attempt(tries, "signal the parent", lambda: os.kill(os.getppid(), signal.SIGKILL))
    attempt(tries, "own directory", lambda: (jobs["hostile"] / "scratch").write_text("fine"))
    if os.fork() == 0:  # a daemon left behind, to fake the next job's answer once it has run
        os.setsid()
        while True:
            try:
                (jobs["honest"] / "result.txt").write_text("faked by a daemon")
            except OSError:
                pass
            time.sleep(0.01)
    (jobs["hostile"] / "tries.json").write_text(json.dumps(tries))


def slow():
    while True:
        pass


def raises():
    raise RuntimeError("the job's own error")


def honest():
    (jobs["honest"] / "result.txt").write_text("its own")
    (jobs["honest"] / "home.txt").write_text(os.environ["HOME"] + " " + os.environ["TMPDIR"])


def children():
    found = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1] == str(os.getpid()):
                found.append(int(pid))
        except OSError:
            pass
    return found


out = {"hostile": run_confined_job(str(jobs["hostile"]), hostile, 30), "left after hostile": children()}
began = time.monotonic()
out["slow"] = run_confined_job(str(jobs["slow"]), slow, 1.0)
out["slow seconds"] = time.monotonic() - began
out["raises"] = run_confined_job(str(jobs["raises"]), raises, 30)
out["honest"] = run_confined_job(str(jobs["honest"]), honest, 30)
time.sleep(0.2)
out["tries"] = json.loads((jobs["hostile"] / "tries.json").read_text())
out["result"] = (jobs["honest"] / "result.txt").read_text()
out["home"] = (jobs["honest"] / "home.txt").read_text()
out["answer"] = (staging / "answer.json").read_text()
out["left"] = children()
print(json.dumps(out))
'''


@needs_landlock
def test_each_job_runs_confined_in_its_own_process_and_cannot_reach_another(tmp_path: Path) -> None:
    """run_confined_job, as the PyTorch timing child runs a batch of problems: a job writes only its
    own directory (not another job's, not its parent's answer, which it cannot even read), cannot
    signal its parent, and what it leaves running is killed before the next job starts, so a
    daemon cannot fake the next job's answer; a job past its deadline is killed (None); one that
    raises ends alone (status 1); the next still runs, with HOME and TMPDIR inside its directory."""
    out = run_jobs_probe(tmp_path, "jobs_probe", JOBS, ChildLimits(timeout_s=90))
    staging = tmp_path / "staging"
    tries = out["tries"]
    assert tries["own directory"] == "ok", tries
    assert (tries["write another job's answer"] == errno.EACCES
            and tries["write the parent's answer"] == errno.EACCES), tries
    assert tries["read the parent's answer"] == errno.EACCES and tries["signal the parent"] == errno.EPERM, tries
    assert out["hostile"] == 0 and out["left after hostile"] == [] and out["left"] == []
    assert out["slow"] is None and out["slow seconds"] < 10
    assert out["raises"] == 1 and "the job's own error" in out["stderr"]
    assert out["honest"] == 0 and out["result"] == "its own" and out["answer"] == "the parent's"
    home, tmp = out["home"].split()
    assert home.startswith(str((staging / "honest").resolve()))
    assert tmp.startswith(f"{SYSTEM_TMP}/kernelopt-child-") and not Path(tmp).exists()


PARALLEL_JOBS = """
import json, os, time
from pathlib import Path
from kernelopt_mcp._confined_child import run_confined_jobs

staging = Path.cwd()
names = ["a", "b", "c", "stuck"]
for name in names:
    (staging / name).mkdir()


def job(name):
    def work():
        (staging / name / "span.json").write_text(json.dumps([time.monotonic()]))
        if name == "a":  # leaves a process behind, and tries another job's directory
            if os.fork() == 0:
                while True:
                    time.sleep(0.05)
            try:
                (staging / "b" / "span.json").write_text("faked")
            except OSError as exc:
                (staging / "a" / "tried.txt").write_text(str(exc.errno))
        while name == "stuck":
            pass
        time.sleep(0.5)
        (staging / name / "span.json").write_text(json.dumps([json.loads((staging / name / "span.json").read_text())[0],
                                                              time.monotonic()]))
    return work


began = time.monotonic()
statuses = run_confined_jobs([(str(staging / n), job(n)) for n in names], 2.0, parallel=3)
out = {"statuses": statuses, "seconds": time.monotonic() - began,
       "spans": {n: json.loads((staging / n / "span.json").read_text()) for n in names},
       "tried": (staging / "a" / "tried.txt").read_text()}
def parent_of(pid):  # None once it has exited (between the listing and the read: other processes come and go)
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
    except OSError:
        return None

out["children"] = [p for p in os.listdir("/proc") if p.isdigit() and parent_of(p) == str(os.getpid())]
weighed = ["x", "y", "z"]  # weights 2, 2, 1 within a capacity of 3: x and z at once, y after x
for name in weighed:
    (staging / name).mkdir()
run_confined_jobs([(str(staging / n), job(n)) for n in weighed], 10.0, parallel=3, weights=[2, 2, 1], capacity=3)
out["weighed"] = {n: json.loads((staging / n / "span.json").read_text()) for n in weighed}
print(json.dumps(out))
"""


@needs_landlock
def test_confined_jobs_run_side_by_side_each_to_itself(tmp_path: Path) -> None:
    """run_confined_jobs with parallel 3 (the timing child compiles several problems at once): the
    first three run at the same time, the fourth when one ends; each writes only its own directory;
    one past its deadline is killed (None); what any left running is killed once all have ended.
    With weights (the GPU memory a problem holds) the jobs at once stay within the capacity."""
    out = run_jobs_probe(tmp_path, "parallel_probe", PARALLEL_JOBS, ChildLimits(timeout_s=90))
    spans = out["spans"]
    assert out["statuses"] == [0, 0, 0, None], out
    assert spans["b"][0] < spans["a"][1] and spans["c"][0] < spans["a"][1]  # a, b and c at once
    assert spans["stuck"][0] >= min(spans[n][1] for n in "abc") - 0.05  # the fourth once one had ended
    assert out["tried"] == str(errno.EACCES) and len(spans["b"]) == 2  # b's own, a could not write it
    assert out["children"] == [] and out["seconds"] < 10, out
    x, y, z = (out["weighed"][n] for n in "xyz")
    assert z[0] < x[1] and y[0] >= x[1] - 0.05, out["weighed"]  # within the capacity: x with z, y once x ended


@needs_landlock
def test_path_holds_only_what_the_child_may_run(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A program looked up by name in a confined child is one it may run, or not found
    (FileNotFoundError, which torch.compile handles when it asks for ``nvcc --version``), never
    found and refused (PermissionError: every torch.compile failed so on the H100, nvcc being on
    PATH but not executable there); and a dynamically linked program it may run does run (the
    loader is executable too: without it, g++ failed torch.compile's CPU code with EACCES)."""
    import shutil
    import tempfile

    # where programs lie (a Python installation): a directory anyone may search. A root child runs
    # under a uid of its own (sandbox.limit_tasks), for which access(2) (shutil.which) answers as
    # for any user: inside pytest's 0700 tmp_path it would find nothing
    tools = Path(tempfile.mkdtemp(prefix="ko-tools-"))
    tools.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(tools, ignore_errors=True))
    allowed, other = tools / "allowed", tools / "other"
    for d, tool in ((allowed, "tool_a"), (other, "tool_b")):
        d.mkdir()
        shutil.copy("/bin/true", d / tool)  # dynamically linked
    package = probe_package(tmp_path, "path_probe",
        "import json, shutil, subprocess\n"
        "def run(tool):\n    try:\n        return subprocess.run([tool]).returncode\n    except OSError as exc:\n"
        "        return type(exc).__name__\n"
        "print(json.dumps({'a': shutil.which('tool_a'), 'b': shutil.which('tool_b'), 'run a': run('tool_a'),"
        " 'run b': run('tool_b')}))\n"
    )
    staging = tmp_path / "staging"
    staging.mkdir()
    result = run_confined_python("path_probe", [], staging=staging, python_path=[str(package.parent)],
                                 read=[str(package)], execute=[str(allowed)],
                                 env={"PATH": f"{allowed}{os.pathsep}{other}"},
                                 limits=ChildLimits(timeout_s=60))
    assert result.returncode == 0, result.stderr_tail
    found = json.loads(result.stdout)
    assert found == {"a": str(allowed / "tool_a"), "b": None, "run a": 0, "run b": "FileNotFoundError"}, found


def test_what_a_child_wrote_is_read_or_moved_only_as_plain_files(tmp_path: Path) -> None:
    """A confined child runs a client's code and may leave, instead of its answer or its outputs, a
    symbolic link to a file its parent can read (a key, a token), a hard link, or a FIFO nobody
    writes (the parent would wait forever): the parent reads and moves plain files only."""
    from kernelopt_mcp.confined_python import check_plain_tree, read_child_file

    secret = tmp_path / "secret.json"
    secret.write_text('{"error": "planted-secret-51c2"}')
    out = tmp_path / "staging"
    (out / "sub").mkdir(parents=True)
    (out / "answer.json").write_text('{"ok": true}')
    (out / "sub" / "0.bin").write_bytes(b"\0" * 16)
    assert json.loads(read_child_file(out / "answer.json")) == {"ok": True}
    check_plain_tree(out)  # directories and regular files: fine
    with pytest.raises(OSError, match="more than"):
        read_child_file(out / "sub" / "0.bin", max_bytes=8)

    (out / "link.json").symlink_to(secret)
    os.mkfifo(out / "fifo.json")
    os.link(secret, out / "hard.json")
    for name in ("link.json", "fifo.json", "hard.json"):
        with pytest.raises(OSError) as caught:
            read_child_file(out / name)
        assert "planted" not in str(caught.value), name
    for planted in ("link.json", "fifo.json", "hard.json"):
        tree = tmp_path / f"tree-{planted}"
        (tree / "sub").mkdir(parents=True)
        os.rename(out / planted, tree / "sub" / planted)
        with pytest.raises(OSError, match="not a plain file"):
            check_plain_tree(tree)
    (tmp_path / "dirlink").symlink_to(out, target_is_directory=True)
    with pytest.raises(OSError, match="not a directory"):
        check_plain_tree(tmp_path / "dirlink")
