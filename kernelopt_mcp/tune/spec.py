"""Tunable candidates: a kernel source with parameters, constraints, defaults and a launch spec.

The file format (``workloads/<name>/tunable.json``, see the README's "Autotuning")::

    {"description": "...", "source": "tunable.cu",
     "params": {"BM": [64, 128], "TM": [4, 8]},
     "constraints": ["BM / TM <= 32"],
     "defaults": {"BM": 64, "TM": 4},
     "launch": {"default": {"grid": ["ceil_div(N, BM)"], "block": ["BM / TM"]}},
     "compile_options": []}

Each parameter reaches the kernel as ``-DNAME=VALUE`` and the launch expressions as a name beside
the case's scalars. Problems raise :class:`~kernelopt_mcp.errors.TunableError` naming the field
and what to change.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .. import expr
from ..compile_options import check_options
from ..errors import ExpressionError, TunableError
from ..files import read_json, read_text
from ..launch import DeviceLimits, LaunchConfig, LaunchSpec, device_names
from ..workload import Workload
from .space import Space, Value

IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_PARAMS = 16
MAX_VALUES = 64


class TunableSpec(BaseModel):
    """tunable.json: what may vary, what must hold, where to start, and how to launch."""

    model_config = ConfigDict(extra="forbid")

    description: str = ""
    source: str = Field("tunable.cu", description="CUDA source, relative to the JSON file")
    params: dict[str, list[Value]] = Field(description="name -> the values to try (non-empty)")
    constraints: list[str] = Field(default_factory=list, description="expressions of the params; all must be true")
    defaults: dict[str, Value] = Field(description="the untuned configuration (must satisfy the constraints)")
    launch: LaunchSpec
    compile_options: list[str] = Field(default_factory=list)

    @field_validator("params", mode="after")
    @classmethod
    def _check_params(cls, params: dict[str, list[Value]]) -> dict[str, list[Value]]:
        if not params:
            raise ValueError("declare at least one parameter, e.g. {\"BLOCK\": [128, 256]}")
        if len(params) > MAX_PARAMS:
            raise ValueError(f"{len(params)} parameters; at most {MAX_PARAMS}")
        for name, values in params.items():
            if not IDENT_RE.match(name):
                raise ValueError(f"parameter name {name!r} is not a C identifier")
            if not values:
                raise ValueError(f"parameter {name!r} has no values; give a non-empty list")
            if len(values) > MAX_VALUES:
                raise ValueError(f"parameter {name!r} has {len(values)} values; at most {MAX_VALUES}")
            if len({json.dumps(v) for v in values}) != len(values):
                raise ValueError(f"parameter {name!r} lists a value twice")
            for v in values:
                if isinstance(v, bool) or (isinstance(v, str) and not IDENT_RE.match(v)):
                    raise ValueError(
                        f"parameter {name!r}: value {v!r} must be an integer, a float or a short identifier"
                    )
        return params

    @field_validator("constraints", mode="after")
    @classmethod
    def _check_constraints(cls, constraints: list[str]) -> list[str]:
        for c in constraints:
            expr.parse(c)
        return constraints

    @field_validator("compile_options", mode="after")
    @classmethod
    def _check_options(cls, options: list[str]) -> list[str]:
        check_options(options)
        return options


def _errors(exc: ValidationError, where: str) -> str:
    return "; ".join(
        f"{where}.{'.'.join(map(str, e['loc']))}: {e['msg']}" if e["loc"] else f"{where}: {e['msg']}"
        for e in exc.errors(include_url=False)[:6]
    )


@dataclass
class Tunable:
    """A checked tunable spec plus its source text."""

    spec: TunableSpec
    source: str
    origin: str = "tunable"

    @property
    def names(self) -> list[str]:
        return list(self.spec.params)

    def check(self, workload: Workload | None = None) -> None:
        """Cross-field checks (and, given the workload, name clashes and launch names).

        Raises:
            TunableError: a default missing or outside its list, a constraint naming a
                non-parameter or false for the defaults, a param named like a workload scalar,
                a launch expression naming something unknown.
        """
        spec, where = self.spec, self.origin
        params = set(spec.params)
        missing = params - set(spec.defaults)
        extra = set(spec.defaults) - params
        if missing or extra:
            raise TunableError(
                f"{where}: defaults must give exactly one value per parameter"
                + (f"; missing {sorted(missing)}" if missing else "") + (f"; unknown {sorted(extra)}" if extra else "")
            )
        for name, value in spec.defaults.items():
            if value not in spec.params[name]:
                raise TunableError(f"{where}: defaults.{name} = {value!r} is not one of params.{name} "
                                   f"{spec.params[name]}")
        for c in spec.constraints:
            unknown = expr.names(c) - params
            if unknown:
                raise TunableError(
                    f"{where}: constraint {c!r} names {sorted(unknown)}, which are not parameters; constraints may "
                    f"use only {sorted(params)}"
                )
        reason = Space(spec).violation(spec.defaults)
        if reason:
            raise TunableError(f"{where}: the defaults {spec.defaults} break the constraint {reason}; pick defaults "
                               "that satisfy every constraint")
        if workload is None:
            return
        scalars = {p.name for p in workload.signature.scalars}
        clash = params & scalars
        if clash:
            raise TunableError(
                f"{where}: parameter(s) {sorted(clash)} have the names of workload {workload.name!r}'s scalars; "
                "rename them (e.g. BLOCK_N instead of N)"
            )
        known = params | scalars | set(device_names(DeviceLimits()))
        for case_name, config in _configs(spec.launch):
            for text in _dims(config):
                unknown = expr.names(text) - known
                if unknown:
                    raise TunableError(
                        f"{where}: launch{'.cases.' + case_name if case_name else '.default'} uses {sorted(unknown)} "
                        f"in {text!r}; known names are the parameters {sorted(params)}, the scalars {sorted(scalars)} "
                        "and SM_COUNT"
                    )
        cases = {c.name for c in workload.spec.cases}
        bad = set(spec.launch.cases) - cases
        if bad:
            raise TunableError(f"{where}: launch.cases names unknown cases {sorted(bad)}; the cases are "
                               f"{sorted(cases)}")

    def materialize(self, params: dict[str, Value]) -> tuple[str, LaunchSpec, list[str]]:
        """A plain candidate for one configuration: the source with ``#define`` lines first, the launch
        with the values substituted, and the spec's compile options (no -D needed)."""
        defines = "".join(f"#define {k} {v}\n" for k, v in params.items())
        header = f"// tunable configuration: {json.dumps(params)}\n"
        return (header + defines + self.source, substitute_launch(self.spec.launch, params),
                list(self.spec.compile_options))


def _configs(spec: LaunchSpec) -> list[tuple[str, LaunchConfig]]:
    out = [("", spec.default)] if spec.default is not None else []
    return [*out, *spec.cases.items()]


def _dims(config: LaunchConfig) -> list[str]:
    maps = [d for m in config.tensor_maps for d in m.expressions()]
    return [d for d in [*config.grid, *config.block, config.shared_bytes, *maps] if isinstance(d, str)]


def substitute(text: str | int, params: dict[str, Value]) -> str | int:
    """``text`` with each parameter name replaced by its value (numbers only; the rest kept)."""
    if not isinstance(text, str):
        return text
    tree = expr.parse(text)

    class Sub(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            value = params.get(node.id)
            if isinstance(value, int | float) and not isinstance(value, bool):
                return ast.copy_location(ast.Constant(value), node)
            return node

        def visit_Call(self, node: ast.Call) -> ast.AST:  # keep function names
            node.args = [self.visit(a) for a in node.args]
            return node

    new = Sub().visit(ast.parse(ast.unparse(tree), mode="eval"))
    out = ast.unparse(new)
    if not expr.names(out):  # only numbers left: fold to an integer where it is one
        try:
            value = expr.evaluate(out, {})
        except ExpressionError:
            return out
        if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
            return int(value)
    return out


def substitute_launch(spec: LaunchSpec, params: dict[str, Value]) -> LaunchSpec:
    def dims(values: list[int | str] | None) -> list[str | int] | None:
        return None if values is None else [substitute(d, params) for d in values]

    def one(config: LaunchConfig) -> dict[str, Any]:
        out: dict[str, Any] = {
            "grid": dims(config.grid), "block": dims(config.block),
            "shared_bytes": substitute(config.shared_bytes, params),
        }
        if config.tensor_maps:
            out["tensor_maps"] = [
                {**m.model_dump(), **{k: dims(getattr(m, k)) for k in ("dims", "box", "strides", "element_strides")}}
                for m in config.tensor_maps
            ]
        return out

    data: dict[str, Any] = {"cases": {k: one(v) for k, v in spec.cases.items()}}
    if spec.default is not None:
        data["default"] = one(spec.default)
    return LaunchSpec.model_validate(data)


def parse_tunable(data: Any, source: str, origin: str = "tunable", workload: Workload | None = None) -> Tunable:
    """A checked tunable from a JSON object and the source text.

    Raises:
        TunableError: what is wrong, by field.
    """
    if not isinstance(data, dict):
        raise TunableError(f"{origin}: expected a JSON object with params, defaults, launch (and constraints, source)")
    try:
        spec = TunableSpec.model_validate(data)
    except ValidationError as exc:
        raise TunableError(f"{origin}: {_errors(exc, 'tunable')}") from None
    except (ExpressionError, ValueError) as exc:
        raise TunableError(f"{origin}: {exc}") from None
    tunable = Tunable(spec, source, origin)
    tunable.check(workload)
    return tunable


def load_tunable(path: Path, workload: Workload | None = None) -> Tunable:
    """Read tunable.json and its source (relative to the JSON file).

    Raises:
        TunableError: unreadable or invalid JSON, a missing source, or any check of :meth:`Tunable.check`.
    """
    data = read_json(path, TunableError)
    source_name = data.get("source", "tunable.cu") if isinstance(data, dict) else "tunable.cu"
    source_path = path.parent / str(source_name)
    source = read_text(source_path, f"the source {source_name!r} that {path.name} names", TunableError)
    return parse_tunable(data, source, str(path), workload)


def workload_tunable_path(workload: Workload, given: str | None = None) -> Path:
    """The spec to tune: ``given`` (a path; a bare file name that is not in the working directory
    names a spec beside the workload, e.g. sgemm's ``tunable_3xtf32.json``), else
    ``<workload dir>/tunable.json`` (raises TunableError when the workload has none)."""
    if given is not None:
        path = Path(given)
        beside = workload.root / given if workload.root is not None and path.name == given else None
        return beside if not path.exists() and beside is not None and beside.is_file() else path
    if workload.root is None or not (workload.root / "tunable.json").is_file():
        raise TunableError(
            f"workload {workload.name!r} has no tunable.json; pass a TUNABLE.json (see the README's Autotuning section)"
        )
    return workload.root / "tunable.json"
