"""Reading Nsight Compute exports: the CSV format's quirks, the summary's hints, and real exports
of sgemm's naive and tiled kernels recorded on an H200 (tests/fixtures/ncu/, written by
scripts/record_ncu_fixtures.sh through kernelopt's own profiler)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelopt_mcp import Settings, expr
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.errors import ProfilerError
from kernelopt_mcp.ncu_report import (
    GlobalAccess,
    MemoryTraffic,
    Metric,
    Occupancy,
    ProfileSummary,
    SharedMemoryAccess,
    Throughput,
    hints,
    parse_number,
    parse_raw_csv,
    pick_kernel,
    summarize,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "ncu"
RECORDED = ["initial", "reference"]
NOT_RECORDED = "fixtures not recorded yet: run scripts/record_ncu_fixtures.sh on an H200"


# --- the CSV format --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [("1,048,576", 1048576.0), ("12.5", 12.5), ("-3", -3.0), ("1,234.75", 1234.75), ("n/a", None), ("", None),
     ("(16, 16, 1)", None), ("sgemm", None), ("nan", None), ("1,2", None)],
)
def test_numbers(text: str, value: float | None) -> None:
    assert parse_number(text) == value


def test_header_units_row_and_scaled_units() -> None:
    text = (
        "==PROF== Connected to process 77\n"
        '"ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum","sm__cycles_elapsed.avg.per_second",'
        '"launch__grid_size"\n'
        '"","","usecond","Kbyte","Ghz",""\n'
        '"0","other_kernel","1.5","2","1.5","8"\n'
        '"1","sgemm","25.5","1,000","1.98","65,536"\n'
    )
    kernels = parse_raw_csv(text)
    assert len(kernels) == 2
    row = pick_kernel(kernels, "sgemm")
    assert row["gpu__time_duration.sum"] == Metric(25500.0, "nsecond", "25.5")
    assert row["dram__bytes_read.sum"].value == 1e6 and row["dram__bytes_read.sum"].unit == "byte"
    assert row["sm__cycles_elapsed.avg.per_second"].value == pytest.approx(1.98e9)
    assert row["launch__grid_size"].value == 65536
    # ncu may print the demangled signature; the entry name still finds the row
    assert pick_kernel(parse_raw_csv(text.replace('"sgemm"', '"sgemm(const float *, int)"')),
                       "sgemm")["launch__grid_size"].value == 65536


def test_not_an_export_is_an_error() -> None:
    with pytest.raises(ProfilerError, match="no header row"):
        parse_raw_csv("==ERROR== something went wrong\n")
    with pytest.raises(ProfilerError, match="no kernel rows"):
        pick_kernel(parse_raw_csv('"ID","Kernel Name"\n"",""\n'), "sgemm")


def test_stalls_are_ranked_with_their_share() -> None:
    names = {
        "smsp__average_warp_latency_per_inst_issued.ratio": 20.0,
        "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": 12.0,
        "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": 3.0,
        "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio": 1.0,
        "smsp__average_warps_issue_stalled_long_scoreboard_not_issued_per_issue_active.ratio": 99.0,
    }
    row = {k: Metric(v, "", str(v)) for k, v in names.items()}
    s = summarize(row, workload="w", candidate="c", case="x", kernel="k")
    assert [x.reason for x in s.top_stalls] == ["long_scoreboard", "barrier", "wait"]
    assert s.top_stalls[0].share_pct == pytest.approx(60.0)
    assert any("long scoreboard" in h for h in s.hints)


# --- hints -----------------------------------------------------------------------------------


def _summary(**parts: object) -> ProfileSummary:
    return ProfileSummary(workload="w", candidate="c", case="x", kernel="k", **parts)  # type: ignore[arg-type]


def test_memory_bound_near_peak() -> None:
    h = hints(_summary(throughput=Throughput(compute_pct=20, memory_pct=92, dram_pct=91)))
    assert h[0].startswith("memory-bound: DRAM at 91% of peak (within 9% of it)") and "fewer bytes" in h[0]


def test_latency_bound_with_register_limited_occupancy() -> None:
    s = _summary(
        throughput=Throughput(compute_pct=15, memory_pct=20, dram_pct=18),
        occupancy=Occupancy(achieved_pct=23, theoretical_pct=25, limiter="registers", registers_per_thread=128,
                            waves_per_sm=3),
    )
    h = hints(s)
    assert h[0].startswith("latency-bound")
    assert any("occupancy is limited by registers (128/thread" in x and "__launch_bounds__" in x for x in h)


def test_conflicts_uncoalesced_and_partial_wave() -> None:
    s = _summary(
        throughput=Throughput(compute_pct=50, memory_pct=60, dram_pct=30),
        occupancy=Occupancy(achieved_pct=40, theoretical_pct=100, waves_per_sm=0.4),
        shared_memory=SharedMemoryAccess(load_bank_conflicts=3e6, store_bank_conflicts=0, load_wavefronts=4e6,
                                         store_wavefronts=1e6, conflict_pct=60),
        global_access=GlobalAccess(load_sectors_per_request=28, load_bytes_used_per_sector_pct=14),
        memory=MemoryTraffic(l2_hit_pct=20),
    )
    h = hints(s)
    assert any("40% of one wave" in x for x in h)
    assert any("14% of each 32-byte sector" in x and "coalescing" in x for x in h)
    assert any("bank conflicts" in x and "[32][33]" in x for x in h)
    assert 3 <= len(h) <= 6


def test_there_is_always_something_to_say() -> None:
    assert hints(_summary())


# --- real exports recorded on an H200 ---------------------------------------------------------


def _recorded(name: str) -> tuple[str, dict | None, str]:
    """The recorded raw export, its recorded summary (when kept) and the profiled case."""
    csv_path, summary_path = FIXTURES / f"sgemm_{name}.raw.csv", FIXTURES / f"sgemm_{name}.summary.json"
    meta_path = FIXTURES / "meta.json"
    if not csv_path.is_file() or not meta_path.is_file():
        pytest.skip(NOT_RECORDED)
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
    return csv_path.read_text(), summary, json.loads(meta_path.read_text())["case"]


def _parse(name: str) -> tuple[ProfileSummary, dict | None]:
    text, recorded, case = _recorded(name)
    wl = find_workload("sgemm", Settings())
    flops = float(expr.evaluate(wl.spec.cost.flops or "0", wl.spec.case(case).scalars))
    summary = summarize(
        pick_kernel(parse_raw_csv(text), "sgemm"), workload="sgemm", candidate=name, case=case,
        kernel="sgemm", flops=flops,
    )
    return summary, recorded


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_export_parses_to_the_recorded_summary(name: str) -> None:
    summary, recorded = _parse(name)
    if recorded is None:
        pytest.skip(f"the summary recorded with sgemm_{name}.raw.csv did not come back from the device")
    # (the device name may come from the harness's answer when the export lacks it)
    exclude = {"report_path", "export_path", "clock_control", "section_set", "ncu_version", "notes", "device"}
    ours = summary.model_dump(exclude=exclude)
    # through the model: fields added since the recording (with their defaults) compare too
    theirs = ProfileSummary.model_validate(recorded).model_dump(exclude=exclude)
    assert ours == theirs
    assert "H200" in (recorded["device"] or "") and summary.device in (None, recorded["device"])
    # every part of the summary is filled from a real export
    assert summary.duration_ms and summary.sm_clock_ghz
    t, o, m = summary.throughput, summary.occupancy, summary.memory
    assert None not in (t.compute_pct, t.memory_pct, t.dram_pct, o.achieved_pct, o.theoretical_pct,
                        o.registers_per_thread)
    assert o.block_size == 256 and set(o.block_limits) >= {"registers", "shared memory", "warps (block size)",
                                                           "blocks per SM"}
    assert None not in (m.dram_read_bytes, m.dram_write_bytes, m.l2_bytes, m.l1_bytes, m.l2_hit_pct, m.l1_hit_pct)
    assert summary.global_access.load_sectors_per_request and summary.top_stalls and summary.warp_cycles_per_issue
    assert summary.shared_memory.load_bank_conflicts is not None and 1 <= len(summary.hints) <= 6


def _summary_of(fixture: str, kernel: str) -> ProfileSummary:
    text = (FIXTURES / fixture).read_text()
    return summarize(pick_kernel(parse_raw_csv(text), kernel), workload=kernel, candidate="x", case="c", kernel=kernel)


def test_cp_async_loads_are_not_counted_as_uncoalesced_plain_loads() -> None:
    # the wgmma GEMM (recorded on the H200, 2026-12-04) loads only with cp.async, 16 bytes per
    # thread: the LSU's load counters hold those requests, and the SASS LDG ratio reads 0%
    s = _summary_of("gemm_bf16_wgmma.raw.csv", "gemm_bf16")
    g = s.global_access
    assert g.load_sectors_per_request is None and g.load_bytes_used_per_sector_pct is None
    assert g.async_copy_sectors_per_request is not None and 15.5 < g.async_copy_sectors_per_request <= 16
    assert g.store_bytes_used_per_sector_pct == 100
    assert not any("sector" in h for h in s.hints), s.hints
    assert "sectors/cp.async request" in s.text()
    # the histogram stores nothing with STG (shared atomics, then global atomics): no store ratio
    h = _summary_of("histogram_lanes.raw.csv", "histogram").global_access
    assert h.store_sectors_per_request is None and h.store_bytes_used_per_sector_pct is None
    assert h.load_bytes_used_per_sector_pct == 100 and h.async_copy_sectors_per_request is None


def test_recorded_exports_show_what_tiling_changes() -> None:
    naive, _ = _parse("initial")
    tiled, _ = _parse("reference")
    assert tiled.duration_ms and naive.duration_ms and tiled.duration_ms < naive.duration_ms / 2
    assert (tiled.memory.flops_per_dram_byte or 0) > (naive.memory.flops_per_dram_byte or 0)
    assert (tiled.occupancy.registers_per_thread or 0) > (naive.occupancy.registers_per_thread or 0)
    assert tiled.occupancy.limiter == "registers"
    assert (tiled.occupancy.theoretical_pct or 100) < (naive.occupancy.theoretical_pct or 0)
    # the naive kernel touches no shared memory at all
    assert not naive.shared_memory.load_wavefronts and tiled.shared_memory.load_wavefronts
