#include "check.hpp"
#include "device_info.hpp"
#include "test_util.hpp"

using kernelopt::detail::call_name;
using kernelopt::detail::is_context_fatal;

TEST_CASE("call_name extracts the driver function from the call text") {
  CHECK(call_name("drv.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, p, nullptr)") ==
        "cuLaunchKernel");
  CHECK(call_name("drv_.cuMemAlloc(&ptr_, bytes)") == "cuMemAlloc");
  CHECK(call_name("load_driver().cuEventCreate(&event_, CU_EVENT_DEFAULT)") == "cuEventCreate");
  CHECK(call_name("cuInit (0)") == "cuInit");
  CHECK(call_name("s->accumulate(x)") == "s->accumulate(x)");
}

TEST_CASE("faults that poison the context are fatal; refused launches are not") {
  CHECK(is_context_fatal(CUDA_ERROR_ILLEGAL_ADDRESS));
  CHECK(is_context_fatal(CUDA_ERROR_LAUNCH_FAILED));
  CHECK(is_context_fatal(CUDA_ERROR_MISALIGNED_ADDRESS));
  CHECK(is_context_fatal(CUDA_ERROR_ASSERT));
  CHECK(is_context_fatal(CUDA_ERROR_ILLEGAL_INSTRUCTION));
  CHECK(is_context_fatal(CUDA_ERROR_HARDWARE_STACK_ERROR));
  CHECK(is_context_fatal(CUDA_ERROR_LAUNCH_TIMEOUT));
  CHECK(!is_context_fatal(CUDA_ERROR_INVALID_VALUE));
  CHECK(!is_context_fatal(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES));
  CHECK(!is_context_fatal(CUDA_ERROR_OUT_OF_MEMORY));
  CHECK(!is_context_fatal(CUDA_ERROR_NOT_FOUND));
  CHECK(!is_context_fatal(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE));
}

TEST_CASE("device info formatting") {
  const unsigned char uuid[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                  0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
  CHECK(kernelopt::detail::format_uuid(uuid) == "00112233-4455-6677-8899-aabbccddeeff");
  CHECK(kernelopt::detail::format_driver_version(13000) == "13.0");
  CHECK(kernelopt::detail::format_driver_version(12080) == "12.8");
  // H100 SXM: 2619 MHz HBM3, 5120-bit bus -> 3.35 TB/s
  CHECK(kernelopt::detail::peak_memory_bandwidth(2619000, 5120) == 2.0 * 2619000e3 * 640);
}

TEST_MAIN()
