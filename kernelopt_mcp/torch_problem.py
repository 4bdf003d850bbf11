"""Running a KernelBench-style PyTorch problem file: what ``kernelopt import-torch`` converts.

A problem file defines ``class Model(nn.Module)``, ``get_inputs()`` (the forward arguments) and
optionally ``get_init_inputs()`` (the constructor arguments), usually in terms of module-level
size constants (``batch_size = 16``, ``M = 1024``). This module parses such a file, finds those
constants and runs the problem with the constants replaced: small, odd-sized correctness cases on
the CPU (:func:`draw`: the inputs, the module's parameters and its output), the problem as written
on torch's meta device (:func:`draw_shapes`: shapes, dtypes, generators and FLOPs, no values), and
on the CPU only what no generator makes at those sizes (:func:`module_state`, :func:`fixed_inputs`).

Parameters are drawn for every draw (:func:`draw_parameters`), never left at their defaults (a
LayerNorm weight of ones lets a kernel that ignores it pass); forward runs from a snapshot of the
module's state (BatchNorm's running statistics), so its output depends on the inputs only.

torch is imported lazily (:func:`require_torch`): kernelopt itself does not depend on it; the
workload the import writes needs it where it is evaluated (PyTorch computes the expected outputs).

The problem file is Python that runs in this process: import only files you trust, like any
script you run.
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .dtypes import DType
from .torch_source import (  # noqa: F401 - re-exported: the source half of a problem lives there
    TORCH_MISSING,
    CpuOutOfMemory,
    ProblemSource,
    SizeConstant,
    SizesRejected,
    TorchProblemError,
    code_failed,
    exhausted,
    forward_outputs,
    int_literal,
    load_module,
    parse_problem,
    require_torch,
    with_constants,
)
from .torch_trace import _cache_factories, cuda_to_default, random_origin, traced_random

# --- drawing a problem: inputs, module state, output ----------------------------------------


@dataclass
class Arg:
    """One forward argument as drawn: a tensor (as a NumPy array) or a Python number."""

    name: str
    array: np.ndarray | None = None  # tensors, C-contiguous, on the host
    dtype: DType | None = None
    shape: tuple[int, ...] = ()  # the tensor's own shape (() for a 0-dim tensor)
    number: int | float | None = None  # Python ints, floats and bools
    drawn_from: dict[str, Any] | None = None  # the torch random function that made the tensor, if known
    random: bool = False  # made from torch's random numbers (by drawn_from, or by operations on a draw)

    @property
    def tensor(self) -> bool:
        """A tensor (with or without its values: a draw on the meta device has none), not a number."""
        return self.dtype is not None

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize if self.dtype is not None else 0


@dataclass(frozen=True)
class ParamDraw:
    """How a parameter or buffer got its values in a draw: drawn from ``generator`` (uniform) instead of
    the module's values ``default`` describes, or kept (``generator`` None) for the reason given."""

    default: str
    generator: dict[str, Any] | None = None


@dataclass
class Draw:
    """One run of a problem: its forward arguments, its parameters and buffers, its outputs."""

    args: list[Arg]
    state: list[Arg]  # parameters and registered buffers, by dotted name (as input buffers)
    outputs: list[Arg]  # forward's result flattened (:func:`forward_outputs`): one tensor, or several in order
    init_inputs: list[Any]
    flops: int | None = None
    notes: list[str] = field(default_factory=list)
    outputs64: list[np.ndarray | None] | None = None  # per output, the module run in float64 where that works
    params: dict[str, ParamDraw] = field(default_factory=dict)  # by dotted name, every entry of ``state``
    restored: list[str] = field(default_factory=list)  # state that forward updates (restored after every call)
    probe: Probe | None = None  # with ``probe_s``: what the output does not depend on
    meta: bool = False  # shapes, dtypes and generators only (no values): :func:`draw_shapes`


@dataclass
class Probe:
    """The forward arguments and state (dotted names) whose redraw alone leaves the output unchanged,
    and those not tried (no way to redraw them, or the time ran out)."""

    inputs: list[str] = field(default_factory=list)
    state: list[str] = field(default_factory=list)
    untried: list[str] = field(default_factory=list)


_TORCH_DTYPES = {
    "float16": DType.float16, "bfloat16": DType.bfloat16, "float32": DType.float32, "float64": DType.float64,
    "int8": DType.int8, "int16": DType.int16, "int32": DType.int32, "int64": DType.int64, "uint8": DType.uint8,
    "uint16": DType.uint16, "uint32": DType.uint32, "uint64": DType.uint64,
}


def dtype_of(tensor: Any, what: str) -> DType:
    """The kernel dtype of a torch tensor (``torch.bool`` becomes uint8 0/1)."""
    name = str(tensor.dtype).removeprefix("torch.")
    if name == "bool":
        return DType.uint8
    if name not in _TORCH_DTYPES:
        raise TorchProblemError(
            f"{what} is a {name} tensor; kernels take {', '.join(_TORCH_DTYPES)} (and bool as uint8)"
        )
    return _TORCH_DTYPES[name]


def to_numpy(tensor: Any, dtype: DType) -> np.ndarray:
    torch = require_torch()
    t = tensor.detach().cpu().contiguous()
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    if dtype is DType.bfloat16:  # NumPy has no bfloat16: the same bits, viewed as ml_dtypes' type
        return t.view(torch.int16).numpy().view(dtype.numpy).copy()
    return t.numpy().copy()


def forward_names(model: Any, count: int) -> list[str]:
    """The forward arguments' names (``in0``, ``in1`` ... where forward takes ``*args``)."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    named = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return [named[i] if i < len(named) else f"in{i}" for i in range(count)]


def _on_the_cpu(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` runs the problem's code with every CUDA device it names meaning the CPU
    (:func:`~.torch_trace.cuda_to_default`): the import runs the module where no GPU is used."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with cuda_to_default(require_torch()):
            return fn(*args, **kwargs)

    return run


@_on_the_cpu
def draw(
    source: ProblemSource, values: dict[str, int], seed: int, *, reference64: bool = False,
    probe_s: float | None = None,
) -> Draw:
    """Run the problem once: execute it with the size constants ``values``, seed torch, build
    ``Model(*get_init_inputs())``, draw ``get_inputs()`` and the module's floating parameters and
    buffers (:func:`draw_parameters`), and run forward on the CPU without gradients, from a snapshot
    of the module's state (restored after every call).

    Args:
        probe_s: also find which inputs and parameters the output does not depend on
            (:class:`Probe`), spending at most about this many seconds.

    Raises:
        SizesRejected: the problem's code fails at these sizes (executing the file, Model, get_inputs
            or forward).
        TorchProblemError: something the conversion does not support (the message says what):
            an output that is not a tensor, randomness in forward, inputs of other types, a forward
            that changes its inputs or gives other outputs on the restored state.
    """
    torch = require_torch()
    module = load_module(source, values)
    label = source.label
    torch.manual_seed(seed)
    model, init_inputs = _build(module, source, torch)
    model = model.cpu()
    with traced_random(torch) as made, random_origin(torch) as derived:
        raw_args = _call(module, "get_inputs", label)
    args, call_args = _forward_args(model, raw_args, made, derived, label, torch)
    call_args = [t.detach().cpu().contiguous() if isinstance(t, torch.Tensor) else t for t in call_args]
    params = draw_parameters(model, seed, torch)
    state = _state(model, label)
    before_inputs = [t.clone() for t in call_args if isinstance(t, torch.Tensor)]
    snapshot = {k: v.detach().clone() for k, v in _named_state(model)}
    rng = torch.random.get_rng_state()
    result, flops = _counted_forward(model, call_args, label, torch)
    if not torch.equal(rng, torch.random.get_rng_state()):
        raise TorchProblemError(f"{label}: forward draws random numbers (dropout in training mode, torch.rand ...): "
                                "its output is not a function of its inputs, so no kernel can be checked against it; "
                                "remove the randomness (or use p=0)")
    restored = _restore(model, snapshot, label, torch)
    tensor_args = [(a.name, t) for a, t in zip(args, call_args, strict=True) if isinstance(t, torch.Tensor)]
    for (name, after), before in zip(tensor_args, before_inputs, strict=True):
        if not torch.equal(before, after):
            raise TorchProblemError(f"{label}: forward changes its input {name!r} in place; convert modules that leave "
                                    "their inputs alone")
    outputs = _outputs(result, label, torch)
    again = _forward(model, [t.clone() if isinstance(t, torch.Tensor) else t for t in call_args],
                     snapshot, label, torch)
    if not _same_outputs(again, result, torch):
        raise TorchProblemError(
            f"{label}: forward gives different outputs for the same inputs"
            f"{' (from the same restored state)' if restored else ''}; convert deterministic modules only"
        )
    out = Draw(args, state, outputs, init_inputs, flops=flops or None, params=params, restored=restored)
    if reference64 and any(o.dtype is not None and o.dtype.is_float for o in outputs):
        out.outputs64 = _float64_outputs(model, call_args, outputs, torch)
    if probe_s is not None:
        out.probe = _probe(model, args, call_args, snapshot, params, [r.detach() for r in result], seed, probe_s,
                           label, torch)
    return out


def draw_shapes(source: ProblemSource, values: dict[str, int], seed: int) -> Draw:
    """The problem at the size constants ``values`` on torch's meta device: the shapes and dtypes of
    the forward arguments, the module's state and the output, the generator of each input and the
    FLOPs torch counts, with no value computed or allocated (gigabytes of inputs take a second).
    The draw has no arrays and no parameter rules (:func:`module_state` builds those on the CPU).

    Raises:
        SizesRejected: the problem fails at these sizes or on the meta device (a forward that calls
            ``.item()``, shapes that depend on values); the CPU may still run it.
        TorchProblemError: something the conversion does not support (several or non-tensor outputs,
            inputs of other types).
    """
    torch = require_torch()
    with cuda_to_default(torch):  # the file's top level too (torch.set_default_device("cuda"))
        module = load_module(source, values)
    label = source.label
    torch.manual_seed(seed)
    with torch.device("meta"), cuda_to_default(torch):  # inside: "cuda" means meta
        model, init_inputs = _build(module, source, torch)
        with traced_random(torch) as made, random_origin(torch) as derived:
            raw_args = _call(module, "get_inputs", label)
        args, call_args = _forward_args(model, raw_args, made, derived, label, torch, values=False)
        not_meta = [a.name for a, t in zip(args, call_args, strict=True)
                    if isinstance(t, torch.Tensor) and not t.is_meta]
        if not_meta:
            raise SizesRejected(f"{label}: get_inputs() makes {listed(not_meta)} on a device of its own, "
                                "not on the meta device")
        state = [Arg(name, None, dtype_of(value, f"{label}: Model's {name!r}"), tuple(value.shape))
                 for name, value in _named_state(model)]
        result, flops = _counted_forward(model, call_args, label, torch, meta=True)
    outputs = _outputs(result, label, torch, values=False)
    return Draw(args, state, outputs, init_inputs, flops=flops or None, meta=True)


@_on_the_cpu
def module_state(source: ProblemSource, values: dict[str, int], seed: int) -> tuple[list[Arg], dict[str, ParamDraw]]:
    """The module alone, built on the CPU as :func:`draw` builds it (torch seeded with ``seed``, then
    ``Model(*get_init_inputs())``): its parameters and buffers with their values, and how each is
    drawn (:func:`parameter_rule`). Nothing else runs: no get_inputs, no forward.

    Raises:
        SizesRejected: executing the file, get_init_inputs or Model fails.
    """
    torch = require_torch()
    module = load_module(source, values)
    torch.manual_seed(seed)
    model = _build(module, source, torch)[0].cpu()
    buffers = {name for name, _ in model.named_buffers()}
    rules = {name: parameter_rule(value, name in buffers) for name, value in _named_state(model)}
    return _state(model, source.label), rules


@_on_the_cpu
def fixed_inputs(source: ProblemSource, values: dict[str, int], seed: int, names: list[str]) -> dict[str, np.ndarray]:
    """The values of the forward arguments ``names`` that get_inputs makes without random numbers (an
    ``arange``, a mask of ones), on the CPU at the sizes ``values``; torch's random functions return
    a zero-strided tensor there (one element, no memory), so the drawn arguments cost nothing.

    Raises:
        SizesRejected: the problem fails (its code, run on those stand-ins).
    """
    torch = require_torch()
    module = load_module(source, values)
    label = source.label
    torch.manual_seed(seed)
    model = _build(module, source, torch)[0].cpu()
    with _cheap_random(torch):
        raw_args = _call(module, "get_inputs", label)
    wanted = dict(zip(forward_names(model, len(raw_args)), raw_args, strict=True))
    out = {}
    for name in names:
        value = wanted.get(name)
        if not isinstance(value, torch.Tensor):
            raise SizesRejected(f"{label}: get_inputs() gives no tensor {name!r} on the CPU")
        out[name] = to_numpy(value, dtype_of(value, f"{label}: get_inputs() argument {name!r}"))
    return out


@contextmanager
def _cheap_random(torch: Any) -> Iterator[None]:
    """torch.rand, randn, randint and their *_like made of one zero element, expanded (no memory)."""
    names = ("randn", "rand", "randint", "randn_like", "rand_like", "randint_like")
    originals = {name: getattr(torch, name) for name in names}

    def cheap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def made(*args: Any, **kwargs: Any) -> Any:
            with torch.device("meta"):
                like = fn(*args, **{k: v for k, v in kwargs.items() if k not in ("device", "generator", "out")})
            return torch.zeros((), dtype=like.dtype).expand(like.shape)

        return made

    _cache_factories(torch)
    for name, fn in originals.items():
        setattr(torch, name, cheap(fn))
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(torch, name, fn)


def _build(module: types.ModuleType, source: ProblemSource, torch: Any) -> tuple[Any, list[Any]]:
    """``Model(*get_init_inputs())`` (on torch's current default device) and the init inputs."""
    label = source.label
    init_inputs = list(_call(module, "get_init_inputs", label)) if source.has_init_inputs else []
    try:
        model = module.Model(*init_inputs)
    except Exception as exc:  # noqa: BLE001 - the problem's own code may raise anything
        raise code_failed(label, "Model(*get_init_inputs())", exc) from None
    if not isinstance(model, torch.nn.Module):
        raise TorchProblemError(f"{label}: Model is not a torch.nn.Module")
    return model, init_inputs


def _forward_args(
    model: Any, raw_args: Any, made: dict[int, tuple[Any, dict[str, Any]]], derived: dict[int, Any],
    label: str, torch: Any,
    *, values: bool = True,
) -> tuple[list[Arg], list[Any]]:
    """get_inputs' result as :class:`Arg` (with arrays where ``values``) and as forward's arguments."""
    if not isinstance(raw_args, list | tuple):
        raise TorchProblemError(f"{label}: get_inputs() returned a {type(raw_args).__name__}; return a list of the "
                                "forward arguments")
    names = forward_names(model, len(raw_args))
    args: list[Arg] = []
    call_args: list[Any] = []
    for name, value in zip(names, raw_args, strict=True):
        if isinstance(value, torch.Tensor):
            if value.is_complex() or value.is_sparse:
                raise TorchProblemError(f"{label}: get_inputs() argument {name!r} is a complex or sparse "
                                        "tensor; not supported")
            dtype = dtype_of(value, f"{label}: get_inputs() argument {name!r}")
            entry = made.get(id(value))
            drawn = entry[1] if entry is not None and entry[0] is value else None
            array = to_numpy(value, dtype) if values else None
            args.append(Arg(name, array, dtype, tuple(value.shape), drawn_from=drawn, random=id(value) in derived))
            call_args.append(value)
        elif isinstance(value, bool | int | float):
            args.append(Arg(name, number=value))
            call_args.append(value)
        else:
            raise TorchProblemError(
                f"{label}: get_inputs() argument {name!r} is a {type(value).__name__}; forward arguments must be "
                "tensors or Python numbers (ints become int32 scalars)"
            )
    return args, call_args


def _counted_forward(model: Any, call_args: list[Any], label: str, torch: Any, *,
                     meta: bool = False) -> tuple[list[Any], int | None]:
    """forward without gradients under torch's FLOP counter: its outputs (:func:`forward_outputs`) and
    the FLOPs counted."""
    try:
        from torch.utils.flop_counter import FlopCounterMode

        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            result = forward_outputs(model(*call_args))
        return result, int(counter.get_total_flops())
    except TorchProblemError:
        raise
    except Exception as exc:  # noqa: BLE001 - the problem's own code may raise anything
        where = " on the meta device" if meta else ""
        raise code_failed(label, f"Model.forward{where}", exc) from None


# --- parameters drawn, state restored, dependence probed ------------------------------------


def parameter_rule(value: Any, buffer: bool) -> ParamDraw:
    """How to draw a tensor in place of the module's own values: a floating one whose values vary
    gets a uniform draw of the same mean and spread within their range (a kaiming-uniform weight:
    about the same bounds); a constant one (ones, zeros) gets values around that constant that
    differ per element (ones -> U(0.5, 1.5), zeros -> U(-0.5, 0.5)), so that no parameter can be
    ignored and the output keeps its scale. Kept: integer and bool tensors (index tables, counters),
    tensors with non-finite values, and buffers of whole numbers that vary (0/1 masks, positions)."""
    if not value.is_floating_point():
        return ParamDraw(f"{str(value.dtype).removeprefix('torch.')}: kept (integer and bool state keeps its values)")
    flat = value.detach().reshape(-1)  # no float64 copy: a 16384 x 32768 weight is 2 GiB already
    if flat.itemsize < 4:
        flat = flat.float()
    if flat.numel() == 0:
        return ParamDraw("empty: kept")
    if not bool(flat.isfinite().all()):
        return ParamDraw("has non-finite values (a mask): kept")
    low, high = float(flat.min()), float(flat.max())
    if low == high:
        spread = 0.5 * abs(low) if low else 0.5
        return ParamDraw(f"constant {low:g}", {"generator": "uniform", "low": low - spread, "high": low + spread})
    if buffer and bool((flat == flat.round()).all()):
        return ParamDraw(f"whole numbers in [{low:g}, {high:g}] (a mask or index table): kept")
    mean, std = float(flat.mean()), float(flat.std(correction=0))
    lo, hi = max(low, mean - math.sqrt(3) * std), min(high, mean + math.sqrt(3) * std)
    return ParamDraw(f"varies in [{low:.4g}, {high:.4g}]", {"generator": "uniform", "low": lo, "high": hi})


def draw_parameters(model: Any, seed: int, torch: Any) -> dict[str, ParamDraw]:
    """Replace every floating parameter and buffer of ``model`` by a draw of :func:`parameter_rule`
    from ``seed`` (its own generator: torch's global one, which get_inputs used, is left alone)."""
    generator = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, 0x9A3A]).generate_state(1)[0]))
    buffers = {name for name, _ in model.named_buffers()}
    out: dict[str, ParamDraw] = {}
    with torch.no_grad():
        for name, value in _named_state(model):
            rule = parameter_rule(value, name in buffers)
            if rule.generator is not None:
                value.copy_(_uniform(value, rule.generator, generator, torch))
            out[name] = rule
    return out


def _uniform(like: Any, gen: dict[str, Any], generator: Any, torch: Any) -> Any:
    # float32, in place: a float64 draw of VGG's 138M weights took seconds and a GiB per draw
    fresh = torch.empty(like.shape, dtype=torch.float32).uniform_(gen["low"], gen["high"], generator=generator)
    return fresh.to(like.dtype)


def _restore(model: Any, snapshot: dict[str, Any], label: str, torch: Any) -> list[str]:
    """Put the module's parameters and buffers back to ``snapshot``; the names forward had changed."""
    changed = []
    with torch.no_grad():
        for name, value in _named_state(model):
            before = snapshot.get(name)
            if before is None or before.shape != value.shape or before.dtype != value.dtype:
                raise TorchProblemError(f"{label}: forward adds or reshapes the module's state ({name!r}): it cannot "
                                        "run from a snapshot; register every parameter and buffer in __init__ "
                                        "with its final shape")
            if not torch.equal(before, value.detach()):
                changed.append(name)
                value.copy_(before)
    return changed


def _forward(model: Any, call_args: list[Any], snapshot: dict[str, Any], label: str, torch: Any) -> list[Any]:
    """One forward call from the snapshot (restored after it): its outputs (:func:`forward_outputs`)."""
    try:
        with torch.no_grad():
            return forward_outputs(model(*call_args))
    finally:
        _restore(model, snapshot, label, torch)


def _probe(
    model: Any, args: list[Arg], call_args: list[Any], snapshot: dict[str, Any],
    params: dict[str, ParamDraw], base: list[Any],
    seed: int, budget_s: float, label: str, torch: Any,
) -> Probe:
    """Redraw each forward argument and each drawn parameter alone and see whether the outputs
    change at all (any of them). Integer arguments are redrawn only from the randint they were drawn from; a
    redraw the module refuses (an error) counts as a dependence."""
    generator = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, 0x960B]).generate_state(1)[0]))
    deadline = time.monotonic() + budget_s
    found = Probe()

    def same_output(changed_args: list[Any]) -> bool:
        try:
            out = _forward(model, changed_args, snapshot, label, torch)
        except Exception:  # noqa: BLE001 - the module refuses the redraw: it reads the tensor
            return False
        return _same_outputs(out, base, torch)

    for i, (arg, value) in enumerate(zip(args, call_args, strict=True)):
        if arg.array is None:
            continue
        fresh = _redrawn_arg(arg, value, generator, torch)
        if fresh is None or time.monotonic() > deadline:
            found.untried.append(arg.name)
        elif same_output([*call_args[:i], fresh, *call_args[i + 1:]]):
            found.inputs.append(arg.name)
    state = dict(_named_state(model))
    for name, rule in params.items():
        if rule.generator is None:
            continue
        if time.monotonic() > deadline:
            found.untried.append(name)
            continue
        with torch.no_grad():
            state[name].copy_(_uniform(state[name], rule.generator, generator, torch))
        if same_output(call_args):  # _forward restored the drawn value
            found.state.append(name)
    return found


def _redrawn_arg(arg: Arg, value: Any, generator: Any, torch: Any) -> Any | None:
    gen = arg.drawn_from or {}
    if value.is_floating_point():  # a normal draw is redrawn uniform with its mean and spread
        rule = ParamDraw("", gen) if gen.get("generator") == "uniform" else parameter_rule(value, buffer=False)
        return None if rule.generator is None else _uniform(value, rule.generator, generator, torch)
    if gen.get("generator") == "randint" and value.dtype != torch.bool:
        return torch.randint(gen["low"], gen["high"], value.shape, generator=generator, dtype=value.dtype)
    return None


def _call(module: types.ModuleType, name: str, label: str) -> Any:
    try:
        return getattr(module, name)()
    except Exception as exc:  # noqa: BLE001 - the problem's own code may raise anything
        hint = ""
        if "cuda" in str(exc).lower():
            hint = (" (it asks for the GPU beyond device=\"cuda\", .cuda(), .to(\"cuda\"), set_default_device and "
                    "torch.cuda.synchronize / set_device / current_device, which the import runs on the CPU: make it "
                    "use those, or CPU tensors)")
        raise code_failed(label, f"{name}()", exc, hint) from None


def _named_state(model: Any) -> list[tuple[str, Any]]:
    return [*model.named_parameters(), *model.named_buffers()]


def _state(model: Any, label: str) -> list[Arg]:
    out = []
    for name, value in _named_state(model):
        dtype = dtype_of(value, f"{label}: Model's {name!r}")
        tensor = value.detach().cpu().contiguous()
        out.append(Arg(name, to_numpy(tensor, dtype), dtype, tuple(tensor.shape)))
    return out


def _outputs(result: list[Any], label: str, torch: Any, *, values: bool = True) -> list[Arg]:
    """forward's outputs (:func:`forward_outputs`) as Args, in order; refused: no output, or one that
    is not a real dense tensor."""
    if not result:
        raise TorchProblemError(f"{label}: forward returns no tensor (None, or an empty tuple); return the output "
                                "tensor(s)")
    out = []
    for i, r in enumerate(result):
        which = "forward's output" if len(result) == 1 else f"forward's output {i} (of {len(result)})"
        if not isinstance(r, torch.Tensor):
            raise TorchProblemError(f"{label}: {which} is of type {type(r).__name__}, not a tensor; return "
                                    "tensors (one, or a tuple of them)")
        if r.is_complex() or r.is_sparse:
            raise TorchProblemError(f"{label}: {which} is a complex or sparse tensor; not supported")
        dtype = dtype_of(r, f"{label}: {which}")
        out.append(Arg(f"out{i}", to_numpy(r, dtype) if values else None, dtype, tuple(r.shape)))
    return out


def _same_outputs(a: list[Any], b: list[Any], torch: Any) -> bool:
    """Whether two forward calls' outputs are the same tensors, bit for bit."""
    return len(a) == len(b) and all(
        isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype
        and torch.equal(x.detach().cpu(), y.detach().cpu()) for x, y in zip(a, b, strict=True))


def _float64_outputs(model: Any, call_args: list[Any], outputs: list[Arg], torch: Any) -> list[np.ndarray | None]:
    """Each floating output computed by the module in float64 (to size its tolerance); None for an
    integer output, and for every one where the float64 run fails or gives other outputs."""
    try:
        model64 = copy.deepcopy(model).double()
        args64 = [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in call_args]
        with torch.no_grad():
            result = forward_outputs(model64(*args64))
    except Exception:  # noqa: BLE001 - a module that cannot run in float64 keeps the dtype's default tolerance
        return [None] * len(outputs)
    if len(result) != len(outputs):
        return [None] * len(outputs)
    return [r.detach().cpu().double().numpy()
            if isinstance(r, torch.Tensor) and o.dtype is not None and o.dtype.is_float and tuple(r.shape) == o.shape
            else None for r, o in zip(result, outputs, strict=True)]


def listed(names: list[str], most: int = 6) -> str:
    """``a, b, c`` (and how many more past ``most``): a note stays one short line for a large network."""
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more
