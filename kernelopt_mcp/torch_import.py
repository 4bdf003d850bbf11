"""``kernelopt import-torch``: a KernelBench-style PyTorch problem file becomes a workload.

What converts: a ``Model(nn.Module)`` whose forward takes tensors and Python numbers (from
``get_inputs()``) and returns one tensor, deterministically, without changing its inputs or its
own state. Its parameters and registered buffers (``nn.Linear`` weights, a causal mask) become
extra input buffers filled from the module's initialized values. Everything else is refused with
:class:`~kernelopt_mcp.torch_problem.TorchProblemError` naming the reason.

The workload written (a directory):

- ``workload.json``: the signature (tensor inputs, then parameters, as ``in`` buffers; the output
  as the ``out`` buffer; Python ints as int32 scalars, floats as float32; every dimension that
  changes with the size constants as an int32 scalar named after its constant), the cases
  (``small_odd`` and ``mid_odd`` correctness cases with the size constants scaled down to odd
  sizes, and ``perf``, get_inputs' own sizes), tolerances by dtype (float16 1e-2, bfloat16 2e-2, float32 1e-4,
  float64 1e-10; KernelBench's 1e-2 with ``tolerance="kernelbench"``; widened where the module's own result
  differs more from its float64 result; each with its ``source``), the minimum bytes moved (and the FLOPs where
  torch's FlopCounterMode counts them and they fit ``c * product of scalars``: reported, never a floor),
  ``deterministic: false`` (float outputs agree within the tolerance between repeated launches);
- ``data/<case>/<buffer>.bin``: every input as drawn by torch, and a second draw under
  ``hidden/`` named by each file's ``hidden_path`` (the timed check's hidden inputs);
- ``expected/``: the module's output for both draws, and ``reference.py``, a NumPy oracle that
  looks them up by the inputs' bytes: the GPU machine needs neither torch nor the problem file;
- ``problem.py``: a copy of the problem, for the record (nothing imports it).

Inputs are files, so the harness cannot redraw them before every timed launch (no generator
could reproduce torch's values and the stored oracle knows only the stored draws): evaluation
results say so in their ``checks``. A file does not record ``drawn_from`` for that reason.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from .dtypes import DType
from .launch import LaunchSpec
from .torch_problem import (
    Arg,
    Draw,
    ProblemSource,
    SizeConstant,
    TorchProblemError,
    draw,
    parse_problem,
    require_torch,
)
from .torch_store import StoredDraw, le_bytes, move_into_place, sha256_of, write_workload
from .workload import (
    DEFAULT_TOLERANCE,
    IDENTIFIER,
    Tolerance,
    WorkloadSpec,
    load_workload,
    parse_spec,
)

__all__ = [
    "TorchImportOptions", "TorchImportResult", "TorchProblemError", "choose_tolerance", "import_torch_problem",
    "judged_as_imported", "size_variants",
]

SMALL_SIZES = (5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61)
MAX_CORRECTNESS_BYTES = 256 * 2**20  # all buffers of one correctness case
HIDDEN_SEED_OFFSET = 1_000_003
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
    home: Path | None = None  # where the workload will live when out_dir is staged elsewhere (default out_dir)
    output_name: str = "out"  # the output buffer's name
    tolerance: str = "strict"  # "strict": by dtype (widened where the module needs it); "kernelbench": 1e-2


@dataclass
class TorchImportResult:
    path: Path
    spec: WorkloadSpec
    constants: list[SizeConstant]
    notes: list[str]
    torch_version: str

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


def size_variants(constants: list[SizeConstant]) -> list[tuple[str, str, dict[str, int]]]:
    """The cases' size constants: ``small_odd`` (each constant a distinct small prime, at most its
    own value), ``mid_odd`` (about 1/16 of each, odd and distinct) and ``perf`` (as written).
    Variants equal to an earlier one are left out."""
    small = {c.name: min(c.value, SMALL_SIZES[i % len(SMALL_SIZES)]) for i, c in enumerate(constants)}
    mid = {c.name: min(c.value, max(SMALL_SIZES[-1], (c.value // 16) | 1) + 2 * i) for i, c in enumerate(constants)}
    perf = {c.name: c.value for c in constants}
    out: list[tuple[str, str, dict[str, int]]] = []
    for name, kind, values in (("small_odd", "correctness", small), ("mid_odd", "correctness", mid), ("perf", "performance", perf)):
        if all(values != v for _, _, v in out) and (kind == "performance" or values != perf):
            out.append((name, kind, values))
    if len(out) == 1:  # nothing to scale: a correctness case of the same sizes, drawn with another seed
        out.insert(0, ("check", "correctness", perf))
    return out


@dataclass
class _Case:
    name: str
    kind: str
    values: dict[str, int]
    seed: int
    main: Draw
    hidden: Draw


def import_torch_problem(
    problem: str | Path, out_dir: str | Path, options: TorchImportOptions | None = None, *, source_text: str | None = None,
) -> TorchImportResult:
    """Convert a KernelBench-style problem file into a workload directory ``out_dir``.

    Args:
        problem: the problem file (its name labels messages; with ``source_text`` it is not read).
        out_dir: the workload directory to write (must not exist unless ``options.overwrite``).
        source_text: the problem's source, instead of reading ``problem``.

    Raises:
        TorchProblemError: torch is missing, or the problem is not convertible (the reason).
        WorkloadError: the directory exists, or the workload written does not load.
    """
    options = options or TorchImportOptions()
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
    src = parse_problem(source_text, label)
    name = options.name or safe_name(Path(label).stem)
    if not re.match(IDENTIFIER, name):
        raise TorchProblemError(f"name {name!r}: use letters, digits and _ (not starting with a digit)")
    notes: list[str] = []
    if options.tolerance not in TOLERANCE_MODES:
        raise TorchProblemError(f"tolerance {options.tolerance!r}: choose one of {', '.join(TOLERANCE_MODES)}")
    if not re.match(IDENTIFIER, options.output_name) or options.output_name in CUDA_RESERVED:
        raise TorchProblemError(f"output name {options.output_name!r}: use letters, digits and _ (not a C++ keyword)")
    cases = _draw_cases(src, options, notes)
    layout = _Layout.of(cases, src.constants, options.output_name)
    spec_data = _spec(name, label, src, cases, layout, options, notes, torch.__version__)
    parse_spec(spec_data, f"{label} (imported)")  # fail before writing anything
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=_mkdir(out_dir.parent)))
    try:
        _write(staging, spec_data, src, cases, layout, options, torch.__version__, out_dir)
        load_workload(staging)  # what was written loads
        move_into_place(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    spec = load_workload(out_dir).spec
    return TorchImportResult(out_dir, spec, src.constants, notes, torch.__version__)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _draw_cases(src: ProblemSource, options: TorchImportOptions, notes: list[str]) -> list[_Case]:
    variants = size_variants(src.constants)
    perf_name, _, perf_values = variants[-1]
    seeds = {name: options.seed + 7919 * i for i, (name, _, _) in enumerate(variants)}
    # the problem as written first: whether it converts at all is decided there
    perf_seed = seeds[perf_name]
    perf = _Case(perf_name, "performance", perf_values, perf_seed,
                 draw(src, perf_values, perf_seed, reference64=True), draw(src, perf_values, perf_seed + HIDDEN_SEED_OFFSET))
    _same_layout(perf.main, perf.hidden, src.label, "a second draw")
    cases = []
    for name, kind, values in variants[:-1]:
        scaled = ", ".join(f"{k}={v}" for k, v in values.items() if v != perf_values[k]) or "as written"
        try:
            main = draw(src, values, seeds[name], reference64=True)
            hidden = draw(src, values, seeds[name] + HIDDEN_SEED_OFFSET)
            _same_layout(main, perf.main, src.label, f"the sizes of case {name}")
            _same_layout(main, hidden, src.label, "a second draw")
        except TorchProblemError as exc:
            notes.append(f"correctness case {name} ({scaled}) left out: {exc}")
            continue
        size = sum(a.array.nbytes for a in _buffers(main) if a.array is not None)  # _buffers: arrays only
        if size > options.max_correctness_bytes:
            notes.append(f"correctness case {name} ({scaled}) left out: {size} bytes of buffers")
            continue
        cases.append(_Case(name, kind, values, seeds[name], main, hidden))
    if not cases:
        notes.append("no correctness case of other sizes: the performance case is the only one (it is validated too)")
    return [*cases, perf]


def _buffers(d: Draw) -> list[Arg]:
    return [*(a for a in d.args if a.array is not None), *d.state, d.output]


def _same_layout(a: Draw, b: Draw, label: str, what: str) -> None:
    """Both draws have the same arguments, dtypes and ranks (and shapes, for a second draw)."""
    def layout(d: Draw, shapes: bool) -> list[tuple[Any, ...]]:
        return [(x.name, x.dtype, len(x.shape), x.shape if shapes else None, x.array is None) for x in [*d.args, *d.state, d.output]]

    same_sizes = what == "a second draw"
    if layout(a, same_sizes) != layout(b, same_sizes):
        detail = "shapes" if same_sizes else "arguments, dtypes or ranks"
        raise TorchProblemError(
            f"{label}: {what} gives other {detail} ({_describe(a)} vs {_describe(b)}); shapes must be fixed by "
            "get_inputs and the size constants"
        )


def _describe(d: Draw) -> str:
    return ", ".join(f"{x.name}{list(x.shape)}" if x.array is not None else f"{x.name}={x.number!r}" for x in [*d.args, *d.state, d.output])


# --- the signature ---------------------------------------------------------------------------


@dataclass
class _Layout:
    """Names and shapes: buffers (dims: int or a scalar's name) and scalars (name -> per-case value)."""

    buffers: list[tuple[str, str, DType, list[int | str], str]]  # (name, role, dtype, shape, source key)
    scalars: dict[str, tuple[DType, list[int | float]]]  # name -> (dtype, value per case)
    number_args: dict[str, str]  # forward arg name -> scalar name
    derived: dict[str, list[int]] = field(default_factory=dict)  # dimension expressions -> value per case

    @classmethod
    def of(cls, cases: list[_Case], constants: list[SizeConstant], output_name: str = "out") -> _Layout:
        first = cases[-1].main
        taken: set[str] = {output_name}  # the output keeps its name; an argument of that name gets a suffix

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
            if a.array is not None:
                buffer_keys.append((claim(a.name), "in", f"arg:{a.name}"))
        for s in first.state:
            buffer_keys.append((claim(s.name.replace(".", "_")), "in", f"state:{s.name}"))
        buffer_keys.append((output_name, "out", "out"))
        scalars: dict[str, tuple[DType, list[int | float]]] = {}
        number_args: dict[str, str] = {}
        for i, a in enumerate(first.args):
            if a.array is None:
                values = [cast("int | float", c.main.args[i].number) for c in cases]  # a number where no array
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
            buffers.append((bname, role, cast(DType, arrays[0].dtype), shape or [1], key))  # a 0-dim tensor is one element
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
        return d.output
    pool = d.args if kind == "arg" else d.state
    return next(a for a in pool if a.name == name)


#: Per output dtype. float32 is looser than workload.py's default (1e-5), as the bundled workloads
#: that reduce (sgemm, softmax, layernorm, reduce_sum) are: an imported module may sum in any order.
#: KernelBench itself checks with atol = rtol = 1e-2 for every dtype.
TORCH_TOLERANCE = {**DEFAULT_TOLERANCE, DType.float32: Tolerance(rtol=1e-4, atol=1e-4, source="dtype")}


#: ``--tolerance``: "strict" (by dtype, as above, atol relative to the output's RMS) or KernelBench's
#: torch.allclose(atol = rtol = 1e-2), its atol absolute.
TOLERANCE_MODES = ("strict", "kernelbench")
KERNELBENCH_TOLERANCE = Tolerance(rtol=1e-2, atol=1e-2, absolute=True, source="kernelbench")


def judged_as_imported(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with what sets an imported problem's checks apart: float outputs need only agree
    within the tolerance between two launches on the same inputs (torch's own reductions are not
    bitwise repeatable, and a float ``atomicAdd`` reduction is a correct kernel), and the roofline
    floor is the bytes term alone (torch counts the FLOPs of the module as written, which a
    smarter algorithm may avoid). Integer outputs stay bitwise (:meth:`WorkloadSpec.bitwise_outputs`)."""
    return {**spec, "deterministic": False, "cost": {**spec.get("cost", {}), "floor_from": "bytes"}}


def choose_tolerance(dtype: DType, needed: float, mode: str, notes: list[str]) -> dict[str, Any]:
    """The tolerance of an output of ``dtype`` under ``mode``, widened to 10x ``needed`` (the largest
    error of the module's own result against its float64 result) where that is more."""
    base = KERNELBENCH_TOLERANCE if mode == "kernelbench" else TORCH_TOLERANCE.get(dtype)
    if base is None:
        return {"rtol": 0.0, "atol": 0.0, "source": "dtype"}
    widened = min(0.25, _round_up(10 * needed))
    if widened > max(base.rtol, base.atol):
        notes.append(
            f"tolerance widened to {widened:.3g} (the {base.source or 'dtype'} one is {base.rtol:g}): the module's own "
            f"{dtype} result differs from its float64 result by up to {needed:.3g} of the output's scale"
        )
        return {"rtol": widened, "atol": widened, "source": "widened"}
    chosen = {"rtol": base.rtol, "atol": base.atol, "source": base.source or "dtype"}
    return {**chosen, "absolute": True} if base.absolute else chosen


def _tolerance(cases: list[_Case], dtype: DType, notes: list[str], mode: str) -> dict[str, Any]:
    """:func:`choose_tolerance` with the module's own error measured over every case (relative to
    the output's RMS plus the element, as the comparison measures)."""
    needed = 0.0
    for c in cases:
        if c.main.output64 is None or c.main.output.array is None:
            continue
        expected = c.main.output64.reshape(-1)
        actual = c.main.output.array.astype(np.float64).reshape(-1)
        if expected.size == 0 or not np.all(np.isfinite(expected)):
            continue
        scale = float(np.sqrt(np.mean(expected * expected)))
        err = np.abs(actual - expected) / (scale + np.abs(expected) + 1e-300)
        needed = max(needed, float(err.max()))
    return choose_tolerance(dtype, needed, mode, notes)


def _round_up(x: float) -> float:
    """``x`` rounded up to two significant digits (a tolerance that reads well in workload.json)."""
    if x <= 0:
        return 0.0
    step = 10.0 ** (math.floor(math.log10(x)) - 1)
    return float(f"{math.ceil(x / step) * step:.2g}")


def _cost(layout: _Layout, cases: list[_Case], notes: list[str]) -> dict[str, str]:
    terms = []
    for _name, _, dtype, shape, _ in layout.buffers:
        dims = [str(d) if isinstance(d, int) or d.isidentifier() else f"({d})" for d in shape if d != 1]
        terms.append("*".join([str(dtype.itemsize), *dims]))
    cost = {"bytes": " + ".join(terms)}
    flops = [c.main.flops for c in cases]
    if all(flops):
        fitted = _fit_flops(layout, [int(f) for f in flops if f])
        if fitted:
            cost["flops"] = fitted
        else:
            notes.append(f"FLOPs counted by torch ({flops[-1]} on the performance case) fit no product of the scalars: left out")
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
    name: str, label: str, src: ProblemSource, cases: list[_Case], layout: _Layout, options: TorchImportOptions,
    notes: list[str], torch_version: str,
) -> dict[str, Any]:
    params: list[dict[str, Any]] = [
        {"kind": "buffer", "name": b, "dtype": dtype.value, "role": role, "shape": shape}
        for b, role, dtype, shape, _ in layout.buffers
    ]
    params += [{"kind": "scalar", "name": s, "dtype": dtype.value} for s, (dtype, _) in layout.scalars.items()]
    out_name, _, out_dtype, _, _ = layout.buffers[-1]
    digest = hashlib.sha256(src.text.encode()).hexdigest()[:16]
    spec: dict[str, Any] = {
        "name": name,
        "description": (
            f"Imported from the PyTorch problem {Path(label).name} (sha256 {digest}...) by `kernelopt import-torch` "
            f"with torch {torch_version}: the output of Model.forward; expected outputs were computed with torch "
            "on the CPU and are stored with the workload."
        ),
        "signature": {"entry": name, "params": params},
        "cases": [
            {
                "name": c.name, "kind": c.kind, "scalars": layout.case_scalars(i),
                "inputs": {
                    b: _data_file(c, b, key) for b, role, _, _, key in layout.buffers if role == "in"
                },
            }
            for i, c in enumerate(cases)
        ],
        "tolerance": {out_name: _tolerance(cases, out_dtype, notes, options.tolerance)} if out_dtype.is_float else {},
        "reference": {"python": "reference.py", "cuda": None},
        "cost": _cost(layout, cases, notes),
    }
    spec = judged_as_imported(spec)
    if options.initial_cu is not None:
        if options.initial_launch is None:
            raise TorchProblemError("the initial kernel needs a launch configuration (--initial-launch, or KERNEL.launch.json beside it)")
        if not re.search(rf"\b{re.escape(name)}\s*\(", options.initial_cu):
            raise TorchProblemError(
                f"the initial kernel defines no {name!r}; its entry must be {parse_spec(spec, 'x').signature.c_prototype()} "
                "(or pass --name to match yours)"
            )
        spec["initial"] = {
            "source": "initial.cu", "launch": options.initial_launch.model_dump(mode="json", exclude_none=True),
            "compile_options": options.initial_options,
        }
    else:
        notes.append(
            "no initial kernel: `kernelopt optimize --workload DIR` has the model write one (and a CUDA reference); "
            "`kernelopt evaluate DIR KERNEL.cu --launch LAUNCH.json` evaluates your own"
        )
    notes.append(
        "inputs are torch's draws stored as files (a second draw as each file's hidden_path): the hidden-seed check "
        "runs on that second draw, but redrawing inputs before every timed launch is not possible (no generator "
        "reproduces torch's values, and the stored oracle knows only the stored draws)"
    )
    return spec


def _data_file(c: _Case, buffer: str, key: str) -> dict[str, Any]:
    """A buffer's data file; ``hidden_path`` only where the second draw differs (a buffer that get_inputs or
    the module's init make without randomness is the same on every draw, and the checks must say so)."""
    main, hidden = _array(c.main, key), _array(c.hidden, key)
    gen = {"generator": "file", "path": f"data/{c.name}/{buffer}.bin", "sha256": sha256_of(main)}
    if le_bytes(main) != le_bytes(hidden):
        gen["hidden_path"] = f"data/{c.name}/hidden/{buffer}.bin"
    return gen


def _write(
    root: Path, spec: dict[str, Any], src: ProblemSource, cases: list[_Case], layout: _Layout,
    options: TorchImportOptions, torch_version: str, out_dir: Path,
) -> None:
    inputs = [(b, key) for b, role, _, _, key in layout.buffers if role == "in"]
    out_name, _, out_dtype, _, _ = layout.buffers[-1]
    draws = []
    for i, c in enumerate(cases):
        for hidden, d in ((False, c.main), (True, c.hidden)):
            params: dict[str, Any] = dict(layout.case_scalars(i))
            params.update({b: _array(d, key) for b, key in inputs})
            draws.append(StoredDraw(c.name, hidden, params, _array(d, "out")))
    write_workload(
        root, spec, home=(options.home or out_dir).resolve(), problem=src.text, problem_name=Path(src.label).name, torch_version=torch_version,
        inputs=[b for b, _ in inputs],
        scalar_kinds={s: ("float" if dtype is DType.float32 else "int") for s, (dtype, _) in layout.scalars.items()},
        output=out_name, output_dtype=out_dtype.value, draws=draws, initial_cu=options.initial_cu,
    )


def _array(d: Draw, key: str) -> np.ndarray:
    array = _arg(d, key).array
    assert array is not None  # buffers always have one
    return array
