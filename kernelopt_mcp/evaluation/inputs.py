"""Input buffers: declarative, seeded generators and data files. No host code runs.

Each buffer of each case gets its own random stream, derived from (seed, case, buffer), so a
case's inputs do not change when other cases are added. Inputs are written once per run as
raw little-endian ``.bin`` files with a manifest (``input_cases.json``) that can be loaded
back as the input cases of a later run.

Cases named in ``materialize(on_device=...)`` (performance cases whose expected outputs come
from the CUDA reference, not from NumPy) are not made here: their ``uniform``, ``normal``,
``randint`` and ``choice`` buffers are drawn by the harness on the device (``input_draw``, native_harness/
PROTOCOL.md), under a key derived from (seed, case, buffer), the same bytes in every request.
The same distribution and range as the host's, not the same bits; no host memory, no file. A
generator's ``structure`` (triangular or symmetric matrices) is applied the same way on both, and
a ``choice`` is the table of its values at a randint's draw on both (``input_choice.py``).
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import input_choice, input_structure
from ..data_files import DataFileProblem, open_data, read_array
from ..dtypes import DType
from ..errors import InputError
from ..files import write_atomic
from ..input_choice import Choice
from ..workload import (
    Arange,
    BufferParam,
    Case,
    Constant,
    DataFile,
    Generator,
    Normal,
    RandInt,
    Uniform,
    Workload,
    case_shape,
)
from .fresh_inputs import fresh_spec
from .protocol import InputDraw

MAX_BUFFER_BYTES = 8 * 2**30


def new_input_seed() -> int:
    """A new seed for an evaluation's inputs (recorded with the results; never shown to a model).

    Not the harness's ``fresh_seed``, which is a per-request hidden seed for the inputs redrawn on
    the device (``fresh_inputs.request_seed``)."""
    return secrets.randbits(63)


def _stream(seed: int, case: str, buffer: str) -> np.random.Generator:
    digest = hashlib.blake2b(f"{case}\0{buffer}".encode(), digest_size=8).digest()
    return np.random.default_rng([seed, int.from_bytes(digest, "little")])


def generate(
    gen: Generator, param: BufferParam, shape: tuple[int, ...], seed: int, case: str, base: Path | None,
    *, redraw: bool = False,
) -> np.ndarray:
    """Make one input array of ``param.dtype`` and ``shape``.

    With ``redraw`` (hidden data sets) a data file that records its generator (``drawn_from``)
    is drawn again from it with ``seed`` (the same stream as the original: the original seed gives
    the file's bytes back), and one with a ``hidden_path`` reads that file instead; other data
    files give their bytes, whatever the seed. A generator's ``structure`` is applied to the draw
    (:func:`kernelopt_mcp.input_structure.apply`).

    Raises:
        InputError: a data file is missing, of the wrong size/dtype/shape, or a generator's
            values cannot be represented in the buffer's dtype.
    """
    dtype = param.dtype
    count = _check_size(param, shape, case)
    rng = _stream(seed, case, param.name)
    # Draw narrow float types in float32: half the memory and time for large buffers.
    draw = np.float32 if dtype.is_float and dtype.itemsize <= 4 else np.float64
    values: np.ndarray
    match gen:
        case Uniform(low=low, high=high):
            values = rng.random(size=count, dtype=draw)
            values *= draw(high - low)
            values += draw(low)
        case Normal(mean=mean, std=std):
            values = rng.standard_normal(size=count, dtype=draw)
            values *= draw(std)
            values += draw(mean)
        case RandInt(low=low, high=high):
            if high <= low:
                raise InputError(f"case {case!r}: {param.name}: randint needs high > low")
            values = rng.integers(low, high, size=count, dtype=np.int64)
        case Choice(values=choices):  # already of the dtype: the table at a randint over [0, k)
            values = input_choice.draw(rng, choices, dtype, count)
        case Arange(start=start, step=step, modulo=modulo):
            values = start + step * np.arange(count, dtype=np.float64)
            if modulo:
                values = np.mod(values, modulo)
        case Constant(value=value):
            values = np.full(count, value, dtype=np.float64)
        case DataFile(drawn_from=drawn) if redraw and drawn is not None:
            return generate(drawn, param, shape, seed, case, base)
        case DataFile(hidden_path=hidden) if redraw and hidden is not None:
            return load_data_file(DataFile(generator="file", path=hidden), param, shape, case, base)
        case DataFile():
            return load_data_file(gen, param, shape, case, base)
    out = _cast(values, dtype, param.name, case).reshape(shape)
    structure = input_structure.structure_of(gen)
    return out if structure is None else input_structure.apply(out, structure)


def _check_size(param: BufferParam, shape: tuple[int, ...], case: str) -> int:
    """The element count of the buffer; InputError beyond MAX_BUFFER_BYTES."""
    count = math.prod(shape)  # Python ints: a huge shape cannot wrap around
    if count * param.dtype.itemsize > MAX_BUFFER_BYTES:
        raise InputError(
            f"case {case!r}: buffer {param.name!r} would be {count * param.dtype.itemsize} bytes; "
            f"the limit is {MAX_BUFFER_BYTES} bytes"
        )
    return count


def _cast(values: np.ndarray, dtype: DType, name: str, case: str) -> np.ndarray:
    if not dtype.is_float:
        info = np.iinfo(dtype.numpy)
        if values.size and (values.min() < info.min or values.max() > info.max):
            raise InputError(
                f"case {case!r}: {name}: generated values exceed the range of {dtype} "
                f"({info.min}..{info.max}); narrow the generator"
            )
        values = np.round(values)
    return values.astype(dtype.numpy, copy=False)


def load_data_file(
    gen: DataFile, param: BufferParam, shape: tuple[int, ...], case: str, base: Path | None
) -> np.ndarray:
    """A data file's array (see :mod:`kernelopt_mcp.data_files`: opened non-blocking, regular files
    only, read no further than the case needs; a FIFO or /dev/zero fails at once).

    Raises:
        InputError: missing, unreadable, not the bytes (or .npy dtype) the case needs, changed
            since its sha256 was taken.
    """
    path = Path(gen.path)
    if not path.is_absolute() and base is not None:
        path = base / path
    where = f"case {case!r}: {param.name}: {path}"
    dtype = np.dtype(param.dtype.numpy).newbyteorder("<")
    try:
        array, whole = read_array(open_data(path), path.suffix == ".npy", dtype, shape)
    except FileNotFoundError:
        raise InputError(f"{where}: data file not found; keep the run's inputs or fix the path") from None
    except DataFileProblem as exc:
        raise InputError(f"{where}: {exc}") from None
    except OSError as exc:
        raise InputError(f"{where}: cannot read ({exc.strerror or exc})") from None
    if gen.sha256 and hashlib.sha256(whole).hexdigest() != gen.sha256:
        raise InputError(f"{where}: sha256 differs from the manifest; the file was changed")
    return array.astype(param.dtype.numpy, copy=False)


@dataclass
class CaseInputs:
    """The materialised inputs and resolved shapes of one case: each input buffer is either an
    array written to a file (``arrays``, ``files``) or drawn on the device (``draws``)."""

    case: Case
    arrays: dict[str, np.ndarray]
    shapes: dict[str, tuple[int, ...]]
    files: dict[str, Path]
    draws: dict[str, InputDraw] = field(default_factory=dict)

    def elements(self, buffer: str) -> int:
        """How many elements ``buffer`` has in this case."""
        return int(np.prod(self.shapes[buffer], dtype=np.int64))


def device_draw(
    gen: Generator, param: BufferParam, seed: int, case: str, *, redraw: bool = False,
    shape: tuple[int, ...] | None = None, draw_features: Collection[str] = (),
) -> InputDraw | None:
    """How the harness draws the buffer ``gen`` makes, or None where it must come from the host:
    ``arange`` and ``constant`` are exact values, and a data file gives its bytes (in a hidden
    set, ``redraw``, one that records ``drawn_from`` is drawn from that generator instead, as
    :func:`generate` does); a generator that needs a draw feature the harness lacks (``draw_features``: its
    draw features; a ``structure`` needs ``structured_draw`` and the buffer's ``shape``, a ``choice``
    needs ``choice_draw``: :func:`~.fresh_inputs.fresh_spec`). The key is derived from (seed, case,
    buffer) like the host streams."""
    if isinstance(gen, DataFile) and not redraw:
        return None
    spec, _ = fresh_spec(gen, param.dtype, shape, draw_features=draw_features)
    if spec is None:
        return None
    digest = hashlib.blake2b(f"{seed}\0{case}\0{param.name}".encode(), digest_size=8, person=b"ko-input").digest()
    return InputDraw(seed=int.from_bytes(digest, "little"), **spec.model_dump(exclude_none=True))


def materialize(
    workload: Workload, seed: int, directory: Path, *, cases: set[str] | None = None, redraw: bool = False,
    on_device: set[str] | frozenset[str] = frozenset(), draw_features: Collection[str] = (),
) -> dict[str, CaseInputs]:
    """Generate every case's inputs (or only those of ``cases``), write them as ``.bin``
    files and a manifest. In the cases of ``on_device`` the buffers :func:`device_draw` can
    draw are left to the harness (``CaseInputs.draws``; the manifest keeps their generator);
    structured ones and choices only where ``draw_features`` (the harness's) has theirs.

    ``redraw`` is for hidden data sets (the timed check's second seed): data files that record
    the generator they were drawn from are drawn again with ``seed`` (see :func:`generate`);
    the validation set leaves it off, so it sees the very bytes a run recorded. The manifest
    records each buffer's generator as ``drawn_from`` (a file's own, when it has one), so the
    files it names can be redrawn in turn.

    Files go to ``directory/<case>/<buffer>.bin``; the manifest ``directory/input_cases.json``
    is loadable as an input-cases file (see :func:`kernelopt_mcp.workload_parts.load_parts`).
    """
    spec = workload.spec
    out: dict[str, CaseInputs] = {}
    manifest_cases = []
    for case in spec.cases:
        if cases is not None and case.name not in cases:
            continue
        arrays: dict[str, np.ndarray] = {}
        shapes: dict[str, tuple[int, ...]] = {}
        files: dict[str, Path] = {}
        draws: dict[str, InputDraw] = {}
        manifest_inputs: dict[str, dict[str, Any]] = {}
        case_dir = directory / case.name
        case_dir.mkdir(parents=True, exist_ok=True)
        for param in spec.signature.buffers:
            shape = case_shape(param, case.scalars)
            shapes[param.name] = shape
            if not param.is_input:
                continue
            gen = case.inputs.get(param.name) or spec.inputs[param.name]
            drawn_here = device_draw(
                gen, param, seed, case.name, redraw=redraw, shape=shape, draw_features=draw_features,
            ) if case.name in on_device else None
            if drawn_here is not None:
                _check_size(param, shape, case.name)
                draws[param.name] = drawn_here
                manifest_inputs[param.name] = (_drawn_from(gen) or gen).model_dump(mode="json")
                continue
            array = generate(gen, param, shape, seed, case.name, workload.root, redraw=redraw)
            arrays[param.name] = array
            path = case_dir / f"{param.name}.bin"
            data = np.ascontiguousarray(array).astype(param.dtype.numpy.newbyteorder("<"), copy=False).tobytes()
            write_atomic(path, data, durable=False)  # regenerable scratch: no fsync
            files[param.name] = path
            manifest_inputs[param.name] = {
                "generator": "file",
                "path": f"{case.name}/{param.name}.bin",
                "sha256": hashlib.sha256(data).hexdigest(),
            }
            drawn = _drawn_from(gen)
            if drawn is not None and not redraw:  # a redrawn set's files came from another seed's draw
                manifest_inputs[param.name]["drawn_from"] = drawn.model_dump(mode="json")
            if isinstance(gen, DataFile) and gen.hidden_path and not redraw:
                manifest_inputs[param.name]["hidden_path"] = str(_data_path(gen.hidden_path, workload.root))
        out[case.name] = CaseInputs(case, arrays, shapes, files, draws)
        manifest_cases.append({**case.model_dump(mode="json"), "inputs": manifest_inputs})
    manifest = {
        "seed": seed,
        "workload": spec.name,
        "cases": manifest_cases,
        "tolerance": {k: v.model_dump() for k, v in spec.tolerance.items()},
    }
    write_atomic(directory / "input_cases.json", json.dumps(manifest, indent=2).encode())
    return out


def _drawn_from(gen: Generator) -> Generator | None:
    return gen.drawn_from if isinstance(gen, DataFile) else gen


def _data_path(path: str, base: Path | None) -> Path:
    p = Path(path)
    return base / p if not p.is_absolute() and base is not None else p


def seed_independent_inputs(workload: Workload, cases: set[str] | None = None) -> dict[str, str]:
    """The inputs a hidden seed cannot change, as ``{"<case>.<buffer>": kind}``: ``"data-file"``
    (a file with neither ``drawn_from`` nor ``hidden_path``: a user's data), ``"arange"`` or
    ``"constant"``. A hidden-seed check cannot catch a kernel that recognises these."""
    spec = workload.spec
    fixed: dict[str, str] = {}
    for case in spec.cases:
        if cases is not None and case.name not in cases:
            continue
        for param in spec.signature.inputs:
            gen = case.inputs.get(param.name) or spec.inputs[param.name]
            if isinstance(gen, DataFile) and gen.hidden_path:
                continue
            drawn = _drawn_from(gen)
            if drawn is None:
                fixed[f"{case.name}.{param.name}"] = "data-file"
            elif drawn.generator in ("arange", "constant"):
                fixed[f"{case.name}.{param.name}"] = drawn.generator
    return fixed


def hidden_seed_checks(workload: Workload, cases: set[str]) -> list[str]:
    """What a hidden-seed data set over ``cases`` really checks, in the words of a result's
    ``checks`` list: "timed outputs on hidden-seed inputs" only when some input differs from
    the validation inputs, and a plain line for the inputs it cannot change (grouped by kind)."""
    fixed = seed_independent_inputs(workload, cases)
    total = len(cases) * len(workload.spec.signature.inputs)
    out = ["timed outputs on hidden-seed inputs"] if len(fixed) < total else []
    by_kind: dict[str, list[str]] = {}
    for where, kind in fixed.items():
        by_kind.setdefault(kind, []).append(where)
    for kind, places in by_kind.items():
        names = sorted({w.split(".", 1)[1] for w in places})
        scope = "" if len(places) == len(cases) * len(names) else f" in {len(places)} case inputs"
        out.append(
            f"hidden-seed check: not possible for {kind} inputs {', '.join(names)}{scope} "
            "(the same values on every seed)"
        )
    return out


#: an output element that depends on at least this many elements of one input is a reduction
REDUCTION_MIN_INPUTS = 1024
#: a half-input estimate within this many tolerances of the truth passes too often
ESTIMATE_MARGIN = 3.0


def _moments(gen: Generator) -> tuple[float, float] | None:
    """(mean, std) of a random generator's values; None for files without one, arange and constant."""
    match _drawn_from(gen):
        case Uniform(low=low, high=high):
            return (low + high) / 2, abs(high - low) / math.sqrt(12)
        case Normal(mean=mean, std=std):
            return mean, std
        case RandInt(low=low, high=high) if high > low:
            return (low + high - 1) / 2, math.sqrt(((high - low) ** 2 - 1) / 12)
        case Choice(values=values):
            return input_choice.moments(values)
    return None


def estimate_gaps(workload: Workload, cases: set[str]) -> list[str]:
    """Where the inputs of ``cases`` let a reduction be estimated from half of its inputs within
    the tolerance: one line of advice to the workload's author per (case, output, input).

    An output compared with a relative tolerance cannot tell a sum from an estimate that reads a
    subset and scales it up when the inputs' spread is small against their mean: half of ``R``
    values of mean ``m`` and standard deviation ``s`` predict their sum to ``(s / |m|) / sqrt(R)``.
    reduce_sum's uniform [0, 1) inputs at 2^26 gave 7e-5 against its 1e-4; its normal inputs of
    mean 1, std 1000 give 0.12. Each output is paired with each input of ``R`` >= 1024 times its
    elements (a reduction); whether the output sums them is the workload's to know, so the line
    says "if".
    """
    spec = workload.spec
    out: list[str] = []
    for case in spec.cases:
        if case.name not in cases:
            continue
        counts = {p.name: math.prod(case_shape(p, case.scalars)) for p in spec.signature.buffers}
        for output in spec.signature.outputs:
            tol = spec.tolerance_for(output.name)
            relative = tol.rtol + tol.atol  # atol is relative to the output's RMS
            if relative == 0 or counts[output.name] == 0:
                continue
            for param in spec.signature.inputs:
                ratio = counts[param.name] / counts[output.name]
                moments = _moments(case.inputs.get(param.name) or spec.inputs[param.name])
                if ratio < REDUCTION_MIN_INPUTS or moments is None or moments[0] == 0:
                    continue
                error = moments[1] / abs(moments[0]) / math.sqrt(ratio)
                if error < ESTIMATE_MARGIN * relative:
                    out.append(
                        f"case {case.name}: {output.name} has {ratio:.3g} elements of {param.name} per "
                        f"element; if it sums them, a kernel summing half of them and doubling is within "
                        f"~{error:.2g} of the truth (tolerance {relative:.2g}): draw {param.name} with a std "
                        "far above its mean (workloads/README.md, \"Inputs that make every element count\")"
                    )
    return out
