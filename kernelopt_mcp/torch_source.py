"""The source of a KernelBench-style PyTorch problem: its entry points and size constants, parsed
without running anything, and the file executed with the constants replaced (:func:`load_module`).

Split from :mod:`.torch_problem` (which re-exports these names), so the confined children that only
load a problem at given sizes need none of the drawing code. The problem file is Python that runs in
the process that loads it: import only files you trust.
"""

from __future__ import annotations

import ast
import copy
import importlib
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import WorkloadError

TORCH_MISSING = (
    "install torch (any build, e.g. `pip install torch --index-url https://download.pytorch.org/whl/cpu`) "
    "to import PyTorch problems; the GPU machine needs it too (PyTorch computes an imported problem's expected outputs)"
)


class TorchProblemError(WorkloadError):
    """A PyTorch problem file cannot be converted; the message names the reason and what to change."""


class SizesRejected(TorchProblemError):
    """The problem's own code fails at these sizes, or on this device (a group count that must divide
    the channels, ``.item()`` on the meta device): other sizes, or the CPU, may still work. Everything
    else a draw refuses (randomness in forward, an output that is not a tensor) is a property of the problem."""


class CpuOutOfMemory(SizesRejected):
    """The CPU ran out of memory building or running the module: with more memory free (fewer
    imports at once, another machine) it may import."""


def forward_outputs(result: Any) -> list[Any]:
    """forward's result as the list of its outputs, in order: a tensor is one output; a tuple or list
    (``return (x,)``, torch.max's ``(values, indices)``, an LSTM's nested ``(out, (h, c))``) gives its
    elements depth first, a dict (a Hugging Face ``ModelOutput``) its values in order; None (``return
    out, None``, as modules written for HF-style callers return) is no output. Anything else stays in
    the list as it is, for the caller to refuse."""
    if isinstance(result, tuple | list):
        return [x for item in result for x in forward_outputs(item)]
    if isinstance(result, dict):
        return [x for item in result.values() for x in forward_outputs(item)]
    return [] if result is None else [result]


def exhausted(exc: BaseException) -> bool:
    """Whether ``exc`` says the CPU's memory ran out (torch's allocator raises a RuntimeError)."""
    return isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and "allocate memory" in str(exc))


def code_failed(label: str, what: str, exc: BaseException, hint: str = "") -> TorchProblemError:
    """The refusal for the problem's own code raising ``exc`` while ``what`` ran: at these sizes
    (:class:`SizesRejected`), for want of memory (:class:`CpuOutOfMemory`), or, where the code used
    something the import cannot run at any size (a TorchProblemError of its own), that."""
    if isinstance(exc, TorchProblemError) and not isinstance(exc, SizesRejected):
        return TorchProblemError(f"{label}: {what}: {exc}")
    if exhausted(exc):
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        return CpuOutOfMemory(f"{label}: {what} ran out of memory: {type(exc).__name__}: {first}; import it where more "
                              "memory is free")
    return SizesRejected(f"{label}: {what} failed: {type(exc).__name__}: {exc}{hint}")


def require_torch() -> Any:
    """The ``torch`` module, or :class:`TorchProblemError` saying how to get it."""
    try:
        return importlib.import_module("torch")
    except ImportError as exc:
        raise TorchProblemError(f"torch is not installed ({exc}): {TORCH_MISSING}") from None


# --- the source: entry points and size constants --------------------------------------------


@dataclass(frozen=True)
class SizeConstant:
    """A module-level ``NAME = <int literal>`` that get_inputs / get_init_inputs depend on."""

    name: str
    value: int
    line: int


@dataclass
class ProblemSource:
    text: str
    label: str  # the file name, for messages
    tree: ast.Module
    constants: list[SizeConstant]
    has_init_inputs: bool


def parse_problem(text: str, label: str) -> ProblemSource:
    """Parse a problem file and find its size constants (no code runs).

    Size constants are module-level assignments of a positive integer literal (``N = 4096``)
    whose name ``get_inputs`` or ``get_init_inputs`` reads, directly or through other module-level
    assignments (``N = 2 * M`` makes ``M`` one too), and the elements above 1 of a shape or a list
    of widths written as literals (``input_shape = (32768,)``: ``input_shape_0``; ``layer_sizes =
    [400, 800]``). Only these are scaled for the correctness
    cases; constants the functions do not reach are left alone.

    Raises:
        TorchProblemError: not Python, or ``Model`` / ``get_inputs`` are missing.
    """
    try:
        tree = ast.parse(text, filename=label)
    except SyntaxError as exc:
        raise TorchProblemError(f"{label}: line {exc.lineno}: not valid Python ({exc.msg})") from None
    defined = {
        node.name: node for node in tree.body if isinstance(node, ast.ClassDef | ast.FunctionDef)
    }
    if not isinstance(defined.get("Model"), ast.ClassDef):
        raise TorchProblemError(
            f"{label}: defines no `class Model(nn.Module)`; a KernelBench-style problem names its module Model"
        )
    if not isinstance(defined.get("get_inputs"), ast.FunctionDef):
        raise TorchProblemError(
            f"{label}: defines no `get_inputs()`; add one returning the forward arguments, e.g. "
            "`return [torch.randn(batch_size, dim)]`"
        )
    assigned: dict[str, ast.AST] = {}
    literal: dict[str, tuple[int, int]] = {}
    elements: dict[str, str] = {}  # a shape tuple's element constant -> the tuple's name
    for node in tree.body:
        for target, value, _ in _assignments(node):
            assigned[target] = value
            for name in [n for n, of in elements.items() if of == target]:
                literal.pop(name, None)  # reassigned later: its old elements are no constants
            number = int_literal(value)
            if number is not None and number > 0:
                literal[target] = (number, node.lineno)
            else:
                literal.pop(target, None)  # reassigned to something else later: not a constant
            for i, element in _tuple_elements(value):
                number = int_literal(element)
                if number is not None and number > 1:  # a 1 is a broadcast dimension, not a size
                    literal[f"{target}_{i}"] = (number, node.lineno)
                    elements[f"{target}_{i}"] = target
    reached: set[str] = set()
    todo = [n for f in ("get_inputs", "get_init_inputs") if f in defined for n in _loaded_names(defined[f])]
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        if name in assigned:
            todo += _loaded_names(assigned[name])
    constants = [SizeConstant(n, v, line) for n, (v, line) in literal.items() if elements.get(n, n) in reached]
    constants.sort(key=lambda c: c.line)
    return ProblemSource(text, label, tree, constants, isinstance(defined.get("get_init_inputs"), ast.FunctionDef))


#: a literal tuple or list longer than a tensor's rank or a few layer widths is data, not sizes
MAX_SHAPE_ELEMENTS = 8


def _tuple_elements(value: ast.AST) -> list[tuple[int, ast.expr]]:
    """A shape or a list of widths written as literals (``input_shape = (32768,)``, ``layer_sizes =
    [16384, 16384]``): its elements, each a size constant ``<name>_<i>`` of its own; nothing for any
    other value."""
    if (isinstance(value, ast.Tuple | ast.List) and 0 < len(value.elts) <= MAX_SHAPE_ELEMENTS
            and all(int_literal(e) is not None for e in value.elts)):
        return list(enumerate(value.elts))
    return []


def _assignments(node: ast.stmt) -> list[tuple[str, ast.expr, Callable[[ast.expr], None]]]:
    """The module-level names ``node`` assigns, with their value and how to replace it:
    ``N = 4096``, ``N: int = 4096`` and ``height, width = 32, 32``."""
    def setter(holder: Any, attr: str, index: int | None = None) -> Callable[[ast.expr], None]:
        def put(new: ast.expr) -> None:
            if index is None:
                setattr(holder, attr, new)
            else:
                getattr(holder, attr)[index] = new
        return put

    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
        if isinstance(target, ast.Name):
            return [(target.id, node.value, setter(node, "value"))]
        if (isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                and len(target.elts) == len(node.value.elts) and all(isinstance(t, ast.Name) for t in target.elts)):
            return [(t.id, v, setter(node.value, "elts", i))  # type: ignore[attr-defined]
                    for i, (t, v) in enumerate(zip(target.elts, node.value.elts, strict=True))]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        return [(node.target.id, node.value, setter(node, "value"))]
    return []


_INT_OPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b, ast.LShift: lambda a, b: a << b, ast.Pow: lambda a, b: a**b,
}


def int_literal(node: ast.AST) -> int | None:
    """The value of an integer literal or an expression of literals only (``1 << 20``,
    ``16 * 1024``, ``2 ** 12``), else None."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.BinOp) and type(node.op) in _INT_OPS:
        left, right = int_literal(node.left), int_literal(node.right)
        if left is None or right is None or (isinstance(node.op, ast.LShift | ast.Pow) and not 0 <= right <= 64):
            return None
        if isinstance(node.op, ast.FloorDiv) and right == 0:
            return None
        return _INT_OPS[type(node.op)](left, right)
    return None


def _loaded_names(node: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]


def with_constants(source: ProblemSource, values: dict[str, int]) -> ast.Module:
    """The problem's syntax tree with the size constants' literals replaced by ``values``."""
    tree = copy.deepcopy(source.tree)
    for node in tree.body:
        for target, value, put in _assignments(node):
            if target in values and int_literal(value) is not None:
                put(ast.copy_location(ast.Constant(values[target]), value))
            for i, element in _tuple_elements(value):
                if f"{target}_{i}" in values:
                    value.elts[i] = ast.copy_location(ast.Constant(values[f"{target}_{i}"]), element)  # type: ignore[attr-defined]
    return ast.fix_missing_locations(tree)


_counter = 0


def load_module(source: ProblemSource, values: dict[str, int]) -> types.ModuleType:
    """Execute the problem (with the size constants in ``values``) as a fresh module.

    Raises:
        TorchProblemError: the file fails to execute.
    """
    global _counter
    _counter += 1
    name = f"kernelopt_torch_problem_{_counter}"
    module = types.ModuleType(name)
    module.__file__ = source.label
    code = compile(with_constants(source, values), source.label, "exec")
    sys.modules[name] = module  # dataclasses and pickling look the module up while it executes
    try:
        exec(code, module.__dict__)  # noqa: S102 - the user's own problem file, as `python problem.py` would
    except Exception as exc:  # noqa: BLE001 - the problem's own code may raise anything
        raise code_failed(source.label, "executing the file", exc) from None
    finally:
        sys.modules.pop(name, None)
    return module
