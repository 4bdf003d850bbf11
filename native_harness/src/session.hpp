// One device's primary context, the harness's own stream, the L2 flush scratch buffer, and the
// protocol 2 state kept between requests (input cache, support module).
// `run` uses a session for one request; `serve` keeps it across requests. (The harness's session:
// not kernelopt_mcp's evaluation Session, a workload prepared on a GPU, nor an MCP client's.)
#pragma once

#include <cuda.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "cuda_raii.hpp"
#include "driver.hpp"
#include "input_cache.hpp"
#include "staging.hpp"
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

  // Enqueues, on stream(), a pass over the scratch buffer, so whatever the next kernel reads
  // comes from DRAM. With the support module's ko_flush_l2 the pass reads: every dirty line is
  // written back during the flush and L2 is left holding clean lines of the scratch (as after
  // Nsight Compute's cache control), so the next kernel pays no write-back of the flush's lines.
  // Without it the pass is a memset, whose dirty lines the next kernel evicts. Allocates the
  // scratch on first use. Throws CudaError.
  void flush_l2();

  int sm_count() const noexcept { return sm_count_; }
  std::size_t total_memory_bytes() const noexcept { return total_memory_bytes_; }

  // Device memory for a case, evicting input cache entries while the device is out of memory.
  // Throws CudaError.
  detail::DeviceBuffer allocate(std::size_t bytes);

  // Device memory for staged data (input, timed input, expected and timed expected copies):
  // call protect_staged() once its upload has completed. Evicts input cache entries while the
  // device is out of memory. Throws CudaError.
  detail::DeviceBuffer allocate_staged(std::size_t bytes);
  // Maps a buffer from allocate_staged() read-only for kernels, where staging allows.
  void protect_staged(const detail::DeviceBuffer& buffer) { staging_.protect(buffer); }
  // Hides staged expected values from kernels between compares, and maps them back for one
  // (staging.hpp: Staging::hide, Staging::reveal).
  void hide_staged(const detail::DeviceBuffer& buffer) { staging_.hide(buffer); }
  void reveal_staged(const detail::DeviceBuffer& buffer) { staging_.reveal(buffer); }
  // Whether staged data is mapped read-only (PROTOCOL.md, "Read-only staging"), and why not.
  const detail::Staging& staging() const noexcept { return staging_; }

  // The input cache (protocol 2): lives as long as the session.
  InputCache& input_cache() noexcept { return input_cache_; }

  // The harness's own kernels (request field "support_module"), kept for the session and
  // replaced when a request names another file.
  SupportModule& support() noexcept { return support_; }
  // At least `bytes` (and support_result_bytes) of device memory for the support kernels'
  // results, allocated on first use and kept; grown (after a wait, so no queued work still uses
  // the old one) when a case needs more. Call with the case's size before its first launch.
  // Throws CudaError.
  CUdeviceptr support_scratch(std::size_t bytes = support_result_bytes);
  // At least `bytes` of pinned host memory the checks after a launch copy into, so that their
  // copies queue and one wait reads them all; kept and grown. The contents are the caller's
  // until its next call. Throws CudaError.
  std::uint8_t* readback(std::size_t bytes);

  // time_work's launch_overhead_ms (an empty kernel timed the way `key` names), reused while
  // younger than launch_overhead_reuse: the floor is the device's and the timing mode's, not
  // the kernel's, and measuring it takes up to 210 launches for every timed case.
  std::optional<double> launch_overhead(const std::string& key) const;
  void keep_launch_overhead(const std::string& key, double ms);

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
  int sm_count_ = 0;
  std::size_t total_memory_bytes_ = 0;
  detail::DeviceBuffer flush_scratch_;
  detail::Staging staging_;  // before input_cache_, which allocates through it
  InputCache input_cache_{staging_};
  SupportModule support_;
  detail::DeviceBuffer support_scratch_;
  detail::PinnedHost readback_;
  std::map<std::string, std::pair<double, std::chrono::steady_clock::time_point>> launch_overheads_;
  bool broken_ = false;
};

}  // namespace kernelopt
