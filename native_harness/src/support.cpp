#include "support.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>

#include "check.hpp"
#include "cuda_raii.hpp"
#include "errors.hpp"
#include "file_io.hpp"

namespace kernelopt {
namespace {

constexpr std::uint64_t none = ~std::uint64_t{0};
constexpr const char* rebuild_hint =
    "rebuild it for this device with kernelopt_mcp.evaluation.support_module.support_module(arch)";

double from_bits(std::uint64_t bits) {
  double d = 0;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

// Zeroes the scratch and sets the 8 bytes at `none_offset` to ~0 ("none").
void reset_scratch(const detail::DriverApi& drv, CUstream stream, CUdeviceptr scratch,
                   std::size_t bytes, std::size_t none_offset) {
  KO_CU(drv.cuMemsetD8Async(scratch, 0, bytes, stream));
  KO_CU(drv.cuMemsetD8Async(scratch + none_offset, 0xFF, sizeof(std::uint64_t), stream));
}

void add_once(std::vector<std::string>& names, std::string name) {
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    names.push_back(std::move(name));
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The module
// ---------------------------------------------------------------------------------------------

void SupportModule::load(const std::string& path) {
  if (loaded() && path == path_) return;
  auto image = read_file(path);
  image.push_back(0);  // a PTX image must be NUL-terminated; an ELF ignores the extra byte
  reset();
  const auto& drv = detail::load_driver();
  CUmodule m = nullptr;
  const CUresult r = drv.cuModuleLoadDataEx(&m, image.data(), 0, nullptr, nullptr);
  if (r != CUDA_SUCCESS) {
    if (detail::is_context_fatal(r)) {
      detail::throw_cuda_error(r, "cuModuleLoadDataEx(support_module)", __FILE__, __LINE__);
    }
    const auto info = detail::make_cuda_error_info(r, "cuModuleLoadDataEx", __FILE__, __LINE__);
    throw BadRequest("support_module: " + path + " could not be loaded (" + info.name +
                     "): " + rebuild_hint);
  }
  module_ = detail::Module(m);
  path_ = path;
}

CUfunction SupportModule::find(const std::string& name) {
  if (!loaded()) return nullptr;
  if (const auto it = functions_.find(name); it != functions_.end()) return it->second;
  CUfunction f = nullptr;
  const CUresult r = detail::load_driver().cuModuleGetFunction(&f, module_.get(), name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND) {
    f = nullptr;
  } else if (r != CUDA_SUCCESS) {
    detail::throw_cuda_error(r, "cuModuleGetFunction(support_module)", __FILE__, __LINE__);
  }
  functions_.emplace(name, f);
  return f;
}

CUfunction SupportModule::function(const std::string& name) {
  if (!loaded()) {
    throw BadRequest("support_module: required for this request but not given");
  }
  require({name});
  return find(name);
}

void SupportModule::require(const std::vector<std::string>& names) {
  std::string missing;
  for (const auto& name : names) {
    if (find(name) == nullptr) missing += (missing.empty() ? "" : ", ") + name;
  }
  if (missing.empty()) return;
  throw BadRequest("support_module: " + path_ + " lacks kernel(s) " + missing +
                   ": it is older than this harness; " + rebuild_hint);
}

void SupportModule::reset() noexcept {
  module_.reset();
  path_.clear();
  functions_.clear();
}

std::vector<std::string> support_kernels_needed(const Request& req) {
  std::vector<std::string> names;
  auto timing = [&](const TimingConfig& t) {
    if (t.blocking) add_once(names, spin_kernel_name);
    add_once(names, empty_kernel_name);
  };
  if (req.op == RequestOp::baseline) {
    timing(req.baseline.timing);
    return names;
  }
  for (const auto& spec : req.cases) {
    if (spec.repeat_validation) add_once(names, bitwise_diff_kernel_name);
    if (spec.timing) timing(*spec.timing);
    for (const auto& arg : spec.args) {
      const auto& b = arg.buffer;
      if (arg.kind != ArgKind::buffer || !b.dtype) continue;
      if (!b.expected.empty() || !b.timed_expected.empty()) {
        add_once(names, b.native_expected() ? compare_ref_kernel_name(*b.dtype)
                                            : compare_kernel_name(*b.dtype));
      }
      // the draws this buffer gets: a fill or a choice, then maybe a structure
      for (const FreshSpec* d : {b.fresh && spec.timing ? &*b.fresh : nullptr,
                                 b.input_draw ? &b.input_draw->spec : nullptr,
                                 b.timed_input_draw ? &b.timed_input_draw->spec : nullptr}) {
        if (d == nullptr) continue;
        add_once(names, d->kind == FreshKind::choice ? choice_kernel_name(*b.dtype)
                                                     : fill_kernel_name(*b.dtype));
        if (d->structure) add_once(names, structure_kernel_name(*b.dtype));
      }
      if (spec.has_reference_checks() && b.role != BufferRole::in) {
        add_once(names, compare_ref_kernel_name(*b.dtype));
      }
      // checked_expected: values in the buffer's dtype widen like a reference's outputs
      if (spec.has_expected_checks() && b.role != BufferRole::in) {
        add_once(names, b.native_expected() ? compare_ref_kernel_name(*b.dtype)
                                            : compare_kernel_name(*b.dtype));
      }
    }
  }
  return names;
}

// ---------------------------------------------------------------------------------------------
// Comparison kernels
// ---------------------------------------------------------------------------------------------

std::string compare_kernel_name(ScalarType dtype) {
  return std::string("ko_compare_") + scalar_type_name(dtype);
}

unsigned support_grid(const detail::DriverApi& drv, CUfunction f, int sm_count,
                      std::uint64_t items) {
  int per_sm = 0;
  if (drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, support_block, 0) !=
          CUDA_SUCCESS ||
      per_sm <= 0) {
    per_sm = 4;
  }
  const std::uint64_t fill = std::uint64_t(per_sm) * std::uint64_t(sm_count > 0 ? sm_count : 1);
  const std::uint64_t needed = (items + support_block - 1) / support_block;
  const std::uint64_t grid = needed < fill ? needed : fill;
  return grid == 0 ? 1u : static_cast<unsigned>(grid);
}

std::string fill_kernel_name(ScalarType dtype) {
  return std::string("ko_fill_") + scalar_type_name(dtype);
}

std::string compare_ref_kernel_name(ScalarType dtype) {
  return std::string("ko_compare_ref_") + scalar_type_name(dtype);
}

std::string sum_sq_kernel_name(ScalarType dtype) {
  return std::string("ko_sum_sq_") + scalar_type_name(dtype);
}

void enqueue_fill(const detail::DriverApi& drv, CUfunction fill, int sm_count, CUstream stream,
                  CUdeviceptr out, std::uint64_t elements, std::uint64_t seed, std::uint64_t launch,
                  unsigned buffer, const FreshSpec& spec) {
  if (elements == 0) return;
  unsigned kind = static_cast<unsigned>(spec.kind);
  double a = spec.a;
  double b = spec.b;
  long long low = spec.low;
  unsigned long long range = spec.range;
  unsigned long long n = elements;
  unsigned long long s = seed;
  unsigned long long l = launch;
  void* params[] = {&out, &n, &s, &l, &buffer, &kind, &a, &b, &low, &range};
  KO_CU(drv.cuLaunchKernel(fill, support_grid(drv, fill, sm_count, elements), 1, 1, support_block,
                           1, 1, 0, stream, params, nullptr));
}

std::string structure_kernel_name(ScalarType dtype) {
  return "ko_structure_" + std::to_string(scalar_size(dtype));
}

std::string structure_key(const FreshSpec& spec) {
  if (!spec.structure) return "";
  const auto& st = *spec.structure;
  return ":s" + std::to_string(static_cast<int>(st.kind)) + ":" + std::to_string(st.diagonal) +
         ":" + std::to_string(st.rows) + ":" + std::to_string(st.cols);
}

std::string choice_kernel_name(ScalarType dtype) {
  return "ko_choice_" + std::to_string(scalar_size(dtype));
}

std::string choice_key(const FreshSpec& spec) {
  if (spec.kind != FreshKind::choice) return "";
  std::string key = ":c";
  for (std::size_t i = 0; i < spec.values.size(); ++i) {
    key += ":" + std::to_string(spec.choice_bits[i]);
  }
  return key;
}

namespace {

// fill.cu's KoChoiceTable, passed by value.
struct ChoiceTable {
  unsigned long long bits[max_choice_values];
};

void enqueue_choice(const detail::DriverApi& drv, CUfunction f, int sm_count, CUstream stream,
                    CUdeviceptr out, std::uint64_t elements, std::uint64_t seed,
                    std::uint64_t launch, unsigned buffer, const FreshSpec& spec) {
  ChoiceTable table{};
  for (std::size_t i = 0; i < max_choice_values; ++i) table.bits[i] = spec.choice_bits[i];
  unsigned count = static_cast<unsigned>(spec.values.size());
  unsigned long long n = elements;
  unsigned long long s = seed;
  unsigned long long l = launch;
  void* params[] = {&out, &n, &s, &l, &buffer, &count, &table};
  // a thread per Philox block of two elements
  KO_CU(drv.cuLaunchKernel(f, support_grid(drv, f, sm_count, (elements + 1) / 2), 1, 1,
                           support_block, 1, 1, 0, stream, params, nullptr));
}

}  // namespace

void enqueue_draw(const detail::DriverApi& drv, SupportModule& support, ScalarType dtype,
                  int sm_count, CUstream stream, CUdeviceptr out, std::uint64_t elements,
                  std::uint64_t seed, std::uint64_t launch, unsigned buffer,
                  const FreshSpec& spec) {
  if (elements == 0) return;
  if (spec.kind == FreshKind::choice) {
    enqueue_choice(drv, support.function(choice_kernel_name(dtype)), sm_count, stream, out,
                   elements, seed, launch, buffer, spec);
  } else {
    enqueue_fill(drv, support.function(fill_kernel_name(dtype)), sm_count, stream, out, elements,
                 seed, launch, buffer, spec);
  }
  if (!spec.structure) return;
  const CUfunction f = support.function(structure_kernel_name(dtype));
  unsigned long long n = elements;
  unsigned long long rows = spec.structure->rows;
  unsigned long long cols = spec.structure->cols;
  unsigned kind = static_cast<unsigned>(spec.structure->kind);
  long long diagonal = spec.structure->diagonal;
  void* params[] = {&out, &n, &rows, &cols, &kind, &diagonal};
  // a block per matrix row at a time: as many blocks as fill the device, or as there are rows
  KO_CU(drv.cuLaunchKernel(f, support_grid(drv, f, sm_count, (n / cols) * support_block), 1, 1,
                           support_block, 1, 1, 0, stream, params, nullptr));
}

void enqueue_compare(const detail::DriverApi& drv, CUfunction compare, int sm_count,
                     CUstream stream, CUdeviceptr actual, CUdeviceptr expected,
                     std::uint64_t elements, const CompareTolerance& tol, CUdeviceptr result) {
  if (elements == 0) return;
  double abs_tol = tol.abs_tol;
  double rtol = tol.rtol;
  double rel_floor = tol.rel_floor;
  void* params[] = {&actual, &expected, &elements, &abs_tol, &rtol, &rel_floor, &result};
  KO_CU(drv.cuLaunchKernel(compare, support_grid(drv, compare, sm_count, elements), 1, 1,
                           support_block, 1, 1, 0, stream, params, nullptr));
}

void init_compare_results(const detail::DriverApi& drv, CUstream stream, CUdeviceptr results,
                          std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    reset_scratch(drv, stream, results + i * sizeof(detail::KoCompareResult),
                  sizeof(detail::KoCompareResult),
                  offsetof(detail::KoCompareResult, first_mismatch));
  }
}

CompareFigures compare_figures(const detail::KoCompareResult& r, std::uint64_t elements) {
  CompareFigures fig;
  fig.elements = elements;
  fig.mismatches = r.mismatches;
  fig.nonfinite = r.nonfinite;
  if (r.first_mismatch != none) fig.first_mismatch = r.first_mismatch;
  // compare.py reports the maxima as inf as soon as one output element is NaN/Inf.
  constexpr double inf = std::numeric_limits<double>::infinity();
  fig.max_abs_error = r.nonfinite != 0 ? inf : from_bits(r.max_abs_bits);
  fig.max_rel_error = r.nonfinite != 0 ? inf : from_bits(r.max_rel_bits);
  fig.err_sq = r.err_sq;
  return fig;
}

CompareFigures device_compare(const detail::DriverApi& drv, CUfunction compare, int sm_count,
                              CUstream stream, CUdeviceptr actual, CUdeviceptr expected,
                              std::uint64_t elements, const CompareTolerance& tol,
                              CUdeviceptr scratch) {
  CompareFigures fig;
  fig.elements = elements;
  if (elements == 0) return fig;
  reset_scratch(drv, stream, scratch, sizeof(detail::KoCompareResult),
                offsetof(detail::KoCompareResult, first_mismatch));
  double abs_tol = tol.abs_tol;
  double rtol = tol.rtol;
  double rel_floor = tol.rel_floor;
  void* params[] = {&actual, &expected, &elements, &abs_tol, &rtol, &rel_floor, &scratch};
  const detail::Event start;
  const detail::Event stop;
  KO_CU(drv.cuEventRecord(start.get(), stream));
  KO_CU(drv.cuLaunchKernel(compare, support_grid(drv, compare, sm_count, elements), 1, 1,
                           support_block, 1, 1, 0, stream, params, nullptr));
  KO_CU(drv.cuEventRecord(stop.get(), stream));
  detail::KoCompareResult r{};
  KO_CU(drv.cuMemcpyDtoHAsync(&r, scratch, sizeof r, stream));
  KO_CU(drv.cuStreamSynchronize(stream));
  float ms = 0;
  KO_CU(drv.cuEventElapsedTime(&ms, start.get(), stop.get()));
  fig = compare_figures(r, elements);
  fig.kernel_ms = ms;
  return fig;
}

std::optional<ByteDiff> device_bitwise_diff(const detail::DriverApi& drv, CUfunction diff,
                                            int sm_count, CUstream stream, CUdeviceptr a,
                                            CUdeviceptr b, std::uint64_t bytes,
                                            CUdeviceptr scratch) {
  if (bytes == 0) return std::nullopt;
  enqueue_bitwise_diff(drv, diff, sm_count, stream, a, b, bytes, scratch);
  detail::KoDiffResult r{};
  KO_CU(drv.cuMemcpyDtoHAsync(&r, scratch, sizeof r, stream));
  KO_CU(drv.cuStreamSynchronize(stream));
  return byte_diff(r);
}

void enqueue_bitwise_diff(const detail::DriverApi& drv, CUfunction diff, int sm_count,
                          CUstream stream, CUdeviceptr a, CUdeviceptr b, std::uint64_t bytes,
                          CUdeviceptr result) {
  reset_scratch(drv, stream, result, sizeof(detail::KoDiffResult),
                offsetof(detail::KoDiffResult, first_offset));
  if (bytes == 0) return;
  void* params[] = {&a, &b, &bytes, &result};
  // One thread per 8-byte word.
  KO_CU(drv.cuLaunchKernel(diff, support_grid(drv, diff, sm_count, (bytes + 7) / 8), 1, 1,
                           support_block, 1, 1, 0, stream, params, nullptr));
}

}  // namespace kernelopt
