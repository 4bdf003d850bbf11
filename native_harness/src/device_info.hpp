// Device properties for `--device-info` and the "device" object of every answer.
#pragma once

#include <cuda.h>

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "driver.hpp"

namespace kernelopt {

// Everything `--device-info` prints (PROTOCOL.md). Throws DriverUnavailable.
nlohmann::json device_info_json(int ordinal);

std::string device_name(const detail::DriverApi& drv, CUdevice device);
std::string arch_name(const detail::DriverApi& drv, CUdevice device);  // "sm_90"

namespace detail {
// 8-4-4-4-12 lowercase hex, as nvidia-smi prints it (without its "GPU-" prefix).
std::string format_uuid(const unsigned char (&bytes)[16]);
// 13000 -> "13.0", 12080 -> "12.8".
std::string format_driver_version(int version);
// Theoretical DRAM bandwidth: two transfers per memory clock over the whole bus.
double peak_memory_bandwidth(long long memory_clock_khz, long long bus_width_bits);
}  // namespace detail

}  // namespace kernelopt
