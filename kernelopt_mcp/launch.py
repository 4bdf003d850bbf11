"""Launch configurations: per-case grid, block, dynamic shared memory and TMA tensor maps.

A launch configuration belongs to the candidate, not the workload. Each dimension is a
literal or an expression of the case's scalars (``ceil_div(N, 256)``), resolved per case
and checked against the device's limits before anything is launched. Tensor maps
(``CUtensorMap``, for Hopper's ``cp.async.bulk.tensor``) are encoded by the harness over the
case's own buffers; what needs the buffer's element type (box bytes, swizzle span, the map's
reach within the buffer) is checked where the workload's signature is known
(:mod:`kernelopt_mcp.evaluation.tensor_maps`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from . import expr
from .errors import ExpressionError, LaunchConfigError

Dim = int | str

MAX_TENSOR_RANK = 5
MAX_TENSOR_MAPS = 16
MAX_TENSOR_DIM = 2**32
MAX_TENSOR_STRIDE = 2**40  # exclusive
MAX_BOX = 256
MAX_ELEMENT_STRIDE = 8
Swizzle = Literal["none", "32B", "64B", "128B"]
L2Promotion = Literal["none", "64B", "128B", "256B"]
OobFill = Literal["zero", "nan"]


class TensorMapSpec(BaseModel):
    """A TMA tensor map (CUtensorMap) the harness encodes over one of the kernel's buffers.

    The kernel takes one ``const __grid_constant__ CUtensorMap`` parameter per map, after the
    signature's parameters, in the order of ``tensor_maps``.
    """

    model_config = ConfigDict(extra="forbid")

    buffer: str = Field(
        min_length=1, max_length=64,
        description="name of a buffer parameter of the workload's signature (any role); the map is "
        "encoded over the address of that buffer for each case",
    )
    dims: list[Dim] = Field(
        min_length=1, max_length=MAX_TENSOR_RANK,
        description="the tensor's extents in elements, innermost (contiguous) dimension first, rank 1 to 5; "
        "integers or expressions of the case's scalars and tunable parameters, e.g. [\"K\", \"M\"] for a "
        "row-major M x K matrix. dims and strides must stay within the buffer: the map's last byte, "
        "sum((dims[i] - 1) * stride[i]) + element size, may not pass the buffer's end",
    )
    box: list[Dim] = Field(
        min_length=1, max_length=MAX_TENSOR_RANK,
        description="the tile one cp.async.bulk.tensor copy moves, in elements per dimension (same length as dims), "
        "each 1..256; box[0] * element size must be a multiple of 16 bytes. Tiles past dims are "
        "clipped by the hardware (loads read oob_fill, stores are dropped)",
    )
    strides: list[Dim] | None = Field(
        None, max_length=MAX_TENSOR_RANK - 1,
        description="byte strides of dimensions 1..rank-1 (rank-1 entries), each a positive multiple of 16 "
        "below 2^40; omitted: packed (dims[0] * element size, then each times the next extent)",
    )
    element_strides: list[Dim] | None = Field(
        None, max_length=MAX_TENSOR_RANK,
        description="elements skipped per step in each dimension when filling the box (one per dimension, "
        "each 1..8); omitted: all 1",
    )
    swizzle: Swizzle = Field(
        "none",
        description="shared-memory swizzle of the box; with a swizzle, box[0] * element size is at most "
        "its span (32, 64 or 128 bytes) and the shared tile should be aligned to 1024 bytes",
    )
    l2_promotion: L2Promotion = Field("none", description="L2 promotion of the copies' global reads")
    oob_fill: OobFill = Field(
        "zero", description="what a load reads outside dims: zero, or nan (float buffers only)"
    )

    @field_validator("dims", "box", "element_strides", mode="after")
    @classmethod
    def _check_positive(cls, value: list[Dim] | None) -> list[Dim] | None:
        for item in value or []:
            _check_dim(item, minimum=1)
        return value

    @field_validator("strides", mode="after")
    @classmethod
    def _check_strides(cls, value: list[Dim] | None) -> list[Dim] | None:
        for item in value or []:
            _check_dim(item, minimum=16)
        return value

    @model_validator(mode="after")
    def _check_rank(self) -> TensorMapSpec:
        rank = len(self.dims)
        if len(self.box) != rank:
            raise ValueError(f"box has {len(self.box)} entries but dims has {rank}: give one box extent per dimension")
        if self.strides is not None and len(self.strides) != rank - 1:
            raise ValueError(
                f"strides has {len(self.strides)} entries; a rank-{rank} map takes {rank - 1} (the byte "
                "strides of dimensions 1..rank-1; dimension 0 is contiguous), or leave strides out for packed"
            )
        if self.element_strides is not None and len(self.element_strides) != rank:
            raise ValueError(
                f"element_strides has {len(self.element_strides)} entries but dims has {rank}: give one per dimension"
            )
        return self

    def expressions(self) -> list[Dim]:
        """Every dimension of the map (dims, box, strides, element strides), for substitution."""
        return [*self.dims, *self.box, *(self.strides or []), *(self.element_strides or [])]


class LaunchConfig(BaseModel):
    """Grid, block, dynamic shared memory and tensor maps for one launch; missing dimensions are 1."""

    model_config = ConfigDict(extra="forbid")

    grid: list[Dim] = Field(min_length=1, max_length=3, description="blocks per grid, x[,y[,z]]")
    block: list[Dim] = Field(min_length=1, max_length=3, description="threads per block, x[,y[,z]]")
    shared_bytes: Dim = Field(0, description="dynamic shared memory per block, bytes")
    tensor_maps: list[TensorMapSpec] = Field(
        default_factory=list, max_length=MAX_TENSOR_MAPS,
        description="TMA tensor maps (Hopper, sm_90+) the harness encodes over the case's buffers; the kernel "
        "takes one `const __grid_constant__ CUtensorMap` per map after the signature's parameters, in this "
        "order. Empty: none",
    )

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

    @model_serializer(mode="wrap")
    def _leave_out_no_maps(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # a configuration without tensor maps dumps as it did before they existed (cache keys, files)
        data: dict[str, Any] = handler(self)
        if not self.tensor_maps:
            data.pop("tensor_maps", None)
        return data

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        # what a dump holds is the fields (less an empty tensor_maps), not the serializer's dict[str, Any]
        return handler({k: v for k, v in schema.items() if k != "serialization"})


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
class ResolvedTensorMap:
    """A tensor map with every dimension evaluated for one case (strides None: packed)."""

    buffer: str
    dims: tuple[int, ...]
    box: tuple[int, ...]
    strides: tuple[int, ...] | None = None
    element_strides: tuple[int, ...] | None = None
    swizzle: Swizzle = "none"
    l2_promotion: L2Promotion = "none"
    oob_fill: OobFill = "zero"

    @property
    def rank(self) -> int:
        return len(self.dims)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"buffer": self.buffer, "dims": list(self.dims), "box": list(self.box)}
        if self.strides is not None:
            out["strides"] = list(self.strides)
        if self.element_strides is not None:
            out["element_strides"] = list(self.element_strides)
        return {**out, "swizzle": self.swizzle, "l2_promotion": self.l2_promotion, "oob_fill": self.oob_fill}


@dataclass(frozen=True)
class ResolvedLaunch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    tensor_maps: tuple[ResolvedTensorMap, ...] = ()

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    def dims_json(self) -> dict[str, Any]:
        """Grid, block and shared memory: the harness's ``launch`` object."""
        return {"grid": list(self.grid), "block": list(self.block), "shared_bytes": self.shared_bytes}

    def as_json(self) -> dict[str, Any]:
        """The launch as results show it (``tensor_maps`` only when there are some)."""
        out = self.dims_json()
        if self.tensor_maps:
            out["tensor_maps"] = [m.as_json() for m in self.tensor_maps]
        return out


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
    maps = tuple(_resolve_map(m, j, scalars, case) for j, m in enumerate(config.tensor_maps))
    return ResolvedLaunch(grid, block, shared, maps)


def _resolve_map(spec: TensorMapSpec, j: int, scalars: Mapping[str, int | float], case: str) -> ResolvedTensorMap:
    """One tensor map evaluated for ``case``, with the rules that need no element type checked."""
    where = f"case {case!r}: tensor_maps[{j}] (over {spec.buffer!r})"

    def ints(values: list[Dim], what: str, low: int, high: int, hint: str) -> tuple[int, ...]:
        try:
            out = tuple(expr.evaluate_int(v, scalars, f"tensor_maps[{j}].{what} of case {case!r}") for v in values)
        except ExpressionError as exc:
            raise LaunchConfigError(str(exc)) from None
        for i, value in enumerate(out):
            if not low <= value <= high:
                raise LaunchConfigError(f"{where}: {what}[{i}] = {value}; {hint}")
        return out

    dims = ints(spec.dims, "dims", 1, MAX_TENSOR_DIM, f"each extent must be 1..{MAX_TENSOR_DIM}")
    box = ints(spec.box, "box", 1, MAX_BOX,
               f"each box extent must be 1..{MAX_BOX} elements (copy larger tiles in several boxes)")
    strides = None
    if spec.strides is not None:
        strides = ints(spec.strides, "strides", 16, MAX_TENSOR_STRIDE - 1, "each byte stride must be 16..2^40-1")
        for i, value in enumerate(strides):
            if value % 16:
                raise LaunchConfigError(
                    f"{where}: strides[{i}] = {value} bytes is not a multiple of 16; pad the rows to a multiple "
                    "of 16 bytes (and size the buffer for it), or use another layout"
                )
    elements = None
    if spec.element_strides is not None:
        elements = ints(spec.element_strides, "element_strides", 1, MAX_ELEMENT_STRIDE,
                        f"each element stride must be 1..{MAX_ELEMENT_STRIDE}")
    return ResolvedTensorMap(spec.buffer, dims, box, strides, elements, spec.swizzle, spec.l2_promotion, spec.oob_fill)
