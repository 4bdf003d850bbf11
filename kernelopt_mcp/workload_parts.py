"""The original tool's separate files as a workload: a signature JSON, an input-cases JSON, the
CUDA sources and a NumPy oracle named one by one (``kernelopt evaluate`` on seed-style inputs)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .errors import WorkloadError
from .files import read_json
from .workload import (
    DataFile,
    InputCasesFile,
    Signature,
    Workload,
    attach_sources,
    format_validation_error,
    parse_spec,
)

__all__ = ["load_parts"]


def load_parts(
    *,
    signature: str | Path,
    input_cases: str | Path,
    reference_cu: str | Path | None = None,
    initial_cu: str | Path | None = None,
    oracle: str | Path | None = None,
    reference_launch: dict[str, Any] | None = None,
    initial_launch: dict[str, Any] | None = None,
    name: str | None = None,
    description: str = "",
) -> Workload:
    """Build a workload from separate files, as the original tool takes them.

    Data files named in the input-cases JSON are resolved relative to that JSON, so a
    manifest from an earlier run (``results/run-001/input_cases.json``) works as is.
    """
    sig_path, cases_path = Path(signature), Path(input_cases)
    sig_data = read_json(sig_path)
    try:
        sig = Signature.model_validate(sig_data.get("signature", sig_data) if isinstance(sig_data, dict) else sig_data)
    except ValidationError as exc:
        raise WorkloadError(format_validation_error(exc, str(sig_path))) from None
    try:
        cases = InputCasesFile.model_validate(read_json(cases_path))
    except ValidationError as exc:
        raise WorkloadError(format_validation_error(exc, str(cases_path))) from None
    base = Path(_resolved(cases_path.parent, "input_cases"))
    cases = _absolute_files(cases, base)
    spec_data: dict[str, Any] = {
        "name": name or re.sub(r"\W", "_", sig.entry),
        "description": description,
        "signature": sig.model_dump(mode="json"),
        "inputs": {k: v.model_dump(mode="json") for k, v in cases.inputs.items()},
        "cases": [c.model_dump(mode="json") for c in cases.cases],
        "tolerance": {k: v.model_dump() for k, v in cases.tolerance.items()},
        "reference": {
            "python": _resolved(oracle, "oracle") if oracle else None,
            "cuda": _resolved(reference_cu, "reference_cu") if reference_cu else None,
            "launch": reference_launch,
        },
        "initial": (
            {"source": _resolved(initial_cu, "initial_cu"), "launch": initial_launch}
            if initial_cu and initial_launch else None
        ),
    }
    if initial_cu and not initial_launch:
        raise WorkloadError(f"{initial_cu}: the initial kernel needs a launch configuration")
    spec = parse_spec(spec_data, f"{sig_path} + {cases_path}")
    return attach_sources(spec, base, origin=f"{sig_path}, {cases_path}")


def _resolved(path: str | Path, what: str) -> str:
    try:
        return str(Path(path).resolve())
    except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, a NUL byte
        raise WorkloadError(f"{str(path)[:200]!r}: {what}: not a usable path ({exc})") from None


def _absolute_files(cases: InputCasesFile, base: Path) -> InputCasesFile:
    def fix(gen: Any) -> Any:
        if isinstance(gen, DataFile):
            update = {k: str(base / v) for k in ("path", "hidden_path")
                      if (v := getattr(gen, k)) and not Path(v).is_absolute()}
            return gen.model_copy(update=update) if update else gen
        return gen

    return cases.model_copy(
        update={
            "inputs": {k: fix(v) for k, v in cases.inputs.items()},
            "cases": [
                c.model_copy(update={"inputs": {k: fix(v) for k, v in c.inputs.items()}})
                for c in cases.cases
            ],
        }
    )
