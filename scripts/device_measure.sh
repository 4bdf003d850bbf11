#!/usr/bin/env bash
# Run on the GPU machine (the `device` tool) after scripts/device_gpu_tests.sh has installed
# kernelopt into /tmp/site: measure what docs/measurements.md's performance and autotuning tables show
# (cuBLAS baseline, calibration, short tuning runs, bench/run.py). Output: $OUT/measure.log,
# $OUT/bench.json, $OUT/tune.tar.gz.
OUT=${OUT:-/tmp/out}
export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
export KERNELOPT_HARNESS=/tmp/site/bin/kernelopt-harness KERNELOPT_CACHE=/tmp/ko-cache
LOG="$OUT/measure.log"
step() { echo "== $*" | tee -a "$LOG"; }
step "cuBLAS SGEMM 4096^3 (FP32, no TF32)"
timeout 60 python3 - >> "$LOG" 2>&1 <<'PY'
from kernelopt_mcp.baselines import find_cublas, run_cublas_sgemm
from kernelopt_mcp.evaluation.harness import HarnessProcess
from kernelopt_mcp.evaluation.support_module import support_module
import os
with HarnessProcess(os.environ["KERNELOPT_HARNESS"]) as proc:
    for m, n, k in [(4096, 4096, 4096), (2048, 8192, 1024), (3001, 2999, 1007)]:
        r = run_cublas_sgemm(proc, m, n, k, {"warmup": 10, "iterations": 100}, support_module=support_module("sm_90"))
        print(f"cublas {m}x{n}x{k}: {r.model_dump_json()}")
PY
step "calibrate"; timeout 60 kernelopt gpu --calibrate >> "$LOG" 2>&1
mkdir -p /tmp/tune
for spec in "sgemm 70" "softmax 40" "reduce_sum 30" "transpose 25"; do
  set -- $spec
  step "tune $1 (random, ${2} s)"
  timeout $(( $2 + 60 )) kernelopt tune "$1" --strategy random --budget-s "$2" --budget-evals 40 --warmup 5 --iterations 30 \
      -o "/tmp/tune/$1" --top 8 >> "$LOG" 2>&1
  echo "rc=$?" >> "$LOG"
done
tar -czf "$OUT/tune.tar.gz" -C /tmp tune 2>/dev/null
step "bench/run.py"
timeout 200 python3 bench/run.py --json > "$OUT/bench.json" 2>> "$LOG"; echo "bench rc=$?" >> "$LOG"
step "sanitizer gpu tests"
timeout 60 python3 -m pytest --run-gpu -q -x -p no:cacheprovider tests/gpu/test_sanitizer_gpu.py >> "$LOG" 2>&1
tail -5 "$LOG"
