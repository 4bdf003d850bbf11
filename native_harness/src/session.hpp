// One device's primary context, the harness's own stream and the L2 flush scratch buffer.
// `run` uses a session for one request; `serve` keeps it across requests.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <optional>
#include <string>

#include "cuda_raii.hpp"
#include "driver.hpp"
#include "support.hpp"

namespace kernelopt {

// Loads the driver and calls cuInit once. Throws DriverUnavailable.
const detail::DriverApi& init_driver();

// Throws DriverUnavailable when `ordinal` names no device.
CUdevice get_device(const detail::DriverApi& drv, int ordinal);

class Session {
 public:
  // Throws DriverUnavailable when the driver, the device or its context cannot be had.
  explicit Session(int ordinal);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const detail::DriverApi& drv() const noexcept { return drv_; }
  int ordinal() const noexcept { return ordinal_; }
  CUdevice device() const noexcept { return device_; }
  CUstream stream() const noexcept { return stream_; }
  const std::string& name() const noexcept { return name_; }
  const std::string& arch() const noexcept { return arch_; }

  // Whether flush_l2() does anything: false when the device reports no L2.
  bool can_flush_l2() const noexcept { return l2_bytes_ > 0; }

  // Allocates the flush scratch (twice the L2 size) if it does not exist yet; it is then kept
  // for the session. Throws CudaError (out of memory).
  void prepare_flush_l2();

  // Enqueues, on stream(), writes over the scratch buffer, so whatever the next kernel reads
  // comes from DRAM. Allocates the scratch on first use. Throws CudaError.
  void flush_l2();

  // The harness's own kernels (request field "support_module"), kept for the session.
  SupportModule& support() noexcept { return support_; }

  // After a context-fatal error every later call fails: the owner must stop using the session.
  bool broken() const noexcept { return broken_; }
  void mark_broken() noexcept { broken_ = true; }

 private:
  const detail::DriverApi& drv_;
  int ordinal_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  std::string name_;
  std::string arch_;
  std::size_t l2_bytes_ = 0;
  detail::DeviceBuffer flush_scratch_;
  SupportModule support_;
  bool broken_ = false;
};

}  // namespace kernelopt
