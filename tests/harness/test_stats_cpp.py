"""The harness's C++ statistics (native_harness/src/stats.hpp) and kernelopt_mcp.evaluation.stats agree on
every vector in tests/fixtures/timings/: quartiles, median, stdev, the median's rse, and the
sample count where adaptive timing stops.

A small driver program is compiled against the header with the system C++ compiler (the one
that builds the harness)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from kernelopt_mcp.evaluation.stats import adaptive_stop_index, rse_median, summarize

REPO = Path(__file__).resolve().parents[2]
HEADER = REPO / "native_harness" / "src" / "stats.hpp"
VECTORS = sorted((Path(__file__).parents[1] / "fixtures" / "timings").glob("*.json"))
TARGETS = (0.01, 0.003, 0.0005)

DRIVER = r"""
#include <cstdio>
#include <iostream>
#include <limits>
#include <vector>
#include "stats.hpp"
using namespace kernelopt;

// stdin: first, then the samples. stdout: q1 median q3 stdev rse, then per target: stop index, converged
int main() {
  std::size_t first;
  std::cin >> first;
  std::vector<double> t;
  for (double x; std::cin >> x;) t.push_back(x);
  const Summary s = summarize(t);
  std::printf("%.17g %.17g %.17g %.17g %.17g\n", s.q1, s.median, s.q3, s.stdev, median_rse(s, t.size()));
  for (double target : {0.01, 0.003, 0.0005}) {
    AdaptiveLimits limits;
    limits.target_rse = target;
    limits.max_ms = std::numeric_limits<double>::infinity();
    limits.max_iterations = t.size();
    std::size_t n = std::min(first, t.size());
    AdaptiveStep step;
    for (;;) {
      std::vector<double> head(t.begin(), t.begin() + n);
      step = adaptive_step(median_rse(summarize(head), n), n, 0.0, limits);
      if (step != AdaptiveStep::more) break;
      n += adaptive_round(first, n, limits);
    }
    std::printf("%zu %d\n", n, step == AdaptiveStep::converged ? 1 : 0);
  }
}
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no C++ compiler on PATH (the harness build needs one too)")
    if "adaptive_step" not in HEADER.read_text():
        pytest.skip("native_harness/src/stats.hpp has no adaptive_step yet (protocol-v2 timing not merged)")
    work = tmp_path_factory.mktemp("stats_cpp")
    (work / "driver.cpp").write_text(DRIVER)
    exe = work / "driver"
    subprocess.run([compiler, "-std=c++17", "-O2", f"-I{HEADER.parent}", str(work / "driver.cpp"), "-o", str(exe)],
                   check=True, capture_output=True)
    return exe


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_cpp_and_python_agree(driver: Path, path: Path) -> None:
    t = json.loads(path.read_text())["times_ms"]
    first = min(10, len(t))
    text = "\n".join([str(first), *(repr(float(x)) for x in t)])
    out = subprocess.run([str(driver)], input=text, capture_output=True, text=True, check=True).stdout.split("\n")
    q1, med, q3, stdev, rse = (float(v) for v in out[0].split())
    s = summarize(t)
    assert (q1, med, q3) == pytest.approx((s.q1_ms, s.median_ms, s.q3_ms), rel=1e-12)
    assert stdev == pytest.approx(s.stdev_ms, rel=1e-9, abs=1e-15)
    py_rse = rse_median(t)
    assert (math.isinf(rse) and math.isinf(py_rse)) or rse == pytest.approx(py_rse, rel=1e-9)
    for target, line in zip(TARGETS, out[1:4], strict=True):
        n, converged = (int(v) for v in line.split())
        assert (n, bool(converged)) == adaptive_stop_index(t, target, first=first), f"target {target}"
