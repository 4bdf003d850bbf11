"""The element types kernels may use, and how each maps to NumPy and CUDA C++."""

from __future__ import annotations

from enum import StrEnum

import numpy as np

# ml_dtypes (bfloat16) is imported where a bfloat16 is first needed: loading its extension takes
# most of a second, and commands that never touch a bfloat16 array (`kernelopt --help`, `compile`)
# should not pay for it.


class DType(StrEnum):
    float16 = "float16"
    bfloat16 = "bfloat16"
    float32 = "float32"
    float64 = "float64"
    int8 = "int8"
    int16 = "int16"
    int32 = "int32"
    int64 = "int64"
    uint8 = "uint8"
    uint16 = "uint16"
    uint32 = "uint32"
    uint64 = "uint64"

    @property
    def numpy(self) -> np.dtype:
        if self is DType.bfloat16:
            import ml_dtypes

            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(self.value)

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def cuda_type(self) -> str:
        return _CUDA_TYPES[self]

    @property
    def eps(self) -> float:
        """Machine epsilon for float types, 0 for integers."""
        if not self.is_float:
            return 0.0
        import ml_dtypes

        return float(ml_dtypes.finfo(self.numpy).eps)


_FLOATS = {DType.float16, DType.bfloat16, DType.float32, DType.float64}

_CUDA_TYPES = {
    DType.float16: "__half",
    DType.bfloat16: "__nv_bfloat16",
    DType.float32: "float",
    DType.float64: "double",
    DType.int8: "signed char",
    DType.int16: "short",
    DType.int32: "int",
    DType.int64: "long long",
    DType.uint8: "unsigned char",
    DType.uint16: "unsigned short",
    DType.uint32: "unsigned int",
    DType.uint64: "unsigned long long",
}


def scalar_raw(dtype: DType, value: int | float) -> bytes:
    """Little-endian bytes of ``value`` as ``dtype``, range-checked for integers."""
    if not dtype.is_float:
        info = np.iinfo(dtype.numpy)
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"{value!r} is not an integer, but the scalar is {dtype}")
        if not info.min <= int(value) <= info.max:
            raise ValueError(f"{value} does not fit in {dtype} ({info.min}..{info.max})")
        value = int(value)
    return np.array(value, dtype=dtype.numpy).astype(dtype.numpy.newbyteorder("<")).tobytes()
