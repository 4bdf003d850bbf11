"""create_workload's torch_problem option (kernelopt_mcp/torch_workspace.py): refused unless the
operator allowed it; then the problem is imported in a child process into the workspace, its
errors and a problem that never finishes come back as request errors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kernelopt_mcp.quota import DEFAULT_WORKLOAD_MAX_BYTES, DEFAULT_WORKSPACE_QUOTA_BYTES, WorkspaceQuota
from kernelopt_mcp.torch_workspace import create_torch_workload
from kernelopt_mcp.workload import load_workload
from kernelopt_mcp.workspace import RequestError

PROBLEMS = Path(__file__).parents[1] / "torch_problems"


@dataclass
class _Config:
    created_dir: Path
    workload_max_bytes: int = DEFAULT_WORKLOAD_MAX_BYTES


class FakeWorkspace:
    """What create_torch_workload reads of the service: the created directory, known workloads, the
    workspace's disk quota (a real one)."""

    def __init__(self, root: Path, quota: int = DEFAULT_WORKSPACE_QUOTA_BYTES) -> None:
        self.config = _Config(root / "workloads")
        self.compile_cache: Any = None
        self.quota = WorkspaceQuota(root, quota)

    def workloads(self) -> dict[str, Path]:
        found = {p.name: p for p in self.config.created_dir.glob("*") if (p / "workload.json").is_file()}
        return {"vector_add": Path("/bundled/vector_add"), **found}

    def origin(self, directory: Path) -> str:
        return "bundled" if str(directory).startswith("/bundled") else "created"


def test_refused_unless_the_operator_allowed_it(tmp_path: Path) -> None:
    ws = FakeWorkspace(tmp_path)
    with pytest.raises(RequestError, match=r"does not run PyTorch problems.*KERNELOPT_ALLOW_TORCH_PROBLEMS=1"):
        create_torch_workload(ws, "mm", (PROBLEMS / "matmul.py").read_text())
    assert not ws.config.created_dir.exists()


def test_allowed_import_creates_a_workload(tmp_path: Path, torch: Any) -> None:
    ws = FakeWorkspace(tmp_path)
    created = create_torch_workload(ws, "mm", (PROBLEMS / "matmul.py").read_text(), allowed=True)
    assert created.name == "mm" and not created.replaced
    assert (created.c_prototype == 'extern "C" __global__ void mm(const float* A, const float* B, float* out, int M, '
            'int K, int N)')
    assert (created.correctness_cases, created.performance_cases) == (2, 1)
    assert load_workload(ws.config.created_dir / "mm").spec.cost.flops == "2*M*K*N"
    # no staging left
    assert [p.name for p in ws.config.created_dir.iterdir() if not p.name.startswith(".mm.lock")] == ["mm"]
    home = ws.config.created_dir / "mm"
    assert (home / "problem.py").read_text() == (PROBLEMS / "matmul.py").read_text()  # the reference PyTorch runs
    assert ".mm-torch-" not in (home / "workload.json").read_text()  # the workload names no staging directory

    with pytest.raises(RequestError, match="already exists"):
        create_torch_workload(ws, "mm", (PROBLEMS / "matmul.py").read_text(), allowed=True)
    with pytest.raises(RequestError, match="bundled workload"):
        create_torch_workload(ws, "vector_add", (PROBLEMS / "matmul.py").read_text(), allowed=True)
    with pytest.raises(RequestError, match=r"output 1 \(of 2\) is of type int, not a tensor"):
        create_torch_workload(ws, "mm", (PROBLEMS / "unsupported" / "tuple_with_number.py").read_text(), allowed=True,
                              overwrite=True)
    assert load_workload(ws.config.created_dir / "mm").name == "mm"  # a failed replacement keeps the old one
    again = create_torch_workload(ws, "mm", (PROBLEMS / "elementwise_gelu.py").read_text(), allowed=True,
                                  overwrite=True)
    assert again.replaced and "const float* x" in again.c_prototype


def test_an_import_past_the_workspace_quota_is_refused_and_leaves_nothing(tmp_path: Path, torch: Any) -> None:
    ws = FakeWorkspace(tmp_path, quota=1000)  # the stored outputs of any problem exceed it
    with pytest.raises(RequestError, match=r"importing 'mm' .*workspace quota"):
        create_torch_workload(ws, "mm", (PROBLEMS / "matmul.py").read_text(), allowed=True)
    assert [p.name for p in ws.config.created_dir.iterdir() if not p.name.startswith(".mm.lock")] == []


def test_an_import_past_the_operators_size_cap_says_what_its_buffers_cost(tmp_path: Path, torch: Any) -> None:
    """An imported problem's buffers are drawn on the GPU, never kept on disk: the refusal says so
    (not a created workload's "inputs are kept on disk") and how to raise the cap."""
    ws = FakeWorkspace(tmp_path)
    ws.config.workload_max_bytes = 1000
    with pytest.raises(RequestError, match=r"an imported PyTorch problem may use at most .* \(drawn on the GPU for "
                       r"every evaluation.*--workload-max-gib"):
        create_torch_workload(ws, "mm", (PROBLEMS / "matmul.py").read_text(), allowed=True)
    assert [p.name for p in ws.config.created_dir.iterdir() if not p.name.startswith(".mm.lock")] == []


def test_a_problem_that_never_finishes_is_killed(tmp_path: Path, torch: Any) -> None:
    ws = FakeWorkspace(tmp_path)
    endless = ("import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs():\n    while True:\n"
               "        pass\n")
    with pytest.raises(RequestError, match="did not finish within 15 s"):
        create_torch_workload(ws, "loop", endless, allowed=True, timeout_s=15)
    assert not (ws.config.created_dir / "loop").exists()


# --- through the MCP tool --------------------------------------------------------------------


def _config(tmp_path: Path, allow: bool) -> Any:
    from fakegpu import write_harness

    from kernelopt_mcp.config import Settings
    from kernelopt_mcp.server_config import ServerConfig

    settings = Settings(harness=write_harness(tmp_path, "nogpu"), allow_torch_problems=allow, timeout_s=20)
    return ServerConfig(settings=settings, workspace=tmp_path / "ws")


@pytest.mark.anyio
async def test_the_create_workload_tool_refuses_torch_problems_by_default(tmp_path: Path) -> None:
    from fakegpu import in_memory_server

    async with in_memory_server(_config(tmp_path, allow=False)) as (client, _):
        r = await client.call_tool("create_workload",
                                   {"spec": {"name": "mm"}, "torch_problem": (PROBLEMS / "matmul.py").read_text()})
    assert r.is_error and "does not run PyTorch problems" in r.content[0].text
    assert not (tmp_path / "ws" / "workloads" / "mm").exists()


@pytest.mark.anyio
async def test_the_create_workload_tool_imports_where_allowed(tmp_path: Path, torch: Any) -> None:
    from fakegpu import in_memory_server

    async with in_memory_server(_config(tmp_path, allow=True)) as (client, _):
        r = await client.call_tool("create_workload", {"spec": {"name": "lin"},
                                                       "torch_problem": (PROBLEMS / "linear_relu.py").read_text()})
        assert not r.is_error, r.content[0].text
        assert r.structured_content["c_prototype"].startswith(
            'extern "C" __global__ void lin(const float* x, const float* fc_weight')
        described = await client.call_tool("describe_workload", {"name": "lin"})
    assert not described.is_error and "fc_bias" in described.content[0].text


@pytest.mark.anyio
async def test_describe_workload_of_a_workload_with_only_a_numpy_oracle(tmp_path: Path) -> None:
    """What import-torch writes (no CUDA reference, no initial kernel), without torch: describe_workload
    used to fail its own output schema (reference_cu and initial_cu required, but dropped as nulls)."""
    import json

    from fakegpu import TINY_SPEC, in_memory_server, write_harness

    from kernelopt_mcp.config import Settings, bundled_workloads_dir
    from kernelopt_mcp.server_config import ServerConfig

    wl = tmp_path / "extra" / "oracle_only"
    wl.mkdir(parents=True)
    spec = {k: v for k, v in TINY_SPEC.items() if k != "initial"}
    spec.update(name="oracle_only", reference={"python": "reference.py", "cuda": None})
    (wl / "workload.json").write_text(json.dumps(spec))
    (wl / "reference.py").write_text("def reference(a, b, n):\n    return {'c': a + b}\n")
    settings = Settings(harness=write_harness(tmp_path, "nogpu"),
                        workload_dirs=(bundled_workloads_dir(), tmp_path / "extra"))
    async with in_memory_server(ServerConfig(settings=settings, workspace=tmp_path / "ws")) as (client, _):
        r = await client.call_tool("describe_workload", {"name": "oracle_only"})
    assert not r.is_error, r.content[0].text
    assert "void vector_add(const float* a" in r.content[0].text and "reference_cu" not in r.structured_content
