// The CUDA driver API, resolved at run time from libcuda.so.1.
//
// The harness must build and answer --version and malformed requests on machines without a
// driver, and must never pick up a stub libcuda at link time, so nothing links against
// libcuda: load_driver() dlopens it and fills a table of function pointers.
#pragma once

#include <cuda.h>

#if CUDA_VERSION < 12000
#error "kernelopt-harness needs cuda.h from CUDA 12.0 or newer"
#endif
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
// The table resolves the legacy-stream symbols; per-thread variants would silently differ.
#error "do not build kernelopt-harness with CUDA_API_PER_THREAD_DEFAULT_STREAM"
#endif

namespace kernelopt::detail {

// Members carry the names of the driver API. Where cuda.h #defines a name to a versioned
// symbol (cuMemAlloc -> cuMemAlloc_v2, cuEventElapsedTime -> cuEventElapsedTime_v2) the
// preprocessor renames the member the same way, so `drv.cuMemAlloc(...)` calls exactly the
// ABI that this cuda.h declares, and driver.cpp resolves that versioned symbol.
struct DriverApi {
// NOLINTNEXTLINE(bugprone-macro-parentheses): `name` is a declarator, not an expression.
#define KO_DRIVER_FN(name) decltype(&::name) name = nullptr
  KO_DRIVER_FN(cuGetErrorName);
  KO_DRIVER_FN(cuGetErrorString);
  KO_DRIVER_FN(cuInit);
  KO_DRIVER_FN(cuDriverGetVersion);
  KO_DRIVER_FN(cuDeviceGetCount);
  KO_DRIVER_FN(cuDeviceGet);
  KO_DRIVER_FN(cuDeviceGetName);
  KO_DRIVER_FN(cuDeviceGetAttribute);
  KO_DRIVER_FN(cuDeviceTotalMem);
  KO_DRIVER_FN(cuDeviceGetUuid);
  KO_DRIVER_FN(cuDeviceGetPCIBusId);
  KO_DRIVER_FN(cuDevicePrimaryCtxRetain);
  KO_DRIVER_FN(cuDevicePrimaryCtxRelease);
  KO_DRIVER_FN(cuCtxSetCurrent);
  KO_DRIVER_FN(cuStreamCreate);
  KO_DRIVER_FN(cuStreamDestroy);
  KO_DRIVER_FN(cuStreamSynchronize);
  KO_DRIVER_FN(cuEventCreate);
  KO_DRIVER_FN(cuEventDestroy);
  KO_DRIVER_FN(cuEventRecord);
  KO_DRIVER_FN(cuEventSynchronize);
  KO_DRIVER_FN(cuEventElapsedTime);
  KO_DRIVER_FN(cuModuleLoadDataEx);
  KO_DRIVER_FN(cuModuleUnload);
  KO_DRIVER_FN(cuModuleGetFunction);
  KO_DRIVER_FN(cuFuncGetAttribute);
  KO_DRIVER_FN(cuFuncSetAttribute);
  KO_DRIVER_FN(cuOccupancyMaxActiveBlocksPerMultiprocessor);
  KO_DRIVER_FN(cuMemAlloc);
  KO_DRIVER_FN(cuMemFree);
  KO_DRIVER_FN(cuMemcpyHtoDAsync);
  KO_DRIVER_FN(cuMemcpyDtoHAsync);
  KO_DRIVER_FN(cuMemcpyDtoDAsync);
  KO_DRIVER_FN(cuMemsetD8Async);
  KO_DRIVER_FN(cuMemsetD32Async);
  KO_DRIVER_FN(cuLaunchKernel);
  // Blocking timing: the release flag of ko_spin lives in host memory mapped for the device.
  KO_DRIVER_FN(cuMemHostAlloc);
  KO_DRIVER_FN(cuMemFreeHost);
  KO_DRIVER_FN(cuMemHostGetDevicePointer);
  // Graph timing: launches captured from the stream and replayed as one graph.
  KO_DRIVER_FN(cuStreamBeginCapture);
  KO_DRIVER_FN(cuStreamEndCapture);
  KO_DRIVER_FN(cuGraphInstantiate);
  KO_DRIVER_FN(cuGraphLaunch);
  KO_DRIVER_FN(cuGraphDestroy);
  KO_DRIVER_FN(cuGraphExecDestroy);
  // Optional: virtual memory management, for staged data mapped read-only (staging.hpp).
  // nullptr when the driver lacks one of them; the harness then falls back to cuMemAlloc.
  KO_DRIVER_FN(cuMemCreate);
  KO_DRIVER_FN(cuMemRelease);
  KO_DRIVER_FN(cuMemAddressReserve);
  KO_DRIVER_FN(cuMemAddressFree);
  KO_DRIVER_FN(cuMemMap);
  KO_DRIVER_FN(cuMemUnmap);
  KO_DRIVER_FN(cuMemSetAccess);
  KO_DRIVER_FN(cuMemGetAllocationGranularity);
#if CUDA_VERSION >= 12000
  // Optional (driver 12.0+): encodes the CUtensorMaps of a case's "tensor_maps"
  // (tensor_map.hpp). nullptr when the driver lacks it; requests with tensor maps are refused.
  KO_DRIVER_FN(cuTensorMapEncodeTiled);
#endif
#if CUDA_VERSION >= 12040
  // Optional (driver 12.4+): lets the harness check the request's arguments against the
  // kernel's parameter list before launching. nullptr when the driver lacks it.
  KO_DRIVER_FN(cuFuncGetParamInfo);
#endif
#undef KO_DRIVER_FN
};

// Loads libcuda.so.1 (or $KERNELOPT_LIBCUDA) once and resolves the table. Throws
// DriverUnavailable when the library or a required symbol is missing. Does not call cuInit.
const DriverApi& load_driver();

// The table if load_driver() has succeeded, else nullptr. For error formatting paths that
// must not themselves fail.
const DriverApi* loaded_driver() noexcept;

}  // namespace kernelopt::detail
