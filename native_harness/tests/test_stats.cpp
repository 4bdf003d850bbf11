#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "stats.hpp"
#include "test_util.hpp"

using kernelopt::adaptive_round;
using kernelopt::adaptive_step;
using kernelopt::AdaptiveLimits;
using kernelopt::AdaptiveStep;
using kernelopt::graph_batch_for;
using kernelopt::median_rse;
using kernelopt::quantile_sorted;
using kernelopt::summarize;

namespace {
bool near(double a, double b) { return std::fabs(a - b) <= 1e-12 * (1 + std::fabs(b)); }
}  // namespace

TEST_CASE("odd count: middle element, sample stdev") {
  const auto s = summarize({3, 1, 2});
  CHECK(near(s.median, 2));
  CHECK(near(s.mean, 2));
  CHECK(near(s.min, 1));
  CHECK(near(s.max, 3));
  CHECK(near(s.stdev, 1));  // sqrt(((1)^2 + 0 + (1)^2) / (3 - 1))
}

TEST_CASE("even count: mean of the two middle elements") {
  const auto s = summarize({4, 1, 3, 2});
  CHECK(near(s.median, 2.5));
  CHECK(near(s.mean, 2.5));
  CHECK(near(s.stdev, std::sqrt(5.0 / 3.0)));
}

TEST_CASE("one sample: stdev 0") {
  const auto s = summarize({0.5});
  CHECK(near(s.median, 0.5) && near(s.min, 0.5) && near(s.max, 0.5));
  CHECK(s.stdev == 0);
}

TEST_CASE("empty sample: all zeros") {
  const auto s = summarize({});
  CHECK(s.median == 0 && s.mean == 0 && s.stdev == 0);
}

TEST_CASE("tiny spread around a large mean stays accurate") {
  const auto s = summarize({1e6 + 0.001, 1e6 + 0.002, 1e6 + 0.003});
  CHECK(std::fabs(s.stdev - 0.001) < 1e-9);
}

TEST_CASE("quartiles interpolate linearly like numpy.quantile's default") {
  // numpy.quantile([1, 2, 3, 4], [0.25, 0.75]) == [1.75, 3.25]
  auto s = summarize({4, 1, 3, 2});
  CHECK(near(s.q1, 1.75) && near(s.q3, 3.25));
  // numpy.quantile([0.5, 0.51, 0.52, 0.7, 0.9], [0.25, 0.75]) == [0.51, 0.7]
  s = summarize({0.9, 0.5, 0.7, 0.52, 0.51});
  CHECK(near(s.q1, 0.51) && near(s.q3, 0.7));
  // numpy.quantile(range(10), [0.25, 0.5, 0.75]) == [2.25, 4.5, 6.75]
  const std::vector<double> ten{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  CHECK(near(quantile_sorted(ten, 0.25), 2.25));
  CHECK(near(quantile_sorted(ten, 0.5), 4.5));
  CHECK(near(quantile_sorted(ten, 0.75), 6.75));
  CHECK(near(quantile_sorted(ten, 0), 0) && near(quantile_sorted(ten, 1), 9));
  CHECK(quantile_sorted({}, 0.5) == 0);
  s = summarize({0.25});
  CHECK(s.q1 == 0.25 && s.q3 == 0.25);
}

// Recorded-looking kernel times: a 1 ms kernel with ~0.3% jitter and one slow outlier.
std::vector<double> steady_kernel(std::size_t n) {
  std::vector<double> v;
  for (std::size_t i = 0; i < n; ++i) {
    v.push_back(1.0 + 0.003 * static_cast<double>((i * 37) % 11) / 10.0);
  }
  v[n / 2] = 1.4;  // a clock hiccup: the median and IQR ignore it
  return v;
}

TEST_CASE("rse of the median follows the protocol's formula") {
  const std::vector<double> v{0.9, 0.5, 0.7, 0.52, 0.51};
  const auto s = summarize(v);
  // 1.2533 * ((0.7 - 0.51) / 1.349) / sqrt(5) / 0.52
  const double expected = 1.2533 * ((0.7 - 0.51) / 1.349) / std::sqrt(5.0) / 0.52;
  CHECK(near(median_rse(s, v.size()), expected));
  // More samples of the same spread: smaller rse, by sqrt(n).
  const auto a = steady_kernel(100), b = steady_kernel(400);
  const double ra = median_rse(summarize(a), a.size()), rb = median_rse(summarize(b), b.size());
  CHECK_MSG(ra > 0 && rb > 0 && rb < ra, std::to_string(ra) + " " + std::to_string(rb));
  CHECK_MSG(ra < 0.001, std::to_string(ra));  // 0.3% jitter, 100 samples
  // Not estimable: too few samples, a zero median.
  CHECK(std::isinf(median_rse(summarize({0.5}), 1)));
  CHECK(std::isinf(median_rse(summarize({0, 0, 0}), 3)));
  // Identical samples: no spread at all.
  CHECK(median_rse(summarize({2, 2, 2, 2}), 4) == 0);
}

TEST_CASE("adaptive stopping: converged first, then sample and time limits") {
  AdaptiveLimits l;
  l.target_rse = 0.01;
  l.max_ms = 100;
  l.max_iterations = 1000;
  CHECK(adaptive_step(0.009, 100, 5, l) == AdaptiveStep::converged);
  CHECK(adaptive_step(0.01, 100, 5, l) == AdaptiveStep::converged);
  CHECK(adaptive_step(0.009, 1000, 500, l) == AdaptiveStep::converged);
  CHECK(adaptive_step(0.02, 1000, 5, l) == AdaptiveStep::sample_limit);
  CHECK(adaptive_step(0.02, 100, 100, l) == AdaptiveStep::time_limit);
  CHECK(adaptive_step(0.02, 100, 99.9, l) == AdaptiveStep::more);
  CHECK(adaptive_step(std::numeric_limits<double>::infinity(), 1, 0, l) == AdaptiveStep::more);
  // A noisy 20 us kernel (30% jitter): 100 samples are not enough for 0.5%, 2000 are.
  std::vector<double> noisy;
  for (std::size_t i = 0; i < 2000; ++i) {
    noisy.push_back(0.020 * (1.0 + 0.3 * static_cast<double>((i * 7919) % 101) / 100.0));
  }
  l.target_rse = 0.005;
  l.max_iterations = 10000;
  std::vector<double> first(noisy.begin(), noisy.begin() + 100);
  CHECK(adaptive_step(median_rse(summarize(first), 100), 100, 1, l) == AdaptiveStep::more);
  CHECK(adaptive_step(median_rse(summarize(noisy), 2000), 2000, 1, l) == AdaptiveStep::converged);
}

TEST_CASE("adaptive rounds: as large as the first, at least 16, never past the limit") {
  AdaptiveLimits l;
  l.max_iterations = 250;
  CHECK(adaptive_round(100, 100, l) == 100);
  CHECK(adaptive_round(100, 200, l) == 50);
  CHECK(adaptive_round(100, 250, l) == 0);
  CHECK(adaptive_round(3, 3, l) == 16);
}

TEST_CASE("graph batch: enough launches for 0.2 ms per graph, 1..1000") {
  CHECK(graph_batch_for(0.005) == 40);
  CHECK(graph_batch_for(0.003) == 67);  // ceil(66.67)
  CHECK(graph_batch_for(0.2) == 1);
  CHECK(graph_batch_for(5.0) == 1);
  CHECK(graph_batch_for(0.0001) == 1000);
  CHECK(graph_batch_for(0) == 1000);
  CHECK(graph_batch_for(0.01, 0.2, 8) == 8);
}

TEST_MAIN()
