#!/usr/bin/env bash
# The lint step of CI (.ci/run calls this script; .pre-commit-config.yaml runs the same tools at
# the same versions). Settings live in pyproject.toml ([tool.ruff], [tool.mypy]), .clang-format
# and .clang-tidy; the tools come with `pip install ".[test]"`.
#
#   scripts/lint.sh          ruff check, mypy, clang-format --dry-run (what CI runs)
#   scripts/lint.sh --fix    the same, but let ruff fix what it can and clang-format rewrite
#   scripts/lint.sh --tidy   the same, then clang-tidy on native_harness/src (minutes; needs
#                            `pip install clang-tidy` and a CMake configure for the compile database)
set -euo pipefail
cd "$(dirname "$0")/.."

fix=0
tidy=0
for arg in "$@"; do
  case "$arg" in
    --fix) fix=1 ;;
    --tidy) tidy=1 ;;
    *) echo "usage: scripts/lint.sh [--fix] [--tidy]" >&2; exit 2 ;;
  esac
done

for tool in ruff mypy clang-format; do
  command -v "$tool" >/dev/null || { echo "$tool not found: pip install \".[test]\"" >&2; exit 2; }
done

# The tool's own C++ and CUDA. Not workloads/ or tests/adversarial/: those kernels are inputs.
cxx_files() {
  ls native_harness/src/*.cpp native_harness/src/*.hpp native_harness/tests/*.cpp \
     native_harness/tests/*.hpp kernelopt_mcp/support/*.cu
}

status=0
echo "== ruff check ($(ruff --version))"
if [ "$fix" = 1 ]; then
  ruff check --fix --output-format concise . || status=1
else
  ruff check --output-format concise . || status=1
fi

echo "== mypy ($(mypy --version)): strict on kernelopt_mcp/evaluation and kernelopt_mcp/app.py"
mypy || status=1
# The GPU tests run only on a GPU machine, so CI never executes them: type-check them against the
# library's API here (optional types left loose), or a renamed function breaks them unnoticed until
# device time is spent on them (issue 18's refactor left 13 calls to a removed Session.evaluate).
echo "== mypy on tests/gpu (the library API they call)"
mypy --no-strict-optional --follow-imports=silent tests/gpu || status=1

echo "== clang-format ($(clang-format --version | grep -o 'version [0-9.]*'))"
if [ "$fix" = 1 ]; then
  cxx_files | xargs clang-format -i || status=1
else
  cxx_files | xargs clang-format --dry-run -Werror || status=1
fi

if [ "$tidy" = 1 ]; then
  command -v clang-tidy >/dev/null || { echo "clang-tidy not found: pip install clang-tidy" >&2; exit 2; }
  echo "== clang-tidy ($(clang-tidy --version | grep -o 'version [0-9.]*'))"
  cmake -S native_harness -B build/tidy -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
  clang-tidy -p build/tidy --quiet native_harness/src/*.cpp || status=1
fi

if [ "$status" = 0 ]; then echo "lint: clean"; else echo "lint: FAILED (see above)"; fi
exit "$status"
