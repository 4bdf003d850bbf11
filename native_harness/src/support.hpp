// The harness's own device code (kernelopt_mcp/support/*.cu compiled by Python into one CUBIN):
// loaded once per session from the request's "support_module" path, reloaded when the path
// changes, and asked for its extern "C" kernels by name (ko_spin, ko_empty, ko_compare_*, ...).
#pragma once

#include <cuda.h>

#include <map>
#include <string>

namespace kernelopt {

class SupportModule {
 public:
  SupportModule() = default;
  ~SupportModule() { reset(); }
  SupportModule(const SupportModule&) = delete;
  SupportModule& operator=(const SupportModule&) = delete;

  // Loads the CUBIN at `path` unless it is the one already loaded (the same path: Python
  // names each build by its source hash, so a new build is a new path). Throws IoError
  // (unreadable file), BadRequest (the driver refuses the image: the message says how to
  // rebuild it) and CudaError when the refusal destroyed the context.
  void load(const std::string& path);

  bool loaded() const noexcept { return module_ != nullptr; }
  const std::string& path() const noexcept { return path_; }

  // The kernel `name`, looked up once and cached. Throws BadRequest when the loaded module
  // lacks it (an older support module than this harness expects) or none is loaded.
  CUfunction function(const std::string& name);

  // Unloads the module; must run while the context is still alive (Session's destructor).
  void reset() noexcept;

 private:
  CUmodule module_ = nullptr;
  std::string path_;
  std::map<std::string, CUfunction> functions_;
};

}  // namespace kernelopt
