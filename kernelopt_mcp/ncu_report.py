"""Reading an Nsight Compute export and turning it into a summary a model can act on.

The input is ``ncu --import REPORT --csv --page raw --print-units base``: a header row of
metric names, a row of units, then one row per profiled kernel. Numbers may carry thousands
separators ("1,048,576"), some values are "n/a", and units may come scaled ("Kbyte",
"usecond") when an export was made without ``--print-units base``; all of that is handled
here. :func:`summarize` picks the numbers that matter (speed of light, occupancy and its
limiter, memory traffic, stalls, bank conflicts, coalescing) and derives a few hints.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, Field

from .errors import ProfilerError


@dataclass(frozen=True)
class Metric:
    """One exported value: a number in base units (bytes, ns, hz, %) or the raw text."""

    value: float | None
    unit: str
    text: str


_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")
_SCALE = {
    # bytes (ncu uses decimal prefixes: 1 Kbyte = 1000 byte)
    "byte": (1.0, "byte"), "kbyte": (1e3, "byte"), "mbyte": (1e6, "byte"), "gbyte": (1e9, "byte"),
    "tbyte": (1e12, "byte"),
    # time, normalised to nanoseconds
    "nsecond": (1.0, "nsecond"), "usecond": (1e3, "nsecond"), "msecond": (1e6, "nsecond"),
    "second": (1e9, "nsecond"), "ns": (1.0, "nsecond"), "us": (1e3, "nsecond"), "ms": (1e6, "nsecond"),
    # frequencies
    "hz": (1.0, "hz"), "khz": (1e3, "hz"), "mhz": (1e6, "hz"), "ghz": (1e9, "hz"),
}


def parse_number(text: str) -> float | None:
    """A CSV cell as a float: thousands separators removed; "n/a", "" and text give None."""
    t = text.strip()
    if not t or t.lower() in ("n/a", "na", "nan", "-"):
        return None
    if _THOUSANDS.match(t):
        t = t.replace(",", "")
    try:
        value = float(t)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_raw_csv(text: str) -> list[dict[str, Metric]]:
    """Every kernel row of a raw-page CSV export, as metric name -> :class:`Metric`.

    Raises:
        ProfilerError: no header row (the text is not an ncu raw CSV export).
    """
    rows = list(csv.reader(io.StringIO(text)))
    start = next(
        (i for i, r in enumerate(rows) if r and ("Kernel Name" in r or r[0] == "ID")), None
    )
    if start is None:
        head = "\n".join(text.strip().splitlines()[:5])
        raise ProfilerError(f"the ncu export has no header row (not a raw CSV export?): {head[:400]!r}")
    header = rows[start]
    units: list[str] = [""] * len(header)
    body = rows[start + 1:]
    # The units row has an empty ID cell; kernel rows start with their numeric ID.
    if body and body[0] and parse_number(body[0][0]) is None:
        units = (body[0] + [""] * len(header))[: len(header)]
        body = body[1:]
    kernels = []
    for row in body:
        if not row or len(row) < len(header) // 2 or row[0].startswith("=="):
            continue
        metrics: dict[str, Metric] = {}
        for name, unit, cell in zip(header, units, row, strict=False):
            value = parse_number(cell)
            scale, base = _SCALE.get(unit.strip().lower(), (1.0, unit.strip()))
            metrics[name] = Metric(None if value is None else value * scale, base, cell)
        kernels.append(metrics)
    return kernels


# --- the summary ---------------------------------------------------------------------------


class Throughput(BaseModel):
    """Speed of light: how busy the busiest unit of each kind was, as % of its peak."""

    compute_pct: float | None = Field(None, description="SM throughput (sm__throughput), % of peak")
    memory_pct: float | None = Field(None, description="memory throughput, the busiest of DRAM/L2/L1 "
                                     "(gpu__compute_memory_throughput), % of peak")
    dram_pct: float | None = Field(None, description="DRAM throughput, % of peak")


class Occupancy(BaseModel):
    achieved_pct: float | None = Field(None, description="active warps per SM cycle, % of the SM's maximum")
    theoretical_pct: float | None = Field(None, description="the most this launch can reach, % of the maximum")
    limiter: str | None = Field(None, description="what caps theoretical occupancy: registers, shared memory, warps "
                                "(block size) or blocks")
    block_limits: dict[str, float] = Field(default_factory=dict, description="blocks per SM each resource allows")
    registers_per_thread: float | None = None
    static_shared_bytes_per_block: float | None = None
    dynamic_shared_bytes_per_block: float | None = None
    block_size: float | None = None
    grid_size: float | None = None
    waves_per_sm: float | None = Field(None,
                                       description="grid size / (blocks per SM x SMs); below 1 the GPU is not filled")


class MemoryTraffic(BaseModel):
    dram_read_bytes: float | None = None
    dram_write_bytes: float | None = None
    l2_bytes: float | None = Field(None, description="bytes through the L2 (lts__t_bytes)")
    l1_bytes: float | None = Field(None, description="bytes through L1/TEX (l1tex__t_bytes)")
    l2_hit_pct: float | None = None
    l1_hit_pct: float | None = None
    flops_per_dram_byte: float | None = Field(None, description="the workload's FLOPs for this case / DRAM bytes moved")


class Stall(BaseModel):
    reason: str
    cycles_per_issue: float = Field(description="average cycles a warp spent in this state per issued instruction")
    share_pct: float | None = Field(None, description="share of all cycles between two issued instructions")


class SharedMemoryAccess(BaseModel):
    load_bank_conflicts: float | None = None
    store_bank_conflicts: float | None = None
    load_wavefronts: float | None = None
    store_wavefronts: float | None = None
    conflict_pct: float | None = Field(None,
                                       description="extra wavefronts from bank conflicts, % of all shared wavefronts")


class GlobalAccess(BaseModel):
    """Coalescing of the kernel's plain global loads and stores (LDG, STG): None where it issued
    none. Asynchronous copies into shared memory (cp.async, LDGSTS) are counted on their own;
    TMA's bulk copies bypass these units and appear in neither."""

    load_sectors_per_request: float | None = Field(None, description="32-byte sectors per warp-level global load (4 = "
                                                   "32 threads x 4 B, coalesced)")
    store_sectors_per_request: float | None = None
    load_bytes_used_per_sector_pct: float | None = Field(None, description="of each 32-byte sector loaded, % the "
                                                         "threads used (100 = coalesced)")
    store_bytes_used_per_sector_pct: float | None = None
    async_copy_sectors_per_request: float | None = Field(
        None,
        description="cp.async (LDGSTS): 32-byte sectors per warp-level request (16 = 32 threads x 16 B, coalesced)"
    )


class ProfileSummary(BaseModel):
    """A curated Nsight Compute profile of one kernel launch: numbers and what they suggest."""

    workload: str
    candidate: str
    case: str
    kernel: str
    device: str | None = None
    duration_ms: float | None = Field(None, description="kernel duration under the profiler (not a benchmark)")
    sm_clock_ghz: float | None = None
    throughput: Throughput = Field(default_factory=Throughput)
    occupancy: Occupancy = Field(default_factory=Occupancy)
    memory: MemoryTraffic = Field(default_factory=MemoryTraffic)
    warp_cycles_per_issue: float | None = Field(None, description="average cycles between two instructions of a warp")
    top_stalls: list[Stall] = Field(default_factory=list)
    shared_memory: SharedMemoryAccess = Field(default_factory=SharedMemoryAccess)
    global_access: GlobalAccess = Field(default_factory=GlobalAccess)
    hints: list[str] = Field(default_factory=list, description="plain-language suggestions derived from the numbers")
    report_path: str | None = Field(None, description="the saved .ncu-rep (open with ncu-ui or ncu --import)")
    export_path: str | None = Field(None, description="the raw CSV export the summary was read from")
    clock_control: str = "none"
    section_set: str = "curated"
    ncu_version: str | None = None
    notes: list[str] = Field(default_factory=list)

    def text(self) -> str:
        """A compact, readable rendering (the CLI and the MCP tool's text content)."""
        t, o, m, s, g = self.throughput, self.occupancy, self.memory, self.shared_memory, self.global_access
        lines = [
            f"{self.workload} · {self.candidate} · case {self.case} · kernel {self.kernel}"
            + (f" · {self.device}" if self.device else ""),
            f"  duration {_f(self.duration_ms, ' ms', 4)} under the profiler (clock control {self.clock_control}; not "
            "a benchmark)"
            + (f", SM clock {_f(self.sm_clock_ghz, ' GHz', 3)}" if self.sm_clock_ghz else ""),
            f"  speed of light: compute {_f(t.compute_pct, '%')}, memory {_f(t.memory_pct, '%')}, DRAM "
            f"{_f(t.dram_pct, '%')}",
            f"  occupancy: achieved {_f(o.achieved_pct, '%')} of theoretical {_f(o.theoretical_pct, '%')}"
            + (f", limited by {o.limiter}" if o.limiter else "")
            + (" (blocks/SM by " + ", ".join(f"{k} {v:g}" for k, v in o.block_limits.items()) + ")"
               if o.block_limits else ""),
            f"  launch: {_f(o.registers_per_thread, '', 0)} registers/thread, shared "
            f"{_bytes(o.static_shared_bytes_per_block)} static + {_bytes(o.dynamic_shared_bytes_per_block)} dynamic "
            f"per block, block {_f(o.block_size, '', 0)}, grid {_f(o.grid_size, '', 0)}, "
            f"{_f(o.waves_per_sm, ' waves', 3)}",
            f"  memory: DRAM read {_bytes(m.dram_read_bytes)}, write {_bytes(m.dram_write_bytes)}; L2 "
            f"{_bytes(m.l2_bytes)} (hit {_f(m.l2_hit_pct, '%')}); L1 {_bytes(m.l1_bytes)} (hit {_f(m.l1_hit_pct, '%')})"
            + (f"; {m.flops_per_dram_byte:.3g} FLOP per DRAM byte" if m.flops_per_dram_byte else ""),
            f"  global access: {_f(g.load_sectors_per_request, '', 3)} sectors/load request"
            + (f" ({g.load_bytes_used_per_sector_pct:.0f}% of each sector used)"
               if g.load_bytes_used_per_sector_pct is not None else "")
            + f", {_f(g.store_sectors_per_request, '', 3)} sectors/store request"
            + (f" ({g.store_bytes_used_per_sector_pct:.0f}% used)"
               if g.store_bytes_used_per_sector_pct is not None else "")
            + (f", {g.async_copy_sectors_per_request:.3f} sectors/cp.async request"
               if g.async_copy_sectors_per_request else ""),
            f"  shared memory: {_f(s.load_bank_conflicts, '', 0)} load / {_f(s.store_bank_conflicts, '', 0)} store "
            "bank conflicts"
            + (f" ({s.conflict_pct:.1f}% of shared wavefronts)" if s.conflict_pct is not None else ""),
        ]
        if self.top_stalls:
            lines.append(
                f"  warp stalls (of {_f(self.warp_cycles_per_issue, ' cycles', 3)} between issues): "
                + ", ".join(f"{x.reason} {x.cycles_per_issue:.2f}"
                            + (f" ({x.share_pct:.0f}%)" if x.share_pct is not None else "") for x in self.top_stalls)
            )
        lines += [f"  hint: {h}" for h in self.hints]
        lines += [f"  note: {n}" for n in self.notes]
        if self.report_path:
            lines.append(f"  report: {self.report_path}")
        return "\n".join(lines)


def _f(x: float | None, unit: str = "", digits: int = 1) -> str:
    if x is None:
        return "n/a"
    return f"{x:.{digits}f}{unit}" if digits else f"{x:,.0f}{unit}"


def _bytes(x: float | None) -> str:
    if x is None:
        return "n/a"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.0f} B"


# --- from metrics to summary ---------------------------------------------------------------

_LIMITS = {"registers": "registers", "shared_mem": "shared memory", "warps": "warps (block size)",
           "blocks": "blocks per SM"}
_STALL_FAMILIES = (
    re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$"),
    re.compile(r"^smsp__average_warp_latency_issue_stalled_(\w+?)(?:\.ratio|\.sum|\.avg)?$"),
    re.compile(r"^smsp__pcsamp_warps_issue_stalled_(\w+?)(?:\.sum)?$"),
)


def pick_kernel(kernels: list[dict[str, Metric]], entry: str) -> dict[str, Metric]:
    """The row of the kernel named ``entry`` (ncu may show ``entry`` or ``entry(args)``)."""
    if not kernels:
        raise ProfilerError(f"the ncu export holds no kernel rows: kernel {entry!r} was not profiled")
    for row in kernels:
        name = (row.get("Kernel Name") or Metric(None, "", "")).text
        if name == entry or name.split("(")[0].strip() == entry:
            return row
    return kernels[0]


def summarize(
    row: dict[str, Metric], *, workload: str, candidate: str, case: str, kernel: str, flops: float | None = None
) -> ProfileSummary:
    """Build the curated summary (without report paths) from one kernel's metrics."""

    def v(*names: str) -> float | None:
        for n in names:
            m = row.get(n)
            if m is not None and m.value is not None:
                return m.value
        return None

    duration_ns = v("gpu__time_duration.sum", "gpu__time_duration.avg")
    clock = v("sm__cycles_elapsed.avg.per_second", "smsp__cycles_elapsed.avg.per_second")
    device = row.get("device__attribute_display_name")
    limits = {
        label: val for key, label in _LIMITS.items()
        if (val := v(f"launch__occupancy_limit_{key}")) is not None
    }
    occ = Occupancy(
        achieved_pct=v("sm__warps_active.avg.pct_of_peak_sustained_active"),
        theoretical_pct=v("sm__maximum_warps_per_active_cycle_pct"),
        limiter=min(limits, key=lambda k: limits[k]) if limits else None,
        block_limits=limits,
        registers_per_thread=v("launch__registers_per_thread"),
        static_shared_bytes_per_block=v("launch__shared_mem_per_block_static"),
        dynamic_shared_bytes_per_block=v("launch__shared_mem_per_block_dynamic"),
        block_size=v("launch__block_size"),
        grid_size=v("launch__grid_size"),
        waves_per_sm=v("launch__waves_per_multiprocessor"),
    )
    if occ.theoretical_pct is not None and occ.theoretical_pct >= 99.9:
        occ.limiter = None  # nothing limits a launch that reaches the maximum
    dram_read, dram_write = v("dram__bytes_read.sum"), v("dram__bytes_write.sum")
    dram_total = (dram_read or 0) + (dram_write or 0)
    mem = MemoryTraffic(
        dram_read_bytes=dram_read, dram_write_bytes=dram_write,
        l2_bytes=v("lts__t_bytes.sum"), l1_bytes=v("l1tex__t_bytes.sum"),
        l2_hit_pct=v("lts__t_sector_hit_rate.pct"), l1_hit_pct=v("l1tex__t_sector_hit_rate.pct"),
        flops_per_dram_byte=flops / dram_total if flops and dram_total > 0 else None,
    )
    ld_c, st_c = (v("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"),
                  v("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"))
    ld_w, st_w = (v("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"),
                  v("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"))
    wavefronts = (ld_w or 0) + (st_w or 0)
    shared = SharedMemoryAccess(
        load_bank_conflicts=ld_c, store_bank_conflicts=st_c, load_wavefronts=ld_w, store_wavefronts=st_w,
        conflict_pct=100 * ((ld_c or 0) + (st_c or 0)) / wavefronts if wavefronts > 0 else None,
    )
    glob = _global_access(v)
    latency = v("smsp__average_warp_latency_per_inst_issued.ratio")
    summary = ProfileSummary(
        workload=workload, candidate=candidate, case=case, kernel=kernel,
        device=device.text if device is not None and device.text else None,
        duration_ms=duration_ns / 1e6 if duration_ns is not None else None,
        sm_clock_ghz=clock / 1e9 if clock else None,
        throughput=Throughput(
            compute_pct=v("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
            memory_pct=v("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
            dram_pct=v("dram__throughput.avg.pct_of_peak_sustained_elapsed",
                       "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
        ),
        occupancy=occ, memory=mem, warp_cycles_per_issue=latency,
        top_stalls=_stalls(row, latency), shared_memory=shared, global_access=glob,
    )
    summary.hints = hints(summary)
    return summary


def _global_access(v: Callable[..., float | None]) -> GlobalAccess:
    """Coalescing of LDG / STG alone. The LSU's global-load counters also count cp.async
    (LDGSTS), and the SASS bytes-per-sector ratios read 0% for an instruction that never ran, so
    a kernel loading only with cp.async would look uncoalesced: its LDGSTS requests and sectors
    are taken out and reported on their own."""
    ldg, stg = v("smsp__sass_inst_executed_op_global_ld.sum"), v("smsp__sass_inst_executed_op_global_st.sum")
    async_requests = v("sm__sass_l1tex_t_requests_pipe_lsu_mem_global_op_ldgsts.sum") or 0.0
    async_sectors = sum(
        v(f"sm__sass_l1tex_t_sectors_pipe_lsu_mem_global_op_ldgsts_cache_{way}.sum") or 0.0
        for way in ("access", "bypass")
    )
    requests, sectors = (v("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"),
                         v("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"))
    if ldg == 0:
        load_spr = None
    elif async_requests and requests is not None and sectors is not None:
        load_spr = _ratio(sectors - async_sectors, requests - async_requests) if requests > async_requests else None
    else:
        load_spr = (_ratio(sectors, requests)
                    or v("l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio"))
    return GlobalAccess(
        load_sectors_per_request=load_spr,
        store_sectors_per_request=None if stg == 0 else (
            _ratio(v("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"),
                   v("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"))
            or v("l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio")
        ),
        load_bytes_used_per_sector_pct=(None if ldg == 0
                                        else v("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct")),
        store_bytes_used_per_sector_pct=(None if stg == 0
                                         else v("smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct")),
        async_copy_sectors_per_request=_ratio(async_sectors, async_requests),
    )


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _stalls(row: dict[str, Metric], latency: float | None, top: int = 5) -> list[Stall]:
    for family in _STALL_FAMILIES:
        found = {}
        for name, metric in row.items():
            match = family.match(name)
            if match and metric.value is not None and not match.group(1).endswith("not_issued"):
                found[match.group(1)] = metric.value
        if found:
            total = latency if family is _STALL_FAMILIES[0] and latency else sum(found.values())
            ranked = sorted(found.items(), key=lambda kv: -kv[1])[:top]
            return [
                Stall(reason=r, cycles_per_issue=val, share_pct=100 * val / total if total else None)
                for r, val in ranked if val > 0
            ]
    return []


_STALL_ADVICE = {
    "long_scoreboard": "warps mostly wait for global/local memory (long scoreboard): keep more loads in flight (vector "
    "loads, several independent loads per thread, cp.async prefetch) or reuse data from shared memory/registers",
    "barrier": "warps mostly wait at __syncthreads (barrier): balance the work between barriers, use fewer barriers, "
    "or double-buffer so loads overlap compute",
    "mio_throttle": "the shared-memory/special-function queue is full (MIO throttle): fewer, wider shared-memory "
    "accesses (float4), fewer bank conflicts",
    "short_scoreboard": "warps wait on shared memory or special functions (short scoreboard): cut shared-memory round "
    "trips (register blocking) and bank conflicts",
    "math_pipe_throttle": "a math pipe is saturated (math pipe throttle): the kernel is compute-bound on that pipe; "
    "use a faster pipe (tensor cores, FMA instead of separate mul/add) or fewer instructions",
    "wait": "warps wait on fixed-latency dependencies (wait): more independent instructions per thread (ILP, several "
    "accumulators)",
    "lg_throttle": "the global load/store queue is full (LG throttle): issue fewer, wider memory instructions (float4, "
    "16-byte accesses)",
    "tex_throttle": "the texture/read-only path is saturated (TEX throttle): fewer __ldg/texture "
    "requests or wider ones",
    "not_selected": "eligible warps were often not selected: the scheduler has spare warps; this is usually fine",
    "dispatch_stall": "dispatch stalls: pipeline conflicts; often reduced by fewer divergent or dependent instructions",
    "no_instruction": "instruction-cache misses (no instruction): a very large unrolled loop body; unroll less",
    "branch_resolving": "branch resolving: many divergent branches; make control flow uniform per warp",
    "membar": "memory barriers (membar): fewer __threadfence calls",
    "drain": "drain: waiting for stores at exit; usually small",
}


def hints(s: ProfileSummary) -> list[str]:
    """3-6 plain-language suggestions, most important first."""
    out: list[str] = []
    t, o, m = s.throughput, s.occupancy, s.memory
    comp, mem, dram = t.compute_pct, t.memory_pct, t.dram_pct
    if dram is not None and dram >= 75:
        out.append(
            f"memory-bound: DRAM at {dram:.0f}% of peak (within {max(0.0, 100 - dram):.0f}% of it): further gains need "
            "fewer bytes (fuse passes, reuse through shared memory, narrower types), not faster code"
        )
    elif comp is not None and comp >= 70 and (mem is None or comp >= mem):
        out.append(
            f"compute-bound: SM throughput {comp:.0f}% of peak: cut instructions per result (register blocking, "
            "fewer index computations) or move the math to tensor cores if the tolerance allows"
        )
    elif mem is not None and mem >= 70:
        out.append(
            f"a memory unit is busy ({mem:.0f}% of peak) while DRAM is at {_f(dram, '%', 0)}: the bottleneck is "
            "L1/shared memory or L2 traffic; reuse data in registers and avoid redundant shared or L2 accesses"
        )
    elif comp is not None and mem is not None and max(comp, mem) < 40:
        out.append(
            f"latency-bound: neither compute ({comp:.0f}%) nor memory ({mem:.0f}%) is busy: expose more parallelism "
            "(more warps, more independent work per thread, more loads in flight)"
        )
    if o.waves_per_sm is not None and o.waves_per_sm < 1:
        out.append(
            f"the grid fills only {100 * o.waves_per_sm:.0f}% of one wave over the SMs: use more, smaller blocks "
            "(or split-K / split the work) so every SM has work"
        )
    if o.theoretical_pct is not None and o.theoretical_pct < 50 and o.limiter:
        if o.limiter == "registers":
            out.append(
                f"occupancy is limited by registers ({_f(o.registers_per_thread, '', 0)}/thread: theoretical "
                f"{o.theoretical_pct:.0f}%): try __launch_bounds__(threads, min_blocks) or keep fewer values live"
                + ("; low occupancy is fine if each thread has enough independent work (ILP)"
                   if (comp or 0) > 50 else "")
            )
        elif o.limiter == "shared memory":
            per_block = (o.static_shared_bytes_per_block or 0) + (o.dynamic_shared_bytes_per_block or 0)
            out.append(
                f"occupancy is limited by shared memory ({_bytes(per_block)} per block: theoretical "
                f"{o.theoretical_pct:.0f}%): smaller tiles, fewer pipeline stages, or reuse buffers"
            )
        else:
            out.append(
                f"occupancy is limited by {o.limiter} (theoretical {o.theoretical_pct:.0f}%): use blocks of 128-512 "
                "threads so more warps fit on each SM"
            )
    elif (
        o.achieved_pct is not None and o.theoretical_pct and o.achieved_pct < 0.7 * o.theoretical_pct
        and (o.waves_per_sm is None or o.waves_per_sm >= 1)
    ):
        out.append(
            f"achieved occupancy {o.achieved_pct:.0f}% is well below the theoretical {o.theoretical_pct:.0f}%: "
            "uneven work between warps or blocks, or a partial last wave"
        )
    g = s.global_access
    if g.load_bytes_used_per_sector_pct is not None and g.load_bytes_used_per_sector_pct < 60:
        out.append(
            f"global loads use only {g.load_bytes_used_per_sector_pct:.0f}% of each 32-byte sector "
            f"({_f(g.load_sectors_per_request, '', 2)} sectors per request): let adjacent threads read adjacent "
            "addresses (coalescing), or stage the tile through shared memory"
        )
    elif g.load_sectors_per_request is not None and g.load_sectors_per_request > 16:
        out.append(
            f"{g.load_sectors_per_request:.1f} sectors per global load request (4 is ideal for 4-byte accesses, "
            "16 for float4): accesses are uncoalesced; let adjacent threads read adjacent addresses"
        )
    sh = s.shared_memory
    if (sh.conflict_pct is not None and sh.conflict_pct > 10
            and ((sh.load_bank_conflicts or 0) + (sh.store_bank_conflicts or 0)) > 1e4):
        out.append(
            f"shared-memory bank conflicts add {sh.conflict_pct:.0f}% extra wavefronts: pad the inner dimension "
            "(e.g. [32][33]) or swizzle the index so a warp's accesses hit 32 different banks"
        )
    if s.top_stalls:
        top = s.top_stalls[0]
        advice = _STALL_ADVICE.get(top.reason)
        if advice and top.reason not in ("not_selected", "drain"):
            out.append(advice + (f" ({top.cycles_per_issue:.1f} cycles per issue)" if top.cycles_per_issue else ""))
    if m.l2_hit_pct is not None and m.l2_hit_pct < 50 and dram is not None and dram > 40:
        out.append(
            f"L2 hit rate is {m.l2_hit_pct:.0f}%: data is re-read from DRAM; tile or reorder blocks so blocks that "
            "share data run together"
        )
    if not out:
        out.append("no single bottleneck stands out: compare with the roofline (gpu_properties) and try "
                   "one change at a time")
    return out[:6]
