from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelopt_mcp.cli import main
from kernelopt_mcp.evaluation.device import cuda_device_count


def test_schema_to_stdout_and_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "kernelopt workload"
    assert main(["schema", "-o", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text()) == schema


def test_workloads_json_lists_the_bundled_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["workloads", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert {"vector_add", "sgemm", "reduce_sum", "softmax", "transpose", "layernorm"} <= set(rows)
    assert rows["sgemm"]["signature"].startswith('extern "C" __global__ void sgemm(const float* A')


def test_compile_ok_and_error_exit_codes(tmp_path: Path, repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", str(repo / "workloads/sgemm/reference.cu"), "--arch", "sm_90", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "ok" and out["kernels"]["sgemm"]["registers"] > 0
    bad = tmp_path / "bad.cu"
    bad.write_text('extern "C" __global__ void k() {\n  undefined_thing();\n}\n')
    assert main(["compile", str(bad), "--arch", "sm_90"]) == 1
    text = capsys.readouterr().out
    assert "line 2" in text and "undefined_thing" in text


def test_compile_refuses_unlisted_options(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", str(repo / "workloads/vector_add/initial.cu"), "--arch", "sm_90",
                 "--option=-rdc=true"]) == 2
    assert "not allowed" in capsys.readouterr().err


def test_unknown_workload_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", "no_such_workload"]) == 2
    assert "known:" in capsys.readouterr().err


@pytest.mark.skipif(cuda_device_count() > 0, reason="checks the message on machines without a GPU")
def test_evaluate_without_a_gpu_says_so(harness_binary: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", "vector_add", "--harness", str(harness_binary)]) == 2
    err = capsys.readouterr().err
    assert "no usable CUDA device" in err and "nvidia-smi" in err
