"""Time PyTorch problems' modules on the GPU: eager and ``torch.compile``, one case after another.

Run by :func:`kernelopt_mcp.torch_baseline.measure_batch` as ``python -m
kernelopt_mcp._torch_baseline_child REQUEST.json`` inside a confined child (confined_python.py,
``gpu=True``): never in the server's or the CLI's process. The request names the problem files
(copies in the child's staging directory), each with its cases' size constants, the device and the
timing rules; one child times them all, so torch's import and the CUDA context are paid once per
batch, not once per problem. The answer is written to the file the request names (atomically,
after every step, so a child killed at its deadline still leaves the cases it finished). Each
problem has its own deadline (``problem_timeout_s``): a watchdog records the problem as past it
and ends the child, and the parent times the problems after it in a new child; so does a CUDA
error, which leaves the context unusable for the next problem. Nothing goes to stdout: the
problems' own prints cannot corrupt the answer.

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

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kernelopt_mcp._child_answer import Answer, line
from kernelopt_mcp._child_answer import main as child_main

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


def compiled_times(
    torch: Any, model: Any, inputs: list[Any], flush: _Flush, request: dict[str, Any],
) -> tuple[list[float] | None, str | None, float | None]:
    """``torch.compile(model)`` (default mode) timed, or None and why it could not run; and the
    compilation's wall seconds (None where it did not compile)."""
    try:
        from torch.utils._triton import has_triton

        if not has_triton():
            return None, "torch.compile not run: triton is not installed or finds no usable GPU (pip install triton)", None
    except ImportError:
        pass
    try:
        began = time.monotonic()
        compiled = torch.compile(model)
        compiled(*inputs)  # compiles: never timed
        torch.cuda.synchronize()
        compile_s = round(time.monotonic() - began, 3)
    except Exception as exc:  # noqa: BLE001 - inductor and dynamo raise many kinds; the note names it
        return None, f"torch.compile failed: {line(exc)}", None
    try:
        return measure(torch, lambda: compiled(*inputs), flush, request), None, compile_s
    except Exception as exc:  # noqa: BLE001
        return None, f"the compiled module failed while timed: {line(exc)}", compile_s


def time_case(
    torch: Any, source: Any, case: dict[str, Any], device: Any, flush: _Flush, request: dict[str, Any], entry: dict[str, Any],
    answer: Answer,
) -> None:
    """One case: the module built, timed eagerly (the answer written), then compiled and timed."""
    try:
        model, inputs = build(torch, source, {k: int(v) for k, v in case["values"].items()}, device, int(request["seed"]))
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
#: exit status of a child that ended itself: a problem past its deadline, or a CUDA error
STOPPED = 3
#: words of an exception after which the CUDA context cannot serve another problem
CUDA_STICKY = ("CUDA error", "device-side assert", "illegal memory access", "an illegal instruction", "unspecified launch failure")


class _Watchdog:
    """Ends the child when the current problem runs past its deadline, its entry saying so."""

    def __init__(self, answer: Answer, seconds: float) -> None:
        self.answer, self.seconds = answer, seconds
        self.timer: threading.Timer | None = None

    def arm(self, entry: dict[str, Any]) -> None:
        self.disarm()
        if self.seconds > 0:
            self.timer = threading.Timer(self.seconds, self._expire, args=(entry,))
            self.timer.daemon = True
            self.timer.start()

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expire(self, entry: dict[str, Any]) -> None:
        entry["error"] = f"the problem ran past its {self.seconds:.0f} s deadline in the timing child after {len(entry['cases'])} case(s)"
        self.answer.write()
        os._exit(STOPPED)


def _sticky(entry: dict[str, Any]) -> bool:
    notes = [entry.get("error") or "", *(c.get(k) or "" for c in entry["cases"] for k in ("eager_note", "compile_note"))]
    return any(word in note for note in notes for word in CUDA_STICKY)


def time_problem(torch: Any, problem: dict[str, Any], device: Any, flush: _Flush, request: dict[str, Any],
                 entry: dict[str, Any], answer: Answer) -> None:
    """Every case of one problem into ``entry``; what the problem's file itself breaks is its error."""
    from kernelopt_mcp.torch_problem import TorchProblemError, parse_problem

    began = time.monotonic()
    path = Path(problem["problem"])
    try:
        source = parse_problem(path.read_text(encoding="utf-8"), problem.get("label") or path.name)
    except (OSError, TorchProblemError) as exc:
        entry["error"] = line(exc)
        return
    for case in problem["cases"]:
        record: dict[str, Any] = {"name": case["name"], "eager": None, "eager_note": None, "compile": None, "compile_note": None}
        entry["cases"].append(record)
        time_case(torch, source, case, device, flush, request, record, answer)
        entry["seconds"] = round(time.monotonic() - began, 3)
        answer.write()
        torch._dynamo.reset()
        torch.cuda.empty_cache()


def run(request: dict[str, Any], answer: Answer) -> None:
    try:
        import torch
    except ImportError as exc:
        answer.data["error"] = f"torch cannot be imported ({line(exc)}): install torch (pip install torch)"
        answer.data["blocked"] = True
        return
    answer.data["torch_version"] = torch.__version__
    try:
        torch.cuda.init()
        count = torch.cuda.device_count()
    except Exception as exc:  # noqa: BLE001 - no driver, no device, a driver too old for this torch
        # a machine without a GPU says "no NVIDIA driver"; a driver call the child's confinement
        # refused says "OS call failed" (CUDA error 304): name both, so neither reads as the other
        hint = " (a driver call refused inside the confined child?)" if "304" in str(exc) or "OS call failed" in str(exc) else ""
        answer.data["error"] = f"torch {torch.__version__} could not start CUDA in the timing child{hint} ({line(exc)})"
        answer.data["blocked"] = True
        return
    ordinal = int(request["device"])
    if not 0 <= ordinal < count:
        answer.data["error"] = f"torch {torch.__version__} sees {count} CUDA device(s); device {ordinal} is not one of them"
        answer.data["blocked"] = True
        return
    device = torch.device("cuda", ordinal)
    torch.cuda.set_device(device)
    props = torch.cuda.get_device_properties(device)
    answer.data["device_name"] = props.name
    l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0)
    answer.data["l2_bytes"] = l2_bytes
    answer.data["startup_s"] = round(time.monotonic() - STARTED, 3)  # torch's import and the CUDA context
    flush = _Flush(torch, device, l2_bytes if request["flush_l2"] else 0)
    answer.write()
    watchdog = _Watchdog(answer, float(request.get("problem_timeout_s") or 0))
    for problem in request["problems"]:
        entry: dict[str, Any] = {"label": problem.get("label"), "cases": [], "error": None, "finished": False}
        answer.data["problems"].append(entry)
        watchdog.arm(entry)
        time_problem(torch, problem, device, flush, request, entry, answer)
        watchdog.disarm()
        entry["finished"] = True
        answer.write()
        if _sticky(entry):
            return  # the context may be unusable: the parent times the rest in a new child
    answer.data["finished"] = True


FRESH: dict[str, Any] = {"torch_version": None, "device_name": None, "mode": "default", "error": None, "blocked": False,
                         "problems": [], "finished": False}


def main(argv: list[str]) -> int:
    return child_main(argv, "kernelopt_mcp._torch_baseline_child", FRESH, run, "the timing child")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
