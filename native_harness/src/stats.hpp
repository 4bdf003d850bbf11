// Summary statistics of the measured launch times.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace kernelopt {

struct Summary {
  double median = 0;
  double mean = 0;
  double min = 0;
  double max = 0;
  double stdev = 0;  // sample standard deviation (n - 1); 0 for a single sample
};

// All zeros for an empty sample.
inline Summary summarize(std::vector<double> samples) {
  Summary s;
  const auto n = samples.size();
  if (n == 0) return s;
  std::sort(samples.begin(), samples.end());
  s.min = samples.front();
  s.max = samples.back();
  s.median = n % 2 == 1 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2.0;
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

}  // namespace kernelopt
