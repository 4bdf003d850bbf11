"""Time PyTorch problems' modules on the GPU: eager and ``torch.compile``, one case after another.

Run by :func:`kernelopt_mcp.torch_baseline.measure_batch` as ``python -m
kernelopt_mcp._torch_baseline_child REQUEST.json`` in a confined child started with ``each_job``
(confined_python.py, ``gpu=True``): never in the server's or the CLI's process. The request names the
problem files (copies in the child's staging directory), each with its cases' size constants, the
device and the timing rules. This process imports torch once (no CUDA context: a forked process
could not use it) and then gives each problem a process of its own
(:func:`~kernelopt_mcp._confined_child.run_confined_job`), which confines itself before it reads the
problem file: it writes only its own directory (its answer, torch.compile's and CUDA's caches), and
can neither signal nor read another process. A problem therefore cannot change another's times or
the answer; its deadline (``problem_timeout_s``) is a SIGKILL from this process; a CUDA error ends
its context alone; every process it left is killed before the next problem starts. A first job,
which runs no problem code, starts CUDA and reads the device (a machine that cannot time says so
once). Each problem's answer is rewritten after every step (a problem killed at its deadline keeps
the cases it finished); this process reads it only after the problem's processes are gone, keeps
its known fields, and writes the batch's answer to the file the request names. Nothing goes to
stdout: the problems' own prints cannot corrupt an answer.

Each case, by the rules the harness times a candidate by: ``Model(*get_init_inputs())`` and
``get_inputs()`` made on the device (on the CPU and moved there where the problem insists), the
module called under ``torch.no_grad()``; ``warmup`` calls, then measured calls, each between a CUDA
event pair on the current stream, synchronized after each call; before each call, outside the event
pair, a read over a buffer of twice the L2 size (the harness's flush: L2 is left holding clean
lines, so no write-back lands in the timed window), then a short spin that holds the stream while
the host enqueues the call (the harness's blocking kernel: the first launch's host latency is not
timed; an eager module's later kernels still wait for the host where it is slower than the GPU,
which is eager's own cost, as KernelBench counts it). With ``stop`` "precision", measured calls stop once the
median's relative standard error is at most ``precision_rse`` (rounds as the harness takes them).
``torch.compile(model)`` in its default mode is timed the same way; its compilation and its
warm-up never count. Where it cannot run, the case says why in one line and eager stands.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from kernelopt_mcp._child_answer import NOTE_CHARS, Answer, line
from kernelopt_mcp._child_answer import main as child_main
from kernelopt_mcp._confined_child import run_confined_job, run_confined_jobs

# GPU cycles the stream is held for before each measured call (~50 us at 2 GHz), so the host's
# enqueue of the start event and the module's first kernel is not timed as an idle gap (the
# harness's blocking kernel does the same for a candidate); outside the timed window
HOLD_CYCLES = 100_000


class _Flush:
    """A read over twice the L2 size before each measured call (nothing where ``l2_bytes`` is 0)."""

    def __init__(self, torch: Any, device: Any, l2_bytes: int) -> None:
        self.buffer = None
        if l2_bytes > 0:
            words = (2 * l2_bytes + 3) // 4
            self.buffer = torch.zeros(words, dtype=torch.int32, device=device)
            self.sink = torch.zeros((), dtype=torch.int64, device=device)
            self.torch = torch

    def __call__(self) -> None:
        if self.buffer is not None:
            self.torch.sum(self.buffer, dim=0, dtype=self.torch.int64, out=self.sink)


def _hold(torch: Any) -> None:
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(HOLD_CYCLES)


def measure(torch: Any, call: Any, flush: _Flush, request: dict[str, Any]) -> list[float]:
    """Per-call times (ms) of ``call``: warm-up calls, then measured ones (see the module's docstring)."""
    from kernelopt_mcp.evaluation.stats import adaptive_round, rse_median

    for _ in range(int(request["warmup"])):
        flush()
        call()
    torch.cuda.synchronize()
    iterations = int(request["iterations"])
    precision = request["stop"] == "precision"
    first = min(iterations, int(request["precision_min_iterations"])) if precision else iterations
    target, step = first, adaptive_round(first)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times: list[float] = []
    began = time.monotonic()
    while len(times) < target:
        flush()
        _hold(torch)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(float(start.elapsed_time(end)))
        if len(times) == target and precision and target < iterations:
            elapsed_ms = 1000.0 * (time.monotonic() - began)
            if rse_median(times) > float(request["precision_rse"]) and elapsed_ms < float(request["max_ms"]):
                target = min(target + step, iterations)
    return times


def build(torch: Any, source: Any, values: dict[str, int], device: Any, seed: int) -> tuple[Any, list[Any]]:
    """The module and its forward arguments on ``device``: made there (torch's default device set
    to it), else on the CPU and moved (a problem that builds CPU tensors itself, or asks for them)."""
    from kernelopt_mcp.torch_problem import load_module

    module = load_module(source, values)

    def make() -> tuple[Any, list[Any]]:
        torch.manual_seed(seed)
        init = list(module.get_init_inputs()) if source.has_init_inputs else []
        model = module.Model(*init)
        return model, list(module.get_inputs())

    try:
        with torch.device(device):
            model, inputs = make()
    except Exception:  # noqa: BLE001 - the problem's own code; it gets a second chance on the CPU
        model, inputs = make()
    model = model.to(device)
    return model, [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def compile_model(torch: Any, model: Any, inputs: list[Any]) -> tuple[Any, float]:
    """``torch.compile(model)`` (default mode) called once, which compiles it (never timed), and the
    wall seconds that took."""
    began = time.monotonic()
    compiled = torch.compile(model)
    compiled(*inputs)
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return compiled, round(time.monotonic() - began, 3)


def compiled_times(
    torch: Any, model: Any, inputs: list[Any], flush: _Flush, request: dict[str, Any],
) -> tuple[list[float] | None, str | None, float | None]:
    """``torch.compile(model)`` (default mode) timed, or None and why it could not run; and the
    compilation's wall seconds (None where it did not compile)."""
    try:
        from torch.utils._triton import has_triton

        if not has_triton():
            return (None,
                    "torch.compile not run: triton is not installed or finds no usable GPU (pip install triton)", None)
    except ImportError:
        pass
    try:
        compiled, compile_s = compile_model(torch, model, inputs)
    except Exception as exc:  # noqa: BLE001 - inductor and dynamo raise many kinds; the note names it
        return None, f"torch.compile failed: {line(exc)}", None
    try:
        return measure(torch, lambda: compiled(*inputs), flush, request), None, compile_s
    except Exception as exc:  # noqa: BLE001
        return None, f"the compiled module failed while timed: {line(exc)}", compile_s


def time_case(
    torch: Any, source: Any, case: dict[str, Any], device: Any, flush: _Flush, request: dict[str, Any],
    entry: dict[str, Any],
    answer: Answer,
) -> None:
    """One case: the module built, timed eagerly (the answer written), then compiled and timed."""
    try:
        model, inputs = build(torch, source, {k: int(v) for k, v in case["values"].items()}, device,
                              int(request["seed"]))
    except Exception as exc:  # noqa: BLE001 - the problem's own code may raise anything
        entry["eager_note"] = f"the module could not be built on the GPU: {line(exc)}"
        entry["compile_note"] = "torch.compile not run: the module could not be built"
        return
    with torch.no_grad():
        try:
            entry["eager"] = {"times_ms": measure(torch, lambda: model(*inputs), flush, request)}
        except Exception as exc:  # noqa: BLE001
            entry["eager_note"] = f"the module failed on the GPU: {line(exc)}"
        answer.write()
        if not request["compile"]:
            entry["compile_note"] = "torch.compile not timed (turned off)"
        elif entry["eager"] is None:
            entry["compile_note"] = "torch.compile not run: the module fails eagerly"
        else:
            times, entry["compile_note"], entry["compile_s"] = compiled_times(torch, model, inputs, flush, request)
            entry["compile"] = {"times_ms": times} if times is not None else None


STARTED = time.monotonic()
#: the largest answer of one problem's process this child reads (its times, its notes)
MAX_ENTRY_BYTES = 16 << 20
#: the deadline of the first job, which starts CUDA and reads the device
PROBE_TIMEOUT_S = 120.0


def time_problem(torch: Any, problem: dict[str, Any], device: Any, flush: _Flush, request: dict[str, Any],
                 entry: dict[str, Any], answer: Answer) -> None:
    """Every case of one problem into ``entry``; what the problem's file itself breaks is its error."""
    from kernelopt_mcp.torch_problem import TorchProblemError, parse_problem

    path = Path(problem["problem"])
    try:
        source = parse_problem(path.read_text(encoding="utf-8"), problem.get("label") or path.name)
    except (OSError, TorchProblemError) as exc:
        entry["error"] = line(exc)
        return
    for case in problem["cases"]:
        record: dict[str, Any] = {"name": case["name"], "eager": None, "eager_note": None, "compile": None,
                                  "compile_note": None}
        entry["cases"].append(record)
        time_case(torch, source, case, device, flush, request, record, answer)
        answer.write()
        torch._dynamo.reset()
        torch.cuda.empty_cache()


def start_cuda(torch: Any, ordinal: int) -> tuple[Any, dict[str, Any]]:
    """CUDA device ``ordinal`` made current: the device and what the answer records of it
    (``device_name``, ``l2_bytes``), or ``error`` and ``blocked`` where CUDA cannot start."""
    try:
        torch.cuda.init()
        count = torch.cuda.device_count()
    except Exception as exc:  # noqa: BLE001 - no driver, no device, a driver too old for this torch
        # a machine without a GPU says "no NVIDIA driver"; a driver call the child's confinement
        # refused says "OS call failed" (CUDA error 304): name both, so neither reads as the other
        hint = (" (a driver call refused inside the confined child?)"
                if "304" in str(exc) or "OS call failed" in str(exc) else "")
        return None, {"error": f"torch {torch.__version__} could not start CUDA in the timing child{hint} "
                      f"({line(exc)})", "blocked": True}
    if not 0 <= ordinal < count:
        return None, {"error": f"torch {torch.__version__} sees {count} CUDA device(s); device {ordinal} is not one of "
                      "them", "blocked": True}
    device = torch.device("cuda", ordinal)
    torch.cuda.set_device(device)
    props = torch.cuda.get_device_properties(device)
    return device, {"device_name": props.name, "l2_bytes": int(getattr(props, "L2_cache_size", 0) or 0),
                    "memory_bytes": int(getattr(props, "total_memory", 0) or 0)}


def _mapped_driver_dir() -> str | None:
    """The directory of the CUDA driver library this process has mapped (the child maps it before
    it forks), or None."""
    from kernelopt_mcp.sandbox import mapped_files

    return next((os.path.dirname(p) for p in mapped_files() if os.path.basename(p).startswith("libcuda.so")), None)


def _job_environment(job: Path) -> None:
    """torch.compile's, triton's and CUDA's caches in the job's own directory (the one it writes);
    triton told where the driver library lies (else it asks ``ldconfig -p``, a program the job
    may not run)."""
    os.environ.update(TORCHINDUCTOR_CACHE_DIR=str(job / ".inductor"), TRITON_CACHE_DIR=str(job / ".triton"),
                      CUDA_CACHE_PATH=str(job / ".nv"))
    driver = _mapped_driver_dir()
    if driver is not None:
        os.environ.setdefault("TRITON_LIBCUDA_PATH", driver)


def probe(torch: Any, request: dict[str, Any], path: Path) -> None:
    """The first job: CUDA started and the device read, no problem code run."""
    _job_environment(path.parent)
    began = time.monotonic()
    _, found = start_cuda(torch, int(request["device"]))
    Answer(path, {**found, "cuda_s": round(time.monotonic() - began, 3)}).write()


def warm_job(torch: Any, problem: dict[str, Any], request: dict[str, Any], path: Path) -> None:
    """One problem compiled ahead, in its own confined process, beside others: every case's module
    built and ``torch.compile``d once as :func:`time_case` compiles it (under ``torch.no_grad()``),
    nothing timed, so that the problem's timing job, run later in the same directory, finds
    torch.compile's caches warm. Each case's compile seconds go to ``path``; a case that fails is
    left to its timing job (which compiles it again and says why)."""
    from kernelopt_mcp.torch_problem import parse_problem

    _job_environment(path.parent)
    entry: dict[str, Any] = {"cases": []}
    answer = Answer(path, entry)
    device, _ = start_cuda(torch, int(request["device"]))
    if device is None:
        return
    source = parse_problem(Path(problem["problem"]).read_text(encoding="utf-8"), problem.get("label") or "problem")
    for case in problem["cases"]:
        seconds = _compile_case(torch, source, case, device, int(request["seed"]))
        if seconds is not None:
            entry["cases"].append({"name": case["name"], "compile_s": seconds})
            answer.write()
        torch._dynamo.reset()
        torch.cuda.empty_cache()


def _compile_case(torch: Any, source: Any, case: dict[str, Any], device: Any, seed: int) -> float | None:
    """One case's module compiled once (its memory gone on return); None where that failed."""
    try:
        model, inputs = build(torch, source, {k: int(v) for k, v in case["values"].items()}, device, seed)
        with torch.no_grad():
            return compile_model(torch, model, inputs)[1]
    except Exception:  # noqa: BLE001 - the problem's own code, or inductor's: the timing job says why
        return None


#: where a problem compiled ahead leaves its compile seconds, in its job's directory
WARM_FILE = "warm.json"


#: what a problem compiled ahead holds on the GPU besides its buffers' bytes (counted AHEAD_BUFFERS
#: times: its inputs, parameters and output, and as much again for what forward makes on the way):
#: its CUDA context and what compiling and running it once may take
AHEAD_BASE_BYTES = 1 << 30
AHEAD_BUFFERS = 3
#: the share of the GPU's memory the problems compiled at once may take together
AHEAD_SHARE = 0.75


def compile_ahead(torch: Any, jobs: list[tuple[Path, dict[str, Any]]], request: dict[str, Any], timeout_s: float,
                  parallel: int, memory_bytes: int) -> float:
    """Every problem compiled once (:func:`warm_job`), ``parallel`` at a time and each in its own
    confined process, before any is timed: compiling is CPU work the problems can share, timing
    is not, so each problem's timing then loads its compiled code instead of compiling it alone.
    The problems compiled at once fit in a share of the GPU's ``memory_bytes`` together, by their
    buffers' bytes (the request's ``bytes``: a large one compiles alone). Nothing is timed
    meanwhile, and the autotuning choices made while the problems shared the GPU are removed
    (:func:`forget_autotuning`): each timing job makes its own on a quiet GPU. The phase's wall
    seconds."""
    began = time.monotonic()
    weights = [AHEAD_BASE_BYTES + AHEAD_BUFFERS * max(0, int(mine.get("bytes") or 0)) for _, mine in jobs]
    run_confined_jobs([(str(job), functools.partial(warm_job, torch, mine, request, job / WARM_FILE))
                       for job, mine in jobs], timeout_s, parallel, weights=weights,
                      capacity=int(AHEAD_SHARE * memory_bytes))
    for job, _ in jobs:
        forget_autotuning(job)
    return round(time.monotonic() - began, 3)


#: the most names :func:`forget_autotuning` looks at in one problem's directory (its compile caches
#: hold hundreds; a problem that made millions would only keep its own autotuning)
MAX_CACHE_NAMES = 100_000


def forget_autotuning(directory: Path) -> None:
    """Remove the autotuning results inductor keeps beside its kernels (``*.best_config``) under
    ``directory`` (links are removed, never followed; at most :data:`MAX_CACHE_NAMES` names seen:
    what is left past them changes only the problem's own times)."""
    seen = 0
    for root, dirs, files in os.walk(directory):
        seen += len(dirs) + len(files)
        for name in files:
            if name.endswith(".best_config"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(root, name))
        if seen > MAX_CACHE_NAMES:
            return


def ahead_compile_seconds(directory: Path) -> dict[str, float]:
    """The compile seconds a problem's :func:`warm_job` left, by case (nothing where it left none)."""
    cases = _read(directory / WARM_FILE).get("cases")
    return {c["name"]: seconds for c in (cases if isinstance(cases, list) else [])
            if isinstance(c, dict) and isinstance(c.get("name"), str) and (seconds := _seconds(c.get("compile_s")))}


def time_job(torch: Any, problem: dict[str, Any], request: dict[str, Any], path: Path) -> None:
    """One problem, in its own confined process: CUDA started, every case timed into ``path``."""
    _job_environment(path.parent)
    entry: dict[str, Any] = {"cases": [], "error": None, "finished": False}
    answer = Answer(path, entry)
    began = time.monotonic()
    device, found = start_cuda(torch, int(request["device"]))
    if device is None:
        entry["error"] = found["error"]
        answer.write()
        return
    flush = _Flush(torch, device, found["l2_bytes"] if request["flush_l2"] else 0)
    entry["cuda_s"] = round(time.monotonic() - began, 3)
    answer.write()
    time_problem(torch, problem, device, flush, request, entry, answer)
    entry["finished"] = True
    answer.write()


def _read(path: Path) -> dict[str, Any]:
    """A job's answer as it left it ({} where it left none, or not a JSON object within bounds, or
    not a plain file: a link it left to some other file is never followed)."""
    from kernelopt_mcp.confined_python import read_child_file

    try:
        data = json.loads(read_child_file(path, MAX_ENTRY_BYTES))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _text(value: Any) -> str | None:
    return value[:NOTE_CHARS] if isinstance(value, str) else None


def _seconds(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    return float(value) if ok else None


def _times(value: Any) -> dict[str, list[float]] | None:
    times = value.get("times_ms") if isinstance(value, dict) else None
    if not isinstance(times, list) or not times:
        return None
    kept = [_seconds(t) for t in times]
    return {"times_ms": kept} if all(t is not None and t > 0 for t in kept) else None  # type: ignore[dict-item]


def problem_entry(raw: dict[str, Any], problem: dict[str, Any]) -> dict[str, Any]:
    """A problem's answer, written by its own process (the problem's code ran there), cut to the
    fields and types this child's answer has: at most one record per case it was asked for."""
    asked = {c["name"] for c in problem["cases"]}
    cases: list[dict[str, Any]] = []
    listed = raw.get("cases")
    for c in listed if isinstance(listed, list) else []:
        if not isinstance(c, dict) or c.get("name") not in asked or any(k["name"] == c["name"] for k in cases):
            continue
        cases.append({"name": c["name"], "eager": _times(c.get("eager")), "eager_note": _text(c.get("eager_note")),
                      "compile": _times(c.get("compile")), "compile_note": _text(c.get("compile_note")),
                      "compile_s": _seconds(c.get("compile_s"))})
    return {"label": problem.get("label"), "cases": cases, "error": _text(raw.get("error")),
            "finished": raw.get("finished") is True, "cuda_s": _seconds(raw.get("cuda_s"))}


def _ended(status: int | None, timeout_s: float, cases: int) -> str:
    if status is None:
        return f"the problem ran past its {timeout_s:.0f} s deadline in the timing child after {cases} case(s)"
    how = f"signal {status - 128}" if status > 128 else f"exit {status}"
    return f"the problem's process ended ({how}) after {cases} case(s)"


def run(request: dict[str, Any], answer: Answer) -> None:
    try:
        import torch
    except ImportError as exc:
        answer.data["error"] = f"torch cannot be imported ({line(exc)}): install torch (pip install torch)"
        answer.data["blocked"] = True
        return
    try:  # what every problem's process would import again: torch.compile's front end (no CUDA context)
        import torch._dynamo
    except ImportError:
        pass
    answer.data["torch_version"] = torch.__version__
    answer.data["import_s"] = round(time.monotonic() - STARTED, 3)
    staging = Path(request["answer"]).parent
    first = staging / "job_probe" / "probe.json"
    first.parent.mkdir()
    status = run_confined_job(str(first.parent), functools.partial(probe, torch, request, first), PROBE_TIMEOUT_S)
    found = _read(first)
    if status != 0 or not isinstance(found.get("device_name"), str):
        why = _text(found.get("error")) or f"the job that starts CUDA failed ({_ended(status, PROBE_TIMEOUT_S, 0)})"
        answer.data.update(error=why, blocked=True)
        return
    answer.data["device_name"] = found["device_name"]
    answer.data["startup_s"] = round(time.monotonic() - STARTED, 3)  # torch's import and a first CUDA context
    answer.write()
    timeout_s = float(request.get("problem_timeout_s") or 0) or math.inf
    jobs = []
    for k, problem in enumerate(request["problems"]):
        job = staging / f"job_{k}"
        job.mkdir()
        # the job reads its problem in its own directory: it may read nothing else of this staging directory
        jobs.append((job, {**problem, "problem": shutil.copy(problem["problem"], job)}))
    parallel = int(request.get("compile_ahead") or 0)
    if request["compile"] and parallel > 1 and len(jobs) > 1:
        memory = found.get("memory_bytes")
        answer.data["compile_ahead_s"] = compile_ahead(torch, jobs, request, timeout_s, parallel,
                                                       memory if isinstance(memory, int) else 0)
        answer.write()
    for (job, mine), problem in zip(jobs, request["problems"], strict=True):
        began = time.monotonic()
        status = run_confined_job(str(job),
                                  functools.partial(time_job, torch, mine, request, job / "entry.json"), timeout_s)
        entry = problem_entry(_read(job / "entry.json"), problem)
        entry["seconds"] = round(time.monotonic() - began, 3)  # its CUDA context's start included
        ahead = ahead_compile_seconds(job)
        for case in entry["cases"]:  # compiled ahead: the compile's seconds are that of the first compile
            if case["compile"] is not None and case["name"] in ahead:
                case["compile_s"] = ahead[case["name"]]
        if not entry["finished"]:  # killed at its deadline, or its process ended part way
            if status is None or entry["error"] is None:
                entry["error"] = _ended(status, timeout_s, len(entry["cases"]))
            for case in entry["cases"]:
                if case["compile"] is None and case["compile_note"] is None:
                    case["compile_note"] = f"torch.compile not timed: {entry['error']}"
        shutil.rmtree(job, ignore_errors=True)
        answer.data["problems"].append(entry)
        answer.write()
    answer.data["finished"] = True


FRESH: dict[str, Any] = {"torch_version": None, "device_name": None, "mode": "default", "error": None, "blocked": False,
                         "problems": [], "finished": False}


def main(argv: list[str]) -> int:
    return child_main(argv, "kernelopt_mcp._torch_baseline_child", FRESH, run, "the timing child")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
