#include "staging.hpp"

#include <cstdlib>
#include <cstring>

#include "check.hpp"
#include "errors.hpp"

namespace kernelopt::detail {
namespace {

CUmemAllocationProp device_pinned(CUdevice device) {
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

std::string error_name(const DriverApi& drv, CUresult r) {
  const char* name = nullptr;
  if (drv.cuGetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr) {
    return "CUresult " + std::to_string(static_cast<int>(r));
  }
  return name;
}

}  // namespace

void Staging::init(const DriverApi& drv, CUdevice device) {
  drv_ = &drv;
  device_ = device;
  readonly_ = false;
  const char* env = std::getenv("KERNELOPT_HARNESS_READONLY_STAGING");
  if (env != nullptr && std::strcmp(env, "0") == 0) {
    reason_ = "disabled by KERNELOPT_HARNESS_READONLY_STAGING=0";
    return;
  }
  if (drv.cuMemCreate == nullptr) {
    reason_ = "the driver lacks the virtual memory management API";
    return;
  }
  int supported = 0;
  const CUresult a = drv.cuDeviceGetAttribute(
      &supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device);
  if (a != CUDA_SUCCESS || supported == 0) {
    reason_ = "the device does not support virtual memory management";
    return;
  }
  const CUmemAllocationProp prop = device_pinned(device);
  std::size_t granularity = 0;
  const CUresult g =
      drv.cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (g != CUDA_SUCCESS || granularity == 0) {
    reason_ = "cuMemGetAllocationGranularity returned " + error_name(drv, g);
    return;
  }
  granularity_ = granularity;
  readonly_ = true;
  reason_.clear();
  const char* hide = std::getenv("KERNELOPT_HARNESS_HIDE_EXPECTED");
  hides_ = hide == nullptr || std::strcmp(hide, "0") != 0;
  hide_reason_ = hides_ ? "" : "disabled by KERNELOPT_HARNESS_HIDE_EXPECTED=0";
}

DeviceBuffer Staging::allocate(std::size_t bytes) const {
  if (!readonly_) return DeviceBuffer(bytes);
  const DriverApi& drv = *drv_;
  const std::size_t mapped = (bytes + granularity_ - 1) / granularity_ * granularity_;
  const CUmemAllocationProp prop = device_pinned(device_);
  CUmemGenericAllocationHandle handle = 0;
  KO_CU(drv.cuMemCreate(&handle, mapped, &prop, 0));
  CUdeviceptr ptr = 0;
  CUresult r = drv.cuMemAddressReserve(&ptr, mapped, 0, 0, 0);
  if (r != CUDA_SUCCESS) {
    drv.cuMemRelease(handle);
    throw_cuda_error(r, "cuMemAddressReserve(...)", __FILE__, __LINE__);
  }
  r = drv.cuMemMap(ptr, mapped, 0, handle, 0);
  if (r != CUDA_SUCCESS) {
    drv.cuMemAddressFree(ptr, mapped);
    drv.cuMemRelease(handle);
    throw_cuda_error(r, "cuMemMap(...)", __FILE__, __LINE__);
  }
  DeviceBuffer buffer(ptr, bytes, mapped, handle);  // from here on, freed by its destructor
  r = set_access(buffer, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  if (r != CUDA_SUCCESS) throw_cuda_error(r, "cuMemSetAccess(PROT_READWRITE)", __FILE__, __LINE__);
  return buffer;
}

void Staging::protect(const DeviceBuffer& buffer) {
  if (!readonly_ || !buffer.mapped()) return;
  const CUresult r = set_access(buffer, CU_MEM_ACCESS_FLAGS_PROT_READ);
  if (r == CUDA_SUCCESS) return;
  if (is_context_fatal(r)) throw_cuda_error(r, "cuMemSetAccess(PROT_READ)", __FILE__, __LINE__);
  readonly_ = false;
  reason_ = "cuMemSetAccess(PROT_READ) returned " + error_name(*drv_, r);
}

void Staging::hide(const DeviceBuffer& buffer) {
  if (!hides() || !buffer.mapped() || buffer.unmapped()) return;
  const CUresult r = drv_->cuMemUnmap(buffer.get(), buffer.mapped_size());
  if (r == CUDA_SUCCESS) {
    buffer.set_unmapped(true);
    return;
  }
  if (is_context_fatal(r)) throw_cuda_error(r, "cuMemUnmap(...)", __FILE__, __LINE__);
  hides_ = false;
  hide_reason_ = "cuMemUnmap returned " + error_name(*drv_, r);
}

void Staging::reveal(const DeviceBuffer& buffer) {
  if (!buffer.unmapped()) return;
  KO_CU(drv_->cuMemMap(buffer.get(), buffer.mapped_size(), 0, buffer.handle(), 0));
  buffer.set_unmapped(false);
  const CUresult r = set_access(buffer, CU_MEM_ACCESS_FLAGS_PROT_READ);
  if (r != CUDA_SUCCESS) throw_cuda_error(r, "cuMemSetAccess(PROT_READ)", __FILE__, __LINE__);
}

CUresult Staging::set_access(const DeviceBuffer& buffer, CUmemAccess_flags flags) const {
  CUmemAccessDesc desc;
  std::memset(&desc, 0, sizeof desc);
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = device_;
  desc.flags = flags;
  return drv_->cuMemSetAccess(buffer.get(), buffer.mapped_size(), &desc, 1);
}

}  // namespace kernelopt::detail
