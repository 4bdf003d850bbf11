"""Compute an imported PyTorch problem's expected outputs on the very inputs the harness drew.

Run by :func:`kernelopt_mcp.torch_reference.compute_expected` as ``python -m
kernelopt_mcp._torch_reference_child REQUEST.json`` in a confined child (confined_python.py,
``run_torch_child``): never in the server's or the CLI's process, since the problem file is code.

For every job (a case of a data set): the module is built at the case's size constants
(``Model(*get_init_inputs())`` after ``torch.manual_seed(seed)``, on the GPU; one build per set of
sizes), each input buffer is made on the device, drawn by the harness's own fill kernel under the
harness's key (``kernelopt_mcp.torch_fill``: the same bytes, nothing copied between the processes)
or read from its file (a deterministic input), the drawn parameters and buffers are copied into
the module, forward runs under ``torch.no_grad()`` from the module's state snapshot (restored after:
BatchNorm's running statistics), and the output, in its buffer's dtype, is written to the job's
file with the figures the tolerances need (sum of squares and count of the finite values).

The answer (one JSON file, rewritten after every job) lists each job's outcome; nothing goes to
stdout, so the problem's own prints cannot corrupt it. A request whose inputs are all files (a
harness without device draws) runs on the CPU where torch sees no GPU (the answer names no device).
"""

from __future__ import annotations

import copy
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from kernelopt_mcp._child_answer import Answer, line
from kernelopt_mcp._child_answer import main as child_main
from kernelopt_mcp.torch_source import forward_outputs

TORCH_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
                "uint32", "uint64")


class _Fill:
    """The harness's draws in torch: the support module's fill kernels, made on the first draw."""

    def __init__(self, torch: Any, support: str | None) -> None:
        self.torch, self.support = torch, support
        self.filler: Any = None  # a TorchFiller, made at the first draw

    def __call__(self, tensor: Any, draw: dict[str, Any]) -> None:
        from kernelopt_mcp.evaluation.protocol import FreshSpec
        from kernelopt_mcp.torch_fill import TorchFiller, draw_key

        if self.filler is None:
            if not self.support:
                raise ValueError("a device draw needs the harness's support module")
            self.filler = TorchFiller(self.torch, Path(self.support).read_bytes())
        seed, index, argument = int(draw["seed"]), int(draw["draw"]), int(draw["argument"])
        self.filler.fill(tensor, draw_key(seed, index, argument), index, argument,
                         FreshSpec.model_validate(draw["spec"]))


def _dtype(torch: Any, name: str) -> Any:
    if name not in TORCH_DTYPES:
        raise ValueError(f"no torch dtype for {name}")
    return getattr(torch, name)


def _read_file(torch: Any, path: str, dtype: str, shape: list[int], device: Any) -> Any:
    data = bytearray(Path(path).read_bytes())
    flat = torch.frombuffer(data, dtype=_dtype(torch, dtype)) if data else torch.empty(0, dtype=_dtype(torch, dtype))
    return flat.reshape(shape).to(device)


WRITE_CHUNK = 1 << 26  # elements per step of writing an output: its float64 copies stay under 1.5 GiB


def _write_output(torch: Any, out: Any, path: str) -> dict[str, Any]:
    """The output's bytes to ``path`` (little-endian, C order) and its figures, a chunk at a time:
    whole float64 copies of a large output (the copy, its finite values, their squares) would take
    six times its own memory beside the module's."""
    flat = out.detach().contiguous().reshape(-1)
    finite, sum_sq = 0, 0.0
    with open(path, "wb") as f:
        for start in range(0, flat.numel(), WRITE_CHUNK):
            part = flat[start:start + WRITE_CHUNK]
            wide = part.to(torch.float64)
            kept = wide[torch.isfinite(wide)]
            finite += int(kept.numel())
            sum_sq += float((kept * kept).sum().item())
            del wide, kept
            host = part.cpu()
            if host.dtype == torch.bfloat16:
                host = host.view(torch.int16)
            if host.dtype == torch.bool:
                host = host.to(torch.uint8)
            host.numpy().tofile(f)
    return {"elements": int(flat.numel()), "finite": finite, "sum_sq": sum_sq}


class _Module:
    """The problem's module built at one set of sizes, with its state snapshot."""

    def __init__(self, torch: Any, source: Any, sizes: dict[str, int], seed: int, device: Any) -> None:
        from kernelopt_mcp.torch_problem import load_module

        module = load_module(source, sizes)
        torch.manual_seed(seed)
        init = list(module.get_init_inputs()) if source.has_init_inputs else []
        with torch.device(device):
            self.model = module.Model(*init)
        self.model = self.model.to(device)
        self.state = dict([*self.model.named_parameters(), *self.model.named_buffers()])
        with torch.no_grad():
            self.snapshot = {name: value.detach().clone() for name, value in self.state.items()}

    def restore(self, torch: Any) -> None:
        with torch.no_grad():
            for name, value in self.state.items():
                value.copy_(self.snapshot[name])


def run_job(torch: Any, request: dict[str, Any], job: dict[str, Any], module: _Module, fill: _Fill,
            device: Any) -> dict[str, Any]:
    """One job: inputs made, parameters copied in, forward run, each output written (and, where the
    job asks for ``own_error``, the module's own float error at this size, :func:`_own_error`): the
    figures per output buffer, under ``outputs``."""
    tensors: dict[str, Any] = {}
    for name, b in job["buffers"].items():
        if "file" in b:
            tensors[name] = _read_file(torch, b["file"], b["dtype"], b["shape"], device)
            continue
        t = torch.empty(b["shape"], dtype=_dtype(torch, b["dtype"]), device=device)
        fill(t, b["draw"])
        tensors[name] = t
    args = []
    for name in request["forward"]:
        if name in tensors:
            args.append(tensors[name])
        else:
            value = job["scalars"][name]
            args.append(int(value) if isinstance(value, int) else float(value))
    started = time.perf_counter()
    with torch.no_grad():
        _load_state(request, module, tensors)
        try:
            outs = forward_outputs(module.model(*args))
        finally:
            module.restore(torch)
    wants = job["outputs"]
    if len(outs) != len(wants):
        raise ValueError(f"forward returned {len(outs)} outputs; the workload has {len(wants)} output buffers")
    for k, (out, want) in enumerate(zip(outs, wants, strict=True)):
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"forward's output {k} is a {type(out).__name__}, not a tensor")
        if out.numel() != int(want["elements"]):
            raise ValueError(f"forward's output {k} has {out.numel()} elements; the output buffer {want['name']!r} "
                             f"has {want['elements']}")
        got = "uint8" if out.dtype == torch.bool else str(out.dtype).removeprefix("torch.")  # as the import names it
        if got != want["dtype"]:  # never converted: the kernel is checked against what the module computes
            raise TypeError(
                f"forward's output {k} is {got} on {device}, but {want['dtype']} where the problem was imported: "
                "the module computes differently on this device (torch.autocast, or code that depends on the "
                "device); make its dtypes explicit (x.half(), .float()) and import it again")
        outs[k] = out.to(_dtype(torch, want["dtype"]))  # bool -> uint8
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    figures: dict[str, dict[str, Any]] = {want["name"]: {} for want in wants}
    if job.get("own_error"):
        own = _own_error(torch, request, module, tensors, args, outs, time.perf_counter() - started)
        for want, measured in zip(wants, own, strict=True):
            figures[want["name"]].update(measured)
    del args
    tensors.clear()  # the inputs' memory goes before the outputs are written (a large problem's inputs and output
    # may take most of the GPU)
    for out, want in zip(outs, wants, strict=True):
        figures[want["name"]].update(_write_output(torch, out, want["file"]))
    return {"outputs": figures}


def _load_state(request: dict[str, Any], module: _Module, tensors: dict[str, Any]) -> None:
    """The job's drawn parameters and buffers copied into the module (under no_grad)."""
    for buffer, dotted in request["state"].items():
        target = module.state[dotted]
        target.copy_(tensors[buffer].reshape(target.shape).to(target.dtype))


#: The float64 run that measures the module's own error is skipped where the float32 forward took
#: longer than this (float64 convolutions and GEMMs can be tens of times slower on a GPU).
OWN_ERROR_MAX_FORWARD_S = 0.5


def _own_error(torch: Any, request: dict[str, Any], module: _Module, tensors: dict[str, Any], args: list[Any],
               outs: list[Any], forward_s: float) -> list[dict[str, Any]]:
    """Per output, how far the module's own output is from the same module run in float64 on the same
    inputs and parameters: ``own_error``, the largest ``|out - out64| / (rms(out64) + |out64|)`` (the
    measure the import sizes a tolerance by, taken here at the case's real size, where a long
    reduction's rounding is larger than at the import's scaled-down sizes), or ``own_error_skipped``
    saying why it was not measured (too slow, out of memory, no float64 run, non-finite values);
    nothing for an integer or float64 output."""
    floating = [o.is_floating_point() and o.dtype != torch.float64 for o in outs]
    if not any(floating):
        return [{} for _ in outs]
    if forward_s > OWN_ERROR_MAX_FORWARD_S:
        skipped: dict[str, Any] = {"own_error_skipped": f"the float32 forward took {forward_s:.1f} s"}
        return [dict(skipped) if f else {} for f in floating]
    try:
        result = _float64_error(torch, request, module, tensors, args, outs)
    except torch.cuda.OutOfMemoryError:
        result = [{"own_error_skipped": "out of memory for a float64 copy"}] * len(outs)
    except Exception as exc:  # noqa: BLE001 - a module that cannot run in float64 keeps its tolerance
        result = [{"own_error_skipped": f"the float64 forward failed ({line(exc)})"}] * len(outs)
    if outs[0].is_cuda:  # the float64 copies are gone with the call's frame (and a raised error's traceback)
        torch.cuda.empty_cache()
    return [dict(r) if f else {} for r, f in zip(result, floating, strict=True)]


def _float64_error(torch: Any, request: dict[str, Any], module: _Module, tensors: dict[str, Any], args: list[Any],
                   outs: list[Any]) -> list[dict[str, Any]]:
    with torch.no_grad():
        _load_state(request, module, tensors)
        try:
            model64 = copy.deepcopy(module.model).double()
        finally:
            module.restore(torch)
        wide = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
        outs64 = forward_outputs(model64(*wide))
        del wide, model64
        if len(outs64) != len(outs):
            return [{"own_error_skipped": "the float64 forward returned other outputs"}] * len(outs)
        found = []
        for out, out64 in zip(outs, outs64, strict=True):
            if not isinstance(out64, torch.Tensor) or out64.numel() != out.numel():
                found.append({"own_error_skipped": "the float64 forward returned another output"})
            elif not out.is_floating_point():
                found.append({})
            else:
                found.append(_largest_error(torch, out.reshape(-1), out64.detach().reshape(-1).to(torch.float64)))
        return found


def _largest_error(torch: Any, out: Any, out64: Any) -> dict[str, Any]:
    """:func:`_own_error`'s figure, a chunk at a time (no whole float64 copy of ``out``)."""
    n, sum_sq = out64.numel(), 0.0
    for part in out64.split(WRITE_CHUNK):
        if not bool(torch.isfinite(part).all()):
            return {"own_error_skipped": "the float64 result has non-finite values"}
        sum_sq += float((part * part).sum().item())
    if n == 0:
        return {"own_error": 0.0}
    scale = math.sqrt(sum_sq / n)
    largest = 0.0
    for start in range(0, n, WRITE_CHUNK):
        e = out64[start:start + WRITE_CHUNK]
        a = out[start:start + WRITE_CHUNK].to(torch.float64)
        err = (a - e).abs() / (scale + e.abs() + 1e-300)
        err = err[torch.isfinite(err)]  # a float32 overflow is the kernel's to match, not a tolerance to widen
        if err.numel():
            largest = max(largest, float(err.max().item()))
    return {"own_error": largest}


def run(request: dict[str, Any], answer: Answer) -> None:
    try:
        import torch
    except ImportError as exc:
        answer.data["error"] = f"torch cannot be imported ({line(exc)}): install torch (pip install torch)"
        return
    answer.data["torch_version"] = torch.__version__
    # the reference in full float32: no TF32 in matmuls or cuDNN convolutions (cuDNN's default allows
    # it), whose error is near the strict float32 tolerance a correct kernel is judged by
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    drawn = any("draw" in b for job in request["jobs"] for b in job["buffers"].values())
    try:
        count = torch.cuda.device_count() if request["device"] != "cpu" else 0
        if count:
            torch.cuda.init()
    except Exception as exc:  # noqa: BLE001 - no driver, no device, a driver call refused
        if drawn:
            answer.data["error"] = (f"torch {torch.__version__} could not start CUDA in the reference child "
                                    f"({line(exc)})")
            return
        count = 0
    if count == 0 and not drawn:  # every input is a file: the module runs where torch can (no GPU here)
        device = torch.device("cpu")
    else:
        ordinal = int(request["device"])
        if not 0 <= ordinal < count:
            answer.data["error"] = (f"torch {torch.__version__} sees {count} CUDA device(s); "
                                    f"device {ordinal} is not one of them")
            return
        device = torch.device("cuda", ordinal)
        torch.cuda.set_device(device)
        answer.data["device_name"] = torch.cuda.get_device_properties(device).name
    from kernelopt_mcp.torch_problem import parse_problem

    path = Path(request["problem"])
    source = parse_problem(path.read_text(encoding="utf-8"), request.get("label") or path.name)
    fill = _Fill(torch, request.get("support"))
    if device.type == "cpu":  # a problem written for the GPU (x.cuda(), device="cuda") runs here on the CPU
        from kernelopt_mcp.torch_trace import cuda_to_default

        with cuda_to_default(torch):
            _run_jobs(torch, request, answer, source, fill, device)
    else:
        _run_jobs(torch, request, answer, source, fill, device)
    answer.data["finished"] = True


def _run_jobs(torch: Any, request: dict[str, Any], answer: Answer, source: Any, fill: _Fill, device: Any) -> None:
    modules: dict[str, _Module] = {}
    for job in request["jobs"]:
        entry: dict[str, Any] = {"case": job["case"], "set": job["set"], "error": None}
        answer.data["jobs"].append(entry)
        try:
            key = json.dumps(job["sizes"], sort_keys=True)
            if key not in modules:
                modules.clear()  # one module at a time: a large one's memory goes before the next is built
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                modules[key] = _Module(torch, source, {k: int(v) for k, v in job["sizes"].items()},
                                       int(request["seed"]), device)
            entry.update(run_job(torch, request, job, modules[key], fill, device))
        except Exception as exc:  # noqa: BLE001 - the problem's own code may raise anything
            entry["error"] = line(exc)
        answer.write()


FRESH: dict[str, Any] = {"torch_version": None, "device_name": None, "error": None, "jobs": [], "finished": False}


def main(argv: list[str]) -> int:
    return child_main(argv, "kernelopt_mcp._torch_reference_child", FRESH, run, "the reference child")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
