// Device buffers for staged data (PROTOCOL.md, "Read-only staging"): the device copies of
// input files and float64 expected values that the harness keeps in the candidate's context.
// Each is its own virtual memory mapping (cuMemCreate + cuMemAddressReserve + cuMemMap), and
// once uploaded it is mapped read-only for the device, so a kernel writing into it anywhere
// faults instead of silently corrupting what it (or a later kernel) is judged against.
// Without driver or device support the buffers come from cuMemAlloc and stay writable.
// Expected values are more than read-only: they are hidden (unmapped, their memory kept)
// whenever no compare is reading them, so a kernel cannot read its answers either.
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

  // Whether expected values are hidden between compares, and why not (empty when they are).
  // Needs readonly(); KERNELOPT_HARNESS_HIDE_EXPECTED=0 turns it off.
  bool hides() const noexcept { return readonly_ && hides_; }
  const std::string& hide_reason() const noexcept { return readonly_ ? hide_reason_ : reason_; }

  // Takes a protected buffer out of the address space (cuMemUnmap; its memory and address
  // stay reserved): any kernel touching it faults, so none can read it. No kernel may be
  // using it (the caller synchronizes). A no-op when !hides(), for a cuMemAlloc buffer, or
  // one hidden already. A driver that refuses (other than context-fatally, which throws)
  // turns hiding off for the session, with the reason; the buffer stays mapped.
  void hide(const DeviceBuffer& buffer);
  // Maps a hidden buffer back at its address, read-only, for the harness's own kernels and
  // copies. Every candidate launch before must have finished (the caller synchronizes).
  // Throws CudaError: a hidden buffer that cannot come back cannot be compared against.
  void reveal(const DeviceBuffer& buffer);

 private:
  CUresult set_access(const DeviceBuffer& buffer, CUmemAccess_flags flags) const;

  const DriverApi* drv_ = nullptr;
  CUdevice device_ = 0;
  std::size_t granularity_ = 0;
  bool readonly_ = false;
  bool hides_ = false;
  std::string reason_ = "not initialized";
  std::string hide_reason_ = "not initialized";
};

}  // namespace kernelopt::detail
