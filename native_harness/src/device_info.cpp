#include "device_info.hpp"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "check.hpp"
#include "errors.hpp"
#include "session.hpp"

namespace kernelopt {
namespace {

int attribute(const detail::DriverApi& drv, CUdevice device, CUdevice_attribute attr) {
  int value = 0;
  KO_CU(drv.cuDeviceGetAttribute(&value, attr, device));
  return value;
}

}  // namespace

namespace detail {

std::string format_uuid(const unsigned char (&bytes)[16]) {
  std::string out;
  char hex[3];
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    std::snprintf(hex, sizeof hex, "%02x", bytes[i]);
    out += hex;
  }
  return out;
}

std::string format_driver_version(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

double peak_memory_bandwidth(long long memory_clock_khz, long long bus_width_bits) {
  return 2.0 * static_cast<double>(memory_clock_khz) * 1000.0 *
         (static_cast<double>(bus_width_bits) / 8.0);
}

}  // namespace detail

std::string device_name(const detail::DriverApi& drv, CUdevice device) {
  char name[256] = {};
  KO_CU(drv.cuDeviceGetName(name, static_cast<int>(sizeof name - 1), device));
  return name;
}

std::string arch_name(const detail::DriverApi& drv, CUdevice device) {
  const int major = attribute(drv, device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  const int minor = attribute(drv, device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  return "sm_" + std::to_string(major * 10 + minor);
}

nlohmann::json device_info_json(int ordinal) {
  const auto& drv = init_driver();
  const CUdevice dev = get_device(drv, ordinal);
  try {
    // Essential properties fail the query; the rest degrade to null, so one attribute that a
    // future driver retires does not take the whole report down.
    auto attr = [&](CUdevice_attribute a) -> nlohmann::json {
      int value = 0;
      const CUresult r = drv.cuDeviceGetAttribute(&value, a, dev);
      if (r == CUDA_SUCCESS) return value;
      if (detail::is_context_fatal(r)) {
        detail::throw_cuda_error(r, "cuDeviceGetAttribute(...)", __FILE__, __LINE__);
      }
      return nullptr;
    };
    auto flag = [&](CUdevice_attribute a) -> nlohmann::json {
      const auto v = attr(a);
      return v.is_null() ? v : nlohmann::json(v.get<int>() != 0);
    };
    int count = 0;
    KO_CU(drv.cuDeviceGetCount(&count));
    int driver_version = 0;
    KO_CU(drv.cuDriverGetVersion(&driver_version));
    std::size_t total_memory = 0;
    KO_CU(drv.cuDeviceTotalMem(&total_memory, dev));
    CUuuid uuid{};
    KO_CU(drv.cuDeviceGetUuid(&uuid, dev));
    unsigned char uuid_bytes[16];
    for (int i = 0; i < 16; ++i) uuid_bytes[i] = static_cast<unsigned char>(uuid.bytes[i]);
    char pci[64] = {};
    KO_CU(drv.cuDeviceGetPCIBusId(pci, static_cast<int>(sizeof pci - 1), dev));

    const int major = attribute(drv, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    const int minor = attribute(drv, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    const auto memory_clock_khz = attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
    const auto bus_width = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);

    nlohmann::json j;
    j["ordinal"] = ordinal;
    j["device_count"] = count;
    j["name"] = device_name(drv, dev);
    j["uuid"] = detail::format_uuid(uuid_bytes);
    j["pci_bus_id"] = std::string(pci);
    j["compute_capability"] = {major, minor};
    j["arch"] = "sm_" + std::to_string(major * 10 + minor);
    j["sm_count"] = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    j["clock_khz"] = attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    j["memory_clock_khz"] = memory_clock_khz;
    j["memory_bus_width_bits"] = bus_width;
    j["total_memory_bytes"] = static_cast<std::uint64_t>(total_memory);
    j["l2_cache_bytes"] = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    j["persisting_l2_max_bytes"] = attr(CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE);
    j["shared_memory_per_sm_bytes"] =
        attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    j["shared_memory_per_block_bytes"] = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    j["shared_memory_per_block_optin_bytes"] =
        attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    j["registers_per_sm"] = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
    j["registers_per_block"] = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
    j["max_threads_per_block"] = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    j["max_threads_per_sm"] = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
    j["max_blocks_per_sm"] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
    j["warp_size"] = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    j["max_block_dim"] = {attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X),
                          attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y),
                          attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)};
    j["max_grid_dim"] = {attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X),
                         attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y),
                         attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)};
    j["ecc_enabled"] = flag(CU_DEVICE_ATTRIBUTE_ECC_ENABLED);
    j["driver_version"] = driver_version;
    j["driver_version_str"] = detail::format_driver_version(driver_version);
    j["peak_memory_bandwidth_bytes_per_s"] =
        memory_clock_khz.is_null() || bus_width.is_null()
            ? nlohmann::json(nullptr)
            : nlohmann::json(
                  detail::peak_memory_bandwidth(memory_clock_khz.get<int>(), bus_width.get<int>()));
    j["async_engine_count"] = attr(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT);
    j["concurrent_kernels"] = flag(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS);
    return j;
  } catch (const detail::CudaError& e) {
    const auto& i = e.info();
    throw DriverUnavailable("device " + std::to_string(ordinal) + " could not be queried: " +
                                i.call + " returned " + i.name + " (" + i.description + ")",
                            static_cast<int>(i.code), i.call, i.name);
  }
}

}  // namespace kernelopt
