"""TMA tensor maps of a case: the checks that need the workload's signature, and the request.

A launch's tensor maps (:class:`~kernelopt_mcp.launch.TensorMapSpec`, resolved per case by
:func:`kernelopt_mcp.launch.resolve`) name buffers of the signature; the harness encodes each
over the address of that buffer (native_harness/PROTOCOL.md, "Tensor maps"). Here the rules
that need the buffer's element type and size are checked before anything is sent, so a bad map
is an ``invalid_launch`` that says what to change; the harness enforces the same rules on its
own (the reach above all: a map must not let the kernel past its buffer).
"""

from __future__ import annotations

import math

from ..dtypes import DType
from ..errors import LaunchConfigError
from ..launch import ResolvedLaunch, ResolvedTensorMap
from ..workload import BufferParam, Case, Workload, case_shape
from .protocol import TensorMapRequest

__all__ = [
    "FEATURE", "TENSOR_MAP_BYTES", "check_tensor_maps", "packed_strides", "reach", "store_tail_hint",
    "tensor_map_requests",
]

FEATURE = "tensor_maps"  # the harness's --version feature
TENSOR_MAP_BYTES = 128  # sizeof(CUtensorMap): one kernel parameter per map, after the signature's
# the scalar dtypes cuTensorMapEncodeTiled has no type for (PROTOCOL.md)
NOT_TMA = frozenset({DType.int8, DType.int16})
SWIZZLE_SPAN = {"32B": 32, "64B": 64, "128B": 128}
STORE_CHUNK = 16  # a TMA store writes global memory in whole aligned 16-byte chunks (PROTOCOL.md, reach)


def packed_strides(dims: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The byte strides of dimensions 1..rank-1 of a packed tensor of ``dims``."""
    out, stride = [], itemsize
    for extent in dims[:-1]:
        stride *= extent
        out.append(stride)
    return tuple(out)


def reach(m: ResolvedTensorMap, itemsize: int) -> int:
    """One past the last byte ``m`` can address: ``sum((dims[i] - 1) * stride[i]) + size``."""
    strides = (itemsize, *(m.strides if m.strides is not None else packed_strides(m.dims, itemsize)))
    return sum((d - 1) * s for d, s in zip(m.dims, strides, strict=True)) + itemsize


def _buffer(workload: Workload, m: ResolvedTensorMap, where: str) -> BufferParam:
    sig = workload.signature
    buffers = [p.name for p in sig.buffers]
    try:
        param = sig.param(m.buffer)
    except KeyError:
        raise LaunchConfigError(
            f"{where}: the signature has no parameter {m.buffer!r}; a tensor map's buffer is one of "
            f"{', '.join(buffers)}"
        ) from None
    if not isinstance(param, BufferParam):
        raise LaunchConfigError(
            f"{where}: {m.buffer!r} is a scalar parameter; a tensor map's buffer is one of {', '.join(buffers)}"
        )
    return param


def check_tensor_maps(launch: ResolvedLaunch, workload: Workload, case: Case) -> None:
    """Check ``launch``'s tensor maps against the buffers of ``case`` (the rules of PROTOCOL.md
    that need the element type, and the map's reach within its buffer).

    Raises:
        LaunchConfigError: a map names no buffer parameter, breaks a rule, or reaches past its
            buffer (the message names the map and the numbers).
    """
    for j, m in enumerate(launch.tensor_maps):
        where = f"case {case.name!r}: tensor_maps[{j}]"
        param = _buffer(workload, m, where)
        where += f" (over {m.buffer!r}, {param.dtype.value})"
        size = param.dtype.itemsize
        if param.dtype in NOT_TMA:
            raise LaunchConfigError(
                f"{where}: TMA has no {param.dtype.value} element type (int8 and int16 are refused); a map "
                "over another buffer, or plain loads, for this one"
            )
        row = m.box[0] * size
        if row % 16:
            raise LaunchConfigError(
                f"{where}: box[0] = {m.box[0]} elements is {row} bytes, not a multiple of 16; make box[0] a "
                f"multiple of {16 // math.gcd(16, size)}"
            )
        span = SWIZZLE_SPAN.get(m.swizzle)
        if span is not None and row > span:
            raise LaunchConfigError(
                f"{where}: with swizzle {m.swizzle}, box[0] * {size} bytes is at most {span}, but box[0] = "
                f"{m.box[0]} is {row} bytes; make box[0] at most {span // size} or use a wider swizzle"
            )
        if m.oob_fill == "nan" and not param.dtype.is_float:
            raise LaunchConfigError(f"{where}: oob_fill 'nan' needs a float buffer; use 'zero'")
        if m.strides is None:
            for i, stride in enumerate(packed_strides(m.dims, size), start=1):
                if stride % 16:
                    raise LaunchConfigError(
                        f"{where}: packed, dimension {i} has a stride of {stride} bytes, not a multiple of "
                        "16 (TMA needs that); give strides of padded rows (and a buffer that holds them)"
                    )
        nbytes = math.prod(case_shape(param, case.scalars)) * size
        last = reach(m, size)
        if last > nbytes:
            strides = list(m.strides) if m.strides is not None else f"packed {list(packed_strides(m.dims, size))}"
            layout = f"dims {list(m.dims)}" + (f", strides {strides}" if m.rank > 1 else "")
            raise LaunchConfigError(
                f"{where}: the map reaches {last} bytes ({layout}) but the "
                f"buffer has {nbytes} bytes (shape {list(case_shape(param, case.scalars))}); a map may not "
                "reach past its buffer: make dims (and strides) fit it. TMA clips tiles at dims, so a "
                "partial last tile needs no padding"
            )


def store_tail_hint(launch: ResolvedLaunch, workload: Workload, buffer: str) -> str:
    """Why a write just past ``buffer`` may have come from a TMA store ("" when no map of the
    launch over it has rows that end inside a 16-byte chunk)."""
    for j, m in enumerate(launch.tensor_maps):
        if m.buffer != buffer:
            continue
        row = m.dims[0] * workload.signature.param(buffer).dtype.itemsize
        if row % STORE_CHUNK:
            return (
                f"; tensor_maps[{j}] over {buffer!r} has rows of {row} bytes, which end inside a 16-byte chunk, "
                "and a TMA store writes whole chunks: storing a row's last tile through it writes the rest of "
                "that chunk past the row. Store the partial last tile with plain stores, or map rows of a "
                "multiple of 16 bytes"
            )
    return ""


def tensor_map_requests(launch: ResolvedLaunch, workload: Workload) -> list[TensorMapRequest]:
    """The request's ``tensor_maps`` of ``launch``: each with its buffer's dtype and explicit
    strides and element strides (packed and 1 where the launch leaves them out)."""
    out = []
    for m in launch.tensor_maps:
        param = workload.signature.param(m.buffer)
        out.append(TensorMapRequest(
            buffer=m.buffer, dtype=param.dtype.value, dims=list(m.dims),
            strides=list(m.strides if m.strides is not None else packed_strides(m.dims, param.dtype.itemsize)),
            box=list(m.box),
            element_strides=list(m.element_strides) if m.element_strides is not None else [1] * m.rank,
            swizzle=m.swizzle, l2_promotion=m.l2_promotion, oob_fill=m.oob_fill,
        ))
    return out
