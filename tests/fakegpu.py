"""A pretend GPU for CPU tests: a stand-in for the native harness that runs vector_add-style
kernels in NumPy, and the small workload it understands.

Two modes of the stand-in (written to a test's tmp_path by :func:`write_harness`):
- "nogpu": answers every command like a machine without a driver (exit 3, driver_unavailable);
- "fake":  a pretend H200 that computes c = a + b (buffers named a, b, c) in NumPy, and checks a case's
  tensor maps like the harness (KO_FAKE_FEATURES must name tensor_maps). Markers in the
  kernel's source (kept in the CUBIN as a __device__ string, see :func:`kernel`) make it hang
  (HANG; STALL:<case>; on that case only), print 20000 lines to stderr (PRINT), crash (CRASH), return a wrong
  element (WRONG), be slow to answer (SLOW) or fast (FAST), differ on the determinism re-run beyond the
  tolerance (RACE) or within it (JITTER), be wrong on the hidden inputs after timing (CACHE) or slow on them
  (SLOWCHECK); kernels that assume upper-triangular square inputs: c = a + b on the upper triangle, zeros
  below (UPPER), and out = triu(A @ B) of two float32 N x N inputs' upper triangles (TRIMATMUL);
  KO_FAKE_FEATURES naming structured_draw applies a draw's ``structure`` (PROTOCOL.md), refused without it,
  and naming choice_draw draws a ``choice`` (its values at the fake's randint over [0, k)), refused without
  it; kernels that rely on their second input's values being -1 or +1: c = a + (b > 0 ? 1 : -1) (SIGN), and a
  hinge loss max(0, 1 - p * t) as (t > 0 ? 1 - p : 1 + p) of float32 predictions p and targets t (HINGE);
  ``MS:<case>=<ms>;...`` sets the median latency of named cases.
Every start of the stand-in appends its arguments and its whole environment to
``harness-env.jsonl`` beside it (the wrapper names the file), so a test can check what the server
let through to the harness; every request appends the device it named to ``harness-requests.jsonl``.
``KO_FAKE_DEVICES=N`` makes it a machine of N pretend H200s (``--device-info --device K`` answers for
ordinal K, each with its own UUID).
It speaks the harness's `serve` protocol (one JSON request per line on stdin), so every path of
the server and of clients above it runs for real, bar the GPU itself.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

ADD_LAUNCH = {"default": {"grid": ["ceil_div(n, 256)"], "block": [256]}}

FAKE_HARNESS = r'''
import json, os, re, sys, time
import numpy as np

if os.environ.get("KO_FAKE_ENV_LOG"):
    with open(os.environ["KO_FAKE_ENV_LOG"], "a") as log:
        log.write(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ)}) + "\n")

def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()

if os.environ.get("KO_FAKE_GPU") == "nogpu":
    say({"protocol": 1, "status": "error", "error": {"kind": "driver_unavailable",
         "message": "libcuda.so.1: cannot open shared object file"}})
    sys.exit(3)
# KO_FAKE_FEATURES="blocking": advertise protocol-2 features (blocking timing), and refuse what the
# real harness refuses for them (request.cpp: blocking needs the support module)
FEATURES = [f for f in os.environ.get("KO_FAKE_FEATURES", "").split(",") if f]
if sys.argv[1:2] == ["--version"]:
    say({"harness": "fake", "protocol": 2 if FEATURES else 1, "features": FEATURES}); sys.exit(0)
if sys.argv[1:2] == ["--device-info"] and os.environ.get("KO_FAKE_GPU") == "sparse":
    say({"ordinal": 0, "device_count": 1, "name": "Some GPU", "compute_capability": [8, 0], "arch": "sm_80",
         "sm_count": 108, "clock_khz": None, "total_memory_bytes": 42949672960, "l2_cache_bytes": 41943040,
         "shared_memory_per_block_bytes": 49152, "shared_memory_per_block_optin_bytes": 166912,
         "max_threads_per_block": 1024, "warp_size": 32, "max_block_dim": [1024, 1024, 64],
         "max_grid_dim": [2147483647, 65535, 65535], "driver_version": 13000, "driver_version_str": "580.00",
         "peak_memory_bandwidth_bytes_per_s": None})
    sys.exit(0)
# KO_FAKE_DEVICES=N: a machine of N pretend H200s (ordinals 0..N-1, a UUID each); --device picks one
# CUDA_VISIBLE_DEVICES (set by Ray for an actor given one GPU) renumbers them from 0, as CUDA does
PHYSICAL = list(range(int(os.environ.get("KO_FAKE_DEVICES", "1"))))
if os.environ.get("CUDA_VISIBLE_DEVICES"):
    PHYSICAL = [int(v) for v in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if int(v) in PHYSICAL]
DEVICES = len(PHYSICAL)
if sys.argv[1:2] == ["--device-info"]:
    ordinal = int(sys.argv[sys.argv.index("--device") + 1]) if "--device" in sys.argv else 0
    if not 0 <= ordinal < DEVICES:
        say({"protocol": 1, "status": "error", "error": {"kind": "driver_unavailable",
             "message": f"cuDeviceGet({ordinal}): CUDA_ERROR_INVALID_DEVICE ({DEVICES} device(s))"}})
        sys.exit(3)
    say({"ordinal": ordinal, "device_count": DEVICES, "uuid": f"00000000-0000-4000-8000-{PHYSICAL[ordinal]:012x}",
         "name": "NVIDIA H200 (fake)", "compute_capability": [9, 0],
         "arch": "sm_90", "sm_count": 132, "clock_khz": 1980000, "memory_clock_khz": 3201000,
         "memory_bus_width_bits": 6144, "total_memory_bytes": 150754820096, "l2_cache_bytes": 52428800,
         "shared_memory_per_sm_bytes": 233472, "shared_memory_per_block_bytes": 49152,
         "shared_memory_per_block_optin_bytes": 232448, "registers_per_sm": 65536,
         "registers_per_block": 65536, "max_threads_per_block": 1024, "max_threads_per_sm": 2048,
         "warp_size": 32, "max_block_dim": [1024, 1024, 64], "max_grid_dim": [2147483647, 65535, 65535],
         "driver_version": 13000, "driver_version_str": "580.00", "peak_memory_bandwidth_bytes_per_s": 4.9e12})
    sys.exit(0)
kept = {}  # device_expected: key -> the values a reference run kept (lost with the process)
class Refuse(Exception):
    """A request-level error answer (nothing of the request ran)."""

class Crash(Exception):
    """A case faulted: the request ends after answering, and the process exits 5."""

SIZES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8,
         "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8}  # TMA's types (no int8, int16)

def check_maps(case, i):
    """PROTOCOL.md "Tensor maps": the rules the harness checks before the first launch (buffer, dtype,
    rank, reach), each failure a bad_request naming cases[i].tensor_maps[j]."""
    def refuse(message):
        raise Refuse({"protocol": 2, "status": "error", "cases": [], "error": {"kind": "bad_request", "message": message}})
    if "tensor_maps" not in FEATURES:
        refuse(f"cases[{i}].tensor_maps: unknown field")
    bufs = {a["name"]: a for a in case["args"] if a["kind"] == "buffer"}
    for j, m in enumerate(case["tensor_maps"]):
        where = f"cases[{i}].tensor_maps[{j}]"
        if m.get("buffer") not in bufs:
            refuse(f"{where}.buffer: {m.get('buffer')!r} is no buffer arg of the case")
        size = SIZES.get(m.get("dtype"))
        if size is None:
            refuse(f"{where}.dtype: {m.get('dtype')!r} is not a TMA element type")
        dims = m["dims"]
        strides = m.get("strides")
        if strides is None:
            strides = [size * dims[0]]
            for d in dims[1:-1]:
                strides.append(strides[-1] * d)
        if not 1 <= len(dims) <= 5 or len(strides) != len(dims) - 1 or len(m["box"]) != len(dims):
            refuse(f"{where}: dims, strides and box disagree on the rank")
        reach = sum((d - 1) * st for d, st in zip(dims, [size, *strides])) + size
        if reach > bufs[m["buffer"]]["bytes"]:
            refuse(f"{where}: reaches {reach} bytes, past the {bufs[m['buffer']]['bytes']} bytes of buffer {m['buffer']!r}")

def run_case(req, module, case, t0, index=0):
    if "tensor_maps" in case:
        check_maps(case, index)
    if (case.get("timing") or {}).get("blocking") and not req.get("support_module"):
        raise Refuse({"protocol": 1, "status": "error", "cases": [], "error": {"kind": "bad_request",
             "message": "cases[0].timing.blocking: needs the harness's support kernels"}})
    if b"KO_FAKE_PRINT" in module:  # device printf from every thread, before the hang below
        for i in range(20000):
            sys.stderr.write(f"thread {i}: hello\n")
        sys.stderr.flush()
    if b"KO_FAKE_HANG" in module:
        time.sleep(3600)
    stall = re.search(rb"KO_FAKE_STALL:([A-Za-z0-9_]+);", module)  # hangs on the case named only
    if stall and stall.group(1).decode() == case["name"]:
        time.sleep(3600)
    if b"KO_FAKE_SLOW" in module:
        time.sleep(0.5)
    result = {"name": case["name"], "status": "ok", "error": None, "guard_violations": [],
              "modified_inputs": [], "occupancy_blocks_per_sm": 8}
    if b"KO_FAKE_CRASH" in module:
        result.update(status="runtime_error", error={"call": "cuCtxSynchronize",
                      "cuda_error": "CUDA_ERROR_ILLEGAL_ADDRESS", "code": 700,
                      "message": "an illegal memory access was encountered"})
        raise Crash(result)
    bufs = {a["name"]: a for a in case["args"] if a["kind"] == "buffer"}
    if not bufs:  # a launch without buffers (the evaluator's warm-up: ko_empty): nothing to compute
        return result, None
    drawn = [n for n, x in bufs.items() if "input_draw" in x]
    if drawn and ("input_draw" not in FEATURES or not req.get("support_module")):
        raise Refuse({"protocol": 1, "status": "error", "cases": [], "error": {"kind": "bad_request",
             "message": f"cases[0].args: input_draw on {drawn} needs the input_draw feature and the support module"}})

    structured = [n for n, x in bufs.items() for f in ("input_draw", "timed_input_draw", "fresh")
                  if (x.get(f) or {}).get("structure")]
    if structured and "structured_draw" not in FEATURES:  # (the real harness would ignore it: a dense draw)
        raise Refuse({"protocol": 1, "status": "error", "cases": [], "error": {"kind": "bad_request",
             "message": f"cases[0].args: a structure on {structured} needs the structured_draw feature"}})

    chosen = [n for n, x in bufs.items() for f in ("input_draw", "timed_input_draw", "fresh")
              if (x.get(f) or {}).get("kind") == "choice"]
    if chosen and "choice_draw" not in FEATURES:  # (the real harness would refuse the kind)
        raise Refuse({"protocol": 1, "status": "error", "cases": [], "error": {"kind": "bad_request",
             "message": f"cases[0].args: a choice on {chosen} needs the choice_draw feature"}})

    def load(buf):  # input_draw: like ko_fill, a pure function of (seed, spec); not its bits
        d = buf.get("input_draw")
        if d is None:
            return np.fromfile(buf["input"], dtype="<f4")
        rng, n = np.random.default_rng(d["seed"]), buf["bytes"] // 4
        if d["kind"] in ("randint", "choice"):  # a choice: its values at the randint over [0, k) (input_choice.py)
            low, high = (0, len(d["values"])) if d["kind"] == "choice" else (d["low"], d["high"])
            j = rng.integers(low, high, n, dtype=np.int64)
            v = np.asarray(d["values"], dtype="<f4")[j] if d["kind"] == "choice" else j
        else:
            v = rng.uniform(d["low"], d["high"], n) if d["kind"] == "uniform" else rng.normal(d["mean"], d["std"], n)
        return structure(v.astype("<f4"), d.get("structure"))

    def structure(v, st):  # PROTOCOL.md "structure": zeros and mirrored bits in every rows x cols matrix
        if st:
            m, r = v.reshape(-1, st["rows"], st["cols"]), np.arange(st["rows"])[:, None]
            offset = np.arange(st["cols"])[None, :] - r
            if st["kind"] == "symmetric":
                m[:, offset < 0] = m.transpose(0, 2, 1)[:, offset < 0]
            else:
                m[:, offset < st.get("diagonal", 0) if st["kind"] == "triu" else offset > st.get("diagonal", 0)] = 0
        return v

    names = [x[f][5:] for x in bufs.values() for f in ("expected", "timed_expected")
             if str(x.get(f, "")).startswith("kept:")]
    if (names or any("keep_expected" in x for x in bufs.values())) and "device_expected" not in FEATURES:
        raise Refuse({"protocol": 1, "status": "error", "cases": [], "error": {"kind": "bad_request",
             "message": "cases[0].args: keep_expected / kept: need the device_expected feature"}})
    if [k for k in names if k not in kept]:
        raise Refuse({"protocol": 2, "status": "error", "cases": [], "error": {"kind": "expected_missing",
             "message": "no kept expected values under these keys", "missing": [k for k in names if k not in kept]}})
    t1 = time.perf_counter()
    ins = [load(bufs["a"]), load(bufs["b"])] if "a" in bufs else [load(x) for x in bufs.values() if x["role"] == "in"]
    t2 = time.perf_counter()
    if b"KO_FAKE_TRIMATMUL" in module:  # triu(A @ B) from A's and B's upper triangles only (assumes triu inputs)
        n = int(np.sqrt(ins[0].size))
        upper = [np.triu(x.reshape(n, n).astype(np.float64)) for x in ins[:2]]
        c = np.triu(upper[0] @ upper[1]).astype("<f4").reshape(-1)
    elif b"KO_FAKE_SIGN" in module:  # a + sign(b), as a kernel that takes b for -1 or +1 computes a + b
        c = (ins[0] + np.where(ins[1] > 0, np.float32(1), np.float32(-1))).astype("<f4")
    elif b"KO_FAKE_HINGE" in module:  # max(0, 1 - p * t) for targets t of -1 or +1 only
        c = np.maximum(np.where(ins[1] > 0, 1 - ins[0], 1 + ins[0]), 0).astype("<f4")
    elif b"KO_FAKE_UPPER" in module:  # a + b on the upper triangle of square matrices, zeros below (assumes triu)
        n = int(np.sqrt(ins[0].size))
        c = np.triu((ins[0] + ins[1]).reshape(n, n)).astype("<f4").reshape(-1)
    else:
        c = (ins[0] + ins[1]).astype("<f4")
    if b"KO_FAKE_WRONG" in module and c.size:
        c[c.size // 2] += 1.0
    if b"KO_FAKE_NAN" in module:  # writes nothing: the output keeps the harness's NaN poison
        c[:] = np.nan
    out = bufs["c"] if "c" in bufs else next(x for x in bufs.values() if x["role"] != "in")
    if out.get("keep_expected"):  # the reference's run: keep c under the key, report what tolerances need
        fin = c[np.isfinite(c)].astype(np.float64)
        kept[out["keep_expected"]] = c.copy()
        result["kept"] = [{"buffer": "c", "key": out["keep_expected"], "elements": int(c.size), "finite": int(fin.size),
                           "sum_sq": float(np.dot(fin, fin)), "bytes": int(c.size) * 4}]
    if str(out.get("expected", "")).startswith("kept:"):  # ko_compare_ref on the device
        e, th = kept[out["expected"][5:]].astype(np.float64), out["compare"]
        diff = np.abs(c.astype(np.float64) - e)
        bad = ~(diff <= th["abs_tol"] + th["rtol"] * np.abs(e))
        fin = np.isfinite(diff)
        result.setdefault("compares", []).append({
            "buffer": "c", "launch": "validation", "elements": int(c.size), "mismatches": int(bad.sum()),
            "nonfinite": int((~np.isfinite(c)).sum()), "max_abs_error": float(diff[fin].max(initial=0.0)),
            "max_rel_error": float((diff[fin] / np.maximum(np.abs(e[fin]), th["rel_floor"])).max(initial=0.0)),
            "err_sq": float(np.dot(diff[fin], diff[fin])), "first_mismatch": int(np.argmax(bad)) if bad.any() else None,
            "output_written": bool(bad.any())})
        if bad.any():  # the values at the first mismatch, as the harness reads them ("nan" for NaN)
            i = int(np.argmax(bad))
            result["compares"][-1].update({k: (str(v) if not np.isfinite(v) else float(v)) for k, v in (
                ("first_mismatch_expected", e[i]), ("first_mismatch_actual", float(c[i])))})
        if bad.any() or out.get("write_output"):
            c.tofile(out["output"])
    elif not out.get("keep_expected") or out.get("write_output"):
        c.tofile(out["output"])
    # KO_FAKE_RACE: the determinism re-run differs; KO_FAKE_CACHE: the check launch on hidden inputs is wrong
    # (both need KO_FAKE_FEATURES to name determinism / timed_inputs, so the evaluator asks for them)
    bad = {"elements": int(c.size), "mismatches": 7, "nonfinite": 0, "max_abs_error": 1.0, "max_rel_error": 1.0,
           "err_sq": 7.0, "first_mismatch": 0, "output_written": False}
    if b"KO_FAKE_RACE" in module and case.get("repeat_validation"):
        result.setdefault("compares", []).append({"buffer": "c", "launch": "repeat", **bad})
        result["determinism"] = [{"buffer": "c", "bytes_differ": 28, "first_offset": 0}]
    # KO_FAKE_JITTER: the re-run's bytes differ within the tolerance (a float atomicAdd's reordered sum)
    if b"KO_FAKE_JITTER" in module and case.get("repeat_validation"):
        result.setdefault("compares", []).append({"buffer": "c", "launch": "repeat", **bad, "mismatches": 0, "first_mismatch": None,
                                                  "max_abs_error": 1e-7, "max_rel_error": 1e-7, "err_sq": 1e-14})
        result["determinism"] = [{"buffer": "c", "bytes_differ": 8, "first_offset": 4}]
    if b"KO_FAKE_CACHE" in module and "timed_input" in bufs.get("a", {}):
        result.setdefault("compares", []).append({"buffer": "c", "launch": "timed", **bad})
    timing = case.get("timing") or {}
    if timing.get("iterations"):
        t = 0.05 if b"KO_FAKE_FAST" in module else 0.1
        # KO_FAKE_MS:<case>=<ms>;... sets the median of named cases (tests of ranking by geometric mean)
        for name, ms in re.findall(rb"([A-Za-z0-9_.-]+)=([0-9.]+);", (re.findall(rb"KO_FAKE_MS:([^\x00]*)", module) or [b""])[0]):
            if name.decode() == case["name"]:
                t = float(ms)
        times = [t * (1 + 0.01 * (i % 3)) for i in range(timing["iterations"])]
        for field in ("fresh_launches", "poison_subset"):
            if field in case and field not in FEATURES:
                raise Refuse({"protocol": 1, "status": "error", "cases": [], "error": {"kind": "bad_request",
                     "message": f"cases[0].{field}: unknown field"}})
        # KO_FAKE_MEMO: a result cache: 30% faster on the launches that reuse inputs seen before
        # (with fresh_launches, every measured launch not listed there)
        if b"KO_FAKE_MEMO" in module and "fresh_launches" in case:
            listed = set(case["fresh_launches"])
            times = [x if i in listed else 0.7 * x for i, x in enumerate(times)]
        result["timing"] = {"warmup": timing["warmup"], "iterations": timing["iterations"], "flush_l2": True,
                            "times_ms": times}
        if case.get("confirm_launch"):  # KO_FAKE_SLOWCHECK: launches on unseen inputs 10x slower than the timed ones
            slow = 10 if b"KO_FAKE_SLOWCHECK" in module else 1
            result["timing"].update(check_launch_ms=t * slow, confirm_launch_ms=t * slow)
    # where the time went, as the harness reports it (PROTOCOL.md, steps_ms)
    t3 = time.perf_counter()
    result["steps_ms"] = {"setup": (t2 - t1) * 1e3, "validation_launch": (t3 - t2) * 1e3}
    return result, {"read_files": (t1 - t0) * 1e3, "cases": (t3 - t1) * 1e3, "teardown": 0.0}

for line in sys.stdin:
    t0 = time.perf_counter()
    req = json.loads(line)
    if os.environ.get("KO_FAKE_REQUEST_LOG"):  # which device served which request (tests of several devices)
        with open(os.environ["KO_FAKE_REQUEST_LOG"], "a") as log:
            log.write(json.dumps({"device": req.get("device", 0), "physical": PHYSICAL[req.get("device", 0)],
                                  "pid": os.getpid(), "ppid": os.getppid(), "module": req["module"]}) + "\n")
    module = open(req["module"], "rb").read()
    # KO_FAKE_FEATURES=progress: every case of the request, a progress line before each (PROTOCOL.md)
    batch = req["cases"] if "progress" in FEATURES else req["cases"][:1]
    results, steps = [], None
    try:
        for i, case in enumerate(batch):
            if req.get("progress"):
                say({"progress": {"case": case["name"], "index": i}})
            result, steps = run_case(req, module, case, t0, i)
            results.append(result)
    except Refuse as refused:
        say(refused.args[0])
        continue
    except Crash as crash:
        say({"protocol": 1, "status": "ok", "error": None, "cases": results + [crash.args[0]]})
        sys.exit(5)
    say({"protocol": 1, "status": "ok", "error": None, "cases": results, **({"steps_ms": steps} if steps else {})})
'''  # noqa: E501

ADD_KERNEL = """\
{marker}
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}}
"""


def kernel(mode: str = "") -> str:
    return ADD_KERNEL.format(marker=f'__device__ char ko_fake_mode[] = "KO_FAKE_{mode}";' if mode else "")


TINY_SPEC: dict[str, Any] = {
    "name": "tiny_add",
    "description": "c = a + b on small vectors (a test workload)",
    "signature": {"entry": "vector_add", "params": [
        {"kind": "buffer", "name": "a", "dtype": "float32", "role": "in", "shape": ["n"]},
        {"kind": "buffer", "name": "b", "dtype": "float32", "role": "in", "shape": ["n"]},
        {"kind": "buffer", "name": "c", "dtype": "float32", "role": "out", "shape": ["n"]},
        {"kind": "scalar", "name": "n", "dtype": "int32"},
    ]},
    "inputs": {"a": {"generator": "uniform"}, "b": {"generator": "normal"}},
    "cases": [
        {"name": "one", "kind": "correctness", "scalars": {"n": 1}},
        {"name": "odd_1001", "kind": "correctness", "scalars": {"n": 1001}},
        {"name": "n_4096", "kind": "performance", "scalars": {"n": 4096}},
    ],
    "reference": {"launch": {"grid": ["ceil_div(n, 128)"], "block": [128]}},
    "initial": {"launch": {"grid": ["ceil_div(n, 64)"], "block": [64]}},
    "cost": {"flops": "n", "bytes": "12 * n"},
}


def write_harness(directory: Path, mode: str, devices: int = 1) -> Path:
    """The stand-in as ``directory/kernelopt-harness-<mode>``: a machine of ``devices`` pretend GPUs
    (set in the wrapper: the harness's environment is an allowlist)."""
    script = directory / "fake_harness.py"
    script.write_text(FAKE_HARNESS)
    wrapper = directory / f"kernelopt-harness-{mode}"
    log = directory / "harness-env.jsonl"
    requests = directory / "harness-requests.jsonl"
    wrapper.write_text(
        f"#!/bin/sh\nKO_FAKE_GPU={mode} KO_FAKE_DEVICES={devices} KO_FAKE_ENV_LOG='{log}' "
        f"KO_FAKE_REQUEST_LOG='{requests}' exec {sys.executable} {script} \"$@\"\n"
    )
    wrapper.chmod(0o755)
    return wrapper


def write_tiny_workload(parent: Path, spec: dict[str, Any] | None = None) -> Path:
    """A configured workload directory ``parent/<name>`` (NumPy oracle + CUDA reference); returns ``parent``."""
    spec = json.loads(json.dumps(spec or TINY_SPEC))
    wl = parent / spec["name"]
    wl.mkdir(parents=True)
    spec["reference"] = {"python": "reference.py", "cuda": "reference.cu", **spec["reference"]}
    (wl / "workload.json").write_text(json.dumps(spec))
    (wl / "reference.py").write_text(
        "import numpy as np\n\ndef reference(a, b, n):\n    return {'c': a.astype(np.float64) + b}\n"
    )
    (wl / "reference.cu").write_text(kernel())
    (wl / "initial.cu").write_text(kernel())
    return parent


@asynccontextmanager
async def in_memory_server(config: Any, *, orchestrator: bool = False) -> AsyncIterator[tuple[Any, Any]]:
    """kernelopt-mcp built from ``config`` and the SDK's in-memory Client on it:
    yields ``(client, service)``; the service (harnesses, temporary files) is closed after.
    ``orchestrator``: started as ``kernelopt optimize`` starts it (its freeze tools listed and served)."""
    from mcp import Client

    from kernelopt_mcp.server import build_server

    app, service = build_server(config, orchestrator=orchestrator)
    try:
        async with Client(app) as client:
            yield client, service
    finally:
        service.close()


REPO = Path(__file__).resolve().parent.parent


def tool_text(result: Any) -> str:
    """The text content of an MCP tool result."""
    return "\n".join(c.text for c in result.content if c.type == "text")


def server_command(*args: str) -> list[str]:
    """The installed console script when there is one (CI installs it), else the module."""
    script = shutil.which("kernelopt-mcp")
    return [script, *args] if script else [sys.executable, "-m", "kernelopt_mcp.server", *args]


@asynccontextmanager
async def stdio_server(*args: str, env: dict[str, str] | None = None,
                       read_timeout_s: float = 600) -> AsyncIterator[Any]:
    """kernelopt-mcp run with ``args`` as a subprocess, and the SDK's Client on its stdio. The
    environment is this one (the SDK passes a minimal one by default) plus ``env``, with the
    checkout on PYTHONPATH."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    cmd = server_command(*args)
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    params = StdioServerParameters(
        command=cmd[0], args=cmd[1:], env={**os.environ, "PYTHONPATH": path, **(env or {})}, cwd=str(REPO)
    )
    async with Client(params, read_timeout_seconds=read_timeout_s) as client:
        yield client


def fake_processes(marker: str) -> list[int]:
    """Live (non-zombie) processes whose command line mentions ``marker`` (to check that a kill took)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def wait_for_port(proc: subprocess.Popen[Any], port: int, output: Any, timeout_s: float = 60) -> None:
    """Wait until the server ``proc`` accepts connections on loopback ``port``; if it exits or
    the time passes first, fail with the end of ``output()`` (what the server printed)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the server did not start: {output()}") from None
            time.sleep(0.2)


def stop_server(proc: subprocess.Popen[Any], timeout_s: float = 10) -> None:
    """Stop a server started by a test: SIGTERM, then SIGKILL if it has not exited within
    ``timeout_s``; its stderr pipe, if any, is closed."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stderr:
        proc.stderr.close()


@contextmanager
def released_fifo(path: Path, payload: bytes = b"{}", after_s: float = 3.0) -> Iterator[Path]:
    """A FIFO at ``path``; after ``after_s`` a thread opens its write end (if anyone is reading)
    and writes ``payload``, so a reader that blocked on it comes back instead of hanging the test."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    done = threading.Event()

    def release() -> None:
        if done.wait(after_s):
            return
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not done.is_set():
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: no reader (yet)
                time.sleep(0.05)
                continue
            try:
                os.write(fd, payload)
            finally:
                os.close(fd)
            return

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        done.set()
        thread.join()


async def spread_over_devices(
    tmp_path: Path, *server_args: str, tool: str = "validate", calls: int = 6
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``calls`` slow ``tool`` calls at once on a stdio server over a machine of two pretend GPUs
    (``server_args`` added to its command line): their structured results, and gpu_properties'."""
    import anyio

    harness = write_harness(tmp_path, "fake", devices=2)
    extra = write_tiny_workload(tmp_path / "extra")
    env = {"KERNELOPT_HARNESS": str(harness), "KERNELOPT_WORKLOADS": str(extra),
           "KERNELOPT_CACHE": str(tmp_path / "cache")}
    results: list[dict[str, Any]] = []
    async with stdio_server("--workspace", str(tmp_path / "ws"), *server_args, env=env) as client:
        async def one(i: int) -> None:
            source = kernel("SLOW") + f"// candidate {i}\n"
            r = await client.call_tool(tool, {"workload": "tiny_add", "launch": ADD_LAUNCH, "source": source})
            assert not r.is_error, tool_text(r)
            results.append(r.structured_content)

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for i in range(calls):
                    tg.start_soon(one, i)
        props = await client.call_tool("gpu_properties", {})
    return results, props.structured_content


@contextmanager
def local_ray(ray: Any, **init: Any) -> Iterator[str]:
    """A local Ray instance (``ray.init(**init)``, no dashboard, quiet) whose processes import this
    checkout (first on their PYTHONPATH, as every driver's actors must): its address."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), str(REPO / "clients"), before]))
    try:
        ray.init(include_dashboard=False, log_to_driver=False, logging_level="WARNING", **init)
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def evaluate_pair(tmp_path: Path, monkeypatch: Any, features: str, spec: dict[str, Any],
                  mode: str) -> tuple[Any, Any, list[str]]:
    """The tiny workload ``spec`` on the pretend GPU announcing ``features``: the kernel of ``mode``
    and the plain one evaluated in one session (workdir ``tmp_path/w``, whose requests
    :func:`written_requests` reads); both results and the session's checks."""
    from kernelopt_mcp import Candidate, HarnessProcess, LaunchSpec, Session, Settings
    from kernelopt_mcp.config import find_workload
    from kernelopt_mcp.evaluation.candidate import EvaluateOptions
    from kernelopt_mcp.evaluation.device import device_info
    from kernelopt_mcp.evaluation.evaluate import evaluate

    monkeypatch.setenv("KO_FAKE_FEATURES", features)
    harness = write_harness(tmp_path, "fake")
    wl = find_workload(write_tiny_workload(tmp_path / "wl", spec) / spec["name"], Settings())
    launch = LaunchSpec.model_validate(ADD_LAUNCH)
    with HarnessProcess(harness, 0) as proc, Session(wl, proc, device_info(harness, 0), workdir=tmp_path / "w",
                                                     options=EvaluateOptions(warmup=1, iterations=20)) as ev:
        special = evaluate(ev, Candidate(kernel(mode), launch, [], mode.lower()))
        plain = evaluate(ev, Candidate(kernel(), launch, [], "add"))
        return special, plain, ev.checks


def written_requests(workdir: Path) -> list[dict[str, Any]]:
    """The harness requests a session in ``workdir`` wrote, in order."""
    return [json.loads(p.read_text()) for p in sorted((workdir / "requests").rglob("*.json"))]


def evaluate_then_redrawn(tmp_path: Path, workload: Path, source: str, launch: dict[str, Any], capsys: Any,
                          redraw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """`kernelopt evaluate --json` of ``source`` on the imported ``workload`` with the pretend GPU,
    then again after ``redraw(spec)`` rewrote its workload.json's input generators: both results."""
    from kernelopt_mcp.cli import main

    kernel_path, launch_path = tmp_path / "kernel.cu", tmp_path / "launch.json"
    kernel_path.write_text(source)
    launch_path.write_text(json.dumps({"default": launch}))
    argv = ["evaluate", str(workload), str(kernel_path), "--harness", str(write_harness(tmp_path, "fake")), "--launch",
            str(launch_path), "--warmup", "1", "--iterations", "3", "--no-torch-baseline", "--json"]
    main(argv)
    first = json.loads(capsys.readouterr().out)
    spec_path = workload / "workload.json"
    spec = json.loads(spec_path.read_text())
    redraw(spec)
    spec_path.write_text(json.dumps(spec))
    main(argv)
    return first, json.loads(capsys.readouterr().out)
