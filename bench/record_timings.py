"""Record per-launch timing vectors on a GPU as fixtures for tests/evaluation/test_stats.py.

    python bench/record_timings.py OUT_DIR [--iterations 400]

Writes one ``<name>.json`` per kernel, ``{"kernel", "times_ms", "flush_l2", "device",
"warmup", "recorded_at"}``, straight from the harness's answer (no statistics applied): copy
them into tests/fixtures/timings/ (the tests load every file there).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kernelopt_mcp import (
    Candidate,
    HarnessProcess,
    Settings,
    app,
)
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.evaluation.device import device_info
from kernelopt_mcp.evaluation.evaluate import case_request
from kernelopt_mcp.evaluation.harness import find_harness
from kernelopt_mcp.evaluation.protocol import HarnessAnswer

# (file name, workload, case, scalars override, flush_l2)
VECTORS = (
    ("h200_vector_add_2e20_flush", "vector_add", "n_2e25", {"n": 1 << 20}, True),
    ("h200_vector_add_2e20_noflush", "vector_add", "n_2e25", {"n": 1 << 20}, False),
    ("h200_softmax_8192_flush", "softmax", "square_8192", None, True),
    ("h200_sgemm_wide_flush", "sgemm", "wide_2048x8192x1024", None, True),
)


def record(settings: Settings, out: Path, vectors: tuple = VECTORS, *, iterations: int = 400,
           warmup: int = 10) -> list[Path]:
    """Time each vector's CUDA reference once and write its raw per-launch times to ``out``."""
    harness = find_harness(settings.harness)
    device = device_info(harness, settings.device)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp, HarnessProcess(harness, settings.device) as proc:
        for name, workload, case_name, scalars, flush in vectors:
            wl = find_workload(workload, settings)
            case = wl.spec.case(case_name)
            case = case.model_copy(update={"scalars": {**case.scalars, **(scalars or {})}})
            wl.spec = wl.spec.model_copy(update={"cases": [case]})
            if not wl.reference_cu or wl.spec.reference.launch is None:
                raise SystemExit(f"{name}: workload {workload} has no CUDA reference")
            ref = Candidate(wl.reference_cu, wl.spec.reference.launch,
                            list(wl.spec.reference.compile_options), "reference")
            options = app.evaluate_options(settings, warmup=warmup, iterations=iterations, flush_l2=flush)
            with app.open_session(settings, wl, proc, device, workdir=Path(tmp) / name, options=options) as ev:
                built = case_request(ev, ref, case.name, Path(tmp) / name / "out", timing=True)
                if built.request is None:
                    raise SystemExit(f"{name}: {built.problem}")
                reply = proc.request(built.request, 600)
            answer = reply.parsed(HarnessAnswer)
            timing = answer.cases[0].timing if answer is not None and answer.cases else None
            if timing is None or not timing.times_ms:
                raise SystemExit(f"{name}: no timing in the answer: {reply.answer} {reply.stderr[-500:]}")
            entry = {
                "kernel": f"{workload} reference, case {case.name} {case.scalars}", "times_ms": timing.times_ms,
                "flush_l2": flush if timing.flush_l2 is None else timing.flush_l2, "warmup": timing.warmup,
                "device": device.summary(),
                "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            path = out / f"{name}.json"
            path.write_text(json.dumps(entry) + "\n")
            written.append(path)
            print(f"{name}: {len(entry['times_ms'])} samples")
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--iterations", type=int, default=400)
    p.add_argument("--warmup", type=int, default=10)
    args = p.parse_args(argv)
    record(Settings.from_env(), args.out, iterations=args.iterations, warmup=args.warmup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
