// Device buffers for staged data (PROTOCOL.md, "Read-only staging"): the device copies of
// input files and float64 expected values that the harness keeps in the candidate's context.
// Each is its own virtual memory mapping (cuMemCreate + cuMemAddressReserve + cuMemMap), and
// once uploaded it is mapped read-only for the device, so a kernel writing into it anywhere
// faults instead of silently corrupting what it (or a later kernel) is judged against.
// Without driver or device support the buffers come from cuMemAlloc and stay writable.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <string>

#include "cuda_raii.hpp"
#include "driver.hpp"

namespace kernelopt::detail {

class Staging {
 public:
  // Decides, once per session, whether staged buffers can be mapped read-only: the driver has
  // the virtual memory management entry points, the device reports
  // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, and KERNELOPT_HARNESS_READONLY_STAGING
  // is not "0". Never throws: anything missing is a reason().
  void init(const DriverApi& drv, CUdevice device);

  // Whether staged buffers are mapped read-only once uploaded.
  bool readonly() const noexcept { return readonly_; }
  // Why not, when !readonly(); empty otherwise.
  const std::string& reason() const noexcept { return reason_; }

  // A device buffer of `bytes` (> 0) that the host may upload into: a read-write mapping
  // (granularity-rounded) when readonly(), else cuMemAlloc. Throws CudaError.
  DeviceBuffer allocate(std::size_t bytes) const;

  // Maps `buffer` read-only for the device; every upload into it must have completed. A
  // driver that refuses (other than with a context-fatal error, which throws CudaError)
  // turns readonly() off for the rest of the session, with the reason, and the buffer stays
  // writable.
  void protect(const DeviceBuffer& buffer);

 private:
  CUresult set_access(const DeviceBuffer& buffer, CUmemAccess_flags flags) const;

  const DriverApi* drv_ = nullptr;
  CUdevice device_ = 0;
  std::size_t granularity_ = 0;
  bool readonly_ = false;
  std::string reason_ = "not initialized";
};

}  // namespace kernelopt::detail
