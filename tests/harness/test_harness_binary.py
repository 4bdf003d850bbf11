"""The installed native harness on a CPU-only machine: its CLI, request validation and exit
codes, and its own C++ test suite (which drives the real binary against a fake libcuda)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from fakegpu import write_harness

from kernelopt_mcp.evaluation.device import cuda_device_count
from kernelopt_mcp.evaluation.harness import ExitCode, harness_features

# What the harness implements of protocol 2 (PROTOCOL.md, "Commands"): the data path and timing.
DATA_PATH_FEATURES = {"support_module", "input_cache", "device_compare", "determinism", "timed_inputs"}
TIMING_FEATURES = {"blocking", "graph", "adaptive", "baseline_cublas"}
# Issue 14's checks of the timed launches (PROTOCOL.md, "Fresh inputs and checked launches").
TIMED_CHECK_FEATURES = {"fresh_inputs", "timed_check", "confirm_launch", "checked_dump", "fresh_launches",
                        "poison_subset"}
# Checked launches against expected values given up front, no CUDA reference (PROTOCOL.md,
# "Checked launches against expected values").
TIMED_CHECK_FEATURES |= {"checked_expected"}
# Staged inputs and expected values mapped read-only (PROTOCOL.md, "Read-only staging").
INTEGRITY_FEATURES = {"readonly_staging"}
# Inputs drawn on the device, expected files in the buffer's dtype (PROTOCOL.md, "Inputs drawn on the device"),
# their matrices made triangular or symmetric ("structured matrices"), or a choice of a few values ("a choice of
# values").
INPUT_FEATURES = {"input_draw", "expected_dtype", "structured_draw", "choice_draw"}
# The CUDA reference's outputs kept on the device as expected values (PROTOCOL.md, "Expected values kept on the
# device").
EXPECTED_FEATURES = {"device_expected"}
# A line on the answer stream before each case of a request (PROTOCOL.md, top-level "progress").
PROGRESS_FEATURES = {"progress"}
# CUtensorMaps the harness encodes over a case's buffers (PROTOCOL.md, "Tensor maps"); listed by a
# harness built against CUDA 12.0+ headers, which every supported build is.
TENSOR_MAP_FEATURES = {"tensor_maps"}


def _run(binary: Path, *args: str, stdin: str | None = None) -> tuple[int, dict | None, str]:
    p = subprocess.run([str(binary), *args], input=stdin, capture_output=True, text=True, timeout=60)
    lines = p.stdout.strip().splitlines()
    return p.returncode, (json.loads(lines[-1]) if lines else None), p.stderr


def _request(tmp_path: Path) -> dict:
    module = tmp_path / "k.cubin"
    module.write_bytes(b"\x7fELF")
    data = tmp_path / "a.bin"
    data.write_bytes(b"\0" * 16)
    return {
        "protocol": 1, "module": str(module), "entry": "k",
        "cases": [{
            "name": "c",
            "args": [
                {"kind": "buffer", "name": "a", "role": "in", "bytes": 16, "input": str(data)},
                {"kind": "buffer", "name": "b", "role": "out", "bytes": 16, "output": str(tmp_path / "b.bin")},
                {"kind": "scalar", "name": "n", "dtype": "int32", "value": 4, "raw": "04000000"},
            ],
            "launch": {"grid": [1, 1, 1], "block": [4, 1, 1], "shared_bytes": 0},
        }],
    }


def test_version(harness_binary: Path) -> None:
    code, answer, _ = _run(harness_binary, "--version")
    assert code == 0 and answer is not None
    assert answer["harness"] == "0.1.0" and answer["protocol"] == 2
    assert set(answer["features"]) == (DATA_PATH_FEATURES | TIMING_FEATURES | TIMED_CHECK_FEATURES | INTEGRITY_FEATURES
                                        | INPUT_FEATURES | EXPECTED_FEATURES | PROGRESS_FEATURES
                                        | TENSOR_MAP_FEATURES)


def test_harness_features_reads_version(harness_binary: Path, tmp_path: Path) -> None:
    assert harness_features(harness_binary) >= DATA_PATH_FEATURES | TIMING_FEATURES
    # A protocol 1 harness (the CPU double answers {"harness": "fake", "protocol": 1}) has none.
    assert harness_features(write_harness(tmp_path, "fake")) == frozenset()


def test_protocol_2_requests_are_accepted_and_their_fields_validated(harness_binary: Path, tmp_path: Path) -> None:
    req = _request(tmp_path)
    req["protocol"] = 2
    req["cases"][0]["args"][1].update(dtype="float32", expected=str(tmp_path / "e.bin"),
                                      compare={"abs_tol": 0, "rtol": 0.01, "rel_floor": 1.0})
    path = tmp_path / "req.json"
    path.write_text(json.dumps(req))
    code, answer, _ = _run(harness_binary, "run", str(path))
    assert code == ExitCode.BAD_REQUEST
    assert answer and answer["error"]["message"].startswith("support_module: is required by cases[0].args[1].expected")


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r.update(protocol=3), "protocol"),
        (lambda r: r.pop("entry"), "entry"),
        (lambda r: r["cases"][0]["args"][0].update(bytes=-1), "cases[0].args[0].bytes"),
        (lambda r: r["cases"][0]["args"][0].update(role="sideways"), "cases[0].args[0].role"),
        (lambda r: r["cases"][0]["args"][2].update(raw="0400"), "cases[0].args[2].raw"),
        (lambda r: r["cases"][0]["launch"].update(block=[0, 1, 1]), "cases[0].launch.block"),
        (lambda r: r["cases"][0].update(timing={"warmup": 1, "iterations": 10**9}), "cases[0].timing.iterations"),
        (lambda r: r.update(guard_bytes=100), "guard_bytes"),
        (lambda r: r.update(cases=[]), "cases"),
    ],
)
def test_malformed_requests_exit_2_naming_the_field(harness_binary: Path, tmp_path: Path, mutate, field: str) -> None:
    req = _request(tmp_path)
    mutate(req)
    path = tmp_path / "req.json"
    path.write_text(json.dumps(req))
    code, answer, _ = _run(harness_binary, "run", str(path))
    assert code == ExitCode.BAD_REQUEST
    assert answer and answer["status"] == "error" and answer["error"]["kind"] == "bad_request"
    assert field in answer["error"]["message"]


def test_invalid_json_is_a_bad_request_and_serve_keeps_going(harness_binary: Path, tmp_path: Path) -> None:
    lines = "{not json\n" + json.dumps({"protocol": 1}) + "\n"
    p = subprocess.run([str(harness_binary), "serve"], input=lines, capture_output=True, text=True, timeout=60)
    answers = [json.loads(x) for x in p.stdout.strip().splitlines()]
    assert [a["error"]["kind"] for a in answers] == ["bad_request", "bad_request"]
    assert p.returncode == 0


@pytest.mark.skipif(cuda_device_count() > 0, reason="checks the no-driver path")
def test_valid_request_without_a_driver_exits_3(harness_binary: Path, tmp_path: Path) -> None:
    path = tmp_path / "req.json"
    path.write_text(json.dumps(_request(tmp_path)))
    env = {**os.environ, "KERNELOPT_LIBCUDA": str(tmp_path / "no-such-libcuda.so")}
    p = subprocess.run([str(harness_binary), "run", str(path)], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == ExitCode.DRIVER_UNAVAILABLE
    answer = json.loads(p.stdout)
    assert answer["error"]["kind"] == "driver_unavailable"
    p = subprocess.run([str(harness_binary), "--device-info"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == ExitCode.DRIVER_UNAVAILABLE


def test_unknown_command_is_a_usage_error(harness_binary: Path) -> None:
    p = subprocess.run([str(harness_binary), "frobnicate"], capture_output=True, text=True, timeout=60)
    assert p.returncode == ExitCode.BAD_REQUEST and "usage" in p.stderr.lower()


@pytest.mark.slow
def test_native_harness_ctest_suite(repo: Path, tmp_path: Path) -> None:
    """Configure and build native_harness with its tests, then run CTest (CPU only)."""
    if not shutil.which("cmake"):
        pytest.fail("cmake is required to build the harness")
    build = tmp_path / "build"
    subprocess.run(
        ["cmake", "-S", str(repo / "native_harness"), "-B", str(build), "-DKERNELOPT_HARNESS_TESTS=ON",
         "-DKERNELOPT_HARNESS_WERROR=ON", "-DCMAKE_BUILD_TYPE=Release"],
        check=True, capture_output=True, timeout=300,
    )
    subprocess.run(["cmake", "--build", str(build), "-j2"], check=True, capture_output=True, timeout=900)
    p = subprocess.run(["ctest", "--test-dir", str(build), "--output-on-failure"], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:]
    assert "100% tests passed" in p.stdout
