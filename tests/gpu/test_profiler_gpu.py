"""Nsight Compute on a real GPU: sgemm's naive starting kernel against its tiled CUDA reference.

Run with --run-gpu on a machine whose ncu may read the counters (root, or
NVreg_RestrictProfilingToAdminUsers=0). The naive kernel re-reads A and B from memory for every
output; the reference tiles through shared memory with 8x8 register blocks, so its profile must
show fewer DRAM bytes (more FLOPs per DRAM byte), a shorter duration, and the occupancy it gives
up for register blocking.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from kernelopt_mcp import (
    Candidate,
    EvaluateOptions,
    HarnessProcess,
    Session,
    Settings,
)
from kernelopt_mcp.cli import main
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.evaluation.candidate import initial_candidate
from kernelopt_mcp.evaluation.device import device_info
from kernelopt_mcp.ncu_report import ProfileSummary
from kernelopt_mcp.profiler import ProfileOptions, find_ncu, profile_case

pytestmark = [pytest.mark.gpu, pytest.mark.ncu]

CASE = "square_4096"


@pytest.fixture(scope="module")
def profiles(harness_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ProfileSummary]]:
    find_ncu()  # a clear failure when Nsight Compute is missing
    wl = find_workload("sgemm", Settings())
    ref = wl.spec.reference
    assert wl.reference_cu and ref.launch
    candidates = {
        "initial": initial_candidate(wl),
        "reference": Candidate(wl.reference_cu, ref.launch, ref.compile_options, "reference"),
    }
    out = tmp_path_factory.mktemp("profiles")
    with HarnessProcess(harness_binary, 0) as proc, Session(
        wl, proc, device_info(harness_binary, 0), options=EvaluateOptions(timeout_s=120)
    ) as ev:
        yield {
            name: profile_case(ev, c, CASE, out / name, ProfileOptions(), harness=harness_binary)
            for name, c in candidates.items()
        }


def test_both_profiles_are_complete(profiles: dict[str, ProfileSummary]) -> None:
    for name, s in profiles.items():
        assert s.case == CASE and s.kernel == "sgemm" and s.clock_control == "none", name
        assert s.duration_ms and s.duration_ms > 0.5, (name, s.duration_ms)
        assert s.throughput.compute_pct and s.throughput.memory_pct and s.throughput.dram_pct is not None, name
        assert s.occupancy.achieved_pct and s.occupancy.theoretical_pct and s.occupancy.registers_per_thread, name
        assert s.occupancy.block_size == 256 and s.occupancy.block_limits, name
        assert s.memory.dram_read_bytes and s.memory.l2_bytes and s.memory.l2_hit_pct is not None, name
        assert s.global_access.load_sectors_per_request, name
        assert s.top_stalls and s.warp_cycles_per_issue, name
        assert 1 <= len(s.hints) <= 6, name
        assert s.report_path and Path(s.report_path).is_file() and s.report_path.endswith(".ncu-rep"), name
        assert s.export_path and Path(s.export_path).stat().st_size > 1000, name
        assert (Path(s.report_path).parent / "summary.json").is_file()


def test_the_tiled_kernel_moves_fewer_bytes_and_gives_up_occupancy(profiles: dict[str, ProfileSummary]) -> None:
    naive, tiled = profiles["initial"], profiles["reference"]
    print(naive.text(), tiled.text(), sep="\n\n")
    assert tiled.duration_ms is not None and naive.duration_ms is not None
    assert tiled.duration_ms < naive.duration_ms / 2
    dram = lambda s: (s.memory.dram_read_bytes or 0) + (s.memory.dram_write_bytes or 0)  # noqa: E731
    assert dram(tiled) < dram(naive)
    assert tiled.memory.flops_per_dram_byte and naive.memory.flops_per_dram_byte
    assert tiled.memory.flops_per_dram_byte > naive.memory.flops_per_dram_byte
    # 8x8 register blocks: many registers per thread, so fewer warps fit than for the naive kernel
    assert (tiled.occupancy.registers_per_thread or 0) > (naive.occupancy.registers_per_thread or 0)
    assert (tiled.occupancy.theoretical_pct or 100) < (naive.occupancy.theoretical_pct or 0)
    assert tiled.occupancy.limiter == "registers"


def test_cli_profile_prints_a_summary_and_saves_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "sgemm", "--case", "wide_2048x8192x1024", "-o", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    print(out)
    for needle in ("sgemm · initial · case wide_2048x8192x1024", "speed of light", "occupancy", "hint:", "report:"):
        assert needle in out
    assert (tmp_path / "p" / "profile.ncu-rep").is_file() and (tmp_path / "p" / "raw.csv").is_file()


def test_the_mcp_tool_returns_the_same_summary(harness_binary: Path, tmp_path: Path) -> None:
    from mcp import Client

    from kernelopt_mcp.server import build_server
    from kernelopt_mcp.server_config import ServerConfig

    async def run() -> dict:
        app, service = build_server(ServerConfig(settings=Settings(harness=harness_binary), workspace=tmp_path / "ws"))
        try:
            async with Client(app) as client:
                r = await client.call_tool("ncu_profile", {"workload": "sgemm", "case": "wide_2048x8192x1024"})
                assert not r.is_error, r.content
                return r.structured_content
        finally:
            service.close()

    out = anyio.run(run)
    assert out["kernel"] == "sgemm" and out["candidate"] == "initial" and out["duration_ms"] > 0
    assert Path(out["report_path"]).is_file() and "/runs/profiles/" in out["report_path"]
    assert out["hints"] and out["occupancy"]["theoretical_pct"] > 0
