"""The sanitizer tier without a GPU: compute-sanitizer's reports (recorded-style fixtures in its
real format), command construction, finding the tool, and running it through a stand-in."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kernelopt_mcp.config import Settings
from kernelopt_mcp.errors import ToolchainNotFound
from kernelopt_mcp.evaluation.protocol import CaseRequest, LaunchRequest, RunRequest, TimingRequest
from kernelopt_mcp.sanitizer import (
    ERROR_EXITCODE,
    SanitizerTool,
    SanitizerUnavailable,
    find_sanitizer,
    parse_report,
    run_tool,
    sanitizer_command,
    verdict,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "sanitizer"
FAKE_SANITIZER = Path(__file__).parents[1] / "fake_sanitizer.py"
FAKE_HARNESS = Path(__file__).parents[1] / "fake_harness.py"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_memcheck_out_of_bounds_read() -> None:
    findings, errors, warnings = parse_report(fixture("memcheck_oob_read.txt"))
    assert (errors, warnings) == (3, 0)
    assert len(findings) == 3
    first = findings[0]
    assert first.kind == "Invalid __global__ read of size 4 bytes"
    assert (first.function, first.pc_offset, first.file, first.line) == ("vector_add", "0x90", "kernel.cu", 4)
    assert (first.thread, first.block) == ((64, 0, 0), (3, 0, 0))
    assert first.address == "0x7f3a5c200f00"
    assert not any("Host Frame" in d for d in first.detail)
    assert any("after the nearest allocation" in d for d in first.detail)
    assert findings[2].kind.startswith("Program hit CUDA_ERROR_LAUNCH_FAILED")
    assert "kernel.cu:4" in first.summary() and "thread (64, 0, 0)" in first.summary()


def test_memcheck_misaligned_in_the_12x_layout() -> None:
    findings, errors, _ = parse_report(fixture("memcheck_misaligned_12x.txt"))
    assert errors == 1
    f = findings[0]
    assert (f.function, f.file, f.line, f.address) == ("softmax", "/tmp/kernelopt-abc/kernel.cu", 7, "0x7f6510c00001")
    assert "is misaligned" in " ".join(f.detail)


def test_clean_reports() -> None:
    assert parse_report(fixture("memcheck_clean.txt")) == ([], 0, 0)
    assert parse_report(fixture("racecheck_clean.txt")) == ([], 0, 0)


@pytest.mark.parametrize("name", ["racecheck_race.txt", "racecheck_race_old.txt"])
def test_racecheck_races_with_their_lines(name: str) -> None:
    findings, errors, _ = parse_report(fixture(name))
    assert errors == 1
    f = findings[0]
    assert f.severity == "error" and f.kind == "Race reported between Write access"
    assert f.file == "kernel.cu" and f.line in (12, 13)
    assert f.function is not None and f.function.startswith("reduce_sum")
    assert any("Read access" in d for d in f.detail)


def test_racecheck_warnings_are_counted_apart() -> None:
    findings, errors, warnings = parse_report(fixture("racecheck_race.txt"))
    assert (errors, warnings) == (1, 1)
    assert [f.severity for f in findings] == ["error", "warning"]
    assert findings[1].line == 16


def test_initcheck_counts_unprinted_errors() -> None:
    findings, errors, _ = parse_report(fixture("initcheck_uninit.txt"))
    assert errors == 128 and len(findings) == 2
    assert findings[0].kind == "Uninitialized __global__ memory read of size 4 bytes"
    assert findings[0].line == 9 and findings[0].address == "0x7f2b1e000000"


def test_an_unsupported_device_is_an_error_not_a_clean_report() -> None:
    with pytest.raises(SanitizerUnavailable, match="Device not supported"):
        parse_report(fixture("unsupported_device.txt"))


def test_command_line() -> None:
    cmd = sanitizer_command(Path("/cs"), SanitizerTool.racecheck, Path("/h"), Path("/r.json"), Path("/log"))
    assert cmd == [
        "/cs", "--tool", "racecheck", "--log-file", "/log", "--print-limit", "100",
        "--error-exitcode", str(ERROR_EXITCODE), "--report-api-errors", "no", "/h", "run", "/r.json",
    ]


def test_find_sanitizer(tmp_path: Path) -> None:
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    binary = home / "bin" / "compute-sanitizer"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    cuda_home = Settings.from_env({"CUDA_HOME": str(home)}).cuda_home  # read at the entry point
    assert find_sanitizer(None, cuda_home=cuda_home, search_path="/nonexistent") == binary
    assert find_sanitizer(binary, search_path="") == binary
    with pytest.raises(ToolchainNotFound, match="KERNELOPT_SANITIZER"):
        find_sanitizer(tmp_path / "nope")
    with pytest.raises(ToolchainNotFound, match="ships with the CUDA toolkit"):
        find_sanitizer(None, cuda_home=tmp_path / "none", search_path="/nonexistent")


def _script(tmp_path: Path, name: str, target: Path) -> Path:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\nexec {sys.executable} {target} \"$@\"\n")
    path.chmod(0o755)
    return path


REQUEST = RunRequest(
    device=0, module="/k.cubin", entry="ok", guard_bytes=65536, flush_l2=True,
    cases=[CaseRequest(name="small", args=[], launch=LaunchRequest(grid=[1, 1, 1], block=[1, 1, 1]),
                       timing=TimingRequest(warmup=0, iterations=5))],
)


def test_run_tool_through_a_stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sanitizer = _script(tmp_path, "compute-sanitizer", FAKE_SANITIZER)
    harness = _script(tmp_path, "kernelopt-harness", FAKE_HARNESS)
    monkeypatch.setenv("FAKE_SANITIZER_REPORT", str(FIXTURES / "memcheck_oob_read.txt"))
    monkeypatch.setenv("FAKE_SANITIZER_ARGS", str(tmp_path / "args.json"))
    report = run_tool(sanitizer, SanitizerTool.memcheck, harness, REQUEST, "small", tmp_path / "w")
    assert not report.passed and report.errors == 3 and report.exit_code == ERROR_EXITCODE
    assert report.findings[0].line == 4
    assert "kernel.cu:4" in verdict([report])[1] and verdict([report])[1].startswith("sanitizer_error")
    args = json.loads((tmp_path / "args.json").read_text())
    assert args[:2] == ["--tool", "memcheck"] and args[-2] == "run"
    sent = json.loads(Path(args[-1]).read_text())
    assert sent["guard_bytes"] == 0, "memcheck must see reads past the buffer, not into guards"
    assert "timing" not in sent["cases"][0]
    assert REQUEST.guard_bytes == 65536 and REQUEST.cases[0].timing is not None  # the caller's copy is untouched

    monkeypatch.setenv("FAKE_SANITIZER_REPORT", str(FIXTURES / "racecheck_clean.txt"))
    clean = run_tool(sanitizer, SanitizerTool.racecheck, harness, REQUEST, "small", tmp_path / "w")
    assert clean.passed and clean.errors == 0 and clean.exit_code == 0
    assert json.loads(Path(json.loads((tmp_path / "args.json").read_text())[-1]).read_text())["guard_bytes"] == 65536
    assert verdict([clean]) == (True, "sanitizer clean: racecheck on 1 correctness case(s)")


def test_run_tool_kills_a_hanging_sanitizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sanitizer = _script(tmp_path, "compute-sanitizer", FAKE_SANITIZER)
    harness = _script(tmp_path, "kernelopt-harness", FAKE_HARNESS)
    monkeypatch.setenv("FAKE_SANITIZER_REPORT", str(FIXTURES / "memcheck_clean.txt"))
    monkeypatch.setenv("FAKE_SANITIZER_SLEEP", "60")
    report = run_tool(sanitizer, SanitizerTool.initcheck, harness, REQUEST, "small", tmp_path / "w", timeout_s=1)
    assert report.timed_out and not report.passed and "did not finish within 1 s" in report.message


def test_cli_evaluate_sanitize(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    """`kernelopt evaluate --sanitize` on the pretend GPU: a passing kernel with a memcheck
    report becomes sanitizer_error (exit 1); a clean report keeps ok (exit 0)."""
    from fakegpu import kernel, write_harness, write_tiny_workload

    from kernelopt_mcp.cli import main

    harness = write_harness(tmp_path, "fake")
    workload = write_tiny_workload(tmp_path / "extra") / "tiny_add"
    source = tmp_path / "k.cu"
    source.write_text(kernel())
    monkeypatch.setenv("KERNELOPT_SANITIZER", str(_script(tmp_path, "compute-sanitizer", FAKE_SANITIZER)))
    args = ["evaluate", str(workload), str(source), "--harness", str(harness), "--no-benchmark", "--sanitize"]

    monkeypatch.setenv("FAKE_SANITIZER_REPORT", str(FIXTURES / "memcheck_oob_read.txt"))
    assert main([*args, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "sanitizer_error" and out["sanitizer_message"].startswith("sanitizer_error:")
    assert {r["case"] for r in out["sanitizer"]} == {"one", "odd_1001"} and len(out["sanitizer"]) == 6
    assert main(args) == 1
    printed = capsys.readouterr().out
    assert "compute-sanitizer on the correctness cases" in printed and "sanitizer_error" in printed

    monkeypatch.setenv("FAKE_SANITIZER_REPORT", str(FIXTURES / "memcheck_clean.txt"))
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "ok"

    monkeypatch.setenv("KERNELOPT_SANITIZER", str(tmp_path / "missing"))
    assert main(args) == 2
    assert "KERNELOPT_SANITIZER" in capsys.readouterr().err


def test_the_address_is_found_in_either_wording() -> None:
    """12.x says "Address 0x.. is out of bounds"; later releases word the same line differently
    ("Access to 0x.."): the H200 run's finding had the line but no address until the pattern
    ignored case."""
    from kernelopt_mcp.sanitizer import parse_report

    for wording in ("Address", "Access to", "access to"):
        text = (
            "========= Invalid __global__ read of size 4 bytes\n"
            "=========     at vector_add+0x100 in kernel.cu:3\n"
            "=========     by thread (0,0,0) in block (0,0,0)\n"
            f"=========     {wording} 0x7f23DAC00000 is out of bounds\n"
            "=========\n========= ERROR SUMMARY: 1 error\n"
        )
        findings, _, _ = parse_report(text)
        assert findings[0].address == "0x7f23DAC00000", wording
