"""The bundled tunable kernels (workloads/<name>/tunable.json + tunable.cu), checked without a GPU.

For each workload: the defaults satisfy the constraints; every valid configuration's launch
expressions resolve for every case within the device limits, and the grid covers every output
element; configurations compile with NVRTC for sm_90 with the workload's entry point and
parameter sizes, no spills or local memory, and registers x threads and shared memory within an
SM's limits. Compiling every configuration takes minutes, so by default a fixed sample is compiled
(the defaults, the largest and smallest blocks, the most register-hungry configuration, and a
seeded random draw); KERNELOPT_TUNABLE_ALL=1 compiles all of them (add --timeout=0).
tests/workloads/test_tunable_emulated.py runs the kernels themselves on the CPU.

The helpers (load_tunable, valid_configs, concrete_launch, options_for) are also used by
tests/gpu/test_tunable_gpu.py.
"""

from __future__ import annotations

import itertools
import json
import os
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kernelopt_mcp import expr
from kernelopt_mcp.compiler import CompileResult, compile_kernel
from kernelopt_mcp.launch import (
    DeviceLimits,
    LaunchConfig,
    LaunchSpec,
    ResolvedLaunch,
    resolve,
)
from kernelopt_mcp.workload import Workload, load_workload

REPO = Path(__file__).resolve().parents[2]
TUNABLE = ["sgemm", "softmax", "reduce_sum", "transpose", "layernorm"]
LIMITS = DeviceLimits()
REGISTERS_PER_SM = 65536
SAMPLE = 6  # random configurations compiled per workload on top of the fixed ones
Config = dict[str, int]


@dataclass
class Tunable:
    workload: Workload
    spec: dict[str, Any]
    source: str


def load_tunable(name: str, spec_file: str = "tunable.json") -> Tunable:
    """workloads/<name>/tunable.json (or another spec beside it), its source and the workload."""
    root = REPO / "workloads" / name
    spec = json.loads((root / spec_file).read_text())
    return Tunable(load_workload(root), spec, (root / spec["source"]).read_text())


def satisfies(spec: dict[str, Any], config: Config) -> bool:
    return all(expr.evaluate(c, config) for c in spec["constraints"])


def valid_configs(spec: dict[str, Any]) -> list[Config]:
    names = list(spec["params"])
    every = (dict(zip(names, values, strict=True)) for values in itertools.product(*spec["params"].values()))
    return [c for c in every if satisfies(spec, c)]


def options_for(spec: dict[str, Any], config: Config) -> list[str]:
    return [*spec.get("compile_options", []), *(f"-D{k}={v}" for k, v in config.items())]


def concrete_launch(spec: dict[str, Any], config: Config) -> LaunchSpec:
    """The launch spec with every parameter name replaced by its value (case scalars remain)."""

    def sub(value: int | str) -> int | str:
        if isinstance(value, int):
            return value
        text = value
        for name in sorted(config, key=len, reverse=True):
            text = _replace_name(text, name, str(config[name]))
        return text

    def one(cfg: dict[str, Any]) -> dict[str, Any]:
        out = {
            "grid": [sub(v) for v in cfg["grid"]],
            "block": [sub(v) for v in cfg["block"]],
            "shared_bytes": sub(cfg.get("shared_bytes", 0)),
        }
        if cfg.get("tensor_maps"):  # every list of expressions in a map, the rest as it is
            out["tensor_maps"] = [
                {k: [sub(v) for v in value] if isinstance(value, list) else value for k, value in m.items()}
                for m in cfg["tensor_maps"]
            ]
        return out

    launch = spec["launch"]
    out: dict[str, Any] = {}
    if "default" in launch:
        out["default"] = one(launch["default"])
    if "cases" in launch:
        out["cases"] = {k: one(v) for k, v in launch["cases"].items()}
    return LaunchSpec.model_validate(out)


def _replace_name(text: str, name: str, value: str) -> str:
    import re

    return re.sub(rf"\b{re.escape(name)}\b", f"({value})", text)


def resolved(t: Tunable, config: Config, case_name: str) -> ResolvedLaunch:
    case = t.workload.spec.case(case_name)
    launch = LaunchSpec.model_validate(t.spec["launch"]).for_case(case_name)
    return resolve(launch, {**case.scalars, **config}, LIMITS, case_name)


# --- what "covers every output" means for each kernel's indexing (mirrors tunable.cu) ----------


def _cover_sgemm(c: Config, s: dict[str, int], r: ResolvedLaunch) -> None:
    nt = (c["BM"] // c["TM"]) * (c["BN"] // c["TN"])
    assert r.block == (nt, 1, 1)
    assert r.grid[0] * c["BN"] >= s["N"] and r.grid[1] * c["BM"] >= s["M"]
    # each thread's TM x TN tile: (TM/4) x (TN/4) 4x4 sub-tiles strided by 4*NTY rows / 4*NTX cols
    ntx, nty = c["BN"] // c["TN"], c["BM"] // c["TM"]
    rows = sorted(i * 4 * nty + ty * 4 + q for ty in range(nty) for i in range(c["TM"] // 4) for q in range(4))
    cols = sorted(j * 4 * ntx + tx * 4 + q for tx in range(ntx) for j in range(c["TN"] // 4) for q in range(4))
    assert rows == list(range(c["BM"])) and cols == list(range(c["BN"]))
    # the load slots of one slice cover the BM x BK tile of A and the BK x BN tile of B once
    a_f4, b_f4 = c["BM"] * c["BK"] // 4, c["BK"] * c["BN"] // 4
    a_slots = sorted((i // (c["BK"] // 4), i % (c["BK"] // 4) * 4 + q) for i in range(a_f4) for q in range(4))
    assert a_slots == [(m, k) for m in range(c["BM"]) for k in range(c["BK"])]
    b_slots = sorted((i // (c["BN"] // 4), i % (c["BN"] // 4) * 4 + q) for i in range(b_f4) for q in range(4))
    assert b_slots == [(k, n) for k in range(c["BK"]) for n in range(c["BN"])]
    assert r.shared_bytes == 2 * 4 * c["BK"] * (c["BM"] + 4 + c["BN"])


def _cover_rows(c: Config, s: dict[str, int], r: ResolvedLaunch) -> None:
    assert r.block == (c["TPR"] * c["RPB"], 1, 1)
    # layernorm's WR: rows of at most 128 * VPT columns get a warp each, TPR * RPB / 32 per block
    warp_rows = c.get("WR", 0) and s["cols"] <= 128 * c["VPT"]
    per_block = c["TPR"] * c["RPB"] // 32 if warp_rows else c["RPB"]
    assert r.grid[0] * per_block >= s["rows"]
    assert (r.grid[0] - 1) * per_block < s["rows"], "a whole block of empty rows"


def _cover_reduce(c: Config, s: dict[str, int], r: ResolvedLaunch) -> None:
    assert r.block == (c["THREADS"], 1, 1)
    assert 1 <= r.grid[0] <= 4096, "more blocks than the two-pass partials array (MAX_BLOCKS)"
    assert r.grid[1] == r.grid[2] == 1  # the grid-stride loop covers any n from any grid.x


def _cover_transpose(c: Config, s: dict[str, int], r: ResolvedLaunch) -> None:
    assert r.block == (c["TILE"], c["ROWS"], 1)
    assert c["TILE"] % c["ROWS"] == 0  # the j loop steps by ROWS up to TILE
    assert r.grid[0] * c["TILE"] >= s["cols"] and r.grid[1] * c["TILE"] >= s["rows"]


COVERAGE: dict[str, Callable[[Config, dict[str, int], ResolvedLaunch], None]] = {
    "sgemm": _cover_sgemm,
    "softmax": _cover_rows,
    "layernorm": _cover_rows,
    "reduce_sum": _cover_reduce,
    "transpose": _cover_transpose,
}


@pytest.fixture(scope="module", params=TUNABLE)
def tunable(request: pytest.FixtureRequest) -> Tunable:
    return load_tunable(request.param)


def test_spec_is_well_formed_and_defaults_satisfy_the_constraints(tunable: Tunable) -> None:
    spec, wl = tunable.spec, tunable.workload
    assert spec["source"] == "tunable.cu"
    scalar_names = {p.name for p in wl.signature.scalars}
    for name, values in spec["params"].items():
        assert name.isidentifier() and name not in scalar_names
        assert values and all(isinstance(v, int) for v in values)
        assert f"#ifndef {name}\n#define {name} " in tunable.source, f"{name} has no default in tunable.cu"
    for constraint in spec["constraints"]:
        assert expr.names(constraint) <= set(spec["params"]), constraint
    defaults = spec["defaults"]
    assert set(defaults) == set(spec["params"])
    assert all(defaults[k] in spec["params"][k] for k in defaults)
    assert satisfies(spec, defaults)
    assert len(valid_configs(spec)) >= 10, "a space too small to be worth tuning"


def test_every_config_resolves_for_every_case_and_covers_the_output(tunable: Tunable) -> None:
    check = COVERAGE[tunable.workload.name]
    for config in valid_configs(tunable.spec):
        concrete = concrete_launch(tunable.spec, config)
        for case in tunable.workload.spec.cases:
            r = resolved(tunable, config, case.name)
            assert r == resolve(concrete.for_case(case.name), case.scalars, LIMITS, case.name)
            check(config, dict(case.scalars), r)


def test_concrete_launch_substitutes_whole_names_only() -> None:
    spec = {"launch": {"default": {"grid": ["ceil_div(N, BN)"], "block": ["BN // TN"], "shared_bytes": "BNX"}}}
    out = concrete_launch(spec, {"BN": 128, "TN": 8})
    assert out.for_case("x") == LaunchConfig(grid=["ceil_div(N, (128))"], block=["(128) // (8)"], shared_bytes="BNX")
    # tensor maps keep their fields, with the parameters substituted in every list of expressions
    tma = {"grid": [1], "block": [1],
           "tensor_maps": [{"buffer": "B", "dims": ["N", "K"], "box": [64, "BN"], "swizzle": "128B"}]}
    out = concrete_launch({"launch": {"default": tma}}, {"BN": 128})
    maps = out.for_case("x").tensor_maps
    assert len(maps) == 1 and maps[0].box == [64, "(128)"], maps
    assert maps[0].dims == ["N", "K"] and maps[0].buffer == "B" and maps[0].swizzle == "128B"


# --- compiling ----------------------------------------------------------------------------------


def _register_estimate(name: str, c: Config) -> int:
    """A rough per-thread register demand, to pick the hungriest configuration for the sample."""
    if name == "sgemm":
        return c["TM"] * c["TN"] * c["MINB"]
    if name in ("softmax", "layernorm"):
        return c["VPT"] * c["TPR"] * c["RPB"]
    if name == "reduce_sum":
        return c["UNROLL"] * c["THREADS"] * c["BPS"]
    return c["TILE"] * c["TILE"] // c["ROWS"]


def _threads(t: Tunable, config: Config) -> int:
    return resolved(t, config, t.workload.spec.cases[0].name).threads_per_block


def compile_sample(t: Tunable) -> list[Config]:
    configs = valid_configs(t.spec)
    if os.environ.get("KERNELOPT_TUNABLE_ALL") == "1":
        return configs
    name = t.workload.name
    fixed = [
        t.spec["defaults"],
        max(configs, key=lambda c: _threads(t, c)),
        min(configs, key=lambda c: _threads(t, c)),
        max(configs, key=lambda c: _register_estimate(name, c)),
    ]
    rest = [c for c in configs if c not in fixed]
    chosen = fixed + random.Random(f"tunable-{name}").sample(rest, min(SAMPLE, len(rest)))
    return [c for i, c in enumerate(chosen) if c not in chosen[:i]]


def _compile(t: Tunable, config: Config) -> CompileResult:
    return compile_kernel(t.source, "sm_90", options_for(t.spec, config), filename="tunable.cu")


def test_configs_compile_without_spills_within_sm_limits(tunable: Tunable) -> None:
    configs = compile_sample(tunable)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda c: _compile(tunable, c), configs))
    sig = tunable.workload.signature
    expected_sizes = [8 if p.kind == "buffer" else 4 for p in sig.params]
    problems = []
    for config, result in zip(configs, results, strict=True):
        if not result.ok:
            problems.append(f"{config}: {result.summary()}")
            continue
        assert [p.size_bytes for p in result.entries[sig.entry]] == expected_sizes, config
        res = result.resources[sig.entry]
        threads = _threads(tunable, config)
        dynamic = max(resolved(tunable, config, c.name).shared_bytes for c in tunable.workload.spec.cases)
        static = res.shared_bytes or 0
        if res.spill_store_bytes or res.spill_load_bytes or res.stack_frame_bytes:
            problems.append(f"{config}: spills or local memory: {result.summary()}")
        if res.registers is None or res.registers * threads > REGISTERS_PER_SM:
            problems.append(f"{config}: {res.registers} registers x {threads} threads > {REGISTERS_PER_SM}")
        if static > 48 * 1024 or static + dynamic > LIMITS.max_shared_bytes_per_block_optin:
            problems.append(f"{config}: {static} B static + {dynamic} B dynamic shared memory")
        if threads > LIMITS.max_threads_per_block:
            problems.append(f"{config}: {threads} threads per block")
    assert not problems, "\n".join(problems)


def test_an_unguarded_param_fails_to_compile_so_the_check_is_real() -> None:
    """A source that needs a define it does not default must fail without it: the -D path matters."""
    t = load_tunable("transpose")
    stripped = t.source.replace("#ifndef TILE\n#define TILE 32\n#endif\n", "")
    assert not compile_kernel(stripped, "sm_90", ["-DROWS=8"]).ok
    assert compile_kernel(stripped, "sm_90", ["-DROWS=8", "-DTILE=32"]).ok
