"""``kernelopt import-torch``: a KernelBench-style PyTorch problem file becomes a workload.

What converts: a ``Model(nn.Module)`` whose forward takes tensors and Python numbers (from
``get_inputs()``) and returns one tensor, deterministically (no random numbers), without changing
its inputs; state it changes (BatchNorm's running statistics) is restored after every call. Its
parameters and registered buffers (``nn.Linear`` weights, a causal mask) become extra input
buffers, the floating ones drawn afresh for every draw (masks and integer state keep their values).
Everything else is refused with :class:`~kernelopt_mcp.torch_problem.TorchProblemError` naming the
reason. A degenerate problem (an input or parameter the output ignores, a constant output) is
imported and flagged (:func:`~kernelopt_mcp.torch_cases.degenerate`).

PyTorch itself is the reference (``reference.torch``): the harness draws every input on the GPU
from its generator, and a PyTorch process rebuilds the module at the case's sizes, fills its
inputs and parameters with the same draws (:mod:`kernelopt_mcp.torch_fill`) and computes the
expected outputs. So nothing of the problem's full size is run on the CPU or written: the
performance case is drawn on torch's meta device (shapes, dtypes, generators, FLOPs), the
correctness cases run on the CPU at their small sizes (the tolerance, the degenerate probe), and
only their findings are kept (:mod:`kernelopt_mcp.torch_cases`).

The workload written (a directory of kilobytes):

- ``workload.json``: the signature (tensor inputs, then parameters, as ``in`` buffers; the output
  as the ``out`` buffer, several as ``out0``, ``out1``, ... where forward returns a tuple; Python
  ints as int32 scalars, floats as float32; every dimension that changes with the size constants
  as an int32 scalar named after its constant), the cases
  (``small_odd`` and ``mid_odd`` correctness cases with the size constants scaled down to odd
  sizes, other sizes where the problem rejects those, and ``perf``, get_inputs' own sizes), each
  input buffer's generator per case (a forward argument's torch.randn / rand / randint as
  ``normal`` / ``uniform`` / ``randint``; a parameter's uniform rule; values no generator makes,
  an ``arange`` input or a causal mask, as ``constant`` where every element is equal, else a data
  file), tolerances by dtype (float16 1e-2, bfloat16 2e-2, float32 1e-4, float64 1e-10;
  KernelBench's 1e-2 with ``tolerance="kernelbench"``; widened where the module's own result
  differs more from its float64 result; each with its ``source``), the minimum bytes moved (and
  the FLOPs where torch's FlopCounterMode counts them and they fit ``c * product of scalars``:
  reported, never a floor), ``deterministic: false`` (float outputs agree within the tolerance
  between repeated launches), ``reference: {"torch": "problem.py"}`` and ``imported``: how buffers
  map to the module (``forward``, ``state``, ``output``), each case's size constants (``sizes``),
  the seed the module is built with (``seed``: its kept state comes from it), how each parameter
  was drawn, the state restored, the degenerate findings;
- ``data/<case>/<buffer>.bin``: only the values no generator makes and that are not constant (the
  same on every draw; at most 256 MiB per buffer of the performance case);
- ``problem.py``: the problem, which the PyTorch reference runs.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from .dtypes import DType
from .expr import MAX_EXPRESSION_CHARS
from .launch import LaunchSpec
from .torch_cases import (
    MAX_CORRECTNESS_BYTES,
    MAX_CPU_BYTES,
    MAX_FIXED_BYTES,
    DrawnCase,
    degenerate,
    draw_cases,
    fixed_values,
    other_sizes,
    size_variants,
)
from .torch_fit import fit_generator, fitted_note
from .torch_problem import (
    Arg,
    CpuOutOfMemory,
    Draw,
    ProblemSource,
    SizeConstant,
    TorchProblemError,
    exhausted,
    listed,
    parse_problem,
    require_torch,
)
from .torch_store import (
    KERNELBENCH_TOLERANCE,
    TOLERANCE_MODES,
    TORCH_TOLERANCE,
    choose_tolerance,
    judged_as_imported,
    le_bytes,
    move_into_place,
    sha256_of,
    write_workload,
)
from .workload import (
    IDENTIFIER,
    WorkloadSpec,
    load_workload,
    parse_spec,
)

__all__ = [
    "KERNELBENCH_TOLERANCE", "TOLERANCE_MODES", "TORCH_TOLERANCE", "TorchImportOptions", "TorchImportResult",
    "TorchProblemError",
    "choose_tolerance", "import_torch_problem", "judged_as_imported", "other_sizes", "size_variants",
]


#: Names a kernel parameter cannot take (C++ keywords, CUDA built-ins); they get a trailing _.
_RESERVED_WORDS = (
    "alignas alignof asm auto bool break case catch char class const constexpr continue decltype default delete do "
    "double else enum explicit export extern false float for friend goto if inline int long mutable namespace new "
    "noexcept nullptr operator private protected public register return short signed sizeof static struct switch "
    "template this throw true try typedef typeid typename union unsigned using virtual void volatile while "
    "threadIdx blockIdx blockDim gridDim warpSize dim3 half"
)
CUDA_RESERVED = frozenset(_RESERVED_WORDS.split())
INT32_MAX = 2**31 - 1


@dataclass
class TorchImportOptions:
    """How to import a problem.

    ``initial`` / ``initial_launch``: a starting kernel (CUDA source) and its launch; without one
    the workload has no initial kernel (``kernelopt optimize --workload`` then has the model write
    one, and a CUDA reference; ``kernelopt evaluate DIR KERNEL.cu --launch L.json`` evaluates yours).
    """

    name: str | None = None
    seed: int = 0
    initial_cu: str | None = None
    initial_launch: LaunchSpec | None = None
    initial_options: list[str] = field(default_factory=list)
    overwrite: bool = False
    max_correctness_bytes: int = MAX_CORRECTNESS_BYTES
    max_cpu_bytes: int = MAX_CPU_BYTES  # what the performance case may take where it must be built on the CPU
    search_s: float = 20.0  # how long to search for correctness sizes the problem accepts
    probe_s: float = 10.0  # how long to look for inputs and parameters the output does not depend on
    output_name: str = "out"  # the output buffer's name
    tolerance: str = "strict"  # "strict": by dtype (widened where the module needs it); "kernelbench": 1e-2


#: the steps :func:`import_torch_problem` reports to its ``progress`` callback
IMPORT_STEPS = 5


@dataclass
class TorchImportResult:
    path: Path
    spec: WorkloadSpec
    constants: list[SizeConstant]
    notes: list[str]
    torch_version: str
    degenerate: list[str] = field(default_factory=list)  # what a kernel may skip and still pass (also in notes)

    @property
    def c_prototype(self) -> str:
        return self.spec.signature.c_prototype()

    def text(self) -> str:
        lines = [f"workload {self.spec.name!r} written to {self.path}", f"  kernel: {self.c_prototype}"]
        consts = ", ".join(f"{c.name}={c.value}" for c in self.constants) or "none found"
        lines.append(f"  size constants (scaled for the correctness cases): {consts}")
        for case in self.spec.cases:
            scalars = ", ".join(f"{k}={v}" for k, v in case.scalars.items())
            lines.append(f"  case {case.name} ({case.kind}){': ' + scalars if scalars else ''}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def safe_name(stem: str) -> str:
    """A workload/entry name from a file name: ``1_Square_matmul_`` -> ``p1_Square_matmul``."""
    name = re.sub(r"\W+", "_", stem).strip("_") or "problem"
    if name[0].isdigit():
        name = f"p{name}"
    return name[:64]


def import_torch_problem(
    problem: str | Path, out_dir: str | Path, options: TorchImportOptions | None = None, *,
    source_text: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> TorchImportResult:
    """Convert a KernelBench-style problem file into a workload directory ``out_dir``.

    Args:
        problem: the problem file (its name labels messages; with ``source_text`` it is not read).
        out_dir: the workload directory to write (must not exist unless ``options.overwrite``).
        source_text: the problem's source, instead of reading ``problem``.
        progress: ``progress(step, done, IMPORT_STEPS)`` before each step (the CLI's progress bar).

    Raises:
        TorchProblemError: torch is missing, or the problem is not convertible (the reason).
        WorkloadError: the directory exists, or the workload written does not load.
    """
    options = options or TorchImportOptions()
    say = progress or (lambda step, done, total: None)
    say("importing torch", 0, IMPORT_STEPS)
    torch = require_torch()
    label = str(problem)
    if source_text is None:
        try:
            source_text = Path(problem).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TorchProblemError(f"{label}: cannot read the problem file ({exc})") from None
    out_dir = Path(out_dir)
    if out_dir.exists() and not options.overwrite and any(out_dir.iterdir()):
        raise TorchProblemError(f"{out_dir}: exists and is not empty; choose another directory or pass --force")
    say("reading the problem", 1, IMPORT_STEPS)
    src = parse_problem(source_text, label)
    name = options.name or safe_name(Path(label).stem)
    if not re.match(IDENTIFIER, name):
        raise TorchProblemError(f"name {name!r}: use letters, digits and _ (not starting with a digit)")
    notes: list[str] = []
    if options.tolerance not in TOLERANCE_MODES:
        raise TorchProblemError(f"tolerance {options.tolerance!r}: choose one of {', '.join(TOLERANCE_MODES)}")
    if not re.match(IDENTIFIER, options.output_name) or options.output_name in CUDA_RESERVED:
        raise TorchProblemError(f"output name {options.output_name!r}: use letters, digits and _ (not a C++ keyword)")
    say("drawing cases (correctness cases on the CPU, the performance case's shapes)", 2, IMPORT_STEPS)
    try:
        cases = draw_cases(src, options.seed, options.max_correctness_bytes, options.search_s, notes,
                           options.max_cpu_bytes, options.probe_s)
        fixed_values(src, cases, options.max_cpu_bytes, notes)
    except (MemoryError, RuntimeError) as exc:  # torch's allocator says "can't allocate memory" as a RuntimeError
        if not exhausted(exc):
            raise
        raise CpuOutOfMemory(
            f"{label}: the CPU ran out of memory building or running the module ({str(exc).splitlines()[0][:200]}); "
            "import it where more memory is free"
        ) from None
    layout = _Layout.of(cases, src.constants, options.output_name)
    inputs, files = _case_inputs(cases, layout, label, notes)
    spec_data = _spec(name, label, src, cases, layout, inputs, options, notes, torch.__version__)
    spec_data["imported"] = _imported(src, cases, layout, options, notes)
    parse_spec(spec_data, f"{label} (imported)")  # fail before writing anything
    say("writing the workload", 3, IMPORT_STEPS)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=_mkdir(out_dir.parent)))
    try:
        write_workload(staging, spec_data, problem=src.text, files=files, initial_cu=options.initial_cu)
        load_workload(staging)  # what was written loads
        move_into_place(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    say("checking the workload loads", 4, IMPORT_STEPS)
    spec = load_workload(out_dir).spec
    say("imported", IMPORT_STEPS, IMPORT_STEPS)
    degenerate = spec.imported.degenerate if spec.imported is not None else []
    return TorchImportResult(out_dir, spec, src.constants, notes, torch.__version__, degenerate)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


# --- the signature ---------------------------------------------------------------------------


@dataclass
class _Layout:
    """Names and shapes: buffers (dims: int or a scalar's name) and scalars (name -> per-case value)."""

    buffers: list[tuple[str, str, DType, list[int | str], str]]  # (name, role, dtype, shape, source key)
    scalars: dict[str, tuple[DType, list[int | float]]]  # name -> (dtype, value per case)
    number_args: dict[str, str]  # forward arg name -> scalar name
    derived: dict[str, list[int]] = field(default_factory=dict)  # dimension expressions -> value per case

    @classmethod
    def of(cls, cases: list[DrawnCase], constants: list[SizeConstant], output_name: str = "out") -> _Layout:
        first = cases[-1].main
        count = len(first.outputs)  # one output is `out`; several are out0, out1, ... in forward's order
        outputs = [output_name] if count == 1 else [f"{output_name}{k}" for k in range(count)]
        taken: set[str] = set(outputs)  # the outputs keep their names; an argument of such a name gets a suffix

        def claim(wanted: str) -> str:
            base = re.sub(r"\W", "_", wanted) or "x"
            base = base if re.match(IDENTIFIER, base) else f"v_{base}"
            base = f"{base}_" if base in CUDA_RESERVED else base  # a parameter named `new` would not compile
            name, i = base[:60], 1
            while name in taken:
                i += 1
                name = f"{base[:56]}_{i}"
            taken.add(name)
            return name

        buffer_keys: list[tuple[str, str, str]] = []  # (buffer name, role, key)
        for a in first.args:
            if a.tensor:
                buffer_keys.append((claim(a.name), "in", f"arg:{a.name}"))
        for s in first.state:
            buffer_keys.append((claim(s.name.replace(".", "_")), "in", f"state:{s.name}"))
        buffer_keys += [(name, "out", f"out:{k}") for k, name in enumerate(outputs)]
        scalars: dict[str, tuple[DType, list[int | float]]] = {}
        number_args: dict[str, str] = {}
        for i, a in enumerate(first.args):
            if not a.tensor:
                values = [cast("int | float", c.main.args[i].number) for c in cases]  # a number, not a tensor
                dtype = DType.float32 if any(isinstance(v, float) for v in values) else DType.int32
                if dtype is DType.int32 and any(abs(int(v)) > INT32_MAX for v in values):
                    dtype = DType.int64
                sname = claim(a.name)
                scalars[sname] = (dtype, [v if dtype is DType.float32 else int(v) for v in values])
                number_args[a.name] = sname
        # dimensions: literal where no case changes them, else a scalar (shared by equal vectors)
        by_vector: dict[tuple[int, ...], str] = {}
        for sname, (dtype, values) in scalars.items():
            if dtype is not DType.float32:
                by_vector.setdefault(tuple(int(v) for v in values), sname)
        const_vectors = {tuple(c.values.get(k.name, k.value) for c in cases): k.name for k in constants}
        derived_dims: dict[str, list[int]] = {}
        buffers = []
        for bname, role, key in buffer_keys:
            arrays = [_arg(c.main, key) for c in cases]
            rank = len(arrays[0].shape)
            shape: list[int | str] = []
            for dim in range(rank):
                vector = tuple(a.shape[dim] for a in arrays)
                if len(set(vector)) == 1:
                    shape.append(vector[0])
                    continue
                if vector not in by_vector:
                    derived = None if vector in const_vectors else _express(vector, by_vector)
                    if derived is not None:  # e.g. a convolution's output: height - 2
                        by_vector[vector] = derived
                        derived_dims[derived] = list(vector)
                    else:
                        sname = claim(const_vectors.get(vector, f"{bname}_dim{dim}"))
                        by_vector[vector] = sname
                        scalars[sname] = (DType.int32 if max(vector) <= INT32_MAX else DType.int64, list(vector))
                shape.append(by_vector[vector])
            # a 0-dim tensor is one element
            buffers.append((bname, role, cast(DType, arrays[0].dtype), shape or [1], key))
        return cls(buffers, scalars, number_args, derived_dims)

    def case_scalars(self, index: int) -> dict[str, int | float]:
        return {name: values[index] for name, (_, values) in self.scalars.items()}


def _express(vector: tuple[int, ...], known: dict[tuple[int, ...], str]) -> str | None:
    """``vector`` (a dimension's value per case) as ``s + d``, ``m * s`` or ``s // m`` of a scalar ``s``
    whose values are known, where that holds on every case; else None."""
    for values, name in list(known.items()):
        if not name.isidentifier() or len(set(values)) == 1:
            continue
        diffs = {v - s for v, s in zip(vector, values, strict=True)}
        if len(diffs) == 1:
            d = diffs.pop()
            return f"{name} + {d}" if d > 0 else f"{name} - {-d}"
        for m in range(2, 65):
            if all(v == m * s for v, s in zip(vector, values, strict=True)):
                return f"{m} * {name}"
            if all(v == s // m for v, s in zip(vector, values, strict=True)):
                return f"{name} // {m}"
    return None


def _arg(d: Draw, key: str) -> Arg:
    kind, _, name = key.partition(":")
    if kind == "out":
        return d.outputs[int(name)]
    pool = d.args if kind == "arg" else d.state
    return next(a for a in pool if a.name == name)


def _tolerances(cases: list[DrawnCase], outputs: list[tuple[str, DType, int]], notes: list[str],
                mode: str) -> dict[str, Any]:
    """Each floating output's tolerance (:func:`_tolerance`); with several outputs a note names its output."""
    found = {}
    for name, dtype, k in outputs:
        if dtype.is_float:
            said: list[str] = []
            found[name] = _tolerance(cases, k, dtype, said, mode)
            notes += said if len(outputs) == 1 else [f"{name}: {n}" for n in said]
    return found


def _tolerance(cases: list[DrawnCase], k: int, dtype: DType, notes: list[str], mode: str) -> dict[str, Any]:
    """:func:`choose_tolerance` for output ``k`` with the module's own error measured over every case
    (relative to the output's RMS plus the element, as the comparison measures)."""
    needed = 0.0
    for c in cases:
        wide = c.main.outputs64[k] if c.main.outputs64 is not None else None
        if wide is None or c.main.outputs[k].array is None:
            continue
        expected = wide.reshape(-1)
        actual = cast(np.ndarray, c.main.outputs[k].array).astype(np.float64).reshape(-1)
        if expected.size == 0 or not np.all(np.isfinite(expected)):
            continue
        scale = float(np.sqrt(np.mean(expected * expected)))
        err = np.abs(actual - expected) / (scale + np.abs(expected) + 1e-300)
        needed = max(needed, float(err.max()))
    return choose_tolerance(dtype, needed, mode, notes)


def _cost(layout: _Layout, cases: list[DrawnCase], notes: list[str]) -> dict[str, str]:
    by_dims: dict[tuple[str, ...], int] = {}  # the buffers of the same variable dimensions (an RNN's layers): one term
    fixed = 0  # the buffers whose size no case changes (a network's weights), summed into one number
    for _name, _, dtype, shape, _ in layout.buffers:
        literal = math.prod(int(d) for d in shape if isinstance(d, int))
        dims = tuple(sorted(d if d.isidentifier() else f"({d})" for d in shape if isinstance(d, str)))
        if dims:
            by_dims[dims] = by_dims.get(dims, 0) + dtype.itemsize * literal
        else:
            fixed += dtype.itemsize * literal
    terms = ["*".join([str(c), *dims]) for dims, c in by_dims.items()]
    text = " + ".join([*terms, *([str(fixed)] if fixed or not terms else [])])
    cost = {"bytes": text} if len(text) <= MAX_EXPRESSION_CHARS else {}
    if not cost:
        notes.append(f"the bytes the buffers take are a sum of {len(terms)} terms, too long a cost expression: left "
                     "out (no roofline floor for this problem)")
    flops = [c.main.flops for c in cases]
    if all(flops):
        fitted = _fit_flops(layout, [int(f) for f in flops if f])
        if fitted:
            cost["flops"] = fitted
        else:
            notes.append(f"FLOPs counted by torch ({flops[-1]} on the performance case) fit no product of "
                         "the scalars: left out")
    return cost


def _fit_flops(layout: _Layout, flops: list[int]) -> str | None:
    """``c*s1*s2...`` (up to 6 integer scalars or dimension expressions, repeats allowed) equal to the
    counted FLOPs in every case."""
    values = {n: [int(v) for v in vs] for n, (dtype, vs) in layout.scalars.items() if dtype is not DType.float32}
    values.update({f"({d})": vs for d, vs in layout.derived.items()})
    names = list(values)
    for size in range(7):
        for combo in itertools.combinations_with_replacement(names, size):
            prods = [math.prod(values[n][i] for n in combo) for i in range(len(flops))]
            if any(p == 0 for p in prods) or flops[0] % prods[0]:
                continue
            coeff = flops[0] // prods[0]
            if all(coeff * p == f for p, f in zip(prods, flops, strict=True)):
                return "*".join([str(coeff), *combo]) if combo else str(coeff)
    return None


def _spec(
    name: str, label: str, src: ProblemSource, cases: list[DrawnCase], layout: _Layout, inputs: list[dict[str, Any]],
    options: TorchImportOptions, notes: list[str], torch_version: str,
) -> dict[str, Any]:
    params: list[dict[str, Any]] = [
        {"kind": "buffer", "name": b, "dtype": dtype.value, "role": role, "shape": shape}
        for b, role, dtype, shape, _ in layout.buffers
    ]
    params += [{"kind": "scalar", "name": s, "dtype": dtype.value} for s, (dtype, _) in layout.scalars.items()]
    outputs = [(b, dtype, int(key.partition(":")[2])) for b, role, dtype, _, key in layout.buffers if role == "out"]
    digest = hashlib.sha256(src.text.encode()).hexdigest()[:16]
    spec: dict[str, Any] = {
        "name": name,
        "description": (
            f"Imported from the PyTorch problem {Path(label).name} (sha256 {digest}...) by `kernelopt import-torch` "
            f"with torch {torch_version}: the output of Model.forward, computed by PyTorch on the GPU (problem.py) "
            "from the inputs the harness draws."
        ),
        "signature": {"entry": name, "params": params},
        "cases": [
            {"name": c.name, "kind": c.kind, "scalars": layout.case_scalars(i), "inputs": inputs[i]}
            for i, c in enumerate(cases)
        ],
        "tolerance": _tolerances(cases, outputs, notes, options.tolerance),
        "reference": {"python": None, "cuda": None, "torch": PROBLEM_FILE},
        "cost": _cost(layout, cases, notes),
    }
    spec = judged_as_imported(spec)
    if options.initial_cu is not None:
        if options.initial_launch is None:
            raise TorchProblemError("the initial kernel needs a launch configuration (--initial-launch, or "
                                    "KERNEL.launch.json beside it)")
        if not re.search(rf"\b{re.escape(name)}\s*\(", options.initial_cu):
            raise TorchProblemError(
                f"the initial kernel defines no {name!r}; its entry must be "
                f"{parse_spec(spec, 'x').signature.c_prototype()} (or pass --name to match yours)"
            )
        spec["initial"] = {
            "source": "initial.cu", "launch": options.initial_launch.model_dump(mode="json", exclude_none=True),
            "compile_options": options.initial_options,
        }
    else:
        notes.append(
            "no initial kernel: `kernelopt optimize --workload DIR` has the model write one; "
            "`kernelopt evaluate DIR KERNEL.cu --launch LAUNCH.json` evaluates your own"
        )
    return spec


#: the problem file in the workload: reference.torch
PROBLEM_FILE = "problem.py"


def _imported(src: ProblemSource, cases: list[DrawnCase], layout: _Layout, options: TorchImportOptions,
              notes: list[str]) -> dict[str, Any]:
    """workload.json's ``imported``: how buffers and scalars map to the module (forward's arguments,
    its state, the output), each case's size constants, the seed the module is built with, how each
    parameter was drawn (on the performance case), the state restored between calls and the
    degenerate findings; each finding also said in ``notes``."""
    names = {key: b for b, _, _, _, key in layout.buffers}
    outputs = [b for b, role, _, _, _ in layout.buffers if role == "out"]
    perf = cases[-1].main
    parameters = {
        names[f"state:{dotted}"]: {"default": rule.default, "drawn_from": rule.generator}
        for dotted, rule in perf.params.items()
    }
    drawn = [b for b, p in parameters.items() if p["drawn_from"] is not None]
    if drawn:
        notes.append(
            "parameters and floating buffers drawn afresh for every draw, not left at the module's defaults: "
            f"{listed(drawn)} (workload.json's imported.parameters says from what)"
        )
    restored = sorted({name for c in cases for name in c.main.restored})
    if restored:
        notes.append(
            f"forward updates the module's state ({listed(restored)}): every call runs from a snapshot of it, restored "
            "after the call, so the output depends on the inputs only"
        )
    found = degenerate(src, cases, names, options.probe_s, notes)
    notes += [f"degenerate: {f}" for f in found]
    return {
        "parameters": parameters, "state_restored": [names[f"state:{n}"] for n in restored], "degenerate": found,
        "forward": [names[f"arg:{a.name}"] if a.tensor else layout.number_args[a.name] for a in perf.args],
        "state": {names[f"state:{a.name}"]: a.name for a in perf.state},
        "sizes": {c.name: dict(c.values) for c in cases},
        "seed": options.seed,
        "output": outputs[0] if len(outputs) == 1 else outputs,
    }


# --- each input buffer's generator ------------------------------------------------------------


def _case_inputs(
    cases: list[DrawnCase], layout: _Layout, label: str, notes: list[str],
) -> tuple[list[dict[str, dict[str, Any]]], dict[str, bytes]]:
    """Every case's generator per input buffer, and the data files they name (path -> bytes)."""
    files: dict[str, bytes] = {}
    fitted: dict[str, tuple[str, dict[str, Any]]] = {}  # buffer -> (case, generator): said once in notes
    out = []
    for c in cases:
        out.append({
            b: _generator(c, cases, b, key, dtype, files, fitted, label)
            for b, role, dtype, _, key in layout.buffers if role == "in"
        })
    notes += [fitted_note(b, case, gen) for b, (case, gen) in fitted.items()]
    return out, files


def _generator(
    c: DrawnCase, cases: list[DrawnCase], buffer: str, key: str, dtype: DType, files: dict[str, bytes],
    fitted: dict[str, tuple[str, dict[str, Any]]], label: str,
) -> dict[str, Any]:
    """How buffer ``buffer`` of case ``c`` is drawn: the random function that made a forward argument,
    a drawn parameter's rule, a generator fitted to an argument made from random numbers by further
    operations, else the values themselves (the module's kept state, get_inputs' own ``arange``):
    ``constant`` where all are equal, else a data file (the same on every draw)."""
    kind, _, name = key.partition(":")
    arg = _arg(c.main, key)
    if kind == "arg" and arg.drawn_from is not None:
        return dict(arg.drawn_from)
    if kind == "arg" and arg.random:
        # the largest case with values: the most to measure (a small case may hold 5 equal ones)
        if buffer not in fitted:
            source = next(x for x in reversed(cases) if _arg(x.main, key).array is not None)
            draws = [a for x in cases for d in (x.main, x.hidden)
                     if d is not None and (a := _arg(d, key).array) is not None]
            fitted[buffer] = (source.name, fit_generator(_array(source.main, key), draws, dtype))
        return dict(fitted[buffer][1])
    if kind == "state" and (rule := c.main.params.get(name)) is not None and rule.generator is not None:
        return dict(rule.generator)
    values = _array(c.main, key)
    flat = values.reshape(-1)
    if flat.size == 0:
        return {"generator": "constant", "value": 0.0}
    first = flat[0]
    if np.all(flat == first) and np.isfinite(float(first)) and float(first) == first:
        return {"generator": "constant", "value": float(first)}
    if c.kind == "performance" and values.nbytes > MAX_FIXED_BYTES:
        what = f"the module's {name!r}" if kind == "state" else f"get_inputs() argument {name!r}"
        raise TorchProblemError(
            f"{label}: {what} is made without random numbers and is not constant, so its values would be stored, but "
            f"at the performance sizes it takes {values.nbytes / 2**20:.4g} MiB (more than {MAX_FIXED_BYTES // 2**20} "
            "MiB): import smaller sizes, or make it from torch.rand / randn / randint"
        )
    path = f"data/{c.name}/{buffer}.bin"
    files[path] = le_bytes(values)
    return {"generator": "file", "path": path, "sha256": sha256_of(values)}


def _array(d: Draw, key: str) -> np.ndarray:
    array = _arg(d, key).array
    if array is None:
        raise TorchProblemError(f"no values for {key!r} in a draw of shapes only: a bug in kernelopt's import")
    return array
