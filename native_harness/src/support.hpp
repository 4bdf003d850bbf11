// The harness's own device code (kernelopt_mcp/support/*.cu compiled by Python into one CUBIN):
// loaded once per session from the request's "support_module" path, reloaded when the path
// changes, and asked for its extern "C" kernels by name. compare.cu: ko_compare_<dtype> (device-
// side comparison of an output with float64 expected values) and ko_bitwise_diff; timing.cu:
// ko_spin (blocking kernel) and ko_empty (launch overhead). The structs in `detail` are the ABI
// of compare.cu.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cuda_raii.hpp"
#include "driver.hpp"
#include "guard.hpp"
#include "request.hpp"

namespace kernelopt {

class SupportModule {
 public:
  SupportModule() = default;

  // Loads the CUBIN at `path` unless it is the one already loaded (the same path: Python
  // names each build by its source hash, so a new build is a new path). Throws IoError
  // (unreadable file), BadRequest (the driver refuses the image: the message says how to
  // rebuild it) and CudaError when the refusal destroyed the context.
  void load(const std::string& path);

  bool loaded() const noexcept { return module_.get() != nullptr; }
  const std::string& path() const noexcept { return path_; }

  // The kernel `name`, looked up once and cached. Throws BadRequest when the loaded module
  // lacks it (an older support module than this harness expects) or none is loaded.
  CUfunction function(const std::string& name);
  // The kernel `name`, or nullptr when the module lacks it or none is loaded. Throws
  // CudaError for failures other than "not found".
  CUfunction find(const std::string& name);

  // Throws one BadRequest naming every kernel of `names` the loaded module lacks.
  void require(const std::vector<std::string>& names);

  // Unloads the module; must run while the context is still alive (Session's destructor).
  void reset() noexcept;

 private:
  detail::Module module_;
  std::string path_;
  std::map<std::string, CUfunction> functions_;  // nullptr: looked up, not in the module
};

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

// KoSumSq of compare.cu: one block's part of ko_sum_sq_<dtype>.
struct KoSumSq {
  double sum_sq;
  std::uint64_t finite;
};
static_assert(sizeof(KoSumSq) == 16, "layout of compare.cu's KoSumSq");
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
  double err_sq = 0;  // over finite differences
  std::optional<std::uint64_t> first_mismatch;
  double kernel_ms = 0;  // the compare kernel's own time (events around it)
};

// The support kernels by name. compare_kernel_name(float32) is "ko_compare_float32", ...
std::string compare_kernel_name(ScalarType dtype);
inline constexpr const char* bitwise_diff_kernel_name = "ko_bitwise_diff";
inline constexpr const char* spin_kernel_name = "ko_spin";
inline constexpr const char* empty_kernel_name = "ko_empty";

// The support kernels `req` will launch, each once: ko_compare_<dtype> for every dtype with
// expected or timed_expected values, ko_bitwise_diff for repeat_validation, ko_spin for blocking
// timing and ko_empty for any timing (launch_overhead_ms is measured whenever a support module
// is given). The handler checks them before anything runs.
std::vector<std::string> support_kernels_needed(const Request& req);

// A grid for a grid-stride support kernel of 256-thread blocks over `items` items: enough
// blocks to fill the device once, never more than the items need. At least 1.
unsigned support_grid(const detail::DriverApi& drv, CUfunction f, int sm_count,
                      std::uint64_t items);
inline constexpr unsigned support_block = 256;

// fill.cu and compare.cu's reference compare and sum of squares: "ko_fill_float32",
// "ko_compare_ref_float32", "ko_sum_sq_float32", ...
std::string fill_kernel_name(ScalarType dtype);
std::string compare_ref_kernel_name(ScalarType dtype);
std::string sum_sq_kernel_name(ScalarType dtype);

// fill.cu's structured draws: "ko_structure_1", "_2", "_4", "_8" (the element's bytes).
std::string structure_kernel_name(ScalarType dtype);
// A spec's structure in a cache key: "" without one, else ":s<kind>:<diagonal>:<rows>:<cols>".
std::string structure_key(const FreshSpec& spec);

// Enqueues `fill` (a ko_fill_<dtype>) over `elements` elements at `out`: the values of
// (seed, launch, buffer) as fill.cu defines them. Does not wait. Throws CudaError.
void enqueue_fill(const detail::DriverApi& drv, CUfunction fill, int sm_count, CUstream stream,
                  CUdeviceptr out, std::uint64_t elements, std::uint64_t seed, std::uint64_t launch,
                  unsigned buffer, const FreshSpec& spec);

// fill.cu's choice draws: "ko_choice_1", "_2", "_4", "_8" (the element's bytes).
std::string choice_kernel_name(ScalarType dtype);
// A spec's choice in a cache key: "" for other kinds, else ":c" and ":<bits>" per value.
std::string choice_key(const FreshSpec& spec);

// A whole draw of `dtype` elements: the fill (a choice: ko_choice_<bytes> with the values' bits),
// then the spec's structure (ko_structure_<bytes>) when it has one, all on `stream` from
// `support`'s kernels. Does not wait. Throws CudaError, and BadRequest when the module lacks a
// kernel.
void enqueue_draw(const detail::DriverApi& drv, SupportModule& support, ScalarType dtype,
                  int sm_count, CUstream stream, CUdeviceptr out, std::uint64_t elements,
                  std::uint64_t seed, std::uint64_t launch, unsigned buffer, const FreshSpec& spec);

// Enqueues `compare` (a ko_compare_<dtype> or ko_compare_ref_<dtype>) accumulating into
// `result` (a KoCompareResult the caller initialised with init_compare_results). Does not wait.
void enqueue_compare(const detail::DriverApi& drv, CUfunction compare, int sm_count,
                     CUstream stream, CUdeviceptr actual, CUdeviceptr expected,
                     std::uint64_t elements, const CompareTolerance& tol, CUdeviceptr result);
// Sets `count` consecutive KoCompareResult at `results` to "nothing found yet".
void init_compare_results(const detail::DriverApi& drv, CUstream stream, CUdeviceptr results,
                          std::size_t count);
// The figures of a KoCompareResult read back from the device.
CompareFigures compare_figures(const detail::KoCompareResult& r, std::uint64_t elements);

// Runs `compare` (a ko_compare_<dtype>) over `elements` elements on `stream` and waits for it.
// `scratch` is support_result_bytes of device memory. Throws CudaError.
CompareFigures device_compare(const detail::DriverApi& drv, CUfunction compare, int sm_count,
                              CUstream stream, CUdeviceptr actual, CUdeviceptr expected,
                              std::uint64_t elements, const CompareTolerance& tol,
                              CUdeviceptr scratch);

// Enqueues ko_bitwise_diff over `bytes` bytes of a and b into the KoDiffResult at `result`,
// reset first. Does not wait. Throws CudaError.
void enqueue_bitwise_diff(const detail::DriverApi& drv, CUfunction diff, int sm_count,
                          CUstream stream, CUdeviceptr a, CUdeviceptr b, std::uint64_t bytes,
                          CUdeviceptr result);
// A KoDiffResult read back: nullopt when nothing differs.
inline std::optional<ByteDiff> byte_diff(const detail::KoDiffResult& r) {
  if (r.bytes_differ == 0) return std::nullopt;
  return ByteDiff{r.first_offset, r.bytes_differ};
}

// Runs ko_bitwise_diff over `bytes` bytes of a and b and waits for it; nullopt when they are
// identical. Throws CudaError.
std::optional<ByteDiff> device_bitwise_diff(const detail::DriverApi& drv, CUfunction diff,
                                            int sm_count, CUstream stream, CUdeviceptr a,
                                            CUdeviceptr b, std::uint64_t bytes,
                                            CUdeviceptr scratch);

}  // namespace kernelopt
