#include "check.hpp"

#include <cctype>

#include "driver.hpp"

namespace kernelopt::detail {
namespace {

std::string basename_of(const char* path) {
  std::string_view p(path);
  const auto slash = p.find_last_of('/');
  return std::string(slash == std::string_view::npos ? p : p.substr(slash + 1));
}

std::string describe(const CudaErrorInfo& i) {
  return i.call + " failed with " + i.name + " (" + std::to_string(static_cast<int>(i.code)) +
         "): " + i.description + " [" + i.call_text + " at " + i.file + ":" +
         std::to_string(i.line) + "]";
}

bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

}  // namespace

CudaError::CudaError(CudaErrorInfo info)
    : std::runtime_error(describe(info)), info_(std::move(info)) {}

bool is_context_fatal(CUresult code) noexcept {
  switch (code) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_TENSOR_MEMORY_LEAK:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case CUDA_ERROR_CONTAINED:
    case CUDA_ERROR_EXTERNAL_DEVICE:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_SYSTEM_NOT_READY:
    // Unknown is what a wedged device tends to return; assume the worst.
    case CUDA_ERROR_UNKNOWN: return true;
    default: return false;
  }
}

std::string error_name(CUresult code) {
  const char* s = nullptr;
  if (const DriverApi* drv = loaded_driver();
      drv != nullptr && drv->cuGetErrorName(code, &s) == CUDA_SUCCESS && s != nullptr) {
    return s;
  }
  return "CUresult " + std::to_string(static_cast<int>(code));
}

std::string error_string(CUresult code) {
  const char* s = nullptr;
  if (const DriverApi* drv = loaded_driver();
      drv != nullptr && drv->cuGetErrorString(code, &s) == CUDA_SUCCESS && s != nullptr) {
    return s;
  }
  return "unrecognized CUDA error code";
}

std::string call_name(std::string_view text) {
  // The first identifier that starts with "cu" and is followed by '(' is the API function;
  // this skips qualifiers like "drv." or "detail::driver()." in front of it.
  for (std::size_t i = 0; i + 2 < text.size(); ++i) {
    if (text[i] != 'c' || text[i + 1] != 'u' || (i > 0 && is_ident_char(text[i - 1]))) {
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && is_ident_char(text[end])) ++end;
    std::size_t paren = end;
    while (paren < text.size() && std::isspace(static_cast<unsigned char>(text[paren]))) ++paren;
    if (paren < text.size() && text[paren] == '(') return std::string(text.substr(i, end - i));
  }
  return std::string(text);
}

CudaErrorInfo make_cuda_error_info(CUresult code, const char* call_text, const char* file,
                                   int line) {
  CudaErrorInfo info;
  info.code = code;
  info.call_text = call_text;
  info.call = call_name(call_text);
  info.name = error_name(code);
  info.description = error_string(code);
  info.file = basename_of(file);
  info.line = line;
  return info;
}

void throw_cuda_error(CUresult code, const char* call_text, const char* file, int line) {
  throw CudaError(make_cuda_error_info(code, call_text, file, line));
}

}  // namespace kernelopt::detail
