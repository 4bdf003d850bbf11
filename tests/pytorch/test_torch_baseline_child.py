"""The PyTorch timing child's own code in real processes, no stand-in (torch_baseline.py's parent
side is tested with one in test_torch_baseline.py): the child where torch sees no GPU, the
environment each problem's process gets, torch.compile inside its confinement on the CPU, the L2
flush on torch's own signatures, and what the child keeps of a problem's answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_torch_baseline import PROBLEM

from kernelopt_mcp.confined_python import ChildLimits
from kernelopt_mcp.sandbox import landlock_abi
from kernelopt_mcp.torch_baseline import measure_baselines

# --- the real child, where torch sees no GPU -----------------------------------------------------


def test_the_real_child_refuses_cleanly_where_torch_sees_no_cuda_device(tmp_path: Path) -> None:
    """The confined child itself (gpu=True: the NVIDIA device files, the driver's /proc and /sys,
    triton's ptxas and the C compiler added), with torch from wherever this process found it."""
    torch = pytest.importorskip("torch",
                                reason="torch is not installed (pip install torch): PyTorch problems cannot be run")
    if torch.cuda.is_available():
        pytest.skip("torch sees a CUDA device here: tests/gpu/test_torch_baseline_gpu.py times it")
    site = str(Path(torch.__file__).resolve().parent.parent)
    limits = ChildLimits(timeout_s=120, landlock=landlock_abi() >= 1, accept_unconfined=True)
    report = measure_baselines(PROBLEM, [("perf", {"n": 4096})], device=0, python_path=[site], limits=limits,
                               workdir=tmp_path)
    assert report.blocked and report.cases == []
    assert report.note is not None and "could not start CUDA" in report.note and torch.__version__ in report.note
    assert len(report.note.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_problems_process_keeps_its_caches_and_tells_triton_where_the_driver_is(tmp_path: Path) -> None:
    """Each problem's process: torch.compile's, triton's and CUDA's caches in its own directory, and
    TRITON_LIBCUDA_PATH the directory of the driver library it has mapped (triton would otherwise
    run ``ldconfig -p``, which Ubuntu makes a script that runs a program the job may not). A
    library named libcuda.so.1 (a copy of libm here) stands in for the driver."""
    import ctypes.util
    import os
    import subprocess
    import sys

    libm = ctypes.util.find_library("m")
    assert libm is not None
    found = next(p for p in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
                             "/lib", "/usr/lib")
                 if (Path(p) / libm).exists())
    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "libcuda.so.1").write_bytes((Path(found) / libm).read_bytes())
    script = (
        "import ctypes, json, os, sys\nfrom pathlib import Path\n"
        "from kernelopt_mcp._torch_baseline_child import _job_environment\n"
        "if len(sys.argv) > 2:\n    ctypes.CDLL(sys.argv[2])\n"
        "_job_environment(Path(sys.argv[1]))\n"
        "print(json.dumps({k: os.environ.get(k) for k in ('TORCHINDUCTOR_CACHE_DIR', 'TRITON_CACHE_DIR', "
        "'CUDA_CACHE_PATH', 'TRITON_LIBCUDA_PATH')}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_LIBCUDA_PATH"}
    job = tmp_path / "job_0"
    mapped = subprocess.run([sys.executable, "-c", script, str(job), str(driver / "libcuda.so.1")], capture_output=True,
                            text=True, timeout=60, env=env)
    alone = subprocess.run([sys.executable, "-c", script, str(job)], capture_output=True, text=True,
                           timeout=60, env=env)
    assert mapped.returncode == 0 and alone.returncode == 0, mapped.stderr + alone.stderr
    got = json.loads(mapped.stdout)
    assert got == {"TORCHINDUCTOR_CACHE_DIR": str(job / ".inductor"), "TRITON_CACHE_DIR": str(job / ".triton"),
                   "CUDA_CACHE_PATH": str(job / ".nv"), "TRITON_LIBCUDA_PATH": str(driver)}, got
    assert json.loads(alone.stdout)["TRITON_LIBCUDA_PATH"] is None


def test_torch_compile_runs_in_the_timing_childs_confinement_on_the_cpu(tmp_path: Path) -> None:
    """torch.compile inside the confinement the timing child's problems get (run_torch_child with
    compiler_access), here on the CPU, where inductor builds C++ with g++: it compiles and runs.
    Found on the H100: every compile failed there, once on a program found on PATH but not
    executable (nvcc) and once on the dynamic loader not executable (every compiler refused)."""
    torch = pytest.importorskip("torch",
                                reason="torch is not installed (pip install torch): PyTorch problems cannot be run")
    from test_torch_child import probe_package

    from kernelopt_mcp.confined_python import run_torch_child
    from kernelopt_mcp.torch_baseline import compiler_access

    package = probe_package(tmp_path, "compile_probe",
        "import json, torch\n"
        "f = torch.compile(lambda x: torch.relu(x) * 2 + 1)\n"
        "x = torch.randn(1000)\n"
        "print(json.dumps({'same': bool(torch.equal(f(x), torch.relu(x) * 2 + 1))}))\n"
    )
    site = str(Path(torch.__file__).resolve().parent.parent)
    read, execute = compiler_access([site])
    staging = tmp_path / "staging"
    staging.mkdir()
    result = run_torch_child("compile_probe", [], staging=staging, python_path=[str(package.parent), site],
                             read=[str(package), *read], execute=execute,
                             limits=ChildLimits(timeout_s=600, landlock=landlock_abi() >= 1, accept_unconfined=True),
                             env={"TORCHINDUCTOR_COMPILE_THREADS": "1",
                                  "TORCHINDUCTOR_CACHE_DIR": str(staging / ".inductor")})
    assert result.returncode == 0, result.stderr_tail
    assert json.loads(result.stdout.decode().strip().splitlines()[-1]) == {"same": True}, result.stderr_tail


def test_the_nvidia_tools_torch_and_triton_ship_run_in_the_timing_childs_confinement(tmp_path: Path) -> None:
    """Every ptxas beside the installed torch and triton (inductor points triton at torch/bin/ptxas
    where it exists) runs in the confinement the timing child's problems get. Found on the H100:
    every torch.compile failed with `Permission denied: .../torch/bin/ptxas`."""
    torch = pytest.importorskip("torch",
                                reason="torch is not installed (pip install torch): PyTorch problems cannot be run")
    from test_torch_child import probe_package

    from kernelopt_mcp.confined_python import run_torch_child
    from kernelopt_mcp.torch_baseline import TOOL_DIRS, compiler_access

    site = Path(torch.__file__).resolve().parent.parent
    tools = [str(site / d / "ptxas") for d in TOOL_DIRS if (site / d / "ptxas").is_file()]
    if not tools:
        pytest.skip(f"neither {' nor '.join(map(str, TOOL_DIRS))} holds a ptxas beside this torch ({site})")
    package = probe_package(tmp_path, "tool_probe",
        "import json, subprocess, sys\n"
        "ran = {}\n"
        "for tool in sys.argv[1:]:\n"
        "    try:\n"
        "        ran[tool] = subprocess.run([tool, '--version'], capture_output=True).returncode\n"
        "    except OSError as e:\n"
        "        ran[tool] = str(e)\n"
        "print(json.dumps(ran))\n"
    )
    read, execute = compiler_access([str(site)])
    staging = tmp_path / "staging"
    staging.mkdir()
    result = run_torch_child("tool_probe", tools, staging=staging, python_path=[str(package.parent), str(site)],
                             read=[str(package), *read], execute=execute,
                             limits=ChildLimits(timeout_s=120, landlock=landlock_abi() >= 1, accept_unconfined=True))
    assert result.returncode == 0, result.stderr_tail
    assert json.loads(result.stdout.decode().strip().splitlines()[-1]) == dict.fromkeys(tools, 0)


def test_the_timing_childs_l2_flush_runs_on_torch() -> None:
    """The flush the timing child runs before every measured call (a read of twice the L2 size into a
    one-element sink), here on the CPU: torch's own signatures, which a stand-in child never calls (a
    `sum(..., out=)` torch refuses without `dim` made every baseline on the H100 a note)."""
    torch = pytest.importorskip("torch",
                                reason="torch is not installed (pip install torch): PyTorch problems cannot be run")
    from kernelopt_mcp._torch_baseline_child import _Flush

    flush = _Flush(torch, torch.device("cpu"), 4096)
    assert flush.buffer is not None and flush.buffer.numel() * 4 >= 2 * 4096
    flush.buffer.fill_(3)
    flush()
    assert int(flush.sink) == 3 * flush.buffer.numel()
    assert _Flush(torch, torch.device("cpu"), 0).buffer is None  # no L2 flush asked: nothing allocated


def test_a_problems_own_answer_is_cut_to_the_fields_and_cases_asked_for() -> None:
    """Each problem's process writes its own answer (the problem's code ran there, so it may say
    anything): the timing child keeps one record per case it asked for, times only where every one
    is a positive finite number, notes as bounded strings, and nothing else; a process that left
    no answer, or a file that is not one, counts as no case at all."""
    from kernelopt_mcp._torch_baseline_child import problem_entry

    problem = {"label": "p.py", "cases": [{"name": "perf", "values": {}}, {"name": "small", "values": {}}]}
    raw = {
        "cases": [
            {"name": "perf", "eager": {"times_ms": [0.5, 0.25]}, "eager_note": None, "compile": {"times_ms": [0.1, -1]},
             "compile_note": "x" * 5000, "compile_s": "soon", "extra": "dropped"},
            {"name": "perf", "eager": {"times_ms": [1e-9]}},  # a second record of the same case
            {"name": "not asked", "eager": {"times_ms": [0.01]}},
            "not a record",
            {"name": "small", "eager": {"times_ms": [float("nan")]}, "compile": {"times_ms": [True]}, "compile_s": 2.5},
        ],
        "error": 42, "finished": "yes", "device_name": "faked", "cuda_s": 1.25,
    }
    entry = problem_entry(raw, problem)
    assert (entry["label"] == "p.py" and entry["error"] is None and entry["finished"] is False
            and "device_name" not in entry)
    assert entry["cuda_s"] == 1.25
    perf, small = entry["cases"]
    assert perf == {"name": "perf", "eager": {"times_ms": [0.5, 0.25]}, "eager_note": None, "compile": None,
                    "compile_note": "x" * 400, "compile_s": None}
    assert (small["name"] == "small" and small["eager"] is None and small["compile"] is None
            and small["compile_s"] == 2.5)
    assert problem_entry({}, problem) == {"label": "p.py", "cases": [], "error": None, "finished": False,
                                          "cuda_s": None}
    assert problem_entry({"cases": {"perf": 1}, "finished": True}, problem)["cases"] == []


AHEAD = '''
import json, sys, torch
from pathlib import Path
from kernelopt_mcp._confined_child import run_confined_jobs
from kernelopt_mcp._torch_baseline_child import (_compile_case, _job_environment, ahead_compile_seconds,
                                                 forget_autotuning, WARM_FILE)
from kernelopt_mcp.torch_problem import parse_problem

job = Path.cwd() / "job"
job.mkdir()
source = parse_problem(Path(sys.argv[1]).read_text(), "problem.py")
case = {"name": "perf", "values": {"n": 4096}}


def compile_here(name):
    def work():
        _job_environment(job)
        seconds = _compile_case(torch, source, case, torch.device("cpu"), 0)
        from torch._dynamo.utils import counters
        hits = dict(counters["inductor"])
        (job / name).write_text(json.dumps({"cases": [{"name": "perf", "compile_s": seconds}], "counters": hits}))
    return work


first = run_confined_jobs([(str(job), compile_here(WARM_FILE))], 600)
second = run_confined_jobs([(str(job), compile_here("again.json"))], 600)
(job / "x.best_config").write_text("{}")
(job / "sub").mkdir()
(job / "sub" / "y.best_config").write_text("{}")
forget_autotuning(job)
print(json.dumps({"statuses": first + second, "ahead": ahead_compile_seconds(job),
                  "first": json.loads((job / WARM_FILE).read_text())["counters"],
                  "second": json.loads((job / "again.json").read_text())["counters"],
                  "left": sorted(str(p.relative_to(job)) for p in job.rglob("*.best_config"))}))
'''


def test_a_problem_compiled_ahead_is_loaded_not_compiled_again_by_its_timing_job(tmp_path: Path) -> None:
    """The timing child's compile-ahead phase, here on the CPU: a problem's case compiled in one
    confined job of its directory is found in torch.compile's caches by the next job of the same
    directory (inductor's FX graph cache hits: what the timing job then loads instead of compiling
    alone); the first job's compile seconds are read back per case; autotuning results made while
    the problems shared the GPU are removed before any timing."""
    torch = pytest.importorskip("torch",
                                reason="torch is not installed (pip install torch): PyTorch problems cannot be run")
    from test_torch_child import probe_package

    from kernelopt_mcp.confined_python import run_torch_child
    from kernelopt_mcp.torch_baseline import compiler_access

    package = probe_package(tmp_path, "ahead_probe", AHEAD)
    (tmp_path / "problem.py").write_text(PROBLEM)
    site = str(Path(torch.__file__).resolve().parent.parent)
    read, execute = compiler_access([site])
    staging = tmp_path / "staging"
    staging.mkdir()
    result = run_torch_child("ahead_probe", [str(tmp_path / "problem.py")], staging=staging,
                             python_path=[str(package.parent), site], read=[str(package), str(tmp_path), *read],
                             execute=execute, each_job=True,
                             limits=ChildLimits(timeout_s=900, landlock=landlock_abi() >= 1, accept_unconfined=True),
                             env={"TORCHINDUCTOR_COMPILE_THREADS": "1"})
    assert result.returncode == 0, result.stderr_tail
    out = json.loads(result.stdout.decode().strip().splitlines()[-1])
    assert out["statuses"] == [0, 0], result.stderr_tail
    assert out["first"].get("fxgraph_cache_miss", 0) >= 1 and not out["first"].get("fxgraph_cache_hit"), out
    assert out["second"].get("fxgraph_cache_hit", 0) >= 1 and not out["second"].get("fxgraph_cache_miss"), out
    assert list(out["ahead"]) == ["perf"] and out["ahead"]["perf"] > 0 and out["left"] == []


def test_autotuning_results_are_forgotten_within_a_bound_and_links_are_never_followed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """forget_autotuning walks a directory a problem wrote: it removes ``*.best_config`` files (a link
    so named is removed, its target kept), never descends a linked directory, and stops after a
    bounded number of names (a problem that made millions keeps only its own autotuning)."""
    from kernelopt_mcp import _torch_baseline_child as child

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept.best_config").write_text("{}")
    job = tmp_path / "job"
    (job / "a").mkdir(parents=True)
    (job / "a" / "k.best_config").write_text("{}")
    (job / "a" / "k.py").write_text("")
    (job / "link.best_config").symlink_to(outside / "kept.best_config")
    (job / "linked_dir").symlink_to(outside, target_is_directory=True)
    child.forget_autotuning(job)
    assert not (job / "a" / "k.best_config").exists() and (job / "a" / "k.py").exists()
    assert not (job / "link.best_config").is_symlink() and (outside / "kept.best_config").exists()
    deep = tmp_path / "deep"
    (deep / "z_last").mkdir(parents=True)
    for i in range(20):
        (deep / f"f{i}").write_text("")
    (deep / "z_last" / "x.best_config").write_text("{}")
    monkeypatch.setattr(child, "MAX_CACHE_NAMES", 10)
    child.forget_autotuning(deep)
    assert (deep / "z_last" / "x.best_config").exists()  # past the bound: left


def test_the_compile_seconds_a_problem_left_are_read_only_from_a_plain_file(tmp_path: Path) -> None:
    """A problem compiled ahead writes its own warm.json, and may leave a FIFO (its parent would wait
    forever) or a link to a file the parent can read there instead: neither is read."""
    import os

    from kernelopt_mcp._torch_baseline_child import WARM_FILE, ahead_compile_seconds

    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"cases": [{"name": "perf", "compile_s": 1.0}]}))
    fifo, link, plain = tmp_path / "fifo", tmp_path / "link", tmp_path / "plain"
    for d in (fifo, link, plain):
        d.mkdir()
    os.mkfifo(fifo / WARM_FILE)
    (link / WARM_FILE).symlink_to(secret)
    (plain / WARM_FILE).write_text(secret.read_text())
    assert ahead_compile_seconds(fifo) == {} and ahead_compile_seconds(link) == {}
    assert ahead_compile_seconds(plain) == {"perf": 1.0}
