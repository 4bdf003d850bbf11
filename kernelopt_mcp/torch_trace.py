"""Which tensors torch's random functions made while a problem ran: the generators an imported
problem's inputs are drawn from (:func:`traced_random`: ``torch.randn`` -> normal, ``torch.rand`` ->
uniform, ``torch.randint``) and the tensors made from random numbers by further operations
(:func:`random_origin`). Split from :mod:`.torch_problem`, which re-exports both.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .torch_source import TorchProblemError


@contextmanager
def traced_random(torch: Any) -> Iterator[dict[int, tuple[Any, dict[str, Any]]]]:
    """Record which tensors torch.randn / rand / randint (and *_like) made, as kernelopt generators."""
    made: dict[int, tuple[Any, dict[str, Any]]] = {}
    originals = {name: getattr(torch, name) for name in ("randn", "rand", "randint", "randn_like", "rand_like")}

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def traced(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            gen: dict[str, Any] | None = None
            if name in ("randn", "randn_like"):
                gen = {"generator": "normal", "mean": 0.0, "std": 1.0}
            elif name in ("rand", "rand_like"):
                gen = {"generator": "uniform", "low": 0.0, "high": 1.0}
            else:
                ints = [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
                low, high = (ints[0], ints[1]) if len(ints) >= 2 else (0, ints[0] if ints else None)
                low, high = kwargs.get("low", low), kwargs.get("high", high)
                if isinstance(low, int) and isinstance(high, int):
                    gen = {"generator": "randint", "low": low, "high": high}
            if gen is not None:
                made[id(out)] = (out, gen)  # the tensor is kept alive, so its id is not reused
            return out

        return traced

    _cache_factories(torch)
    for name, fn in originals.items():
        setattr(torch, name, wrap(name, fn))
    try:
        yield made
    finally:
        for name, fn in originals.items():
            setattr(torch, name, fn)


def _cache_factories(torch: Any) -> None:
    """Have torch list its factory functions now, before they are wrapped: a device context
    (``torch.device("meta")``) lists them once, on first use, and would otherwise list the wrappers
    and then make the originals' tensors on the CPU."""
    with torch.device("meta"):
        torch.empty(0)


#: torch functions and tensor methods whose values are random numbers
_RANDOM_NAMES = (
    "rand randn randint rand_like randn_like randint_like randperm normal bernoulli multinomial poisson "
    "normal_ uniform_ random_ bernoulli_ exponential_ geometric_ log_normal_ cauchy_"
)
RANDOM_FUNCTIONS = frozenset(_RANDOM_NAMES.split())


@contextmanager
def random_origin(torch: Any) -> Iterator[dict[int, Any]]:
    """Record every tensor made from torch's random numbers, directly (``torch.rand``) or by operations
    on such a tensor (``torch.triu(torch.rand(n, n))``, ``torch.randint(0, 2, s).float() * 2 - 1``): by
    ``id``, each kept alive so that its id is not reused. Works on meta tensors: nothing is computed."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_flatten

    made: dict[int, Any] = {}

    class Origin(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            from_random = getattr(func, "__name__", "") in RANDOM_FUNCTIONS or any(
                isinstance(t, torch.Tensor) and id(t) in made for t in tree_flatten((args, kwargs))[0]
            )
            if from_random:
                for t in tree_flatten(out)[0]:
                    if isinstance(t, torch.Tensor):
                        made[id(t)] = t
            return out

    with Origin():
        yield made


@contextmanager
def cuda_to_default(torch: Any) -> Iterator[None]:
    """Run a problem written for the GPU (``torch.randn(n, device="cuda")``, ``x.cuda()``,
    ``x.to("cuda:0", torch.half)``, ``Model().cuda()``, as many problem files outside KernelBench's
    own are) where none is used: every CUDA device it names means the default device instead (the CPU,
    or the meta device inside ``torch.device("meta")``: enter this inside that context, so that it
    sees the call first). The import runs the module where no GPU is, and in a child that may not
    reach one; values and shapes do not depend on the device the problem asked for.

    The CUDA calls such files make besides are answered as by one idle GPU while the context lasts:
    ``torch.set_default_device("cuda")`` keeps the default device, ``torch.cuda.synchronize()`` and
    ``torch.cuda.set_device(0)`` do nothing, ``torch.cuda.current_device()`` is 0."""
    from torch.overrides import TorchFunctionMode

    def is_cuda(value: Any) -> bool:
        if isinstance(value, str):
            return value.split(":", 1)[0] == "cuda"
        return isinstance(value, torch.device) and value.type == "cuda"

    class Default(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            name = getattr(func, "__name__", "")
            if name == "cuda" and args and isinstance(args[0], torch.Tensor):  # Tensor.cuda: already there
                return args[0]
            if is_cuda(kwargs.get("device")):
                del kwargs["device"]
            if name == "to" and len(args) > 1 and is_cuda(args[1]):  # Tensor.to("cuda", ...)
                args = (args[0], *args[2:])
            return func(*args, **kwargs)

    own: list[tuple[Any, str, Any]] = []  # what this torch has of them, put back however the run ends

    def answer(owner: Any, name: str, make: Callable[[Any], Callable[..., Any]]) -> None:
        if owner is not None and hasattr(owner, name):  # older torch lacks set_default_device
            own.append((owner, name, getattr(owner, name)))
            setattr(owner, name, make(getattr(owner, name)))

    def refuse_autocast(real: Any, *, cuda_only: bool = False) -> Callable[..., Any]:
        """torch.autocast(device_type, dtype=None, enabled=True, ...), or with ``cuda_only``
        torch.cuda.amp.autocast(enabled=True, dtype=...), refused unless switched off."""
        def autocast(*args: Any, **kwargs: Any) -> Any:
            at = 0 if cuda_only else 2  # where ``enabled`` is among the positional arguments
            enabled = args[at] if len(args) > at else kwargs.get("enabled", True)
            if enabled:
                raise TorchProblemError(
                    "torch.autocast makes each op's dtype depend on the device it runs on (CUDA's autocast lists "
                    "are not the CPU's, and an autocast for one device leaves the other's tensors alone), and the "
                    "import runs the module on the CPU while the reference runs it on the GPU; cast explicitly in "
                    "forward instead (x.half(), .to(torch.bfloat16), .float())")
            return real(*args, **kwargs)

        return autocast

    cuda = getattr(torch, "cuda", None)
    answer(torch, "autocast", refuse_autocast)
    answer(getattr(torch, "amp", None), "autocast", refuse_autocast)
    answer(getattr(cuda, "amp", None), "autocast", functools.partial(refuse_autocast, cuda_only=True))
    answer(torch, "set_default_device", lambda real: lambda device: None if is_cuda(device) else real(device))
    answer(cuda, "synchronize", lambda real: lambda device=None: None)
    answer(cuda, "set_device", lambda real: lambda device: None)
    answer(cuda, "current_device", lambda real: lambda: 0)
    try:
        with Default():
            yield
    finally:
        for owner, name, call in own:
            setattr(owner, name, call)
