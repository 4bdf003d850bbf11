"""Property-based tests of bad input: workload specs, launch configurations and expressions.

Whatever a workload.json, a launch spec or an expression holds, kernelopt answers with a value or
with its own error (WorkloadError, LaunchConfigError, ExpressionError, or pydantic's
ValidationError at a schema boundary) whose message names what was wrong: never another
exception type, never a hang. The MCP tools' arguments are covered in test_properties_server.py.

Strategies start from the bundled vector_add and sgemm specs and mutate them (drop a field,
replace a value with something hostile, add an unknown key), so most examples get deep into
validation instead of failing at the first field.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kernelopt_mcp import expr
from kernelopt_mcp.errors import ExpressionError, LaunchConfigError, WorkloadError
from kernelopt_mcp.launch import DeviceLimits, LaunchConfig, LaunchSpec, resolve
from kernelopt_mcp.workload import Workload, WorkloadSpec, load_workload, parse_spec
from kernelopt_mcp.workload_parts import load_parts

REPO = Path(__file__).resolve().parents[2]
BASES = {name: json.loads((REPO / "workloads" / name / "workload.json").read_text())
         for name in ("vector_add", "sgemm")}

FAST = settings(max_examples=60, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=25, deadline=5000, suppress_health_check=[HealthCheck.too_slow])

# --- hostile values --------------------------------------------------------------------------

HOSTILE_PATHS = [
    "../../etc/passwd", "/etc/passwd", "/etc/shadow", "..", ".", "", " ", "a\x00b", "~root/.ssh/id_rsa",
    "/proc/self/mem", "/dev/zero", "/dev/urandom", "a/" * 600, "x" * 5000, "\u202eucexe.cu", "C:\\Windows\\win.ini",
    "file:///etc/passwd", "reference.cu/../../../../etc/hosts",
]
BAD_EXPRESSIONS = [
    "9**9**9", "10**10000", "2**64**2", "(" * 150 + "1" + ")" * 150, "(" * 300 + "1" + ")" * 300, "-" * 450 + "1",
    "not " * 120 + "1", "abs(" * 90 + "1" + ")" * 90, "1+" * 240 + "1", "min()", "max()", "ceil_div(1, 0)", "1/0",
    "1//0", "1%0", "0**-1", "log2(0)", "sqrt(-1)", "floor(1e999)", "ceil(1e999 - 1e999)", "(-8)**0.5", "1e999",
    "9" * 499, "9" * 400 + "**64", "__import__('os')", "open('/etc/passwd')", "n.__class__", "[1]", "{}", "lambda: 1",
    "n if n else 1", "x\u00e9", "\u0661\u0662", "1\x00", "", "   ", "n,", "min(n, key=abs)",
    "ceil_div(n)", "n[0]", "~n",
    "n << 70", "True", "'abc'", "b'x'", "1j", "...", "n @ n", "(yield)", "await n", "f'{n}'", "abs(*n)",
]


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


json_scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(), st.integers(min_value=-(2**200), max_value=2**200),
    st.sampled_from([2**31, 2**63, -(2**63) - 1, 10**100]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40), st.text(min_size=1000, max_size=3000).map(lambda s: s[:3000]),
    st.sampled_from(HOSTILE_PATHS), st.sampled_from(BAD_EXPRESSIONS),
    st.sampled_from(["float8", "complex64", "float32 ", "FLOAT32", "half", "object", "void", "buffer", "scalar"]),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12,
) | st.sampled_from([60, 600]).map(_deep)  # fresh each time: mutations edit in place


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every location in a JSON document (dict keys and list indexes), the root excluded."""
    out: list[tuple[Any, ...]] = []
    if len(prefix) > 8:  # below that, only the hostile deep values we put there ourselves
        return out
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, child in items:
        out.append((*prefix, key))
        out.extend(_paths(child, (*prefix, key)))
    return out


@st.composite
def mutated_specs(draw: st.DrawFn, values: st.SearchStrategy[Any] | None = None) -> dict[str, Any]:
    """A bundled spec with one to four mutations: drop, replace, add a key, duplicate a list item."""
    data = copy.deepcopy(BASES[draw(st.sampled_from(sorted(BASES)))])
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(data)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        op = draw(st.sampled_from(["drop", "replace", "replace", "add", "duplicate"]))
        if op == "drop":
            del parent[key]
        elif op == "replace":
            parent[key] = draw(json_values if values is None else values)
        elif op == "add" and isinstance(parent[key], dict):
            parent[key][draw(st.text(max_size=20))] = draw(json_values if values is None else values)
        elif op == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
    return data


def _names_a_field(message: str, source: str) -> None:
    assert message.strip(), "an empty error message"
    assert source in message, f"the message does not name {source!r}: {message[:300]}"


# --- workload specs --------------------------------------------------------------------------


@FAST
@given(mutated_specs())
def test_parse_spec_returns_a_spec_or_a_workload_error_naming_the_file(data: dict[str, Any]) -> None:
    try:
        spec = parse_spec(data, "hostile/workload.json")
    except WorkloadError as exc:
        _names_a_field(str(exc), "hostile/workload.json")
        # every line is "file: field.path: problem"
        for line in str(exc).split("\n"):
            assert line.startswith("hostile/workload.json: "), line
    else:
        assert isinstance(spec, WorkloadSpec)
        json.dumps(spec.model_dump(mode="json"))  # what create_workload stores must serialise


@FAST
@given(json_values)
def test_parse_spec_of_any_json_value_is_a_workload_error(data: Any) -> None:
    with pytest.raises(WorkloadError, match=r"anything\.json"):
        parse_spec(data, "anything.json")


@pytest.fixture(scope="module")
def workload_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("props") / "wl"
    shutil.copytree(REPO / "workloads" / "sgemm", d)
    for f in ("reference.cu", "initial.cu", "reference.py"):  # vector_add's names, same files
        shutil.copy(REPO / "workloads" / "vector_add" / f, d / f"va_{f}")
    return d


@SLOW
@given(mutated_specs())
def test_load_workload_returns_or_raises_a_workload_error_naming_a_path(
    workload_dir: Path, data: dict[str, Any]
) -> None:
    (workload_dir / "workload.json").write_text(json.dumps(data))
    try:
        wl = load_workload(workload_dir)
    except WorkloadError as exc:
        _names_a_field(str(exc), str(workload_dir))
    else:
        assert isinstance(wl, Workload) and wl.root == workload_dir


@SLOW
@given(
    base=st.sampled_from(sorted(BASES)),
    field=st.sampled_from([("reference", "cuda"), ("reference", "python"), ("initial", "source")]),
    path=st.sampled_from(HOSTILE_PATHS) | st.text(max_size=300),
)
@example(base="vector_add", field=("reference", "cuda"), path="a\x00b")
@example(base="vector_add", field=("reference", "python"), path="x" * 5000)
def test_hostile_source_paths_give_a_workload_error_or_a_file(
    workload_dir: Path, base: str, field: tuple[str, str], path: str
) -> None:
    data = copy.deepcopy(BASES[base])
    data[field[0]][field[1]] = path
    (workload_dir / "workload.json").write_text(json.dumps(data))
    try:
        load_workload(workload_dir)
    except WorkloadError as exc:
        _names_a_field(str(exc), ".".join(field))  # the field, with the path it resolved to


@FAST
@given(st.binary(max_size=200) | st.sampled_from([b"\xff\xfe{", b"[" * 100_000, b'{"a": ' * 50_000, b"\x00",
                                                  b"null", b"1e999"]))
def test_undecodable_or_absurd_workload_json_is_a_workload_error(workload_dir: Path, raw: bytes) -> None:
    (workload_dir / "workload.json").write_bytes(raw)
    with pytest.raises(WorkloadError, match=r"workload\.json"):
        load_workload(workload_dir)


@FAST
@given(st.sampled_from(HOSTILE_PATHS) | st.text(max_size=100))
def test_load_workload_of_any_path_is_a_workload_error_or_a_workload(raw: str) -> None:
    try:
        load_workload(raw)
    except WorkloadError as exc:
        assert str(exc).strip()


@st.composite
def hostile_parts(draw: st.DrawFn) -> tuple[Any, Any]:
    base = BASES["vector_add"]
    signature = draw(st.sampled_from([{"signature": base["signature"]}, base["signature"]]) | json_values)
    cases: Any = {"inputs": base["inputs"], "cases": base["cases"]}
    if draw(st.booleans()):
        cases = draw(mutated_specs())
        cases = {k: v for k, v in cases.items() if k in ("inputs", "cases", "tolerance", "seed", "workload")}
    if draw(st.booleans()):
        cases = draw(json_values)
    return signature, cases


@SLOW
@given(hostile_parts(), st.sampled_from(HOSTILE_PATHS + [None]), st.sampled_from(HOSTILE_PATHS + [None]))
def test_load_parts_with_hostile_files(workload_dir: Path, parts: tuple[Any, Any], ref: str | None,
                                       init: str | None) -> None:
    signature, cases = parts
    sig_path, cases_path = workload_dir / "sig.json", workload_dir / "cases.json"
    sig_path.write_text(json.dumps(signature))
    cases_path.write_text(json.dumps(cases))
    try:
        load_parts(
            signature=sig_path, input_cases=cases_path, reference_cu=ref, initial_cu=init,
            reference_launch={"grid": ["ceil_div(n, 256)"], "block": [256]},
            initial_launch={"grid": ["ceil_div(n, 256)"], "block": [256]} if init else None,
        )
    except WorkloadError as exc:
        assert str(exc).strip()


def test_huge_shapes_are_refused_before_any_size_arithmetic() -> None:
    """Regression: a literal dimension of 10**100 passed validation, then np.prod(..., int64) raised
    OverflowError in create_workload (or silently wrapped to a small size for 2**32 x 2**32)."""
    for shape in ([10**100], [2**32, 2**32], ["n*n*n*n"]):
        data = copy.deepcopy(BASES["vector_add"])
        data["signature"]["params"][0]["shape"] = shape
        data["cases"][-1]["scalars"]["n"] = 2**31 - 1
        with pytest.raises(WorkloadError, match=r"more than .* elements"):
            parse_spec(data, "workload.json")


# --- launch configurations ---------------------------------------------------------------------

dims = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70), st.sampled_from(BAD_EXPRESSIONS),
    st.sampled_from(["ceil_div(n, 256)", "n", "M // 16", "min(1024, n)", "n * 0", "n - 2**40", "K * 1e300"]),
    json_scalars,
)
launch_json = st.one_of(
    st.fixed_dictionaries(
        {"grid": st.lists(dims, max_size=5), "block": st.lists(dims, max_size=5)},
        optional={"shared_bytes": dims, "extra": json_values},
    ),
    st.fixed_dictionaries({}, optional={
        "default": st.fixed_dictionaries({"grid": st.lists(dims, max_size=4),
                                          "block": st.lists(dims, max_size=4)}) | json_values,
        "cases": st.dictionaries(st.text(max_size=10), json_values, max_size=3),
    }),
    json_values,
)
scalar_values = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64), st.floats(allow_nan=True, allow_infinity=True),
)


@FAST
@given(launch_json, st.dictionaries(st.sampled_from(["n", "M", "N", "K"]), scalar_values, max_size=4),
       st.text(max_size=20))
def test_launch_specs_resolve_or_fail_with_launch_config_or_validation_errors(
    data: Any, scalars: dict[str, int | float], case: str
) -> None:
    try:
        spec = LaunchSpec.model_validate(data)
    except ValidationError as exc:
        assert str(exc).strip()
        return
    try:
        config = spec.for_case(case)
        launch = resolve(config, scalars, DeviceLimits(), case)
    except LaunchConfigError as exc:
        assert str(exc).strip()
        return
    for values, limits in ((launch.grid, DeviceLimits().max_grid_dim), (launch.block, DeviceLimits().max_block_dim)):
        assert all(isinstance(v, int) and 1 <= v <= limit for v, limit in zip(values, limits, strict=True))
    assert (launch.threads_per_block <= 1024
            and 0 <= launch.shared_bytes <= DeviceLimits().max_shared_bytes_per_block_optin)


@FAST
@given(st.lists(dims, min_size=1, max_size=3), st.lists(dims, min_size=1, max_size=3), dims)
def test_launch_config_fields_validate_or_raise_validation_error(
    grid: list[Any], block: list[Any], shared: Any
) -> None:
    try:
        LaunchConfig(grid=grid, block=block, shared_bytes=shared)
    except ValidationError:
        pass


# --- expressions -------------------------------------------------------------------------------

NAMES = ["n", "M", "N", "K", "cols", "x\u00e9", "\u00b5"]
atoms = st.one_of(
    st.integers(min_value=-(2**100), max_value=2**100).map(str), st.floats(allow_nan=False).map(repr),
    st.sampled_from(NAMES + ["1e999", "0", "-0.0", "1_000"]),
)


def _combine(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    ops = st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "<", "<=", "==", "!=", " and ", " or "])
    funcs = st.sampled_from(["ceil_div", "cdiv", "round_up", "min", "max", "abs", "floor", "ceil", "log2", "sqrt",
                             "pow", "eval"])
    return st.one_of(
        st.tuples(inner, ops, inner).map(lambda t: f"{t[0]}{t[1]}{t[2]}"),
        st.tuples(st.sampled_from(["-", "+", "not ", "~"]), inner).map("".join),
        inner.map(lambda s: f"({s})"),
        st.tuples(funcs, st.lists(inner, max_size=3)).map(lambda t: f"{t[0]}({', '.join(t[1])})"),
    )


expressions = st.recursive(atoms, _combine, max_leaves=25) | st.sampled_from(BAD_EXPRESSIONS) | st.text(max_size=60)
env = st.dictionaries(st.sampled_from(NAMES), scalar_values, max_size=len(NAMES))


@settings(max_examples=300, deadline=1000)
@given(expressions, env)
def test_expressions_evaluate_to_a_number_or_raise_expression_error(
    text: str, variables: dict[str, int | float]
) -> None:
    try:
        value = expr.evaluate(text, variables)
    except ExpressionError as exc:
        assert str(exc).strip()
        return
    assert isinstance(value, int | float) and not isinstance(value, bool)
    try:
        as_int = expr.evaluate_int(text, variables, "dim")
    except ExpressionError:
        return
    assert isinstance(as_int, int)


@FAST
@given(st.one_of(json_values, st.binary(max_size=10), st.builds(object)), env)
def test_non_string_expressions_are_expression_errors_or_numbers(value: Any, variables: dict[str, int | float]) -> None:
    """Regression: a list or dict reached the parser's lru_cache and raised TypeError (unhashable)."""
    try:
        out = expr.evaluate(value, variables)
    except ExpressionError:
        return
    assert isinstance(out, int | float) and not isinstance(out, bool)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("text", BAD_EXPRESSIONS, ids=[f"e{i}" for i in range(len(BAD_EXPRESSIONS))])
def test_each_bad_expression_fails_cleanly_and_quickly(text: str) -> None:
    try:
        value = expr.evaluate(text, {"n": 3})
    except ExpressionError:
        return
    assert isinstance(value, int | float) and not isinstance(value, bool)
