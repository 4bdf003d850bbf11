#include <cmath>

#include "stats.hpp"
#include "test_util.hpp"

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

TEST_MAIN()
