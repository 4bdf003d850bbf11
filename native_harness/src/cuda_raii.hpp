// Owners for driver objects, so every exit path of a case frees what it allocated.
// Destructors ignore errors: after a fatal error the context is gone anyway, and a destructor
// must not throw.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "check.hpp"
#include "driver.hpp"

namespace kernelopt::detail {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    KO_CU(load_driver().cuMemAlloc(&ptr_, bytes));
  }
  // Takes over a virtual memory mapping (staging.cpp): `handle` mapped at `ptr` over
  // `mapped` bytes (`bytes` rounded up to the allocation granularity), the whole reservation.
  DeviceBuffer(CUdeviceptr ptr, std::size_t bytes, std::size_t mapped,
               CUmemGenericAllocationHandle handle) noexcept
      : ptr_(ptr), bytes_(bytes), mapped_(mapped), handle_(handle) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, 0)),
        bytes_(std::exchange(o.bytes_, 0)),
        mapped_(std::exchange(o.mapped_, 0)),
        handle_(std::exchange(o.handle_, 0)),
        unmapped_(std::exchange(o.unmapped_, false)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, 0);
      bytes_ = std::exchange(o.bytes_, 0);
      mapped_ = std::exchange(o.mapped_, 0);
      handle_ = std::exchange(o.handle_, 0);
      unmapped_ = std::exchange(o.unmapped_, false);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr get() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return bytes_; }
  // A virtual memory mapping: its access flags can be changed over mapped_size() bytes.
  bool mapped() const noexcept { return handle_ != 0; }
  std::size_t mapped_size() const noexcept { return mapped_; }
  CUmemGenericAllocationHandle handle() const noexcept { return handle_; }
  // A mapping taken out of the address space for now (Staging::hide): its physical memory
  // and reservation are kept, so Staging::reveal can map it back at the same address. The
  // state of the mapping, not of the contents: it may change on a const buffer.
  bool unmapped() const noexcept { return unmapped_; }
  void set_unmapped(bool unmapped) const noexcept { unmapped_ = unmapped; }

  void reset() noexcept {
    if (ptr_ != 0) {
      if (const DriverApi* drv = loaded_driver()) {
        if (handle_ != 0) {
          if (!unmapped_) drv->cuMemUnmap(ptr_, mapped_);
          drv->cuMemAddressFree(ptr_, mapped_);
          drv->cuMemRelease(handle_);
        } else {
          drv->cuMemFree(ptr_);
        }
      }
      ptr_ = 0;
      bytes_ = 0;
      mapped_ = 0;
      handle_ = 0;
      unmapped_ = false;
    }
  }

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
  std::size_t mapped_ = 0;
  CUmemGenericAllocationHandle handle_ = 0;
  mutable bool unmapped_ = false;
};

// Page-locked host memory (cuMemHostAlloc): device-to-host copies into it are truly
// asynchronous, so several can be queued and waited for once.
class PinnedHost {
 public:
  PinnedHost() = default;
  explicit PinnedHost(std::size_t bytes) : bytes_(bytes) {
    void* p = nullptr;
    // DEVICEMAP as every pinned allocation of the harness (HostFlag); PORTABLE: any context
    KO_CU(load_driver().cuMemHostAlloc(&p, bytes,
                                       CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    ptr_ = static_cast<std::uint8_t*>(p);
  }
  ~PinnedHost() { reset(); }
  PinnedHost(PinnedHost&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PinnedHost& operator=(PinnedHost&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  PinnedHost(const PinnedHost&) = delete;
  PinnedHost& operator=(const PinnedHost&) = delete;

  std::uint8_t* get() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return bytes_; }

  void reset() noexcept {
    if (ptr_ != nullptr) {
      if (const DriverApi* drv = loaded_driver()) drv->cuMemFreeHost(ptr_);
      ptr_ = nullptr;
      bytes_ = 0;
    }
  }

 private:
  std::uint8_t* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

class Event {
 public:
  Event() { KO_CU(load_driver().cuEventCreate(&event_, CU_EVENT_DEFAULT)); }
  ~Event() {
    if (event_ != nullptr) {
      if (const DriverApi* drv = loaded_driver()) drv->cuEventDestroy(event_);
    }
  }
  Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  Event& operator=(Event&&) = delete;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  CUevent get() const noexcept { return event_; }

 private:
  CUevent event_ = nullptr;
};

class Module {
 public:
  Module() = default;
  explicit Module(CUmodule m) : module_(m) {}
  ~Module() { reset(); }
  Module(Module&& o) noexcept : module_(std::exchange(o.module_, nullptr)) {}
  Module& operator=(Module&& o) noexcept {
    if (this != &o) {
      reset();
      module_ = std::exchange(o.module_, nullptr);
    }
    return *this;
  }
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  CUmodule get() const noexcept { return module_; }

  void reset() noexcept {
    if (module_ != nullptr) {
      if (const DriverApi* drv = loaded_driver()) drv->cuModuleUnload(module_);
      module_ = nullptr;
    }
  }

 private:
  CUmodule module_ = nullptr;
};

}  // namespace kernelopt::detail
