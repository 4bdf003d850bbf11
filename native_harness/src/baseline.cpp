#include "baseline.hpp"

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "check.hpp"
#include "cuda_raii.hpp"
#include "errors.hpp"
#include "response.hpp"
#include "timing.hpp"

namespace kernelopt {
namespace {

using nlohmann::json;

// The few cuBLAS entry points used, declared from the stable C ABI (cublas_api.h) so the
// harness needs no cuBLAS header or library at build time: enums are ints, the handle is an
// opaque pointer, cudaStream_t is the driver's CUstream.
using CublasHandle = void*;
using CublasStatus = int;
constexpr CublasStatus cublas_success = 0;
constexpr int cublas_op_n = 0;
constexpr int cublas_default_math = 0;  // CUBLAS_DEFAULT_MATH: FP32 stays FP32 (no TF32)

struct CublasApi {
  CublasStatus (*create)(CublasHandle*) = nullptr;
  CublasStatus (*destroy)(CublasHandle) = nullptr;
  CublasStatus (*set_stream)(CublasHandle, CUstream) = nullptr;
  CublasStatus (*set_math_mode)(CublasHandle, int) = nullptr;
  CublasStatus (*get_version)(CublasHandle, int*) = nullptr;
  CublasStatus (*sgemm)(CublasHandle, int, int, int, int, int, const float*, const float*, int,
                        const float*, int, const float*, float*, int) = nullptr;
  const char* (*status_string)(CublasStatus) = nullptr;  // optional (cuBLAS 11.4+)
};

// The library could not be loaded or lacks an entry point.
class LibraryUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A cuBLAS call returned an error status.
class LibraryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// dlopen'ed once per path and never closed (cuBLAS keeps state tied to the process).
const CublasApi& load_cublas(const std::string& path) {
  static std::map<std::string, CublasApi> loaded;
  if (const auto it = loaded.find(path); it != loaded.end()) return it->second;
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    throw LibraryUnavailable(path + " could not be loaded (" + (why ? why : "unknown reason") +
                             "): install cuBLAS (pip install nvidia-cublas) or pass the path of "
                             "libcublas.so from the CUDA toolkit");
  }
  CublasApi api;
  auto bind = [&](auto& slot, const char* symbol, bool required) {
    dlerror();
    void* p = dlsym(lib, symbol);
    if (dlerror() != nullptr) p = nullptr;
    if (p == nullptr && required) {
      throw LibraryUnavailable(path + " lacks " + symbol + ": not a cuBLAS 11+ library");
    }
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(p);
  };
  bind(api.create, "cublasCreate_v2", true);
  bind(api.destroy, "cublasDestroy_v2", true);
  bind(api.set_stream, "cublasSetStream_v2", true);
  bind(api.set_math_mode, "cublasSetMathMode", true);
  bind(api.get_version, "cublasGetVersion_v2", true);
  bind(api.sgemm, "cublasSgemm_v2", true);
  bind(api.status_string, "cublasGetStatusString", false);
  return loaded.emplace(path, api).first->second;
}

void check(const CublasApi& api, CublasStatus status, const char* call) {
  if (status == cublas_success) return;
  std::string what = std::string(call) + " returned cuBLAS status " + std::to_string(status);
  if (api.status_string != nullptr) {
    if (const char* s = api.status_string(status)) what += std::string(" (") + s + ")";
  }
  throw LibraryError(what);
}

class Handle {
 public:
  explicit Handle(const CublasApi& api) : api_(api) {
    check(api_, api_.create(&h_), "cublasCreate_v2");
  }
  ~Handle() {
    if (h_ != nullptr) api_.destroy(h_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  CublasHandle get() const noexcept { return h_; }

 private:
  const CublasApi& api_;
  CublasHandle h_ = nullptr;
};

std::uint32_t float_bits(float f) {
  std::uint32_t u = 0;
  static_assert(sizeof u == sizeof f);
  std::memcpy(&u, &f, sizeof u);
  return u;
}

json run_sgemm(Session& s, const Request& req, const CublasApi& api, json& response) {
  const auto& drv = s.drv();
  const auto& b = req.baseline;
  const CUstream stream = s.stream();
  const int m = static_cast<int>(b.m), n = static_cast<int>(b.n), k = static_cast<int>(b.k);

  Handle handle(api);
  check(api, api.set_stream(handle.get(), stream), "cublasSetStream_v2");
  check(api, api.set_math_mode(handle.get(), cublas_default_math), "cublasSetMathMode");
  int version = 0;
  check(api, api.get_version(handle.get(), &version), "cublasGetVersion_v2");
  response["library_version"] = version;

  // Every element of A is 0.5 and of B 0.25, so every element of C is exactly k / 8.
  constexpr float a_value = 0.5f, b_value = 0.25f;
  detail::DeviceBuffer a(b.m * b.k * sizeof(float));
  detail::DeviceBuffer bm(b.k * b.n * sizeof(float));
  detail::DeviceBuffer c(b.m * b.n * sizeof(float));
  const bool flush = req.flush_l2 && s.can_flush_l2();
  if (flush) s.prepare_flush_l2();
  try {
    KO_CU(drv.cuMemsetD32Async(a.get(), float_bits(a_value), b.m * b.k, stream));
    KO_CU(drv.cuMemsetD32Async(bm.get(), float_bits(b_value), b.k * b.n, stream));
    KO_CU(drv.cuMemsetD32Async(c.get(), 0xFFFFFFFFu, b.m * b.n, stream));

    const float alpha = 1.0f, beta = 0.0f;
    const auto* pa = reinterpret_cast<const float*>(a.get());
    const auto* pb = reinterpret_cast<const float*>(bm.get());
    auto* pc = reinterpret_cast<float*>(c.get());
    // Row-major C[m,n] = A[m,k] B[k,n] is column-major C^T[n,m] = B^T[n,k] A^T[k,m]: cuBLAS
    // sees B with leading dimension n and A with leading dimension k, nothing transposed.
    auto sgemm = [&] {
      check(api,
            api.sgemm(handle.get(), cublas_op_n, cublas_op_n, n, m, k, &alpha, pb, n, pa, k, &beta,
                      pc, n),
            "cublasSgemm_v2");
    };
    sgemm();  // the validation launch: also lets cuBLAS pick and load its kernel
    float first = 0, last = 0;
    KO_CU(drv.cuMemcpyDtoHAsync(&first, c.get(), sizeof first, stream));
    KO_CU(drv.cuMemcpyDtoHAsync(&last, c.get() + (b.m * b.n - 1) * sizeof(float), sizeof last,
                                stream));
    KO_CU(drv.cuStreamSynchronize(stream));
    const float expected = static_cast<float>(k) * a_value * b_value;
    response["result_ok"] = first == expected && last == expected;

    TimedWork work;
    if (flush) work.prepare = [&] { s.flush_l2(); };
    work.launch = sgemm;
    return time_work(s, b.timing, work, flush);
  } catch (...) {
    drv.cuStreamSynchronize(stream);  // nothing may still use the buffers freed on the way out
    throw;
  }
}

}  // namespace

int run_baseline(Session& session, const Request& req, json& response) {
  const auto& b = req.baseline;
  response.erase("module_load_ms");
  response.erase("steps_ms");
  response.erase("function");
  response.erase("cases");
  response["op"] = "baseline";
  response["device"] = {
      {"ordinal", session.ordinal()}, {"name", session.name()}, {"arch", session.arch()}};
  response["library"] = b.library;
  response["library_path"] = b.library_path;
  response["routine"] = b.routine;
  response["library_version"] = nullptr;
  response["m"] = b.m;
  response["n"] = b.n;
  response["k"] = b.k;
  response["math_mode"] = "default";
  const char* tf32 = std::getenv("NVIDIA_TF32_OVERRIDE");
  response["tf32_override"] = tf32 != nullptr ? json(tf32) : json(nullptr);
  response["flops"] =
      2.0 * static_cast<double>(b.m) * static_cast<double>(b.n) * static_cast<double>(b.k);
  response["result_ok"] = nullptr;
  response["timing"] = nullptr;

  const CublasApi* api = nullptr;
  try {
    api = &load_cublas(b.library_path);
  } catch (const LibraryUnavailable& e) {
    set_request_error(response, request_error("library_unavailable", e.what()));
    return exit_ok;
  }
  try {
    response["timing"] = run_sgemm(session, req, *api, response);
  } catch (const LibraryError& e) {
    set_request_error(response, request_error("library_error", e.what()));
    return exit_ok;
  }
  return exit_ok;
}

}  // namespace kernelopt
