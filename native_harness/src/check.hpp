// The one way the harness calls the driver: KO_CU(drv.cuSomething(...)). A failure throws
// detail::CudaError carrying everything the JSON answer needs to name it.
#pragma once

#include <cuda.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace kernelopt::detail {

struct CudaErrorInfo {
  CUresult code = CUDA_SUCCESS;
  std::string call;         // the API function, e.g. "cuLaunchKernel"
  std::string call_text;    // the whole call as written in the source
  std::string name;         // cuGetErrorName, e.g. "CUDA_ERROR_INVALID_VALUE"
  std::string description;  // cuGetErrorString
  std::string file;         // basename of the source file
  int line = 0;
};

class CudaError : public std::runtime_error {
 public:
  explicit CudaError(CudaErrorInfo info);
  const CudaErrorInfo& info() const noexcept { return info_; }
  CUresult code() const noexcept { return info_.code; }

 private:
  CudaErrorInfo info_;
};

// Errors after which the context is unusable: every later call in this process fails, so the
// process must answer and exit (code 5).
bool is_context_fatal(CUresult code) noexcept;

// cuGetErrorName / cuGetErrorString, or a placeholder when the driver cannot tell.
std::string error_name(CUresult code);
std::string error_string(CUresult code);

// The API function named in a call's source text: "drv.cuLaunchKernel(f, ...)" ->
// "cuLaunchKernel". Returns the text unchanged when it names no cu* function.
std::string call_name(std::string_view call_text);

CudaErrorInfo make_cuda_error_info(CUresult code, const char* call_text, const char* file,
                                   int line);

[[noreturn]] void throw_cuda_error(CUresult code, const char* call_text, const char* file,
                                   int line);

}  // namespace kernelopt::detail

#define KO_CU(call)                                                                    \
  do {                                                                                 \
    const CUresult ko_cu_status_ = (call);                                             \
    if (ko_cu_status_ != CUDA_SUCCESS) {                                               \
      ::kernelopt::detail::throw_cuda_error(ko_cu_status_, #call, __FILE__, __LINE__); \
    }                                                                                  \
  } while (0)
