"""The harness's device draws made again in a PyTorch process: the same bytes, nothing copied.

PyTorch is the reference of an imported problem (DESIGN.md, "Problems written in PyTorch"): it
must run on exactly the inputs the candidate saw. The harness draws those inputs on the device
(``input_draw`` and ``fresh``: native_harness/PROTOCOL.md) with the support module's
``ko_fill_<dtype>``, keyed per draw by ``draw_key(seed, draw, argument)``. This module derives the
same keys (SipHash-2-4, as native_harness/src/draw_key.hpp) and launches the same kernel, from the
same support module, on a torch tensor's memory on torch's current stream (a ``choice`` spec: its
``ko_choice_<bytes>`` with the table of the values' bits the harness makes, :func:`choice_args`),
followed, for a spec with a ``structure`` (triangular or symmetric matrices), by the harness's
``ko_structure_<bytes>``.
The values are a pure function of (key, draw, argument, element, spec), independent of the grid,
so torch's tensor holds the harness's bits: no input crosses between the two processes, and none
touches the disk.

Only the PyTorch side imports torch (:class:`TorchFiller` takes the module as an argument); the
key derivation is plain Python, checked against the C++ in tests/pytorch/test_torch_fill.py.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from .dtypes import DType
from .evaluation.protocol import FreshSpec, StructureSpec
from .input_choice import MAX_VALUES, exact_values, table_bits

__all__ = ["FILL_KINDS", "STRUCTURE_KINDS", "ChoiceArgs", "FillArgs", "TorchFiller", "choice_args", "draw_key",
           "fill_args", "siphash24"]

_MASK = (1 << 64) - 1
#: draw_key.hpp's second key half: "ko-draws"
_DRAWS_K1 = 0x6B6F2D6472617773
#: FreshKind in native_harness/src/request.hpp
FILL_KINDS = {"uniform": 0, "normal": 1, "randint": 2}
#: StructureKind in native_harness/src/request.hpp: ko_structure_<bytes>'s kind
STRUCTURE_KINDS = {"triu": 0, "tril": 1, "symmetric": 2}
#: support.hpp's support_block: the fills' block size (the values do not depend on it)
SUPPORT_BLOCK = 256


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & _MASK


def siphash24(k0: int, k1: int, message: bytes) -> int:
    """SipHash-2-4 (Aumasson and Bernstein, 2012) of ``message`` under the key (k0, k1), the two
    little-endian halves of the 128-bit key: draw_key.hpp's ``siphash24``."""
    v = [0x736F6D6570736575 ^ k0, 0x646F72616E646F6D ^ k1, 0x6C7967656E657261 ^ k0, 0x7465646279746573 ^ k1]

    def sip_round() -> None:
        v[0] = (v[0] + v[1]) & _MASK
        v[1] = _rotl(v[1], 13) ^ v[0]
        v[0] = _rotl(v[0], 32)
        v[2] = (v[2] + v[3]) & _MASK
        v[3] = _rotl(v[3], 16) ^ v[2]
        v[0] = (v[0] + v[3]) & _MASK
        v[3] = _rotl(v[3], 21) ^ v[0]
        v[2] = (v[2] + v[1]) & _MASK
        v[1] = _rotl(v[1], 17) ^ v[2]
        v[2] = _rotl(v[2], 32)

    def absorb(m: int) -> None:
        v[3] ^= m
        sip_round()
        sip_round()
        v[0] ^= m

    full = len(message) // 8 * 8
    for at in range(0, full, 8):
        absorb(int.from_bytes(message[at:at + 8], "little"))
    absorb(((len(message) & 0xFF) << 56) | int.from_bytes(message[full:], "little"))
    v[2] ^= 0xFF
    for _ in range(4):
        sip_round()
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def draw_key(seed: int, draw: int, buffer: int) -> int:
    """The Philox key of draw ``draw`` of argument ``buffer`` under ``seed``: what the harness
    passes ``ko_fill`` (``input_draw``: ``draw_key(seed, 0, argument)``; ``fresh``: the
    request's ``fresh_seed`` and the launch's draw index)."""
    message = (draw & _MASK).to_bytes(8, "little") + (buffer & 0xFFFFFFFF).to_bytes(4, "little")
    return siphash24(seed & _MASK, _DRAWS_K1, message)


@dataclass(frozen=True)
class FillArgs:
    """``ko_fill_<dtype>``'s distribution arguments (kind, a, b, low, range), as the harness
    parses a ``fresh`` object (request_args.cpp ``parse_fresh``)."""

    kind: int
    a: float = 0.0
    b: float = 0.0
    low: int = 0
    range: int = 0


def fill_args(spec: FreshSpec) -> FillArgs:
    """The fill's arguments for ``spec``: uniform (a, b) = (low, high), normal (a, b) = (mean,
    std), randint low and range = high - low (high exclusive).

    Raises:
        ValueError: a spec the harness would refuse (missing bounds, std < 0, high <= low).
    """
    if spec.kind == "randint":
        if spec.low is None or spec.high is None or int(spec.high) <= int(spec.low):
            raise ValueError(f"randint needs integer low < high, got low={spec.low} high={spec.high}")
        return FillArgs(FILL_KINDS["randint"], low=int(spec.low), range=(int(spec.high) - int(spec.low)) & _MASK)
    first, second = (spec.low, spec.high) if spec.kind == "uniform" else (spec.mean, spec.std)
    if first is None or second is None:
        raise ValueError(f"{spec.kind} needs both of its parameters, got {spec.model_dump(exclude_none=True)}")
    if spec.kind == "normal" and float(second) < 0:
        raise ValueError(f"normal needs std >= 0, got {second}")
    return FillArgs(FILL_KINDS[spec.kind], a=float(first), b=float(second))


@dataclass(frozen=True)
class ChoiceArgs:
    """``ko_choice_<bytes>``'s arguments for a ``choice`` spec: how many values, and each one's bits in
    the buffer's dtype (what the harness makes of the spec's numbers: request_args.cpp)."""

    count: int
    bits: tuple[int, ...]


def choice_args(spec: FreshSpec, dtype: DType) -> ChoiceArgs:
    """The choice kernel's arguments for ``spec`` on a buffer of ``dtype``.

    Raises:
        ValueError: a spec the harness would refuse: no values, more than 16, one not finite or not
            exactly a ``dtype`` value (the harness rounds nothing: :func:`~.input_choice.exact_values`).
    """
    values = spec.values or []
    for i, (given, exact) in enumerate(zip(values, exact_values(values, dtype), strict=True)):
        if given != exact:
            raise ValueError(f"values[{i}] = {given!r} is not exactly a {dtype} value (nearest {exact!r})")
    return ChoiceArgs(len(values), tuple(table_bits(values, dtype)))


class _ChoiceTable(ctypes.Structure):
    """fill.cu's ``KoChoiceTable``: the values' bits, each zero-extended to 64 bits (passed by value)."""

    _fields_ = [("bits", ctypes.c_uint64 * MAX_VALUES)]


#: torch dtype name -> the support module's fill kernel
_FILL_KERNELS = {
    "float16": "ko_fill_float16", "bfloat16": "ko_fill_bfloat16", "float32": "ko_fill_float32",
    "float64": "ko_fill_float64", "int8": "ko_fill_int8", "int16": "ko_fill_int16", "int32": "ko_fill_int32",
    "int64": "ko_fill_int64", "uint8": "ko_fill_uint8", "uint16": "ko_fill_uint16",
    "uint32": "ko_fill_uint32", "uint64": "ko_fill_uint64",
}


class TorchFiller:
    """``ko_fill_<dtype>`` of a support module, launched on torch tensors (in torch's process).

    Args:
        torch: the torch module (imported by the caller: this module never imports it).
        support: the support module's bytes (CUBIN or PTX) as the harness loads it: the same
            build (same arch) as the harness's, so the same code draws the same bits.
    """

    def __init__(self, torch: Any, support: bytes) -> None:
        from cuda.bindings import driver

        self._torch = torch
        self._driver = driver
        torch.cuda.init()
        device = torch.cuda.current_device()
        torch.empty(1, device=f"cuda:{device}")  # torch's primary context exists and is current here
        self._check(driver.cuInit(0), "cuInit")
        dev = self._check(driver.cuDeviceGet(device), "cuDeviceGet")
        ctx = self._check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        self._check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        self._sm_count = torch.cuda.get_device_properties(device).multi_processor_count
        self._module = self._check(driver.cuModuleLoadData(support), "cuModuleLoadData (the support module)")
        self._functions: dict[str, Any] = {}

    def _check(self, answer: Any, call: str) -> Any:
        err, *rest = answer if isinstance(answer, tuple) else (answer,)
        if err != self._driver.CUresult.CUDA_SUCCESS:
            _, name = self._driver.cuGetErrorName(err)
            raise RuntimeError(f"{call}: {name.decode() if isinstance(name, bytes) else err}")
        return rest[0] if len(rest) == 1 else (rest or None)

    def _function(self, name: str) -> Any:
        if name not in self._functions:
            self._functions[name] = self._check(self._driver.cuModuleGetFunction(self._module, name.encode()),
                                                f"cuModuleGetFunction({name})")
        return self._functions[name]

    def fill(self, tensor: Any, key: int, draw: int, buffer: int, spec: FreshSpec) -> None:
        """Draw ``tensor`` (contiguous, on this GPU) as the harness draws argument ``buffer``
        under ``key`` (:func:`draw_key`) at draw index ``draw``, enqueued on torch's current stream;
        a choice is drawn by the harness's ``ko_choice_<bytes>``, and a spec's ``structure`` is applied
        after the draw by the harness's own kernel.

        Raises:
            ValueError: a tensor that is not contiguous on a CUDA device, of a dtype no fill has, not
                a whole number of the structure's matrices, or a choice the harness would refuse.
        """
        name = str(tensor.dtype).removeprefix("torch.")
        if name not in _FILL_KERNELS:
            raise ValueError(f"no device draw for {name} tensors")
        if not tensor.is_cuda or not tensor.is_contiguous():
            raise ValueError("the tensor must be contiguous and on the GPU")
        elements = tensor.numel()
        if elements == 0:
            return
        if spec.structure is not None and elements % (spec.structure.rows * spec.structure.cols):
            raise ValueError(f"{elements} elements are not a whole number of {spec.structure.rows} x "
                             f"{spec.structure.cols} matrices")
        stream = self._torch.cuda.current_stream().cuda_stream
        if spec.kind == "choice":
            self._choice(tensor, elements, key, draw, buffer, choice_args(spec, DType(name)), stream)
        else:
            args = fill_args(spec)
            function = self._function(_FILL_KERNELS[name])
            blocks = max(1, min((elements + SUPPORT_BLOCK - 1) // SUPPORT_BLOCK, 4 * self._sm_count))
            values = (tensor.data_ptr(), elements, key & _MASK, draw & _MASK, buffer, args.kind, args.a, args.b,
                      args.low, args.range & _MASK)
            types = (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint32,
                     ctypes.c_uint32, ctypes.c_double, ctypes.c_double, ctypes.c_int64, ctypes.c_uint64)
            self._check(self._driver.cuLaunchKernel(function, blocks, 1, 1, SUPPORT_BLOCK, 1, 1, 0, stream,
                                                    (values, types), 0), f"cuLaunchKernel({_FILL_KERNELS[name]})")
        if spec.structure is not None:
            self._structure(tensor, elements, spec.structure, stream)

    def _choice(self, tensor: Any, elements: int, key: int, draw: int, buffer: int, args: ChoiceArgs,
                stream: Any) -> None:
        """The harness's ``ko_choice_<element bytes>`` (a choice's draw: kernelopt_mcp/input_choice.py)."""
        name = f"ko_choice_{tensor.element_size()}"
        table = _ChoiceTable()
        table.bits[:args.count] = args.bits
        pairs = (elements + 1) // 2  # a thread per Philox block of two elements (fill.cu)
        blocks = max(1, min((pairs + SUPPORT_BLOCK - 1) // SUPPORT_BLOCK, 4 * self._sm_count))
        values = (tensor.data_ptr(), elements, key & _MASK, draw & _MASK, buffer, args.count, table)
        types = (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32,
                 None)  # None: a ctypes.Structure, passed by value from its address
        self._check(self._driver.cuLaunchKernel(self._function(name), blocks, 1, 1, SUPPORT_BLOCK, 1, 1, 0, stream,
                                                (values, types), 0), f"cuLaunchKernel({name})")

    def _structure(self, tensor: Any, elements: int, structure: StructureSpec, stream: Any) -> None:
        """The harness's ``ko_structure_<element bytes>`` after the fill, on the same stream (the
        matrices made triangular or symmetric: kernelopt_mcp/input_structure.py)."""
        rows, cols = structure.rows, structure.cols
        name = f"ko_structure_{tensor.element_size()}"
        lines = elements // cols  # one block per matrix row at a time (fill.cu)
        values = (tensor.data_ptr(), elements, rows, cols, STRUCTURE_KINDS[structure.kind], structure.diagonal)
        types = (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int64)
        self._check(self._driver.cuLaunchKernel(self._function(name), max(1, min(lines, 4 * self._sm_count)), 1, 1,
                                                SUPPORT_BLOCK, 1, 1, 0, stream, (values, types), 0),
                    f"cuLaunchKernel({name})")
