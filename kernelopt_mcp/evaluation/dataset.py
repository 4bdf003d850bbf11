"""A data set (the inputs drawn from one seed) and its expected outputs: on the host (NumPy
arrays), in files the harness compares against on the device, or kept on the device by the
harness itself (feature ``device_expected``: the CUDA reference's outputs, never on the host).
Each expected output comes with the tolerances built on its RMS (:mod:`.compare`).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..files import write_atomic
from ..workload import Workload
from .compare import Thresholds, thresholds, thresholds_from
from .inputs import CaseInputs
from .protocol import KeptEntry

__all__ = ["DataSet", "ExpectedRef"]


@dataclass
class ExpectedRef:
    """An expected output for the harness's device-side comparison: a file of float64 values, or
    (a CUDA reference's outputs, with the harness's ``expected_dtype``) of the output's own dtype;
    or (``kept``, feature ``device_expected``) the reference's output the harness keeps on the
    device under that key, never on the host."""

    path: Path | None
    thresholds: Thresholds
    dtype: str = "float64"
    kept: str | None = None

    @property
    def location(self) -> str:
        """What a request's ``expected`` / ``timed_expected`` says."""
        return f"kept:{self.kept}" if self.kept else str(self.path)

    @property
    def scale(self) -> float:
        return self.thresholds.scale

    @property
    def norm(self) -> float:
        return self.thresholds.norm


@dataclass
class DataSet:
    """The inputs drawn from one seed and the outputs expected for them."""

    name: str
    seed: int
    inputs: dict[str, CaseInputs]
    expected: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    refs: dict[str, dict[str, ExpectedRef]] = field(default_factory=dict)
    nonce: str = field(default_factory=lambda: secrets.token_hex(8))  # names its values kept on the device

    def kept_key(self, workload: Workload, case: str, buffer: str) -> str:
        """The device key of the expected values of ``buffer`` in ``case`` of this data set: unique
        to this data set (its random ``nonce``, never its seed, which requests must not carry), so
        sessions sharing one harness never meet each other's."""
        digest = hashlib.sha256(f"{workload.name}\0{case}\0{buffer}".encode()).hexdigest()[:20]
        return f"{self.name}.{self.nonce}.{digest}"

    def keep_on_device(self, workload: Workload, case: str, kept: list[KeptEntry]) -> None:
        """Record the outputs the harness kept on the device for ``case`` as its expected values,
        with the tolerances built on the figures it reported."""
        dtypes = {p.name: p.dtype for p in workload.signature.outputs}
        for entry in kept:
            th = thresholds_from(float(entry.sum_sq), entry.finite, workload.spec.tolerance_for(entry.buffer))
            self.refs.setdefault(case, {})[entry.buffer] = ExpectedRef(
                None, th, dtypes[entry.buffer].value, kept=entry.key,
            )

    def kept_cases(self) -> set[str]:
        """The cases whose expected values live on the device only."""
        return {case for case, refs in self.refs.items() if any(r.kept for r in refs.values())}

    def store_expected(self, workload: Workload, directory: Path, *, native: frozenset[str] = frozenset()) -> None:
        """Write every expected output not yet written for the device comparison: as float64, or
        in the cases of ``native`` (expected outputs the CUDA reference wrote in the output's
        dtype) as they are, half or less the bytes and no conversion."""
        dtypes = {p.name: p.dtype for p in workload.signature.outputs}
        for case_name, outputs in self.expected.items():
            for name, array in outputs.items():
                if name in self.refs.get(case_name, {}):
                    continue
                th = thresholds(array, workload.spec.tolerance_for(name))
                dtype = dtypes[name]
                if case_name in native and array.dtype == dtype.numpy and dtype.value != "float64":
                    data = np.ascontiguousarray(array).astype(dtype.numpy.newbyteorder("<"), copy=False)
                    path = directory / self.name / case_name / f"{name}.{dtype.value}"
                    write_atomic(path, data.reshape(-1).view(np.uint8).data, durable=False)
                    self.refs.setdefault(case_name, {})[name] = ExpectedRef(path.resolve(), th, dtype.value)
                    continue
                path = directory / self.name / case_name / f"{name}.f64"
                wide = np.ascontiguousarray(array, dtype="<f8").reshape(-1)
                write_atomic(path, wide.view(np.uint8).data, durable=False)
                self.refs.setdefault(case_name, {})[name] = ExpectedRef(path.resolve(), th)
