"""PyTorch problems on a real GPU (issue 19): each supported kind of tests/torch_problems/ is
imported with `kernelopt import-torch` and a plain CUDA kernel for it passes `kernelopt evaluate`
against the module's own outputs, computed by PyTorch on the GPU on the harness's draws (a wrong one
fails); each runs through `kernelopt optimize --workload DIR` with PyTorch as the reference: the
scripted model writes the starting kernel only (no CUDA reference is asked for), then one proposal
and a wrong one, each evaluated on the run's copy of the workload. A LayerNorm kernel that drops
the weight and bias is a `mismatch`: the import draws parameters instead of keeping their defaults
(ones and zeros).

Needs torch where the import runs (here, the same machine). Run with --run-gpu
(scripts/device_gpu_tests.sh tests/gpu/test_torch_import_gpu.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from scripted_model import ScriptedModel
from torch_variants import written_for_the_gpu

from kernelopt_agent.cli import main as agent_main
from kernelopt_mcp.cli import main
from kernelopt_mcp.torch_import import import_torch_problem
from kernelopt_mcp.workload import load_workload

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
PROBLEMS = REPO / "tests" / "torch_problems"

GELU = r"""extern "C" __global__ void elementwise_gelu(const float* x, float* out, int batch_size, int dim) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (long long)batch_size * dim) {
        double v = x[i];
        out[i] = (float)(0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
    }
}
"""
SUM = r"""extern "C" __global__ void reduction_sum(const float* x, float* out, int batch_size, int dim1, int dim2) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int b = blockIdx.y;
    if (j < dim2 && b < batch_size) {
        double acc = 0.0;
        for (int i = 0; i < dim1; ++i) acc += x[((size_t)b * dim1 + i) * dim2 + j];
        out[(size_t)b * dim2 + j] = (float)acc;
    }
}
"""
MATMUL = r"""extern "C" __global__ void matmul(const float* A, const float* B, float* out, int M, int K, int N) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        double acc = 0.0;
        for (int k = 0; k < K; ++k) acc += (double)A[(size_t)row * K + k] * B[(size_t)k * N + col];
        out[(size_t)row * N + col] = (float)acc;
    }
}
"""
LINEAR = r"""extern "C" __global__ void linear_relu(const float* x, const float* fc_weight, const float* fc_bias, float* out,
                                         int batch_size, int in_features, int out_features) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    int b = blockIdx.y;
    if (o < out_features && b < batch_size) {
        double acc = fc_bias[o];
        for (int k = 0; k < in_features; ++k)
            acc += (double)x[(size_t)b * in_features + k] * fc_weight[(size_t)o * in_features + k];
        out[(size_t)b * out_features + o] = (float)(acc > 0.0 ? acc : 0.0);
    }
}
"""  # noqa: E501
CONV = r"""extern "C" __global__ void conv2d_relu_bias(const float* x, const float* bias, const float* conv_weight,
                                              const float* conv_bias, float* out, int batch_size, int height, int width,
                                              int out_channels) {
    const int oh = height - 2, ow = width - 2;
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    int o = blockIdx.y, b = blockIdx.z;
    if (p < oh * ow) {
        int y = p / ow, xx = p % ow;
        double acc = conv_bias[o];
        for (int c = 0; c < 3; ++c)
            for (int ky = 0; ky < 3; ++ky)
                for (int kx = 0; kx < 3; ++kx)
                    acc += (double)x[(((size_t)b * 3 + c) * height + y + ky) * width + xx + kx]
                         * conv_weight[((o * 3 + c) * 3 + ky) * 3 + kx];
        out[(((size_t)b * out_channels + o) * oh + y) * ow + xx] = (float)((acc > 0.0 ? acc : 0.0) + bias[o]);
    }
}
"""
ADD = r"""extern "C" __global__ void vector_add(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
"""
# fp16 in and out, and a Python int of forward() as an int32 scalar
SCALE = r"""#include <cuda_fp16.h>
extern "C" __global__ void scale_int_arg(const __half* x, __half* out, int factor, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2half(__half2float(x[i]) * (float)factor);
}
"""
# two outputs (torch.max's values and int64 indices), each compared with PyTorch's, in validation and in the
# checked timed launches
MAX = r"""extern "C" __global__ void max_with_indices(const float* x, float* out0, long long* out1, int batch_size,
                                              int dim) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < batch_size) {
        const float* r = x + (size_t)row * dim;
        float best = r[0];
        long long at = 0;
        for (int j = 1; j < dim; ++j)
            if (r[j] > best) { best = r[j]; at = j; }
        out0[row] = best;
        out1[row] = at;
    }
}
"""
KERNELS: dict[str, tuple[str, dict[str, Any]]] = {
    "vector_add": (ADD, {"grid": ["ceil_div(n, 256)"], "block": [256]}),
    "max_with_indices": (MAX, {"grid": ["ceil_div(batch_size, 128)"], "block": [128]}),
    "scale_int_arg": (SCALE, {"grid": ["ceil_div(n, 256)"], "block": [256]}),
    "elementwise_gelu": (GELU, {"grid": ["ceil_div(batch_size * dim, 256)"], "block": [256]}),
    "reduction_sum": (SUM, {"grid": ["ceil_div(dim2, 128)", "batch_size"], "block": [128]}),
    "matmul": (MATMUL, {"grid": ["ceil_div(N, 16)", "ceil_div(M, 16)"], "block": [16, 16]}),
    "linear_relu": (LINEAR, {"grid": ["ceil_div(out_features, 128)", "batch_size"], "block": [128]}),
    "conv2d_relu_bias": (CONV, {"grid": ["ceil_div((height - 2) * (width - 2), 128)", "out_channels", "batch_size"],
                                "block": [128]}),
}


def wrong_kernel(problem: str, source: str) -> str:
    """``source`` made wrong on the odd sizes only: it skips the last row, column or element."""
    wrong = source.replace("if (", "if (1 + ", 1) if problem != "elementwise_gelu" else source.replace(
        "if (i < (long long)batch_size * dim)", "if (i + 1 < (long long)batch_size * dim)")
    assert wrong != source
    return wrong


@pytest.fixture(autouse=True)
def _torch() -> None:
    pytest.importorskip("torch", reason="torch is not installed here: the import needs it (the evaluation does not)")


def evaluate(workload: Path, source: str, launch: dict[str, Any], tmp_path: Path, harness: Path,
             capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    kernel = tmp_path / f"{workload.name}-{abs(hash(source))}.cu"
    kernel.write_text(source)
    (tmp_path / "launch.json").write_text(json.dumps({"default": launch}))
    capsys.readouterr()
    code = main(["evaluate", str(workload), str(kernel), "--launch", str(tmp_path / "launch.json"), "--harness",
                 str(harness), "--warmup", "2", "--iterations", "20", "--json",
                 "--no-torch-baseline"])  # PyTorch's times: tests/gpu/test_torch_baseline_gpu.py
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("problem", sorted(KERNELS))
def test_imported_problem_evaluates_on_the_gpu(problem: str, tmp_path: Path, harness_binary: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    workload = import_torch_problem(PROBLEMS / f"{problem}.py", tmp_path / problem).path
    source, launch = KERNELS[problem]
    code, result = evaluate(workload, source, launch, tmp_path, harness_binary, capsys)
    assert code == 0 and result["status"] == "ok", json.dumps(result, indent=1)[:4000]
    assert ({c["name"]: c["status"] for c in result["cases"]}
            == {c.name: "ok" for c in load_workload(workload).spec.cases})
    checks = result["checks"]
    assert "timed outputs on hidden-seed inputs" in checks, checks
    # inputs drawn on the device before every timed launch, each checked against PyTorch: the bundled workloads' checks
    assert any(c.startswith("fresh device-drawn inputs") for c in checks), checks
    assert not any("not possible" in c for c in checks), checks
    print(problem, json.dumps({c["name"]: (c["timing"] or {}).get("median_ms") for c in result["cases"]}))

    # a kernel that is wrong on the odd sizes only (it skips the last row/column/element) fails
    wrong = wrong_kernel(problem, source)
    code, result = evaluate(workload, wrong, launch, tmp_path, harness_binary, capsys)
    assert code != 0 and result["status"] == "mismatch", json.dumps(result, indent=1)[:4000]


def test_a_problem_written_for_the_gpu_is_checked_against_pytorch_on_the_gpu(
        tmp_path: Path, harness_binary: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """linear_relu as files written for the GPU have it (tests/torch_variants.py). The import (no GPU in
    its child) makes the workload of the plain file; the reference child runs the same file on the GPU,
    where those calls are real: the right kernel passes, the wrong one is a mismatch."""
    gpu = written_for_the_gpu((PROBLEMS / "linear_relu.py").read_text(), "torch.randn(batch_size, in_features)")
    (tmp_path / "linear_relu.py").write_text(gpu)
    workload = import_torch_problem(tmp_path / "linear_relu.py", tmp_path / "imported").path
    source, launch = KERNELS["linear_relu"]
    code, result = evaluate(workload, source, launch, tmp_path, harness_binary, capsys)
    assert code == 0 and result["status"] == "ok", json.dumps(result, indent=1)[:4000]
    assert not any("not possible" in c for c in result["checks"]), result["checks"]
    code, result = evaluate(workload, wrong_kernel("linear_relu", source), launch, tmp_path, harness_binary, capsys)
    assert code != 0 and result["status"] == "mismatch", json.dumps(result, indent=1)[:4000]


@pytest.mark.parametrize("problem", sorted(KERNELS))
def test_optimize_an_imported_problem(problem: str, tmp_path: Path, harness_binary: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Every supported kind (elementwise, reduction, matmul, a module with parameters, a conv, fp16 with
    an int argument, two outputs) runs through `kernelopt optimize --workload` with PyTorch as the reference: the
    scripted model writes the initial kernel alone (the plain kernel above), proposes it again with
    another block shape, then a kernel wrong on the odd sizes (a `mismatch`). Nothing is frozen: every
    candidate is evaluated on the run's copy of the workload, PyTorch computing the expected outputs
    on the GPU from each evaluation's own draws."""
    workload = import_torch_problem(PROBLEMS / f"{problem}.py", tmp_path / problem).path
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-scripted")
    monkeypatch.setenv("KERNELOPT_DOCS_OFFLINE", "1")
    monkeypatch.setenv("PYTHONPATH",
                       os.pathsep.join(filter(None, [str(REPO), str(REPO / "clients"), os.environ.get("PYTHONPATH")])))
    source, launch = KERNELS[problem]
    plain = {"default": {**launch, "shared_bytes": 0}}
    generated = {"initial_cu": source, "initial_launch": plain}
    # the same kernel with half the threads per block along x (every grid above divides by block x)
    half = launch["block"][0] // 2
    grid = [launch["grid"][0].replace(f", {launch['block'][0]})", f", {half})"), *launch["grid"][1:]]
    proposal = {"rationale": f"{half} threads per block along x: more blocks in flight", "source": source,
                "launch": {"default": {"grid": grid, "block": [half, *launch["block"][1:]], "shared_bytes": 0}},
                "compile_options": []}
    assert grid != launch["grid"]
    wrong = {"rationale": "skips the last element", "source": wrong_kernel(problem, source), "launch": plain,
             "compile_options": []}
    results = tmp_path / "results"
    steps = [{"content": json.dumps(generated)}, {"content": json.dumps(proposal)}, {"content": json.dumps(wrong)}]
    with ScriptedModel(steps) as model:
        code = agent_main(["optimize", "--workload", str(workload), "--max-iterations", "2", "--base-url", model.url,
                           "--harness", str(harness_binary), "--workspace", str(tmp_path / "ws"),
                           "--results-dir", str(results), "--warmup", "2", "--iterations", "10", "--quiet"])
    run = results / "run-001"
    summary = json.loads((run / "summary.json").read_text())
    assert code == 0 and not model.steps and not model.exhausted, summary
    status = [(h["label"], h["status"]) for h in json.loads((run / "history.json").read_text())
              if h["event"] == "candidate"]
    assert status == [("000-initial", "ok"), ("001-it1", "ok"), ("002-it2", "mismatch")], status
    assert "initial_cu" in model.requests[0]["messages"][-1]["content"]
    assert "reference_cu" not in model.requests[0]["messages"][-1]["content"].split("The full format:")[0]
    reference = summary["workload"]["reference"]
    assert reference["pytorch"] is True and reference["cuda_reference"] is False and reference["checked"] is True
    # PyTorch eager and torch.compile timed beside the best on the same GPU (or why compile could not run)
    pytorch = summary["best"]["pytorch"]
    assert pytorch["eager_ms"] > 0 and summary["best"]["speedup_vs_eager"] == pytorch["speedup_eager"] > 0, pytorch
    assert pytorch.get("compile_ms") or pytorch.get("compile_note"), pytorch
    expected_from = summary["workload"]["expected_outputs"]
    assert expected_from.startswith("PyTorch") and "the CPU" not in expected_from, expected_from  # on the GPU
    assert (not list((run / "tools").glob("*-freeze_workload.json"))
            and (run / "workload" / summary["workload"]["name"] / "problem.py").is_file())
    print(problem,
          json.dumps({"statuses": status, "best": summary["best"]["label"], "notes": summary["notes"]}, indent=1))


LAYERNORM_PROBLEM = (Path(__file__).parents[1] / "torch_problems" / "layernorm.py").read_text()
# one thread per row, in double: slow and plainly right
LAYERNORM = r"""extern "C" __global__ void layernorm(const float* x, const float* ln_weight, const float* ln_bias, float* out,
                                         int batch_size, int features) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= batch_size) return;
    const float* r = x + (size_t)row * features;
    double mean = 0.0, sq = 0.0;
    for (int j = 0; j < features; ++j) mean += r[j];
    mean /= features;
    for (int j = 0; j < features; ++j) { double d = r[j] - mean; sq += d * d; }
    double inv = 1.0 / sqrt(sq / features + 1e-5);
    for (int j = 0; j < features; ++j)
        out[(size_t)row * features + j] = (float)((r[j] - mean) * inv * ln_weight[j] + ln_bias[j]);
}
"""  # noqa: E501


def test_a_layernorm_kernel_that_drops_weight_and_bias_is_a_mismatch(tmp_path: Path, harness_binary: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    problem = tmp_path / "layernorm.py"
    problem.write_text(LAYERNORM_PROBLEM)
    workload = import_torch_problem(problem, tmp_path / "layernorm").path
    launch = {"grid": ["ceil_div(batch_size, 64)"], "block": [64]}
    code, result = evaluate(workload, LAYERNORM, launch, tmp_path, harness_binary, capsys)
    assert code == 0 and result["status"] == "ok", json.dumps(result, indent=1)[:4000]
    assert not any(n.startswith("degenerate problem") for n in result["notes"]), result["notes"]

    dropped = LAYERNORM.replace("(r[j] - mean) * inv * ln_weight[j] + ln_bias[j]", "(r[j] - mean) * inv")
    assert dropped != LAYERNORM
    code, result = evaluate(workload, dropped, launch, tmp_path, harness_binary, capsys)
    assert code != 0 and result["status"] == "mismatch", json.dumps(result, indent=1)[:4000]


WIDE_OUTPUTS = 20
WIDE_PROBLEM = f"""\
import torch
import torch.nn as nn

batch_size = 96
dim = 1000


class Model(nn.Module):
    \"\"\"{WIDE_OUTPUTS} outputs, x times 1 .. {WIDE_OUTPUTS}: with the input, more buffers than 16.\"\"\"

    def forward(self, x):
        return tuple(x * (k + 1) for k in range({WIDE_OUTPUTS}))


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""


WIDE_STORE = "out{k}[i] = v * {m}.f;"


def wide_kernel(last: str = WIDE_STORE, tail: str = "") -> str:
    """out_k = x * (k + 1), the last output's store ``last``, ``tail`` after the stores."""
    outputs = ", ".join(f"float* out{k}" for k in range(WIDE_OUTPUTS))
    stores = "\n        ".join((WIDE_STORE if k < WIDE_OUTPUTS - 1 else last).format(k=k, m=k + 1)
                               for k in range(WIDE_OUTPUTS))
    return (f'extern "C" __global__ void wide_outputs(const float* x, {outputs}, int batch_size, int dim) {{\n'
            "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
            "    long long n = (long long)batch_size * dim;\n"
            f"    if (i < n) {{\n        float v = x[i];\n        {stores}\n    }}\n{tail}}}\n")


def test_a_problem_with_twenty_outputs_is_checked_buffer_by_buffer_on_the_gpu(
        tmp_path: Path, harness_binary: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """21 buffers (one input, 20 outputs; the harness's checks read every buffer's diff from one support scratch
    sized per case, where 16 slots were once the limit): the right kernel passes; one wrong in the last output
    alone is a mismatch naming it; one that writes a float past the end of the last output is an out-of-bounds
    write caught by that buffer's guard bytes."""
    problem = tmp_path / "wide_outputs.py"
    problem.write_text(WIDE_PROBLEM)
    workload = import_torch_problem(problem, tmp_path / "imported").path
    last = f"out{WIDE_OUTPUTS - 1}"
    assert [b.name for b in load_workload(workload).signature.outputs] == [f"out{k}" for k in range(WIDE_OUTPUTS)]
    launch = {"grid": ["ceil_div(batch_size * dim, 256)"], "block": [256]}
    code, result = evaluate(workload, wide_kernel(), launch, tmp_path, harness_binary, capsys)
    assert code == 0 and result["status"] == "ok", json.dumps(result, indent=1)[:4000]
    assert not any("not possible" in c for c in result["checks"]), result["checks"]

    code, result = evaluate(workload, wide_kernel(last="out{k}[i] = v * 19.f;"), launch, tmp_path, harness_binary,
                            capsys)
    assert code != 0 and result["status"] == "mismatch", json.dumps(result, indent=1)[:4000]
    failed = {o["name"] for c in result["cases"] if c["status"] == "mismatch" for o in c["outputs"] if not o["passed"]}
    assert failed == {last}, json.dumps(result, indent=1)[:4000]

    past_end = f"    if (blockIdx.x == 0 && threadIdx.x == 0) {last}[(long long)batch_size * dim] = 0.f;\n"
    code, result = evaluate(workload, wide_kernel(tail=past_end), launch, tmp_path, harness_binary, capsys)
    assert code != 0 and result["status"] == "out_of_bounds_write", json.dumps(result, indent=1)[:4000]
    hit = {v.get("buffer") for c in result["cases"] for v in c["guard_violations"]}
    assert hit == {last}, json.dumps(result, indent=1)[:4000]
