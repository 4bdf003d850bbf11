// The support module's kernels (kernelopt_mcp/support/*.cu), launched by the harness on its own
// stream: device-side comparison of an output with float64 expected values, and a bitwise
// diff of two buffers. The structs below are the ABI of kernelopt_mcp/support/compare.cu.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>

#include "driver.hpp"
#include "guard.hpp"
#include "request.hpp"

namespace kernelopt {

namespace detail {
// KoCompareResult of compare.cu. All fields start at 0 except first_mismatch (~0: none).
struct KoCompareResult {
  std::uint64_t mismatches;
  std::uint64_t nonfinite;
  std::uint64_t first_mismatch;
  std::uint64_t max_abs_bits;  // bits of a non-negative double
  std::uint64_t max_rel_bits;
  double err_sq;
};
static_assert(sizeof(KoCompareResult) == 48, "layout of compare.cu's KoCompareResult");

// KoDiffResult of compare.cu. bytes_differ starts at 0, first_offset at ~0 (none).
struct KoDiffResult {
  std::uint64_t bytes_differ;
  std::uint64_t first_offset;
};
static_assert(sizeof(KoDiffResult) == 16, "layout of compare.cu's KoDiffResult");
}  // namespace detail

// Device scratch the kernels accumulate into: at least this many bytes, 8-byte aligned.
inline constexpr std::size_t support_result_bytes = 256;

// What ko_compare_<dtype> found, as PROTOCOL.md's "compares" entries report it.
struct CompareFigures {
  std::uint64_t elements = 0;
  std::uint64_t mismatches = 0;
  std::uint64_t nonfinite = 0;
  double max_abs_error = 0;  // +inf when any element is non-finite, as compare.py reports it
  double max_rel_error = 0;
  double err_sq = 0;         // over finite differences
  std::optional<std::uint64_t> first_mismatch;
  double kernel_ms = 0;      // the compare kernel's own time (events around it)
};

// The support kernel that compares elements of `dtype`: "ko_compare_float32", ...
std::string compare_kernel_name(ScalarType dtype);
inline constexpr const char* bitwise_diff_kernel_name = "ko_bitwise_diff";

// A grid for a grid-stride support kernel of 256-thread blocks over `items` items: enough
// blocks to fill the device once, never more than the items need. At least 1.
unsigned support_grid(const detail::DriverApi& drv, CUfunction f, int sm_count,
                      std::uint64_t items);
inline constexpr unsigned support_block = 256;

// Runs `compare` (a ko_compare_<dtype>) over `elements` elements on `stream` and waits for it.
// `scratch` is support_result_bytes of device memory. Throws CudaError.
CompareFigures device_compare(const detail::DriverApi& drv, CUfunction compare, int sm_count,
                              CUstream stream, CUdeviceptr actual, CUdeviceptr expected,
                              std::uint64_t elements, const CompareTolerance& tol,
                              CUdeviceptr scratch);

// Runs ko_bitwise_diff over `bytes` bytes of a and b and waits for it; nullopt when they are
// identical. Throws CudaError.
std::optional<ByteDiff> device_bitwise_diff(const detail::DriverApi& drv, CUfunction diff,
                                            int sm_count, CUstream stream, CUdeviceptr a,
                                            CUdeviceptr b, std::uint64_t bytes,
                                            CUdeviceptr scratch);

}  // namespace kernelopt
