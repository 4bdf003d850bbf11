"""Launch configurations: per-case grid, block and dynamic shared memory.

A launch configuration belongs to the candidate, not the workload. Each dimension is a
literal or an expression of the case's scalars (``ceil_div(N, 256)``), resolved per case
and checked against the device's limits before anything is launched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from . import expr
from .errors import ExpressionError, LaunchConfigError

Dim = int | str


class LaunchConfig(BaseModel):
    """Grid, block and dynamic shared memory for one launch; missing dimensions are 1."""

    model_config = ConfigDict(extra="forbid")

    grid: list[Dim] = Field(min_length=1, max_length=3, description="blocks per grid, x[,y[,z]]")
    block: list[Dim] = Field(min_length=1, max_length=3, description="threads per block, x[,y[,z]]")
    shared_bytes: Dim = Field(0, description="dynamic shared memory per block, bytes")

    @field_validator("grid", "block", mode="after")
    @classmethod
    def _check_dims(cls, value: list[Dim]) -> list[Dim]:
        for item in value:
            _check_dim(item, minimum=1)
        return value

    @field_validator("shared_bytes", mode="after")
    @classmethod
    def _check_shared(cls, value: Dim) -> Dim:
        _check_dim(value, minimum=0)
        return value


def _check_dim(item: Dim, minimum: int) -> None:
    if isinstance(item, str):
        expr.parse(item)
    elif isinstance(item, bool) or item < minimum:
        raise ValueError(f"{item!r} must be an integer >= {minimum} or an expression")


class LaunchSpec(BaseModel):
    """A default launch configuration plus per-case overrides (by case name).

    A bare ``{"grid": ..., "block": ...}`` is accepted as the default for every case.
    """

    model_config = ConfigDict(extra="forbid")

    default: LaunchConfig | None = None
    cases: dict[str, LaunchConfig] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _bare_config(cls, data: Any) -> Any:
        if isinstance(data, dict) and ("grid" in data or "block" in data):
            return {"default": data}
        return data

    def for_case(self, case_name: str) -> LaunchConfig:
        config = self.cases.get(case_name, self.default)
        if config is None:
            raise LaunchConfigError(
                f"no launch configuration for case {case_name!r}: add a 'default' "
                f"or a 'cases.{case_name}' entry to the launch spec"
            )
        return config


@dataclass(frozen=True)
class DeviceLimits:
    """The limits a launch is checked against (from the device, or H200 defaults)."""

    max_threads_per_block: int = 1024
    max_block_dim: tuple[int, int, int] = (1024, 1024, 64)
    max_grid_dim: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    max_shared_bytes_per_block_optin: int = 232448
    sm_count: int = 132  # SM_COUNT in launch expressions (persistent grids: "SM_COUNT * 4")


@dataclass(frozen=True)
class ResolvedLaunch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    def as_json(self) -> dict[str, Any]:
        return {"grid": list(self.grid), "block": list(self.block), "shared_bytes": self.shared_bytes}


def device_names(limits: DeviceLimits) -> dict[str, int]:
    """The device's figures that launch expressions may name (beside the case's scalars)."""
    return {"SM_COUNT": limits.sm_count}


def resolve(
    config: LaunchConfig, scalars: Mapping[str, int | float], limits: DeviceLimits, case: str
) -> ResolvedLaunch:
    """Evaluate a launch configuration for one case and check it against ``limits``.

    Besides the case's scalars, expressions may use ``SM_COUNT``, the device's number of
    multiprocessors (a case scalar of that name wins).

    Raises:
        LaunchConfigError: an expression fails, or a dimension breaks a device limit
            (the message names the case, the value and the limit).
    """

    scalars = {**device_names(limits), **scalars}

    def dims(values: list[Dim], what: str) -> tuple[int, int, int]:
        padded = [*values, *([1] * (3 - len(values)))]
        try:
            out = tuple(expr.evaluate_int(v, scalars, f"{what} of case {case!r}") for v in padded)
        except ExpressionError as exc:
            raise LaunchConfigError(str(exc)) from None
        for axis, value in zip("xyz", out, strict=True):
            if value < 1:
                raise LaunchConfigError(
                    f"case {case!r}: {what}.{axis} = {value}; every dimension must be >= 1"
                )
        return out  # type: ignore[return-value]

    grid = dims(config.grid, "grid")
    block = dims(config.block, "block")
    try:
        shared = expr.evaluate_int(config.shared_bytes, scalars, f"shared_bytes of case {case!r}")
    except ExpressionError as exc:
        raise LaunchConfigError(str(exc)) from None
    threads = block[0] * block[1] * block[2]
    if threads > limits.max_threads_per_block:
        raise LaunchConfigError(
            f"case {case!r}: block {list(block)} has {threads} threads; the device allows at most "
            f"{limits.max_threads_per_block} per block"
        )
    for axis, value, limit in zip("xyz", block, limits.max_block_dim, strict=True):
        if value > limit:
            raise LaunchConfigError(f"case {case!r}: block.{axis} = {value} exceeds the limit {limit}")
    for axis, value, limit in zip("xyz", grid, limits.max_grid_dim, strict=True):
        if value > limit:
            raise LaunchConfigError(f"case {case!r}: grid.{axis} = {value} exceeds the limit {limit}")
    if shared < 0 or shared > limits.max_shared_bytes_per_block_optin:
        raise LaunchConfigError(
            f"case {case!r}: shared_bytes = {shared}; the device allows at most "
            f"{limits.max_shared_bytes_per_block_optin} bytes of dynamic shared memory per block "
            "(minus the kernel's static shared memory)"
        )
    return ResolvedLaunch(grid, block, shared)
