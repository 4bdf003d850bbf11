"""The Evaluator's requests against a harness that offers protocol-2 features (the fake GPU)."""

from __future__ import annotations

import json

import pytest
from fakegpu import ADD_LAUNCH, kernel, write_harness, write_tiny_workload

from kernelopt_mcp import Candidate, Evaluator, HarnessProcess, LaunchSpec, Settings
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.evaluate import EvaluateOptions
from kernelopt_mcp.gpu import device_info


@pytest.mark.parametrize("blocking", [True, False])
def test_blocking_timing_sends_the_support_module_even_with_every_check_off(tmp_path, monkeypatch, blocking) -> None:
    """Blocking timing launches the support module's ko_spin: a harness refuses it without the
    module, so the Evaluator must load it even when no comparison or determinism check needs it."""
    monkeypatch.setenv("KO_FAKE_FEATURES", "blocking")
    harness = write_harness(tmp_path, "fake")
    wl = find_workload(write_tiny_workload(tmp_path / "extra") / "tiny_add", Settings())
    opts = EvaluateOptions(warmup=1, iterations=3, blocking=blocking, device_compare=False,
                           check_determinism=False, check_timed_outputs=False)
    workdir = tmp_path / "w"
    with HarnessProcess(harness, 0) as proc, Evaluator(wl, proc, device_info(harness, 0), workdir=workdir,
                                                       options=opts) as ev:
        result = ev.evaluate(Candidate(kernel(), LaunchSpec.model_validate(ADD_LAUNCH), [], "add"))
    assert result.ok, result.message
    requests = [json.loads(p.read_text()) for p in sorted((workdir / "requests").rglob("*.json"))]
    timed = [r for r in requests if r["cases"][0].get("timing")]
    assert timed and all(r["cases"][0]["timing"]["blocking"] is blocking for r in timed)
    # once loaded, every request names the module (a request without it would unload it)
    assert all(("support_module" in r) is blocking for r in requests)


def test_a_timeout_says_how_much_the_kernel_printed(tmp_path) -> None:
    """A kernel that printf's from every thread and runs past the deadline: the timeout names the
    printing as a likely cause, with its size and last line (the log itself is capped)."""
    harness = write_harness(tmp_path, "fake")
    wl = find_workload(write_tiny_workload(tmp_path / "extra") / "tiny_add", Settings())
    source = kernel("PRINT") + '__device__ char ko_fake_also[] = "KO_FAKE_HANG";\n'
    opts = EvaluateOptions(warmup=1, iterations=3, timeout_s=3)
    with HarnessProcess(harness, 0) as proc, Evaluator(wl, proc, device_info(harness, 0), workdir=tmp_path / "w",
                                                       options=opts) as ev:
        result = ev.evaluate(Candidate(source, LaunchSpec.model_validate(ADD_LAUNCH), [], "printer"), benchmark=False)
        quiet = ev.evaluate(Candidate(kernel("HANG"), LaunchSpec.model_validate(ADD_LAUNCH), [], "hang"), benchmark=False)
    assert result.status.value == "timeout"
    assert "it printed 379.8 KiB before the deadline" in result.message, result.message  # 20000 lines, 388890 bytes
    assert "last line: 'thread 19999: hello'" in result.message
    assert quiet.status.value == "timeout" and "printed" not in quiet.message
