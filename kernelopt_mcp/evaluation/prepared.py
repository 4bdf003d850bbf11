"""What a session's candidates are checked against, prepared once: :class:`Prepared`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .candidate import Candidate
from .dataset import DataSet
from .outcomes import EvaluationResult
from .protocol import LaunchRequest

if TYPE_CHECKING:
    from ..torch_reference import TorchCheckPlan
    from ..workload import Tolerance

__all__ = ["Prepared"]


@dataclass(frozen=True)
class Prepared:
    """What :func:`~.evaluate.prepare` made for a session, once; a session holds one and every
    candidate of it is checked against it. The record does not change; its data sets are the
    containers the harness's answers fill in (expected values it keeps on the device, remade in
    place when a new harness process has lost them).

    Attributes:
        data: the validation inputs and their expected values.
        timed: performance inputs from a second seed that is never reported, and their expected
            values (None: no check on hidden-seed inputs).
        device_cases: the cases whose inputs the harness draws on the device.
        native_expected: the performance cases whose expected values are stored in the output's
            dtype, as the CUDA reference wrote them.
        device_kept: ... and those of them whose expected values the harness keeps on the device
            (feature ``device_expected``).
        inputs_from: what a result says of where its inputs were made.
        expected_from: what a result says of where its expected outputs came from.
        support: the support module (None: no check or timing mode in use runs its kernels).
        reference: the CUDA reference (None: there is none).
        reference_result: its evaluation (timed unless prepared without timing).
        reference_medians: its median time per timed case, ms.
        check_module: the CUDA reference's module, which checks candidates' timed launches.
        check_launches: its launch per performance case for those checks.
        torch_checks: PyTorch as the reference: per performance case, the plan of its timed
            launches checked against PyTorch (:class:`~..torch_reference.TorchCheckPlan`).
        tolerances: per output, the tolerance that replaces the workload's for this session:
            PyTorch as the reference, widened where the module's own float error at the real sizes
            needs more than the one the import chose at its scaled-down sizes.
        prepare_ms: host wall ms of each preparation step, and the ``total``: where "once per
            session" goes.
    """

    data: DataSet
    timed: DataSet | None = None
    device_cases: frozenset[str] = frozenset()
    native_expected: frozenset[str] = frozenset()
    device_kept: frozenset[str] = frozenset()
    inputs_from: str = ""
    expected_from: str = ""
    support: Path | None = None
    reference: Candidate | None = None
    reference_result: EvaluationResult | None = None
    reference_medians: Mapping[str, float] = field(default_factory=dict)
    check_module: Path | None = None
    check_launches: Mapping[str, LaunchRequest] = field(default_factory=dict)
    torch_checks: Mapping[str, TorchCheckPlan] = field(default_factory=dict)
    tolerances: Mapping[str, Tolerance] = field(default_factory=dict)
    prepare_ms: Mapping[str, float] = field(default_factory=dict)
