// The fake driver's ko_fill_<dtype> element (fake_kernels.cpp), shared with the end-to-end tests
// so they can compute what a draw holds (the inputs a checked launch saw) without the device.
// Not fill.cu's Philox: only a deterministic function of (key, draw, buffer, i) in the
// generator's range, which is all the harness relies on.
#pragma once

#include <cstdint>

namespace fake {

inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Element `i` of a fill with key `key` (draw_key(seed, draw, buffer)), draw index `launch` and
// argument index `buffer`; kind 0 uniform [a, b), 1 "normal" (a + b * (2u - 1)), 2 randint.
inline double fill_value(std::uint64_t key, std::uint64_t launch, std::uint32_t buffer,
                         std::uint64_t i, std::uint32_t kind, double a, double b, std::int64_t low,
                         std::uint64_t range) {
  const std::uint64_t h = mix(key ^ mix(launch * 0x100000001B3ull + buffer) ^ mix(i));
  const double u = static_cast<double>(h >> 11) * 0x1p-53;
  return kind == 2   ? static_cast<double>(low + static_cast<std::int64_t>(h % range))
         : kind == 0 ? a + (b - a) * u
                     : a + b * (2 * u - 1);
}

// The index a ko_choice_<bytes> of `count` values takes at element `i`: the randint over
// [0, count) of a fill with the same arguments (fill.cu's rule, over this fake's values).
inline std::uint64_t choice_index(std::uint64_t key, std::uint64_t launch, std::uint32_t buffer,
                                  std::uint64_t i, std::uint32_t count) {
  return static_cast<std::uint64_t>(fill_value(key, launch, buffer, i, 2, 0, 0, 0, count));
}

}  // namespace fake
