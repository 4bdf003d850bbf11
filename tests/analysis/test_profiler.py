"""The profiler without a GPU: ncu's command line, its error paths and the plumbing around it,
with a stub `ncu` (below) in front of the pretend harness of tests/fakegpu.py.

The stub runs the profiled command for real (the pretend harness computes c = a + b) and then
behaves as asked by KO_STUB_NCU: ok (writes a report), perm (prints Nsight Compute's real
ERR_NVGPUCTRPERM message and exits 1), hang, or badmetric (refuses --metrics once). On
`--import` it prints the CSV named by KO_STUB_CSV. Parsing of real exports is tested in
tests/analysis/test_ncu_report.py against exports recorded on an H200.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakegpu import ADD_LAUNCH, kernel, write_harness, write_tiny_workload

from kernelopt_mcp import Candidate, HarnessProcess, Session, Settings, profiler
from kernelopt_mcp.cli import main
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.errors import (
    CountersNotPermitted,
    ProfiledKernelFailed,
    ProfilerTimeout,
    ToolchainNotFound,
)
from kernelopt_mcp.evaluation.device import device_info
from kernelopt_mcp.evaluation.evaluate import prepare
from kernelopt_mcp.launch import LaunchSpec
from kernelopt_mcp.profiler import ProfileOptions, find_ncu, profile_case

STUB_NCU = r'''
import json, os, subprocess, sys, time
args = sys.argv[1:]
mode = os.environ.get("KO_STUB_NCU", "ok")
with open(os.environ["KO_STUB_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")
if args[:1] == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2099 NVIDIA Corporation\nVersion 2099.1.0.0 (build stub)")
    sys.exit(0)
if args[:1] == ["--import"]:
    sys.stdout.write(open(os.environ["KO_STUB_CSV"]).read())
    sys.exit(0)
if mode == "hang":
    time.sleep(3600)
if mode == "badmetric" and "--metrics" in args:
    print("==ERROR== Failed to find metric regex:^smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct$")
    sys.exit(1)
i = args.index("run")
harness, request = args[i - 1], args[i + 1]
line = json.dumps(json.load(open(request))) + "\n"
print(f"==PROF== Connected to process {os.getpid()} ({harness})", flush=True)
if mode == "perm":
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
          "Counters on the target device 0. For instructions on enabling permissions and to get more "
          "information see https://developer.nvidia.com/ERR_NVGPUCTRPERM", flush=True)
proc = subprocess.run([harness, "serve"], input=line, capture_output=True, text=True)
sys.stdout.write(proc.stdout)
if mode == "perm":
    sys.exit(1)
if proc.returncode == 0:
    report = args[args.index("-o") + 1] + ".ncu-rep"
    open(report, "wb").write(b"stub report")
    print(f"==PROF== Disconnected from process\n==PROF== Report: {report}", flush=True)
sys.exit(proc.returncode)
'''  # noqa: E501

# The shape of an ncu raw-page export (header, units row, one kernel); the values only feed
# the plumbing tests here and are not measurements.
STUB_CSV = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
    '"Device","CC","device__attribute_display_name","gpu__time_duration.sum","launch__block_size",'
    '"launch__registers_per_thread","dram__bytes_read.sum","sm__warps_active.avg.pct_of_peak_sustained_active"\n'
    '"","","","","","","","","","","","","nsecond","","register/thread","byte","%"\n'
    '"0","4242","kernelopt-harness","127.0.0.1","vector_add","1","7","(64, 1, 1)","(64, 1, 1)","0","9.0",'
    '"Stub GPU","2,048","64","16","49,152","n/a"\n'
)


@pytest.fixture
def stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "stub_ncu.py"
    script.write_text(STUB_NCU)
    ncu = tmp_path / "bin" / "ncu"
    ncu.parent.mkdir()
    ncu.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    ncu.chmod(0o755)
    (tmp_path / "stub.csv").write_text(STUB_CSV)
    monkeypatch.setenv("KO_STUB_CSV", str(tmp_path / "stub.csv"))
    monkeypatch.setenv("KO_STUB_LOG", str(tmp_path / "stub_calls.jsonl"))
    monkeypatch.setenv("KO_STUB_NCU", "ok")
    return ncu


@pytest.fixture
def fake_harness(tmp_path: Path) -> Path:
    return write_harness(tmp_path, "fake")


@pytest.fixture
def evaluator(tmp_path: Path, fake_harness: Path) -> Iterator[Session]:
    wl = find_workload(write_tiny_workload(tmp_path / "extra") / "tiny_add", Settings())
    with HarnessProcess(fake_harness, 0) as proc, Session(wl, proc, device_info(fake_harness, 0),
                                                          workdir=tmp_path / "work") as ev:
        yield ev


def candidate(mode: str = "") -> Candidate:
    return Candidate(kernel(mode), LaunchSpec.model_validate(ADD_LAUNCH), [], f"k{mode.lower()}")


def calls(tmp_path: Path) -> list[list[str]]:
    return [json.loads(line) for line in (tmp_path / "stub_calls.jsonl").read_text().splitlines()]


# --- finding ncu -----------------------------------------------------------------------------


def test_missing_ncu_says_how_to_install_or_point_at_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(profiler, "NCU_FALLBACKS", (str(tmp_path / "nope"),))
    monkeypatch.setattr(profiler, "NCU_GLOB", str(tmp_path / "nsight-compute" / "*" / "ncu"))
    with pytest.raises(ToolchainNotFound, match=r"install it .*KERNELOPT_NCU"):
        find_ncu()
    with pytest.raises(ToolchainNotFound, match="does not exist"):
        find_ncu(tmp_path / "ncu")


def test_ncu_is_found_in_nsight_compute_directories_newest_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(profiler, "NCU_FALLBACKS", ())
    monkeypatch.setattr(profiler, "NCU_GLOB", str(tmp_path / "nsight-compute" / "*" / "ncu"))
    for version in ("2024.3.2", "2025.10.1", "2025.3.1"):
        path = tmp_path / "nsight-compute" / version / "ncu"
        path.parent.mkdir(parents=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    assert find_ncu() == tmp_path / "nsight-compute" / "2025.10.1" / "ncu"


def test_cli_profile_without_ncu_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELOPT_NCU", str(tmp_path / "missing-ncu"))
    assert main(["profile", "vector_add"]) == 2
    err = capsys.readouterr().err
    assert "missing-ncu" in err and "KERNELOPT_NCU" in err


# --- the profiled run ------------------------------------------------------------------------


def test_profile_runs_one_launch_of_the_entry_under_ncu(
    evaluator: Session, stub: Path, fake_harness: Path, tmp_path: Path
) -> None:
    out = tmp_path / "profile"
    summary = profile_case(evaluator, candidate(), None, out, ProfileOptions(ncu=stub), harness=fake_harness)
    cmd = json.loads((out / "ncu_command.json").read_text())
    assert cmd[0] == str(stub)
    for flag, value in [("--kernel-name", "vector_add"), ("--launch-count", "1"), ("--clock-control", "none"),
                        ("--target-processes", "all"), ("-o", str(out / "profile"))]:
        assert cmd[cmd.index(flag) + 1] == value
    assert cmd[-3:-1] == [str(fake_harness), "run"] and "--metrics" in cmd and "WarpStateStats" in cmd
    request = json.loads(Path(cmd[-1]).read_text())
    assert request["entry"] == "vector_add" and [c["name"] for c in request["cases"]] == ["n_4096"]
    assert "timing" not in request["cases"][0], "the profiled run must never time"
    assert calls(tmp_path)[1][:2] == ["--import", str(out / "profile.ncu-rep")]
    # the stub's CSV flows through: thousands separators, units and n/a
    assert summary.duration_ms == pytest.approx(0.002048) and summary.memory.dram_read_bytes == 49152
    assert (summary.occupancy.achieved_pct is None and summary.device == "Stub GPU"
            and summary.ncu_version == "2099.1.0.0")
    assert summary.case == "n_4096" and summary.report_path == str((out / "profile.ncu-rep").resolve())
    assert json.loads((out / "summary.json").read_text())["kernel"] == "vector_add"
    assert (out / "raw.csv").read_text() == STUB_CSV and summary.hints
    assert any("not a benchmark" in n for n in summary.notes)


def test_clock_control_and_section_set_are_passed_on(
    evaluator: Session, stub: Path, fake_harness: Path, tmp_path: Path
) -> None:
    out = tmp_path / "p"
    options = ProfileOptions(ncu=stub, clock_control="base", section_set="full")
    summary = profile_case(evaluator, candidate(), "odd_1001", out, options, harness=fake_harness)
    cmd = json.loads((out / "ncu_command.json").read_text())
    assert cmd[cmd.index("--clock-control") + 1] == "base" and cmd[cmd.index("--set") + 1] == "full"
    assert "--section" not in cmd and summary.case == "odd_1001" and summary.clock_control == "base"
    with pytest.raises(ValueError, match="clock_control"):
        profile_case(evaluator, candidate(), None, out, ProfileOptions(ncu=stub, clock_control="max"),
                     harness=fake_harness)
    with pytest.raises(ValueError, match="no case 'nope'"):
        profile_case(evaluator, candidate(), "nope", out, ProfileOptions(ncu=stub), harness=fake_harness)


def test_counters_not_permitted_says_what_to_change(
    evaluator: Session, stub: Path, fake_harness: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KO_STUB_NCU", "perm")
    with pytest.raises(CountersNotPermitted) as info:
        profile_case(evaluator, candidate(), None, tmp_path / "p", ProfileOptions(ncu=stub), harness=fake_harness)
    message = str(info.value)
    assert "ERR_NVGPUCTRPERM" in message and "root" in message
    assert "options nvidia NVreg_RestrictProfilingToAdminUsers=0" in message


def test_a_kernel_that_faults_under_the_profiler_is_reported_with_its_cuda_error(
    evaluator: Session, stub: Path, fake_harness: Path, tmp_path: Path
) -> None:
    with pytest.raises(ProfiledKernelFailed) as info:
        profile_case(evaluator, candidate("CRASH"), None, tmp_path / "p", ProfileOptions(ncu=stub),
                     harness=fake_harness)
    message = str(info.value)
    assert "runtime_error" in message and "CUDA_ERROR_ILLEGAL_ADDRESS" in message and "validate" in message


def test_a_kernel_that_does_not_compile_is_reported_before_ncu_runs(
    evaluator: Session, stub: Path, fake_harness: Path, tmp_path: Path
) -> None:
    bad = Candidate('extern "C" __global__ void vector_add(const float* a) { oops; }',
                    LaunchSpec.model_validate(ADD_LAUNCH), [], "bad")
    with pytest.raises(ProfiledKernelFailed, match="cannot be profiled"):
        profile_case(evaluator, bad, None, tmp_path / "p", ProfileOptions(ncu=stub), harness=fake_harness)
    assert not (tmp_path / "stub_calls.jsonl").exists()


def test_ncu_that_never_finishes_is_killed_at_the_deadline(
    evaluator: Session, stub: Path, fake_harness: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KO_STUB_NCU", "hang")
    prepare(evaluator, time_reference=False)
    start = time.monotonic()
    with pytest.raises(ProfilerTimeout, match="did not finish within 1 s"):
        profile_case(evaluator, candidate(), None, tmp_path / "p", ProfileOptions(ncu=stub, timeout_s=1),
                     harness=fake_harness)
    assert time.monotonic() - start < 15


def test_cancelling_kills_ncu(evaluator: Session, stub: Path, fake_harness: Path, tmp_path: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelopt_mcp.errors import HarnessCancelled

    monkeypatch.setenv("KO_STUB_NCU", "hang")
    deadline = time.monotonic() + 1.0
    with pytest.raises(HarnessCancelled):
        profile_case(
            evaluator, candidate(), None, tmp_path / "p", ProfileOptions(ncu=stub), harness=fake_harness,
            cancelled=lambda: time.monotonic() > deadline,
        )


def test_an_ncu_that_refuses_an_extra_metric_is_retried_with_sections_only(
    evaluator: Session, stub: Path, fake_harness: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KO_STUB_NCU", "badmetric")
    summary = profile_case(evaluator, candidate(), None, tmp_path / "p", ProfileOptions(ncu=stub), harness=fake_harness)
    profiled = [c for c in calls(tmp_path) if "run" in c]
    assert len(profiled) == 2 and "--metrics" in profiled[0] and "--metrics" not in profiled[1]
    assert any("refused" in n for n in summary.notes)


def test_cli_profile_prints_the_summary(tmp_path: Path, stub: Path, fake_harness: Path,
                                        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    extra = write_tiny_workload(tmp_path / "extra")
    monkeypatch.setenv("KERNELOPT_WORKLOADS", str(extra))
    monkeypatch.setenv("KERNELOPT_NCU", str(stub))
    out = tmp_path / "report"
    assert main(["profile", "tiny_add", "--harness", str(fake_harness), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "tiny_add · initial · case n_4096 · kernel vector_add" in text and "speed of light" in text
    assert f"report: {(out / 'profile.ncu-rep').resolve()}" in text.replace("\n", "")
    assert main(["profile", "tiny_add", "--harness", str(fake_harness), "-o", str(out), "--json", "--case", "one"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["case"] == "one" and payload["duration_ms"] == pytest.approx(0.002048)
    assert os.path.isfile(payload["report_path"])
