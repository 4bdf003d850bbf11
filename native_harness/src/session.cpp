#include "session.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "device_info.hpp"
#include "errors.hpp"
#include "support.hpp"

namespace kernelopt {
namespace {

// ko_flush_l2's launch: enough resident threads to keep every SM's loads in flight.
constexpr unsigned flush_blocks_per_sm = 8;
constexpr unsigned flush_threads = 512;

[[noreturn]] void unavailable(const std::string& what, const detail::CudaError& e) {
  const auto& i = e.info();
  throw DriverUnavailable(what + ": " + i.call + " returned " + i.name + " (" + i.description + ")",
                          static_cast<int>(i.code), i.call, i.name);
}

}  // namespace

const detail::DriverApi& init_driver() {
  static bool initialized = false;
  const auto& drv = detail::load_driver();
  if (!initialized) {
    // Eager loading makes cuModuleLoadDataEx report every problem with the module (instead of
    // the first launch doing it, where it would look like a launch failure), and keeps lazy
    // loading cost out of the first timed launch. Respect an explicit setting.
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    try {
      KO_CU(drv.cuInit(0));
    } catch (const detail::CudaError& e) {
      unavailable("the CUDA driver could not be initialized", e);
    }
    initialized = true;
  }
  return drv;
}

CUdevice get_device(const detail::DriverApi& drv, int ordinal) {
  int count = 0;
  CUdevice device = 0;
  try {
    KO_CU(drv.cuDeviceGetCount(&count));
    if (ordinal >= count) {
      throw DriverUnavailable("device " + std::to_string(ordinal) +
                              " does not exist: " + std::to_string(count) +
                              " CUDA device(s) visible" + " (check CUDA_VISIBLE_DEVICES)");
    }
    KO_CU(drv.cuDeviceGet(&device, ordinal));
  } catch (const detail::CudaError& e) {
    unavailable("device " + std::to_string(ordinal) + " is not usable", e);
  }
  return device;
}

Session::Session(int ordinal) : drv_(init_driver()), ordinal_(ordinal) {
  device_ = get_device(drv_, ordinal);
  try {
    // The primary context is the one the CUDA runtime and profilers attach to, so the numbers
    // match what users see in their own programs.
    KO_CU(drv_.cuDevicePrimaryCtxRetain(&context_, device_));
    KO_CU(drv_.cuCtxSetCurrent(context_));
    // Non-blocking: no implicit serialization with the legacy default stream.
    KO_CU(drv_.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
    name_ = device_name(drv_, device_);
    arch_ = arch_name(drv_, device_);
    int l2 = 0;
    KO_CU(drv_.cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device_));
    l2_bytes_ = l2 > 0 ? static_cast<std::size_t>(l2) : 0;
    KO_CU(drv_.cuDeviceGetAttribute(&sm_count_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device_));
    KO_CU(drv_.cuDeviceTotalMem(&total_memory_bytes_, device_));
    staging_.init(drv_, device_);
  } catch (const detail::CudaError& e) {
    if (stream_ != nullptr) drv_.cuStreamDestroy(stream_);
    if (context_ != nullptr) drv_.cuDevicePrimaryCtxRelease(device_);
    unavailable("device " + std::to_string(ordinal) + " could not be set up", e);
  }
}

Session::~Session() {
  // Everything on the device goes before the context is released.
  flush_scratch_.reset();
  support_scratch_.reset();
  readback_.reset();
  input_cache_.clear();
  support_.reset();
  if (stream_ != nullptr) drv_.cuStreamDestroy(stream_);
  if (context_ != nullptr) drv_.cuDevicePrimaryCtxRelease(device_);
}

void Session::prepare_flush_l2() {
  if (l2_bytes_ == 0 || flush_scratch_.get() != 0) return;
  // Rounded to 256 bytes so the 32-bit memset covers it exactly.
  const std::size_t bytes = (2 * l2_bytes_ + 255) / 256 * 256;
  flush_scratch_ = detail::DeviceBuffer(bytes);
  // Defined contents for the read pass (once per session, outside any timed window).
  KO_CU(drv_.cuMemsetD32Async(flush_scratch_.get(), 0u, bytes / 4, stream_));
}

detail::DeviceBuffer Session::allocate(std::size_t bytes) {
  for (;;) {
    try {
      return detail::DeviceBuffer(bytes);
    } catch (const detail::CudaError& e) {
      if (e.code() != CUDA_ERROR_OUT_OF_MEMORY || !input_cache_.evict_one()) throw;
    }
  }
}

detail::DeviceBuffer Session::allocate_staged(std::size_t bytes) {
  for (;;) {
    try {
      return staging_.allocate(bytes);
    } catch (const detail::CudaError& e) {
      if (e.code() != CUDA_ERROR_OUT_OF_MEMORY || !input_cache_.evict_one()) throw;
    }
  }
}

CUdeviceptr Session::support_scratch(std::size_t bytes) {
  bytes = std::max(bytes, support_result_bytes);
  if (support_scratch_.get() == 0 || support_scratch_.size() < bytes) {
    if (support_scratch_.get() != 0) KO_CU(drv_.cuStreamSynchronize(stream_));
    support_scratch_.reset();
    support_scratch_ = allocate(bytes);
  }
  return support_scratch_.get();
}

std::uint8_t* Session::readback(std::size_t bytes) {
  if (readback_.size() < bytes) {
    readback_.reset();
    readback_ = detail::PinnedHost(bytes);
  }
  return readback_.get();
}

// How long a measured launch overhead is reused (Session::launch_overhead): a search evaluates
// a candidate in well under this, so each one costs one measurement at most, and a change of
// clocks between candidates is still seen.
constexpr auto launch_overhead_reuse = std::chrono::seconds(10);

std::optional<double> Session::launch_overhead(const std::string& key) const {
  const auto it = launch_overheads_.find(key);
  if (it == launch_overheads_.end()) return std::nullopt;
  if (std::chrono::steady_clock::now() - it->second.second > launch_overhead_reuse)
    return std::nullopt;
  return it->second.first;
}

void Session::keep_launch_overhead(const std::string& key, double ms) {
  launch_overheads_[key] = {ms, std::chrono::steady_clock::now()};
}

void Session::flush_l2() {
  if (l2_bytes_ == 0) return;
  prepare_flush_l2();
  CUdeviceptr scratch = flush_scratch_.get();
  if (CUfunction read = support_.find("ko_flush_l2")) {
    // Measured on the H200 (vector_add 2^25, 125 us): after the memset flush the kernel took
    // 5 us longer than after this one, and Nsight Compute's duration matched this one's.
    std::uint64_t words = flush_scratch_.size() / 16;
    CUdeviceptr sink = scratch;
    void* params[] = {&scratch, &words, &sink};
    KO_CU(drv_.cuLaunchKernel(read,
                              static_cast<unsigned>(std::max(sm_count_, 1)) * flush_blocks_per_sm,
                              1, 1, flush_threads, 1, 1, 0, stream_, params, nullptr));
    return;
  }
  KO_CU(drv_.cuMemsetD32Async(scratch, 0u, flush_scratch_.size() / 4, stream_));
}

}  // namespace kernelopt
