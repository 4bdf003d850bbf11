"""Workloads: what a kernel is checked against.

A workload is a directory holding ``workload.json`` (the :class:`WorkloadSpec` below; its
JSON Schema comes from ``kernelopt schema``), a NumPy oracle ``reference.py``, a CUDA
reference ``reference.cu`` and the starting kernel ``initial.cu``. It can also be put
together from the original tool's separate files (:func:`load_parts`): a signature JSON,
an input-cases JSON whose data files may live anywhere, a reference .cu and an initial .cu.

Every load error names the file, the field and what to change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from . import expr
from .dtypes import DType, scalar_raw
from .errors import ExpressionError, WorkloadError, format_validation_error
from .files import read_json, read_text
from .input_choice import Choice, check_fits
from .input_structure import Drawn, StructureField
from .launch import LaunchSpec

IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"
CASE_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
MAX_CASES = 64
# a kernel's parameters: CUDA takes up to 32764 bytes of them (4095 pointers); a KernelBench level-3
# network passes every parameter and buffer of its module (ResNet-101: several hundred)
MAX_PARAMS = 1024
# No device holds a buffer this large; the bound keeps element counts far from int64 overflow.
MAX_ELEMENTS = 2**48
# Field descriptions too long for the field's line (each is a description in a JSON schema).
_BUFFER_PARAM_ROLE = "in: read only (checked unchanged); out: written (poisoned first); inout: both"
_BUFFER_PARAM_SHAPE = "dimensions: integers or expressions of scalars"
_BUFFER_PARAM_INIT = ("out buffers: 'poison' (NaN / 0xFF bytes before every launch) or 'zero' for outputs the kernel "
                      "accumulates into (e.g. with atomics)")
_DATA_FILE_DRAWN_FROM = "the generator these bytes were drawn from: hidden data sets redraw from it with their own seed"
_DATA_FILE_HIDDEN_PATH = ("a second data file of the same dtype and shape, used by hidden data sets instead of `path` "
                          "(relative like `path`)")
_CASE_KIND = ("correctness cases are small and odd-sized; performance cases are timed and ranked (geometric mean of "
              "their median latencies)")
_CASE_INPUTS = "per-buffer generators overriding the workload's"
_TOLERANCE_ABSOLUTE = "atol is absolute, as in torch.allclose (KernelBench's rule), not relative to the output's RMS"
_TOLERANCE_SOURCE = ("where the figures come from: 'dtype' (the output dtype's default), 'workload' (set by the "
                     "workload's author), 'widened' (an imported problem whose own result needs more than its "
                     "dtype's), 'kernelbench' (KernelBench's atol = rtol = 1e-2, on request)")
_REFERENCE_PYTHON = "NumPy oracle: a file defining reference(**params) -> {output name: array}"
_REFERENCE_TORCH = ("a PyTorch problem file (KernelBench's format; `kernelopt import-torch`): the module, run by torch "
                    "on the GPU on the inputs the harness drew, gives the expected outputs")
_COST_FLOOR_FROM = ("what bounds the roofline floor below which a time is impossible: 'bytes' where ``flops`` counts "
                    "one algorithm's operations that a smarter one may avoid (FLOP/s are still reported)")
_DRAWN_PARAMETER_DRAWN_FROM = ("drawn from this on the performance case (correctness cases scale it as the default "
                               "scales with their sizes); null: kept at the module's values (integer state, masks)")
_IMPORTED_STATE_RESTORED = ("module state forward updates (BatchNorm's running statistics in training mode): every "
                            "call ran from a snapshot, restored after it, so the output depends on the inputs only")
_IMPORTED_DEGENERATE = ("one line per finding: an input or parameter the output does not depend on, or an output that "
                        "is constant: a kernel may skip that work and still pass")
_IMPORTED_FORWARD = ("Model.forward's positional arguments, in order, each the name of the input buffer or scalar that "
                     "holds it")
_IMPORTED_STATE = ("input buffer -> the module's parameter or buffer (dotted name) it holds: the drawn ones are copied "
                   "in from the buffer's draw, the kept ones (masks) are the module's own values")
_IMPORTED_OUTPUT = ("the output buffer forward's result goes to; several, in order, where forward returns a tuple "
                    "(nested ones flattened depth first)")
_IMPORTED_SIZES = "case -> the problem's size constants (module-level names) for that case"
_WORKLOAD_SPEC_INPUTS = "default generator per input buffer (name -> generator)"
_WORKLOAD_SPEC_TOLERANCE = "per output buffer; defaults depend on the dtype"
_WORKLOAD_SPEC_DETERMINISTIC = ("floating-point outputs are bitwise reproducible run to run too (false: a repeated "
                                "launch need only agree within the tolerance, so float atomics are legal); integer "
                                "outputs always are")

Identifier = Annotated[str, Field(pattern=IDENTIFIER, max_length=64)]
CaseName = Annotated[str, Field(pattern=CASE_NAME, max_length=64)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- signature -------------------------------------------------------------------------


class BufferParam(_Model):
    """A device pointer parameter, with the shape of the array it points to."""

    kind: Literal["buffer"] = "buffer"
    name: Identifier
    dtype: DType
    role: Literal["in", "out", "inout"] = Field(description=_BUFFER_PARAM_ROLE)
    shape: list[int | str] = Field(min_length=1, max_length=8, description=_BUFFER_PARAM_SHAPE)
    init: Literal["poison", "zero"] = Field("poison", description=_BUFFER_PARAM_INIT)

    @field_validator("shape")
    @classmethod
    def _check_shape(cls, shape: list[int | str]) -> list[int | str]:
        for dim in shape:
            if isinstance(dim, str):
                expr.parse(dim)
            elif isinstance(dim, bool) or dim < 0:
                raise ValueError(f"dimension {dim!r} must be a non-negative integer or expression")
        return shape

    @property
    def is_input(self) -> bool:
        return self.role in ("in", "inout")

    @property
    def is_output(self) -> bool:
        return self.role in ("out", "inout")


class ScalarParam(_Model):
    """A by-value parameter; its value comes from each case's ``scalars``."""

    kind: Literal["scalar"] = "scalar"
    name: Identifier
    dtype: DType


Param = Annotated[BufferParam | ScalarParam, Field(discriminator="kind")]


class Signature(_Model):
    """The kernel's entry point and its parameters, in order."""

    entry: Identifier = Field(description='kernel name; declare it extern "C" __global__')
    params: list[Param] = Field(min_length=1, max_length=MAX_PARAMS)

    @model_validator(mode="after")
    def _check(self) -> Signature:
        names = [p.name for p in self.params]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"parameter names must be unique; repeated: {', '.join(dupes)}")
        if not any(isinstance(p, BufferParam) and p.is_output for p in self.params):
            raise ValueError("the signature needs at least one buffer with role 'out' or 'inout'")
        scalar_names = {p.name for p in self.scalars}
        for p in self.buffers:
            for dim in p.shape:
                if isinstance(dim, str):
                    unknown = expr.names(dim) - scalar_names
                    if unknown:
                        raise ValueError(
                            f"shape of {p.name!r} uses {', '.join(sorted(unknown))}, which is not a "
                            f"scalar parameter (scalars: {', '.join(sorted(scalar_names)) or 'none'})"
                        )
        return self

    @property
    def buffers(self) -> list[BufferParam]:
        return [p for p in self.params if isinstance(p, BufferParam)]

    @property
    def scalars(self) -> list[ScalarParam]:
        return [p for p in self.params if isinstance(p, ScalarParam)]

    @property
    def outputs(self) -> list[BufferParam]:
        return [p for p in self.buffers if p.is_output]

    @property
    def inputs(self) -> list[BufferParam]:
        return [p for p in self.buffers if p.is_input]

    def param(self, name: str) -> BufferParam | ScalarParam:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def c_prototype(self) -> str:
        """The prototype a kernel must have, e.g. for prompts and error messages."""
        args = []
        for p in self.params:
            if isinstance(p, BufferParam):
                const = "const " if p.role == "in" else ""
                args.append(f"{const}{p.dtype.cuda_type}* {p.name}")
            else:
                args.append(f"{p.dtype.cuda_type} {p.name}")
        return f'extern "C" __global__ void {self.entry}({", ".join(args)})'


# --- input generators ------------------------------------------------------------------


class Uniform(Drawn):
    generator: Literal["uniform"]
    low: float = -1.0
    high: float = 1.0
    structure: StructureField = None


class Normal(Drawn):
    generator: Literal["normal"]
    mean: float = 0.0
    std: float = Field(1.0, ge=0)
    structure: StructureField = None


class RandInt(Drawn):
    generator: Literal["randint"]
    low: int = 0
    high: int = Field(100, description="exclusive")
    structure: StructureField = None


class Arange(_Model):
    generator: Literal["arange"]
    start: float = 0
    step: float = 1
    modulo: float | None = Field(None, description="wrap values to [0, modulo) when given")


class Constant(_Model):
    generator: Literal["constant"]
    value: float


DrawnGenerator = Annotated[Uniform | Normal | RandInt | Choice | Arange | Constant, Field(discriminator="generator")]


class DataFile(_Model):
    """Data from a file: ``.npy`` (dtype and shape checked) or raw little-endian ``.bin``.

    A file ignores the seed, so hidden data sets (the timed check's second seed) see the same
    bytes as validation unless the file says how to get others: ``drawn_from`` (the generator
    the bytes were drawn from; a frozen `kernelopt optimize` run records it) is redrawn with the
    hidden seed, ``hidden_path`` (a second data set supplied with the first) is read instead.
    """

    generator: Literal["file"]
    path: str = Field(description="relative to the file that names it, or absolute")
    sha256: str | None = Field(None, description="checked when given")
    drawn_from: DrawnGenerator | None = Field(None, description=_DATA_FILE_DRAWN_FROM)
    hidden_path: str | None = Field(None, description=_DATA_FILE_HIDDEN_PATH)


Generator = Annotated[Uniform | Normal | RandInt | Choice | Arange | Constant | DataFile,
                      Field(discriminator="generator")]


# --- cases, tolerances, references -----------------------------------------------------


class Case(_Model):
    name: CaseName
    kind: Literal["correctness", "performance"] = Field(description=_CASE_KIND)
    scalars: dict[str, int | float] = Field(default_factory=dict)
    inputs: dict[str, Generator] = Field(default_factory=dict, description=_CASE_INPUTS)


ToleranceSource = Literal["dtype", "workload", "widened", "kernelbench"]


class Tolerance(_Model):
    """Elementwise check ``|actual - expected| <= atol * scale + rtol * |expected|``.

    ``scale`` is the RMS of the expected output, so ``atol`` is relative to the output's
    magnitude and an output of zeros cannot pass; with ``absolute`` it is 1 (``torch.allclose``'s
    rule, which KernelBench judges by). NaN and Inf never pass.
    """

    rtol: float = Field(ge=0, lt=0.5)
    atol: float = Field(ge=0, lt=0.5)
    absolute: bool = Field(False, description=_TOLERANCE_ABSOLUTE)
    source: ToleranceSource | None = Field(None, description=_TOLERANCE_SOURCE)


DEFAULT_TOLERANCE = {
    DType.float16: Tolerance(rtol=1e-2, atol=1e-2),
    DType.bfloat16: Tolerance(rtol=2e-2, atol=2e-2),
    DType.float32: Tolerance(rtol=1e-5, atol=1e-5),
    DType.float64: Tolerance(rtol=1e-10, atol=1e-10),
}
EXACT = Tolerance(rtol=0, atol=0)


class Reference(_Model):
    python: str | None = Field("reference.py", description=_REFERENCE_PYTHON)
    cuda: str | None = Field("reference.cu", description="CUDA reference kernel, same signature")
    torch: str | None = Field(None, description=_REFERENCE_TORCH)
    launch: LaunchSpec | None = Field(None, description="launch configuration of the CUDA reference")
    compile_options: list[str] = Field(default_factory=list)


class Initial(_Model):
    source: str = "initial.cu"
    launch: LaunchSpec
    compile_options: list[str] = Field(default_factory=list)


class Cost(_Model):
    """Per-case work, as expressions of the scalars, for FLOP/s and bytes/s figures."""

    flops: str | None = None
    bytes: str | None = Field(None, description="minimum bytes moved: inputs read + outputs written")
    floor_from: Literal["bytes_and_flops", "bytes"] = Field("bytes_and_flops", description=_COST_FLOOR_FROM)

    @field_validator("flops", "bytes")
    @classmethod
    def _parse(cls, value: str | None) -> str | None:
        if value is not None:
            expr.parse(value)
        return value


class DrawnParameter(_Model):
    """How an imported problem's parameter or buffer is drawn (for a reader: the case's input
    generator for the buffer is what the harness and PyTorch draw from)."""

    default: str = Field(description="the module's own values on the performance case, e.g. 'constant 1', or why kept")
    drawn_from: DrawnGenerator | None = Field(None, description=_DRAWN_PARAMETER_DRAWN_FROM)


class Imported(_Model):
    """What `kernelopt import-torch` did with a PyTorch problem and found in it."""

    parameters: dict[str, DrawnParameter] = Field(default_factory=dict, description="by input buffer name")
    state_restored: list[str] = Field(default_factory=list, description=_IMPORTED_STATE_RESTORED)
    degenerate: list[str] = Field(default_factory=list, description=_IMPORTED_DEGENERATE)
    forward: list[str] = Field(default_factory=list, description=_IMPORTED_FORWARD)
    state: dict[str, str] = Field(default_factory=dict, description=_IMPORTED_STATE)
    sizes: dict[str, dict[str, int]] = Field(default_factory=dict, description=_IMPORTED_SIZES)
    seed: int = Field(0, description="torch.manual_seed before the module is built")
    output: str | list[str] | None = Field(None, description=_IMPORTED_OUTPUT)

    @property
    def outputs(self) -> list[str]:
        """The output buffers of forward's outputs, in order (several: a tuple's elements, depth first)."""
        return [] if self.output is None else [self.output] if isinstance(self.output, str) else list(self.output)


class WorkloadSpec(_Model):
    """A complete workload, as stored in ``workload.json``."""

    name: Identifier
    description: str = ""
    signature: Signature
    inputs: dict[str, Generator] = Field(default_factory=dict, description=_WORKLOAD_SPEC_INPUTS)
    cases: list[Case] = Field(min_length=1, max_length=MAX_CASES)
    tolerance: dict[str, Tolerance] = Field(default_factory=dict, description=_WORKLOAD_SPEC_TOLERANCE)
    reference: Reference = Field(default_factory=Reference)
    initial: Initial | None = None
    cost: Cost = Field(default_factory=Cost)
    deterministic: bool = Field(True, description=_WORKLOAD_SPEC_DETERMINISTIC)
    imported: Imported | None = Field(None, description="set by `kernelopt import-torch`: how the problem was imported")

    @model_validator(mode="after")
    def _cross_check(self) -> WorkloadSpec:
        check_cases(self.signature, self.cases, self.inputs)
        outputs = {p.name for p in self.signature.outputs}
        for name in self.tolerance:
            if name not in outputs:
                raise ValueError(
                    f"tolerance.{name}: not an output buffer (outputs: {', '.join(sorted(outputs))})"
                )
        return self

    def tolerance_for(self, output: str) -> Tolerance:
        """The tolerance ``output`` is judged by, with its ``source`` filled in (results record it)."""
        if output in self.tolerance:
            tol = self.tolerance[output]
            return tol if tol.source else tol.model_copy(update={"source": "workload"})
        dtype = self.signature.param(output).dtype
        return DEFAULT_TOLERANCE.get(dtype, EXACT).model_copy(update={"source": "dtype"})

    def bitwise_outputs(self) -> list[str]:
        """Outputs a repeated launch on the same inputs must reproduce bit for bit: every one of a
        ``deterministic`` workload, else the integer ones (an integer sum has no rounding to reorder,
        so any difference between two launches is a race)."""
        return [p.name for p in self.signature.outputs if self.deterministic or not p.dtype.is_float]

    def case(self, name: str) -> Case:
        for c in self.cases:
            if c.name == name:
                return c
        raise WorkloadError(
            f"workload {self.name!r} has no case {name!r}; cases: {', '.join(c.name for c in self.cases)}"
        )

    @property
    def performance_cases(self) -> list[Case]:
        return [c for c in self.cases if c.kind == "performance"]


def check_cases(signature: Signature, cases: list[Case], default_inputs: dict[str, Any]) -> None:
    """Check that every case binds every scalar and has a generator for every input."""
    names = [c.name for c in cases]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"case names must be unique; repeated: {', '.join(dupes)}")
    input_names = {p.name for p in signature.inputs}
    for name in default_inputs:
        if name not in input_names:
            raise ValueError(f"inputs.{name}: not an input buffer (in/inout buffers: "
                             f"{', '.join(sorted(input_names)) or 'none'})")
    for case in cases:
        where = f"case {case.name!r}"
        wanted = {p.name: p for p in signature.scalars}
        missing = sorted(set(wanted) - set(case.scalars))
        extra = sorted(set(case.scalars) - set(wanted))
        if missing:
            raise ValueError(f"{where}: scalars {', '.join(missing)} have no value")
        if extra:
            raise ValueError(f"{where}: {', '.join(extra)} not scalar parameters of the signature")
        for name, value in case.scalars.items():
            try:
                scalar_raw(wanted[name].dtype, value)
            except ValueError as exc:
                raise ValueError(f"{where}: scalar {name}: {exc}") from None
        for name in case.inputs:
            if name not in input_names:
                raise ValueError(f"{where}: inputs.{name} is not an input buffer")
        for name in sorted(input_names - set(case.inputs) - set(default_inputs)):
            raise ValueError(
                f"{where}: input buffer {name!r} has no generator; add one under 'inputs' "
                'of the workload or of the case, e.g. {"generator": "uniform", "low": -1, "high": 1}'
            )
        for p in signature.buffers:
            try:
                shape = case_shape(p, case.scalars)
            except ExpressionError as exc:
                raise ValueError(f"{where}: shape of {p.name!r}: {exc}") from None
            if any(d < 0 for d in shape):
                raise ValueError(f"{where}: shape of {p.name!r} is {shape}; dimensions must be >= 0")
            if math.prod(shape) > MAX_ELEMENTS:
                raise ValueError(f"{where}: shape of {p.name!r} is {shape}: more than {MAX_ELEMENTS} elements")
            try:  # a structure's matrices and a choice's values
                if p.is_input:
                    check_fits(case.inputs.get(p.name) or default_inputs.get(p.name), shape, p.dtype)
            except ValueError as exc:
                raise ValueError(f"{where}: inputs.{p.name}: {exc}") from None


def case_shape(param: BufferParam, scalars: dict[str, int | float]) -> tuple[int, ...]:
    return tuple(expr.evaluate_int(d, scalars, f"shape of {param.name}") for d in param.shape)


# --- loaded workloads ------------------------------------------------------------------


@dataclass
class Workload:
    """A validated spec plus the sources it names, ready to evaluate."""

    spec: WorkloadSpec
    root: Path | None = None
    reference_cu: str | None = None
    initial_cu: str | None = None
    oracle_path: Path | None = None
    torch_problem: Path | None = None  # reference.torch: the PyTorch problem file
    origin: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def signature(self) -> Signature:
        return self.spec.signature

    def data_path(self, relative: str) -> Path:
        path = Path(relative)
        if not path.is_absolute() and self.root is not None:
            path = self.root / path
        return path


def parse_spec(data: Any, source: str) -> WorkloadSpec:
    try:
        return WorkloadSpec.model_validate(data)
    except ValidationError as exc:
        raise WorkloadError(format_validation_error(exc, source)) from None


def load_workload(path: str | Path) -> Workload:
    """Load a workload directory (or its ``workload.json``).

    Raises:
        WorkloadError: the directory, JSON or a named source file is missing or malformed.
    """
    path = Path(path)
    try:
        spec_path = path / "workload.json" if path.is_dir() else path
        found = spec_path.exists()
    except OSError as exc:  # e.g. a name too long
        raise WorkloadError(f"{path}: cannot read ({exc.strerror})") from None
    if not found:
        raise WorkloadError(
            f"{spec_path}: no workload here; a workload is a directory with workload.json "
            "(see `kernelopt schema`), or name a bundled one (`kernelopt workloads`)"
        )
    spec = parse_spec(read_json(spec_path), str(spec_path))
    root = spec_path.parent
    return attach_sources(spec, root, origin=str(root))


def attach_sources(spec: WorkloadSpec, root: Path, origin: str) -> Workload:
    wl = Workload(spec=spec, root=root, origin=origin)
    if spec.reference.cuda:
        wl.reference_cu = read_text(root / spec.reference.cuda, "reference.cuda")
        if spec.reference.launch is None:
            raise WorkloadError(
                f"{root / 'workload.json'}: reference.launch: required when reference.cuda is "
                'given, e.g. {"grid": ["ceil_div(n, 256)"], "block": [256]}'
            )
    if spec.reference.python:
        wl.oracle_path = root / spec.reference.python
        if not _is_file(wl.oracle_path):
            raise WorkloadError(f"{wl.oracle_path}: reference.python not found; add it or set it to null")
    if spec.reference.torch:
        wl.torch_problem = root / spec.reference.torch
        if not _is_file(wl.torch_problem):
            raise WorkloadError(f"{wl.torch_problem}: reference.torch not found; re-import the problem (kernelopt "
                                "import-torch)")
        _check_torch_mapping(spec, root / "workload.json")
    if spec.initial is not None:
        wl.initial_cu = read_text(root / spec.initial.source, "initial.source")
    if not spec.reference.cuda and not spec.reference.python and not spec.reference.torch:
        raise WorkloadError(
            f"{root / 'workload.json'}: reference: give a NumPy oracle (python) and/or a CUDA "
            "reference (cuda), or a PyTorch problem (torch); without one there is nothing to check kernels against"
        )
    if not spec.reference.torch and not spec.reference.python:  # (PyTorch is a reference independent of any kernel)
        wl.notes.append("no NumPy oracle: expected outputs come from the CUDA reference, "
                        "which is not independently checked")
    if spec.imported is not None and spec.imported.degenerate:
        found = spec.imported.degenerate
        more = f" (and {len(found) - 1} more: workload.json's imported.degenerate)" if len(found) > 1 else ""
        wl.notes.append(f"degenerate problem: {found[0]}{more}")
    return wl


def _check_torch_mapping(spec: WorkloadSpec, where: Path) -> None:
    """reference.torch needs ``imported`` to name, for every forward argument and module tensor, the
    input buffer or scalar holding it, the output, and every case's size constants (WorkloadError)."""
    im, sig = spec.imported, spec.signature
    if im is None or not im.outputs:
        raise WorkloadError(f"{where}: reference.torch needs imported.forward, .state, .sizes and .output "
                            "(written by kernelopt import-torch); re-import the problem")
    inputs, scalars = {p.name for p in sig.inputs}, {p.name for p in sig.scalars}
    bad = [f"forward[{i}]: {n!r}" for i, n in enumerate(im.forward) if n not in inputs | scalars]
    bad += [f"state: {n!r}" for n in im.state if n not in inputs]
    bad += [f"output: {o!r}" for o in im.outputs if o not in {p.name for p in sig.outputs}]
    if bad:
        raise WorkloadError(f"{where}: imported.{bad[0]} is no input buffer, scalar or output of the "
                            "signature as it should be")
    unfed = [p.name for p in sig.outputs if im.outputs.count(p.name) != 1]
    if unfed:
        raise WorkloadError(f"{where}: imported.output must name each output buffer of the signature once (forward's "
                            f"outputs in order); {unfed[0]!r} is named {im.outputs.count(unfed[0])} times")
    missing = [c.name for c in spec.cases if c.name not in im.sizes]
    if missing:
        raise WorkloadError(f"{where}: imported.sizes: no size constants for case(s) {', '.join(missing)}")


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long, a permission problem: not a usable file either way
        return False


# --- the original tool's separate files ------------------------------------------------


class InputCasesFile(_Model):
    """The original tool's input-cases JSON (also what a run writes as input_cases.json)."""

    seed: int | None = None
    workload: str | None = Field(None, description="the workload these inputs were made for")
    inputs: dict[str, Generator] = Field(default_factory=dict)
    cases: list[Case] = Field(min_length=1, max_length=MAX_CASES)
    tolerance: dict[str, Tolerance] = Field(default_factory=dict)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of ``workload.json``."""
    schema = WorkloadSpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "kernelopt workload"
    return schema
