#!/usr/bin/env bash
# Record the Nsight Compute exports that tests/analysis/test_profiler.py replays (run on the GPU machine).
#
# Profiles sgemm's naive starting kernel and its tiled CUDA reference on one performance case
# through kernelopt's own profiler (kernelopt_mcp.profiler.profile_case: the same ncu command
# line and export as `kernelopt profile`), then writes the small files the CPU tests read into
# $OUT/ncu/ (never the .ncu-rep):
#   sgemm_initial.raw.csv, sgemm_reference.raw.csv      ncu --import ... --csv --page raw --print-units base
#   sgemm_initial.summary.json, sgemm_reference.summary.json   the ProfileSummary built from them
#   meta.json                                           GPU, driver, ncu version, commands, CLI output
# Commit them under tests/fixtures/ncu/.
#
# Needs: the package installed (scripts/device_gpu_tests.sh installs it into /tmp/site, which is
# picked up here), kernelopt-harness, and ncu on PATH or at /opt/nvidia/nsight-compute/*/ncu.
# Usage: bash scripts/record_ncu_fixtures.sh [CASE]      (default square_4096)
set -euo pipefail
OUT=${OUT:-/tmp/out}
CASE=${1:-square_4096}
if ! command -v kernelopt-harness >/dev/null && [ -x /tmp/site/bin/kernelopt-harness ]; then
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
fi
export KERNELOPT_HARNESS=${KERNELOPT_HARNESS:-$(command -v kernelopt-harness)}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT/ncu"
WORK=$(mktemp -d)
python3 - "$OUT/ncu" "$CASE" "$WORK" <<'PY'
import json, platform, shutil, subprocess, sys, time
from pathlib import Path

from kernelopt_mcp import Candidate, EvaluateOptions, Evaluator, HarnessProcess, Settings, find_harness
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.evaluation.evaluate import initial_candidate
from kernelopt_mcp.evaluation.device import device_info
from kernelopt_mcp.profiler import ProfileOptions, find_ncu, ncu_version, profile_case

out, case, work = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
ncu = find_ncu()
harness = find_harness()
info = device_info(harness, 0)
wl = find_workload("sgemm", Settings())
ref = wl.spec.reference
candidates = {
    "initial": initial_candidate(wl),
    "reference": Candidate(wl.reference_cu, ref.launch, ref.compile_options, "reference"),
}
meta = {
    "recorded": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "gpu": info.name, "arch": info.arch,
    "driver": info.driver_version_str, "ncu": str(ncu), "ncu_version": ncu_version(ncu),
    "python": platform.python_version(), "workload": "sgemm", "case": case, "profiles": {},
}
with HarnessProcess(harness, 0) as proc, Evaluator(wl, proc, info, options=EvaluateOptions(timeout_s=120)) as ev:
    for name, cand in candidates.items():
        t0 = time.monotonic()
        summary = profile_case(ev, cand, case, work / name, ProfileOptions(), harness=harness, progress=print)
        shutil.copy(work / name / "raw.csv", out / f"sgemm_{name}.raw.csv")
        (out / f"sgemm_{name}.summary.json").write_text(summary.model_dump_json(indent=2))
        meta["profiles"][name] = {
            "seconds": round(time.monotonic() - t0, 1),
            "command": json.loads((work / name / "ncu_command.json").read_text()),
            "ncu_output_tail": (work / name / "ncu_output.txt").read_text(errors="replace")[-3000:],
        }
        print(summary.text(), flush=True)
cli = subprocess.run(["kernelopt", "profile", "sgemm", "--case", case, "-o", str(work / "cli")], capture_output=True, text=True)
meta["cli"] = {"rc": cli.returncode, "stdout": cli.stdout[-6000:], "stderr": cli.stderr[-3000:],
               "report_saved": (work / "cli" / "profile.ncu-rep").is_file()}
print(cli.stdout, cli.stderr, sep="\n")
(out / "meta.json").write_text(json.dumps(meta, indent=2))
PY
ls -la "$OUT/ncu"
