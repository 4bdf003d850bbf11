"""A small, safe evaluator for shape, launch and cost expressions.

Expressions are arithmetic over the case's scalars: ``ceil_div(N, 256)``, ``M*N*K*2``,
``min(1024, cols)``. They are parsed with :mod:`ast` and walked node by node; anything but
numbers, known names, arithmetic operators and the functions below is rejected. Python's
``eval`` is never used.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from functools import lru_cache

from .errors import ExpressionError

Number = int | float

MAX_EXPRESSION_CHARS = 500
_MAX_POWER_EXPONENT = 64
_MAX_MAGNITUDE = 2**80


def _ceil_div(a: Number, b: Number) -> int:
    if b == 0:
        raise ExpressionError("ceil_div by zero")
    return -(-int(a) // int(b))


def _round_up(a: Number, b: Number) -> int:
    return _ceil_div(a, b) * int(b)


FUNCTIONS: dict[str, Callable[..., Number]] = {
    "ceil_div": _ceil_div,
    "cdiv": _ceil_div,
    "round_up": _round_up,
    "min": min,
    "max": max,
    "abs": abs,
    "floor": lambda x: math.floor(x),
    "ceil": lambda x: math.ceil(x),
    "log2": math.log2,
    "sqrt": math.sqrt,
}

_BINOPS: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a**b,
}

_CMPOPS: dict[type[ast.cmpop], Callable[[Number, Number], bool]] = {
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
}


def parse(text: str) -> ast.Expression:
    """Parse ``text`` and check that it only uses allowed constructs."""
    # checked before the cache, which would raise TypeError on an unhashable argument
    if not isinstance(text, str):
        raise ExpressionError(f"expression must be a string, got {type(text).__name__}")
    return _parse(text)


@lru_cache(maxsize=4096)
def _parse(text: str) -> ast.Expression:
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"cannot parse {text!r}: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes; nesting the parser refuses
        raise ExpressionError(f"cannot parse {text[:80]!r}: {exc}") from None
    for node in ast.walk(tree):
        _check_node(node, text)
    return tree


def _check_node(node: ast.AST, text: str) -> None:
    allowed = (
        ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load, ast.Call,
        ast.Compare, ast.BoolOp, ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd,
        *_BINOPS, *_CMPOPS,
    )
    if not isinstance(node, allowed):
        raise ExpressionError(
            f"{type(node).__name__} is not allowed in {text!r}: use numbers, scalar names, "
            f"+ - * / // % **, comparisons and {', '.join(sorted(FUNCTIONS))}"
        )
    if isinstance(node, ast.Constant) and (
        isinstance(node.value, bool) or not isinstance(node.value, int | float)
    ):
        raise ExpressionError(f"only numeric constants are allowed in {text!r}")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            raise ExpressionError(
                f"unknown function in {text!r}; allowed: {', '.join(sorted(FUNCTIONS))}"
            )
        if node.keywords:
            raise ExpressionError(f"keyword arguments are not allowed in {text!r}")


def names(text: str) -> set[str]:
    """The variable names an expression refers to (functions excluded)."""
    tree = parse(text)
    # parse() admits calls of plain names only
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - called


def evaluate(expression: str | Number, variables: Mapping[str, Number]) -> Number:
    """Evaluate an expression (or pass a number through) with ``variables`` bound.

    Raises:
        ExpressionError: unknown name, disallowed construct, division by zero, overflow.
    """
    if isinstance(expression, bool):
        raise ExpressionError("booleans are not expressions")
    if isinstance(expression, int | float):
        return expression
    tree = parse(expression)
    try:
        return _eval(tree.body, variables, expression)
    except ZeroDivisionError:
        raise ExpressionError(f"division by zero in {expression!r}") from None
    except (OverflowError, ValueError, TypeError) as exc:
        raise ExpressionError(f"cannot evaluate {expression!r}: {exc}") from None


def evaluate_int(expression: str | Number, variables: Mapping[str, Number], what: str) -> int:
    """Evaluate to an integer; a non-integral result is an error naming ``what``."""
    value = evaluate(expression, variables)
    if isinstance(value, float):
        if not value.is_integer():
            raise ExpressionError(f"{what}: {expression!r} = {value}, which is not an integer")
        value = int(value)
    return int(value)


def _eval(node: ast.AST, env: Mapping[str, Number], text: str) -> Number:
    match node:
        case ast.Constant(value=value):
            return value  # type: ignore[return-value]  # numeric: _check_node
        case ast.Name(id=name):
            if name not in env:
                known = ", ".join(sorted(env)) or "none"
                raise ExpressionError(f"unknown name {name!r} in {text!r} (known: {known})")
            return env[name]
        case ast.UnaryOp(op=ast.USub(), operand=operand):
            return -_eval(operand, env, text)
        case ast.UnaryOp(op=ast.UAdd(), operand=operand):
            return +_eval(operand, env, text)
        case ast.UnaryOp(op=ast.Not(), operand=operand):
            return int(not _eval(operand, env, text))
        case ast.BinOp(left=left, op=op, right=right):
            a, b = _eval(left, env, text), _eval(right, env, text)
            if isinstance(op, ast.Pow) and abs(b) > _MAX_POWER_EXPONENT:
                raise ExpressionError(f"exponent {b} too large in {text!r}")
            result = _BINOPS[type(op)](a, b)
            if isinstance(result, complex) or abs(result) > _MAX_MAGNITUDE:
                raise ExpressionError(f"{text!r} is out of range")
            return result
        case ast.Compare(left=left, ops=ops, comparators=comparators):
            a = _eval(left, env, text)
            for cmp_op, comparator in zip(ops, comparators, strict=True):
                b = _eval(comparator, env, text)
                if not _CMPOPS[type(cmp_op)](a, b):
                    return 0
                a = b
            return 1
        case ast.BoolOp(op=op, values=values):
            results = (_eval(v, env, text) for v in values)
            return int(all(results) if isinstance(op, ast.And) else any(results))
        case ast.Call(func=ast.Name(id=fname), args=args):
            return FUNCTIONS[fname](*(_eval(a, env, text) for a in args))
    raise ExpressionError(f"cannot evaluate {ast.dump(node)} in {text!r}")  # pragma: no cover
