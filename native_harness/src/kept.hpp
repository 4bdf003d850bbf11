// Expected values kept on the device (PROTOCOL.md, "Expected values kept on the device"): a
// reference run's output stays in the input cache under "kept:" + KEY, and later requests name it
// as `expected: "kept:KEY"` instead of a file. Python never handles the bytes: the answer gives it
// the figures it needs (the count and sum of squares of the finite values).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <string>

#include "input_cache.hpp"
#include "request.hpp"
#include "session.hpp"

namespace kernelopt::detail {

// The kept copies a request names, by KEY (without the prefix), held for the whole request so an
// eviction meanwhile cannot drop them.
using KeptCopies = std::map<std::string, InputCache::Kept>;

// Looks up every "kept:KEY" of `req` in the session's input cache (each key once: a hit), before
// anything is allocated or launched. Throws ExpectedMissing listing the keys the cache does not
// hold, then BadRequest (naming the field and both sizes) for a copy of another size than its
// buffer's.
KeptCopies find_kept_copies(Session& session, const Request& req);

// What the answer's "kept" entry reports about a kept copy.
struct KeptFigures {
  std::uint64_t elements = 0;  // bytes / itemsize(dtype)
  std::uint64_t finite = 0;    // elements finite when widened to double (integers: all)
  double sum_sq = 0;           // sum of (double)value^2 over the finite ones, in order
};

// The figures of `bytes` of little-endian `dtype` values at `data`. float16 and bfloat16 are
// widened exactly.
KeptFigures kept_figures(const std::uint8_t* data, std::uint64_t bytes, ScalarType dtype);

// The blocks of ko_sum_sq_<dtype>: a fixed grid, so the figures of the same bytes are the same
// bits on any device.
inline constexpr unsigned sum_sq_blocks = 1024;

// The figures of `elements` values at device address `data`, computed on the device by
// `sum_sq` (a ko_sum_sq_<dtype>: sum_sq_blocks partials added in block order), with nothing of
// the data copied to the host. The same figures as kept_figures but for the order of the
// additions. Waits for the kernel. Throws CudaError.
KeptFigures device_kept_figures(Session& session, CUfunction sum_sq, CUdeviceptr data,
                                std::uint64_t elements);

// One little-endian `dtype` value at `p`, widened to double (float16 and bfloat16 exactly).
double element_to_double(const std::uint8_t* p, ScalarType dtype) noexcept;

// Exact widenings of IEEE binary16 and bfloat16 bits.
double half_bits_to_double(std::uint16_t bits) noexcept;
double bfloat16_bits_to_double(std::uint16_t bits) noexcept;

}  // namespace kernelopt::detail
