from __future__ import annotations

import pytest

from kernelopt_mcp import expr
from kernelopt_mcp.errors import ExpressionError


@pytest.mark.parametrize(
    ("text", "env", "value"),
    [
        ("ceil_div(N, 256)", {"N": 1000}, 4),
        ("ceil_div(N, 256)", {"N": 1024}, 4),
        ("cdiv(N, 256)", {"N": 1025}, 5),
        ("M*N*K*2", {"M": 3, "N": 5, "K": 7}, 210),
        ("min(1024, cols)", {"cols": 4097}, 1024),
        ("max(1, rows // 4)", {"rows": 2}, 1),
        ("round_up(n, 128)", {"n": 129}, 256),
        ("-(-n // 32)", {"n": 33}, 2),
        ("2**10", {}, 1024),
        ("n % 7 + 1", {"n": 15}, 2),
        ("BM * BK <= 8192", {"BM": 64, "BK": 128}, 1),
        ("BM * BK <= 8192 and BM > 32", {"BM": 128, "BK": 128}, 0),
    ],
)
def test_evaluates_arithmetic(text: str, env: dict[str, int], value: int) -> None:
    assert expr.evaluate(text, env) == value


@pytest.mark.parametrize(
    "text",
    [
        '__import__("os").system("true")',
        "open('x')",
        "n.__class__",
        "[n for n in range(3)]",
        "lambda: 1",
        "'abc'",
        "n if n else 1",
        "f(n)",
        "min(n, key=abs)",
        "2 ** 1000",
        "(n := 3)",
        "x[0]",
        "True + 1",
    ],
)
def test_rejects_anything_but_arithmetic(text: str) -> None:
    with pytest.raises(ExpressionError):
        expr.evaluate(text, {"n": 4, "x": 1})


def test_unknown_name_lists_known_ones() -> None:
    with pytest.raises(ExpressionError, match=r"unknown name 'K'.*known: M, N"):
        expr.evaluate("M*K", {"M": 1, "N": 2})


def test_division_by_zero_is_an_expression_error() -> None:
    with pytest.raises(ExpressionError, match="division by zero"):
        expr.evaluate("n // 0", {"n": 1})
    with pytest.raises(ExpressionError, match="by zero"):
        expr.evaluate("ceil_div(n, 0)", {"n": 1})


def test_wrong_arity_is_an_expression_error() -> None:
    with pytest.raises(ExpressionError):
        expr.evaluate("ceil_div(n)", {"n": 1})


def test_integer_results_are_enforced() -> None:
    assert expr.evaluate_int("n / 2", {"n": 8}, "grid.x") == 4
    with pytest.raises(ExpressionError, match=r"grid\.x.*not an integer"):
        expr.evaluate_int("n / 3", {"n": 8}, "grid.x")


def test_names_excludes_functions() -> None:
    assert expr.names("ceil_div(N, BM) * max(x, 1)") == {"N", "BM", "x"}


def test_too_long_expression_is_rejected() -> None:
    with pytest.raises(ExpressionError, match="longer than"):
        expr.parse("1+" * 400 + "1")
