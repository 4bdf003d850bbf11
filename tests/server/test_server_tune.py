"""The autotune tool through the SDK's in-memory client, on the fake GPU (tests/fakegpu.py).

The tunable kernel (tests/fixtures/tune/add.cu) sets its own latency on the fake GPU
(0.0<b><UNROLL> ms, b growing with BLOCK), so the true best is known: BLOCK=32, UNROLL=4 (BLOCK=32, UNROLL=2 does not
compile; BLOCK=64, UNROLL=1 is wrong; BLOCK=2048 is an invalid launch; BLOCK * UNROLL < 64 breaks
the constraint).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from fakegpu import in_memory_server, write_harness, write_tiny_workload
from fakegpu import tool_text as text

from kernelopt_mcp.config import Settings, bundled_workloads_dir
from kernelopt_mcp.server_config import ServerConfig

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tune"
pytestmark = pytest.mark.anyio


@pytest.fixture
def config(tmp_path: Path) -> ServerConfig:
    tiny = write_tiny_workload(tmp_path / "extra")
    settings = Settings(harness=write_harness(tmp_path, "fake"), workload_dirs=(bundled_workloads_dir(), tiny),
                        timeout_s=20, iterations=5, warmup=1)
    return ServerConfig(settings=settings, workspace=tmp_path / "ws", extra_roots=(FIXTURES,))


async def test_autotune_finds_the_best_and_the_cache_remeasures_nothing(config: ServerConfig) -> None:
    async with in_memory_server(config) as (client, _):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["autotune"].annotations.read_only_hint is False
        manual = (await client.read_resource("kernelopt://docs/tools/autotune")).contents[0].text
        assert '"best_params"' in manual and '"speedup_vs_untuned"' in manual  # the result's schema
        args = {"workload": "tiny_add", "tunable_path": str(FIXTURES / "add.json"), "budget_evals": 50}
        result = await client.call_tool("autotune", args)
        assert not result.is_error, text(result)
        out = result.structured_content
        assert out["status"] == "ok" and out["strategy"] == "exhaustive"
        assert out["best_params"] == {"BLOCK": 32, "UNROLL": 4}
        assert out["untuned_params"] == {"BLOCK": 256, "UNROLL": 4} and out["untuned_status"] == "ok"
        assert out["best_score_ms"] == pytest.approx(0.014 * 1.01)
        assert out["speedup_vs_untuned"] == pytest.approx(0.044 / 0.014)
        assert out["speedup_vs_reference"] == pytest.approx(0.1 / 0.014)
        counts = dict(out["counts"])
        assert counts.pop("compiled_ahead") >= 14 - 2  # all but the first (and what was peeked last)
        assert counts == {"tried": 14, "ok": 9, "measured": 14, "cached": 0, "skipped_by_constraint": 1,
                          "compile_errors": 1, "invalid_launches": 3, "failures": 1, "stopped_early": 0}
        assert out["best_launch"]["default"]["block"] == [32]
        assert out["best_launch"]["default"]["grid"] == ["ceil_div(n, 32 * 4)"]
        assert [r["params"] for r in out["top"][:2]] == [{"BLOCK": 32, "UNROLL": 4}, {"BLOCK": 64, "UNROLL": 2}]
        assert "best {'BLOCK': 32, 'UNROLL': 4}" in text(result)
        saved = Path(out["saved_to"])
        assert saved.is_relative_to(config.runs_dir)
        assert json.loads((saved / "best_params.json").read_text()) == {"BLOCK": 32, "UNROLL": 4}
        assert "#define BLOCK 32" in (saved / "best.cu").read_text()
        rows = list(csv.reader(io.StringIO((saved / "tune.csv").read_text())))  # a compile error's cell spans lines
        assert rows[0][:4] == ["index", "BLOCK", "UNROLL", "status"] and len(rows) == 15

        again = await client.call_tool("autotune", args)
        out2 = again.structured_content
        assert out2["counts"]["measured"] == 0 and out2["counts"]["cached"] == 14
        assert out2["best_params"] == out["best_params"]

        # the materialized best is a plain candidate: benchmark takes it as it is
        bench = await client.call_tool("benchmark", {
            "workload": "tiny_add", "source": (saved / "best.cu").read_text(), "launch": out["best_launch"],
        })
        assert bench.structured_content["status"] == "ok"
        assert bench.structured_content["score_ms"] == pytest.approx(out["best_score_ms"])


async def test_autotune_inline_spec_and_budget(config: ServerConfig) -> None:
    spec = json.loads((FIXTURES / "add.json").read_text())
    source = (FIXTURES / "add.cu").read_text()
    async with in_memory_server(config) as (client, _):
        result = await client.call_tool("autotune", {
            "workload": "tiny_add", "tunable": spec, "source": source, "strategy": "random",
            "budget_evals": 4, "top": 2,
        })
        assert not result.is_error, text(result)
        out = result.structured_content
        assert out["counts"]["tried"] == 4 and len(out["top"]) == 2 and out["rows_not_shown"] == 2
        assert out["stop_reason"] == "evaluation budget of 4 spent"


@pytest.mark.parametrize(("args", "message"), [
    ({"tunable": {"params": {"B": [1]}, "defaults": {"B": 1}, "launch": {"grid": [1], "block": [1]}}},
     "needs `source`"),
    ({"tunable": {"params": {"n": [1]}, "defaults": {"n": 1}, "launch": {"grid": [1], "block": [1]}}, "source": "x"},
     "have the names of workload 'tiny_add'"),
    ({"tunable": {"params": {"B": [1]}, "defaults": {"B": 2}, "launch": {"grid": [1], "block": [1]}}, "source": "x"},
     "defaults.B = 2 is not one of"),
    ({"tunable_path": "/etc/passwd"}, "outside the directories"),
    ({}, "has no tunable.json"),
])
async def test_autotune_refuses_bad_requests_with_a_fix(
    config: ServerConfig, args: dict[str, Any], message: str
) -> None:
    async with in_memory_server(config) as (client, _):
        result = await client.call_tool("autotune", {"workload": "tiny_add", **args})
        assert result.is_error and message in text(result), text(result)


async def test_autotune_source_beside_the_spec_must_be_inside_a_root(config: ServerConfig, tmp_path: Path) -> None:
    spec = json.loads((FIXTURES / "add.json").read_text())
    spec["source"] = "../../../../../../../../etc/hostname"
    (config.workspace).mkdir(parents=True, exist_ok=True)
    (config.workspace / "t.json").write_text(json.dumps(spec))
    async with in_memory_server(config) as (client, _):
        result = await client.call_tool("autotune", {"workload": "tiny_add", "tunable_path": "t.json"})
        assert result.is_error and "outside the directories" in text(result)
