"""Performance cases' inputs drawn on the device (issue 17; ``input_draw``), on a real GPU.

vector_add's performance inputs (a ~ U(-1, 1), b ~ N(0, 2); 32M and 134M elements) are drawn by
the harness's ko_fill instead of NumPy: the reference's outputs on them have the moments of
a + b, the same seed gives the same bytes in another session and process, another seed other
bytes, and the initial kernel passes every case against them.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from kernelopt_mcp import EvaluateOptions, HarnessProcess, Session, Settings, Status
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.evaluation.candidate import initial_candidate
from kernelopt_mcp.evaluation.device import DeviceInfo
from kernelopt_mcp.evaluation.evaluate import evaluate, prepare

pytestmark = pytest.mark.gpu

# the reference's outputs on the drawn inputs are read on the host here (device_expected off:
# test_device_expected_gpu.py covers them kept on the device)
OPTS = {"warmup": 2, "iterations": 10, "timeout_s": 120, "device_expected": False}


def _expected(harness_binary: Path, device: DeviceInfo, tmp_path: Path, seed: int, **options: object) -> tuple:
    """The reference's outputs on vector_add's n_2e25 (the larger performance case left out)."""
    wl = find_workload("vector_add", Settings())
    wl.spec = wl.spec.model_copy(update={"cases": [c for c in wl.spec.cases if c.name != "n_2e27"]})
    try:
        with HarnessProcess(harness_binary, device.ordinal) as proc, Session(
            wl, proc, device, workdir=tmp_path, seed=seed, options=EvaluateOptions(**OPTS, **options),  # type: ignore[arg-type]
        ) as s:
            prepare(s, time_reference=False)
            return s.record.device_cases, np.array(s.expected["n_2e25"]["c"]), dict(s.prepare_ms)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)  # GBs of outputs and expected values: the disk is shared


def test_performance_inputs_drawn_on_the_device_have_the_generators_moments_and_pass_the_initial_kernel(
    proc: HarnessProcess, device: DeviceInfo, tmp_path: Path,
) -> None:
    wl = find_workload("vector_add", Settings())
    with Session(wl, proc, device, workdir=tmp_path / "w", seed=11, options=EvaluateOptions(**OPTS)) as s:  # type: ignore[arg-type]
        result = evaluate(s, initial_candidate(wl))
        assert s.record.device_cases == {"n_2e25", "n_2e27"}
        assert not list((tmp_path / "w" / "inputs").glob("n_2e2*/*.bin")), "no host copy of a drawn input"
        for case in ("n_2e25", "n_2e27"):
            c = np.asarray(s.expected[case]["c"], dtype=np.float64)
            # a + b: mean 0, variance 1/3 + 4 (standard error of the mean ~4e-4 at 32M elements)
            assert abs(c.mean()) < 3e-3, (case, c.mean())
            assert abs(c.std() / math.sqrt(1 / 3 + 4) - 1) < 3e-3, (case, c.std())
        print(f"preparation with device inputs: {s.prepare_ms}")
    shutil.rmtree(tmp_path / "w", ignore_errors=True)  # GBs of outputs and expected values: the disk is shared
    assert result.status is Status.ok, result.message
    assert result.inputs_from.startswith("drawn on the device"), result.inputs_from


def test_the_same_seed_draws_the_same_inputs_in_another_process_and_another_seed_others(
    harness_binary: Path, device: DeviceInfo, tmp_path: Path,
) -> None:
    cases, first, timing = _expected(harness_binary, device, tmp_path / "a", seed=5)
    _, again, _ = _expected(harness_binary, device, tmp_path / "b", seed=5)
    _, other, _ = _expected(harness_binary, device, tmp_path / "c", seed=6)
    host_cases, host, host_timing = _expected(harness_binary, device, tmp_path / "d", seed=5, device_inputs=False)
    assert cases == {"n_2e25"} and host_cases == frozenset()
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)
    # NumPy's draw of the same seed: the same distribution, not the same bits
    assert not np.array_equal(first, host) and abs(first.std() / host.std() - 1) < 3e-3
    print(f"inputs step: device {timing['inputs']:.0f} ms, host {host_timing['inputs']:.0f} ms; "
          f"preparation total: device {timing['total']:.0f} ms, host {host_timing['total']:.0f} ms")
