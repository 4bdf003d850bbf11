// Summary statistics of the measured launch times, and the adaptive stopping rule.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace kernelopt {

struct Summary {
  double median = 0;
  double mean = 0;
  double min = 0;
  double max = 0;
  double stdev = 0;  // sample standard deviation (n - 1); 0 for a single sample
  double q1 = 0;     // 25th percentile, linear interpolation (numpy's default)
  double q3 = 0;     // 75th percentile, linear interpolation
};

// The q-quantile (0 <= q <= 1) of an ascending `sorted` sample, interpolating linearly between
// the two nearest ranks exactly like numpy.quantile's default ("linear"): position q * (n - 1).
// 0 for an empty sample.
inline double quantile_sorted(const std::vector<double>& sorted, double q) {
  const auto n = sorted.size();
  if (n == 0) return 0;
  const double pos = q * static_cast<double>(n - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, n - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

// All zeros for an empty sample.
inline Summary summarize(std::vector<double> samples) {
  Summary s;
  const auto n = samples.size();
  if (n == 0) return s;
  std::sort(samples.begin(), samples.end());
  s.min = samples.front();
  s.max = samples.back();
  s.median = n % 2 == 1 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2.0;
  s.q1 = quantile_sorted(samples, 0.25);
  s.q3 = quantile_sorted(samples, 0.75);
  double sum = 0;
  for (const double x : samples) sum += x;
  s.mean = sum / static_cast<double>(n);
  if (n > 1) {
    // Two passes: the one-pass sum-of-squares formula cancels badly when the spread is tiny
    // compared with the mean, which is the usual case for kernel times.
    double ss = 0;
    for (const double x : samples) ss += (x - s.mean) * (x - s.mean);
    s.stdev = std::sqrt(ss / static_cast<double>(n - 1));
  }
  return s;
}

// Relative standard error of the median (protocol-v2): the IQR / 1.349 estimates sigma
// robustly, the median's standard error is sqrt(pi / 2) ~= 1.2533 times the mean's, and the
// result is relative to the median:
//   rse = 1.2533 * (IQR / 1.349) / sqrt(n) / median.
// +infinity when it cannot be estimated: fewer than 2 samples or a median that is not positive.
inline double median_rse(const Summary& s, std::size_t n) {
  if (n < 2 || !(s.median > 0)) return std::numeric_limits<double>::infinity();
  return 1.2533 * ((s.q3 - s.q1) / 1.349) / std::sqrt(static_cast<double>(n)) / s.median;
}

struct AdaptiveLimits {
  double target_rse = 0.01;
  double max_ms = 2000;                // wall time of the whole measurement
  std::size_t max_iterations = 10000;  // samples in all
};

enum class AdaptiveStep {
  converged,     // rse <= target: stop
  time_limit,    // max_ms of wall time spent: stop, not converged
  sample_limit,  // max_iterations samples taken: stop, not converged
  more,          // take another round of samples
};

// The stopping rule, checked after every round of samples. Convergence wins over the limits,
// so a sample that reaches the target exactly at a limit still counts as converged.
inline AdaptiveStep adaptive_step(double rse, std::size_t samples, double elapsed_ms,
                                  const AdaptiveLimits& limits) {
  if (rse <= limits.target_rse) return AdaptiveStep::converged;
  if (samples >= limits.max_iterations) return AdaptiveStep::sample_limit;
  if (elapsed_ms >= limits.max_ms) return AdaptiveStep::time_limit;
  return AdaptiveStep::more;
}

// How many samples the next adaptive round takes: as many as the first round (at least 16),
// never past max_iterations in all.
inline std::size_t adaptive_round(std::size_t first_round, std::size_t samples,
                                  const AdaptiveLimits& limits) {
  const std::size_t want = std::max<std::size_t>(first_round, 16);
  if (samples >= limits.max_iterations) return 0;
  return std::min(want, limits.max_iterations - samples);
}

// Graph mode without an explicit graph_batch: enough launches that one graph replay takes at
// least `target_ms` (so launch and event overheads are amortised), 1..max_batch. A launch time
// that is not positive (no estimate) gives max_batch.
inline unsigned graph_batch_for(double launch_ms, double target_ms = 0.2,
                                unsigned max_batch = 1000) {
  if (!(launch_ms > 0)) return max_batch;
  const double want = std::ceil(target_ms / launch_ms);
  if (want <= 1) return 1;
  if (want >= static_cast<double>(max_batch)) return max_batch;
  return static_cast<unsigned>(want);
}

}  // namespace kernelopt
