#!/usr/bin/env bash
# Run on the GPU machine (the `device` tool): install from .whl/ and the tree, run the given
# pytest selection with --run-gpu, then evaluate every bundled workload with the CLI.
# Everything lands in $OUT/logs.tar.gz (the device returns at most 8 files).
# Usage: [BENCH=...] [VENDOR=...] bash scripts/device_gpu_tests.sh [pytest args...]   (no args: install and check only)
set -o pipefail
OUT=${OUT:-/tmp/out}
LOGS=$(mktemp -d)
# pytest's temporary directories live here and go at exit: on a machine kept warm between calls the
# default /tmp/pytest-of-$USER kept three runs' inputs (a full run's are tens of GB) and filled the disk
BASETEMP=$(mktemp -d /tmp/ko-pytest.XXXXXX)
finish() { tar -czf "$OUT/logs.tar.gz" -C "$LOGS" . ; rm -rf "$BASETEMP"; }
trap finish EXIT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
python3 -m pip install -q --no-build-isolation --no-deps --upgrade --target /tmp/site . > "$LOGS/install.log" 2>&1 || { tail -30 "$LOGS/install.log"; exit 1; }
export KERNELOPT_HARNESS=/tmp/site/bin/kernelopt-harness
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$LOGS/nvidia-smi.txt"
kernelopt gpu --json > "$LOGS/gpu.json" || { echo "kernelopt gpu failed"; exit 1; }
run_bench() {
  # shellcheck disable=SC2086
  timeout "${STEP_TIMEOUT:-240}" python3 bench/run.py --json $BENCH > "$OUT/bench.json" 2> "$LOGS/bench.err"
  echo "bench $BENCH: rc=$? $(tail -1 "$LOGS/bench.err")"
}
# BENCH_FIRST=1: the bench before the tests (its figures come back even if the tests run out of time)
if [ -n "$BENCH" ] && [ -n "$BENCH_FIRST" ]; then run_bench; fi
if [ "$#" -gt 0 ]; then
  # straight into $OUT: it comes back even if the device's time limit kills the run
  # the adversarial suite's verdict table (docs/adversarial.md) comes back too
  KERNELOPT_ADVERSARIAL_REPORT="$OUT/adversarial.md" KERNELOPT_GPU_REPORT="$OUT/report.jsonl" KERNELOPT_GPU_FAILURES="$OUT/failures.txt" KERNELOPT_GPU_PROGRESS="$OUT/progress.txt" \
    python3 -m pytest --run-gpu -v -p no:cacheprovider --basetemp "$BASETEMP" --durations=15 -rA "$@" 2>&1 | tee "$OUT/pytest_gpu.log"
fi
# BENCH="--only checks --only agreement": bench/run.py with those arguments (JSON into $OUT/bench.json);
# VENDOR="attention_fwd softmax" (VENDOR_BUDGET, default 8): bench/vendor.py per entry into $OUT/vendor_<entry>.json;
# VENDOR_ARGS are added to each (e.g. "--config gemm_bf16_wgmma:BM=128,BN=256,STAGES=4"); VENDOR_PROFILE=1 profiles
# each entry's row furthest under its target (reports and summaries in logs.tar.gz under profiles/).
# Each is capped by STEP_TIMEOUT seconds (default 240) so one slow step cannot eat the call.
if [ -n "$BENCH" ] && [ -z "$BENCH_FIRST" ]; then run_bench; fi
for entry in $VENDOR; do
  # shellcheck disable=SC2086
  timeout "${STEP_TIMEOUT:-240}" python3 bench/vendor.py --json --only "$entry" --budget "${VENDOR_BUDGET:-8}" \
    ${VENDOR_PROFILE:+--profile "$LOGS/profiles"} $VENDOR_ARGS > "$OUT/vendor_$entry.json" 2> "$LOGS/vendor_$entry.err"
  echo "vendor $entry: rc=$? $(tail -1 "$LOGS/vendor_$entry.err")"
done
if [ -n "$EVALUATE_ALL" ]; then
  for w in vector_add sgemm reduce_sum softmax transpose layernorm; do
    /usr/bin/time -f "$w: %e s wall" kernelopt evaluate "$w" --json > "$LOGS/eval_$w.json" 2> "$LOGS/eval_$w.err"
    echo "$w rc=$? $(tail -1 "$LOGS/eval_$w.err")"
  done
fi
if [ -n "$EVALUATE_SGEMM" ]; then
  kernelopt evaluate sgemm > "$LOGS/evaluate_sgemm.txt" 2>&1
  tail -22 "$LOGS/evaluate_sgemm.txt"
fi
