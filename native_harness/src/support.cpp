#include "support.hpp"

#include "check.hpp"
#include "driver.hpp"
#include "errors.hpp"
#include "file_io.hpp"

namespace kernelopt {

void SupportModule::load(const std::string& path) {
  if (module_ != nullptr && path == path_) return;
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
                     "): rebuild it for this device with "
                     "kernelopt_mcp.support_module.support_module(arch)");
  }
  module_ = m;
  path_ = path;
}

CUfunction SupportModule::function(const std::string& name) {
  if (module_ == nullptr) {
    throw BadRequest("support_module: required for this request but not given");
  }
  if (const auto it = functions_.find(name); it != functions_.end()) return it->second;
  CUfunction f = nullptr;
  const CUresult r = detail::load_driver().cuModuleGetFunction(&f, module_, name.c_str());
  if (r != CUDA_SUCCESS) {
    if (detail::is_context_fatal(r)) {
      detail::throw_cuda_error(r, "cuModuleGetFunction(support_module)", __FILE__, __LINE__);
    }
    throw BadRequest("support_module: " + path_ + " has no kernel \"" + name +
                     "\": it is older than this harness; rebuild it with "
                     "kernelopt_mcp.support_module.support_module(arch)");
  }
  functions_.emplace(name, f);
  return f;
}

void SupportModule::reset() noexcept {
  if (module_ != nullptr) {
    if (const auto* drv = detail::loaded_driver()) drv->cuModuleUnload(module_);
  }
  module_ = nullptr;
  path_.clear();
  functions_.clear();
}

}  // namespace kernelopt
