// A choice's values as the bits of a buffer's elements (feature "choice_draw": ko_choice's
// table, kernelopt_mcp/input_choice.py). Exact conversions only: Python rounds the workload's
// values to the dtype once (NumPy's cast) and sends numbers that are exactly of it, so nothing is
// rounded here, and a number that is not exactly a value of the dtype is refused. Header-only
// (tests/test_choice_inputs.py compiles it beside Python's table).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>

#include "request.hpp"

namespace kernelopt {

namespace choice_detail {

// The bits of `v` as an IEEE binary16 (float16), if it is exactly one.
inline std::optional<std::uint64_t> half_bits(double v) {
  const std::uint64_t sign = std::signbit(v) ? 0x8000u : 0u;
  const double a = std::fabs(v);
  if (a == 0) return sign;
  if (!(a <= 65504.0)) return std::nullopt;
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e with m in [0.5, 1): its leading bit is 2^(e - 1)
  if (e - 1 >= -14) {
    const double mantissa = std::ldexp(a, 10 - (e - 1));  // 1.f * 2^10: in [1024, 2048)
    if (mantissa != std::floor(mantissa)) return std::nullopt;
    return sign | (static_cast<std::uint64_t>(e - 1 + 15) << 10) |
           (static_cast<std::uint64_t>(mantissa) - 1024u);
  }
  const double fraction = std::ldexp(a, 24);  // a subnormal: fraction * 2^-24
  if (fraction != std::floor(fraction)) return std::nullopt;
  return sign | static_cast<std::uint64_t>(fraction);
}

// The bits of `v` as a float32, if it is exactly one.
inline std::optional<std::uint32_t> float_bits(double v) {
  if (!(std::fabs(v) <= static_cast<double>(FLT_MAX))) return std::nullopt;  // (a cast would be UB)
  const auto f = static_cast<float>(v);
  if (static_cast<double>(f) != v) return std::nullopt;
  std::uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

// The bits of `v` (zero-extended) as an integer of `bytes` bytes, if it is an integer in
// [lo, hi] (doubles: the bounds of the type, exactly representable or one past it).
inline std::optional<std::uint64_t> int_bits(double v, double lo, double hi_exclusive,
                                             std::size_t bytes) {
  if (v != std::trunc(v) || v < lo || !(v < hi_exclusive)) return std::nullopt;
  const std::uint64_t wide = v < 0 ? static_cast<std::uint64_t>(static_cast<std::int64_t>(v))
                                   : static_cast<std::uint64_t>(v);
  return bytes == 8 ? wide : wide & ((std::uint64_t{1} << (8 * bytes)) - 1);
}

}  // namespace choice_detail

// `v`'s bits as an element of `dtype` (little-endian value, zero-extended to 64 bits), or
// nullopt when `v` is not exactly a value of `dtype` (not finite, out of range, or between two
// of its values). -0.0 keeps its sign in the float types.
inline std::optional<std::uint64_t> choice_bits(double v, ScalarType dtype) {
  using namespace choice_detail;
  if (!std::isfinite(v)) return std::nullopt;
  switch (dtype) {
    case ScalarType::float16: return half_bits(v);
    case ScalarType::bfloat16: {
      const auto f = float_bits(v);
      if (!f || (*f & 0xFFFFu) != 0) return std::nullopt;
      return *f >> 16;
    }
    case ScalarType::float32: {
      const auto f = float_bits(v);
      if (!f) return std::nullopt;
      return *f;
    }
    case ScalarType::float64: {
      std::uint64_t bits = 0;
      std::memcpy(&bits, &v, sizeof bits);
      return bits;
    }
    case ScalarType::int8: return int_bits(v, -0x1p7, 0x1p7, 1);
    case ScalarType::int16: return int_bits(v, -0x1p15, 0x1p15, 2);
    case ScalarType::int32: return int_bits(v, -0x1p31, 0x1p31, 4);
    case ScalarType::int64: return int_bits(v, -0x1p63, 0x1p63, 8);
    case ScalarType::uint8: return int_bits(v, 0, 0x1p8, 1);
    case ScalarType::uint16: return int_bits(v, 0, 0x1p16, 2);
    case ScalarType::uint32: return int_bits(v, 0, 0x1p32, 4);
    case ScalarType::uint64: return int_bits(v, 0, 0x1p64, 8);
  }
  return std::nullopt;
}

}  // namespace kernelopt
