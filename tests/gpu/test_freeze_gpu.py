"""freeze_workload and replay_requests on a real GPU, over stdio as kernelopt optimize calls them:
the server benchmarks the frozen workload by name, and the replay requests it writes run on the
harness alone and give the oracle's expected outputs (the same bytes each time).

Run with --run-gpu.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakegpu import stdio_server
from fakegpu import tool_text as text

from kernelopt_mcp.config import bundled_workloads_dir

pytestmark = [pytest.mark.gpu, pytest.mark.anyio]

LAUNCH = {"default": {"grid": ["ceil_div(n, 256)"], "block": [256]}}


def small_vector_add() -> tuple[dict[str, Any], str, str, Path]:
    """The bundled vector_add with small cases (its 2^27 case would take seconds to draw)."""
    root = bundled_workloads_dir() / "vector_add"
    spec = json.loads((root / "workload.json").read_text())
    spec["cases"] = [
        {"name": "one", "kind": "correctness", "scalars": {"n": 1}},
        {"name": "odd_100003", "kind": "correctness", "scalars": {"n": 100003}},
        {"name": "n_2e22", "kind": "performance", "scalars": {"n": 4194304}},
    ]
    return spec, (root / "reference.cu").read_text(), (root / "initial.cu").read_text(), root / "reference.py"


async def test_freeze_benchmark_and_replay_on_the_gpu(tmp_path: Path, harness_binary: Path) -> None:
    spec, reference_cu, initial_cu, oracle = small_vector_add()
    run = tmp_path / "run-001"
    run.mkdir()
    (run / "reference.py").write_text(oracle.read_text())  # as kernelopt optimize does: the oracle under a --root
    oracle = run / "reference.py"
    args = ("--orchestrator", "--harness", str(harness_binary), "--workspace", str(tmp_path / "ws"), "--root", str(run),
            "--output-root", str(run))
    async with stdio_server(*args) as client:
        frozen = await client.call_tool("freeze_workload", {
            "spec": spec, "reference_cu": reference_cu, "initial_cu": initial_cu, "oracle_path": str(oracle),
            "directory": str(run), "warmup": 2, "iterations": 5,
        })
        assert not frozen.is_error, text(frozen)
        out = frozen.structured_content
        assert out["expected_cases"] == ["one", "odd_100003", "n_2e22"] and out["nvrtc_version"]
        bench = await client.call_tool("benchmark", {"workload": "vector_add", "source": initial_cu, "launch": LAUNCH,
                                                     "warmup": 2, "iterations": 5})
        assert bench.structured_content["status"] == "ok", text(bench)
        assert {c["name"] for c in bench.structured_content["cases"]} == set(out["cases"])  # the frozen cases
        replay = await client.call_tool("replay_requests",
                                        {"workload": "vector_add", "source": initial_cu, "launch": LAUNCH})
        assert replay.structured_content["status"] == "ok", text(replay)
        requests = replay.structured_content["requests"]
    expected = json.loads((run / "expected" / "manifest.json").read_text())
    for case, request in requests.items():
        outputs = []
        for _ in range(2):
            proc = subprocess.run([str(harness_binary), "run", str(run / request)], capture_output=True,
                                  text=True, timeout=300)
            answer = json.loads(proc.stdout)
            assert proc.returncode == 0 and answer["cases"][0]["status"] == "ok", (case, proc.stdout, proc.stderr)
            outputs.append((run / "replay" / "outputs" / case / "c.bin").read_bytes())
        assert outputs[0] == outputs[1], case
        entry = expected[case]["c"]
        want = np.fromfile(run / entry["path"], dtype="<f8").reshape(entry["shape"])
        np.testing.assert_allclose(np.frombuffer(outputs[0], dtype="<f4"), want, rtol=1e-6, atol=1e-6)
