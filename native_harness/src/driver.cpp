#include "driver.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "errors.hpp"

namespace kernelopt::detail {
namespace {

// Stringify after macro expansion, so KO_SYMBOL(cuMemAlloc) is "cuMemAlloc_v2" with this
// cuda.h: the symbol whose ABI matches the declaration the member's type came from.
#define KO_STRINGIFY_EXPANDED(x) KO_STRINGIFY(x)
#define KO_STRINGIFY(x) #x

void* resolve(void* lib, const char* symbol) {
  dlerror();  // dlsym reports failure through dlerror, which must start out clear
  void* p = dlsym(lib, symbol);
  return dlerror() == nullptr ? p : nullptr;
}

template <typename Fn>
bool bind(void* lib, Fn& slot, const char* symbol) {
  slot = reinterpret_cast<Fn>(resolve(lib, symbol));
  return slot != nullptr;
}

std::unique_ptr<DriverApi> load() {
  const char* override_path = std::getenv("KERNELOPT_LIBCUDA");
  const std::string path =
      (override_path != nullptr && *override_path != '\0') ? override_path : "libcuda.so.1";

  // Never dlclose: the driver registers atexit handlers and threads of its own.
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    throw DriverUnavailable(path + " could not be loaded (" + (why ? why : "unknown reason") +
                            "): install the NVIDIA driver, or run on a machine with a GPU");
  }

  auto api = std::make_unique<DriverApi>();
  auto missing = [&](const char* symbol) {
    return DriverUnavailable(path + " lacks " + symbol +
                             ": the NVIDIA driver is too old for this harness (it needs a "
                             "CUDA 12 or newer driver, 525+)");
  };

#define KO_REQUIRE(member)                                        \
  do {                                                            \
    if (!bind(lib, api->member, KO_STRINGIFY_EXPANDED(member))) { \
      throw missing(KO_STRINGIFY_EXPANDED(member));               \
    }                                                             \
  } while (0)
// Falls back to the unversioned symbol where the versioned one is newer than some drivers we
// still want to run on; the signatures are identical.
#define KO_REQUIRE_OR(member, fallback)                           \
  do {                                                            \
    if (!bind(lib, api->member, KO_STRINGIFY_EXPANDED(member)) && \
        !bind(lib, api->member, fallback)) {                      \
      throw missing(KO_STRINGIFY_EXPANDED(member));               \
    }                                                             \
  } while (0)

  KO_REQUIRE(cuGetErrorName);
  KO_REQUIRE(cuGetErrorString);
  KO_REQUIRE(cuInit);
  KO_REQUIRE(cuDriverGetVersion);
  KO_REQUIRE(cuDeviceGetCount);
  KO_REQUIRE(cuDeviceGet);
  KO_REQUIRE(cuDeviceGetName);
  KO_REQUIRE(cuDeviceGetAttribute);
  KO_REQUIRE(cuDeviceTotalMem);
  KO_REQUIRE_OR(cuDeviceGetUuid, "cuDeviceGetUuid");
  KO_REQUIRE(cuDeviceGetPCIBusId);
  KO_REQUIRE(cuDevicePrimaryCtxRetain);
  KO_REQUIRE(cuDevicePrimaryCtxRelease);
  KO_REQUIRE(cuCtxSetCurrent);
  KO_REQUIRE(cuStreamCreate);
  KO_REQUIRE(cuStreamDestroy);
  KO_REQUIRE(cuStreamSynchronize);
  KO_REQUIRE(cuEventCreate);
  KO_REQUIRE(cuEventDestroy);
  KO_REQUIRE(cuEventRecord);
  KO_REQUIRE(cuEventSynchronize);
  KO_REQUIRE_OR(cuEventElapsedTime, "cuEventElapsedTime");
  KO_REQUIRE(cuModuleLoadDataEx);
  KO_REQUIRE(cuModuleUnload);
  KO_REQUIRE(cuModuleGetFunction);
  KO_REQUIRE(cuFuncGetAttribute);
  KO_REQUIRE(cuFuncSetAttribute);
  KO_REQUIRE(cuOccupancyMaxActiveBlocksPerMultiprocessor);
  KO_REQUIRE(cuMemAlloc);
  KO_REQUIRE(cuMemFree);
  KO_REQUIRE(cuMemcpyHtoDAsync);
  KO_REQUIRE(cuMemcpyDtoHAsync);
  KO_REQUIRE(cuMemcpyDtoDAsync);
  KO_REQUIRE(cuMemsetD8Async);
  KO_REQUIRE(cuMemsetD32Async);
  KO_REQUIRE(cuLaunchKernel);
  KO_REQUIRE(cuMemHostAlloc);
  KO_REQUIRE(cuMemFreeHost);
  KO_REQUIRE(cuMemHostGetDevicePointer);
  KO_REQUIRE(cuStreamBeginCapture);
  KO_REQUIRE(cuStreamEndCapture);
  KO_REQUIRE(cuGraphInstantiate);
  KO_REQUIRE(cuGraphLaunch);
  KO_REQUIRE(cuGraphDestroy);
  KO_REQUIRE(cuGraphExecDestroy);
  // Optional (staging.hpp): all or none, so a partial set counts as none.
  const bool vmm = bind(lib, api->cuMemCreate, KO_STRINGIFY_EXPANDED(cuMemCreate)) &
                   bind(lib, api->cuMemRelease, KO_STRINGIFY_EXPANDED(cuMemRelease)) &
                   bind(lib, api->cuMemAddressReserve, KO_STRINGIFY_EXPANDED(cuMemAddressReserve)) &
                   bind(lib, api->cuMemAddressFree, KO_STRINGIFY_EXPANDED(cuMemAddressFree)) &
                   bind(lib, api->cuMemMap, KO_STRINGIFY_EXPANDED(cuMemMap)) &
                   bind(lib, api->cuMemUnmap, KO_STRINGIFY_EXPANDED(cuMemUnmap)) &
                   bind(lib, api->cuMemSetAccess, KO_STRINGIFY_EXPANDED(cuMemSetAccess)) &
                   bind(lib, api->cuMemGetAllocationGranularity,
                        KO_STRINGIFY_EXPANDED(cuMemGetAllocationGranularity));
  if (!vmm) api->cuMemCreate = nullptr;
#if CUDA_VERSION >= 12000
  bind(lib, api->cuTensorMapEncodeTiled, KO_STRINGIFY_EXPANDED(cuTensorMapEncodeTiled));
#endif
#if CUDA_VERSION >= 12040
  bind(lib, api->cuFuncGetParamInfo, KO_STRINGIFY_EXPANDED(cuFuncGetParamInfo));
#endif
#undef KO_REQUIRE
#undef KO_REQUIRE_OR

  return api;
}

std::unique_ptr<DriverApi>& table() {
  static std::unique_ptr<DriverApi> api;
  return api;
}

}  // namespace

const DriverApi& load_driver() {
  // Single-threaded process: no call_once needed, and a failed load may be retried.
  auto& api = table();
  if (!api) api = load();
  return *api;
}

const DriverApi* loaded_driver() noexcept { return table().get(); }

}  // namespace kernelopt::detail
