// One case of a request (PROTOCOL.md, "Per case, in order"), shared by runner.cpp (which runs
// the cases), case_runner.cpp (setup, launches, timing) and case_checks.cpp (device compare,
// guard and input checks, the determinism re-run and the timed check). Internal to the harness.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "check.hpp"
#include "cuda_raii.hpp"
#include "guard.hpp"
#include "request.hpp"
#include "session.hpp"

namespace kernelopt::detail {

// Where a buffer's starting contents come from: the file's bytes on the host, or a device
// copy (the input cache's entry, or an upload made once because the device needs it: inout
// restores, expected values). Empty files have neither.
struct Source {
  std::vector<std::uint8_t> host;
  std::shared_ptr<const DeviceBuffer> device;
};

struct DeviceArg {
  const KernelArg* spec = nullptr;
  BufferLayout layout;
  DeviceBuffer allocation;
  CUdeviceptr data = 0;
  Source input;           // in, inout: the input; inout restores from input.device
  Source timed_input;     // in, inout with timed_input
  Source expected;        // out, inout with expected (device, float64)
  Source timed_expected;  // out, inout with timed_expected (device, float64)
  DeviceBuffer saved;     // repeat_validation: the validation launch's output
  bool output_written = false;
};

// Kernel parameter storage: every slot is 16-byte aligned and wide enough for a pointer or
// any supported scalar, and the vector never reallocates after the pointers are taken.
struct alignas(16) ParamSlot {
  unsigned char bytes[16];
};

struct CaseState {
  std::vector<DeviceArg> buffers;
  std::vector<ParamSlot> slots;
  std::vector<void*> params;
};


enum class LaunchKind { validation, repeat, timed };

class CaseRunner {
 public:
  CaseRunner(Session& s, CUfunction f, const Request& req, const CaseSpec& spec)
      : s_(s), drv_(s.drv()), f_(f), req_(req), spec_(spec) {}

  // Appends the case's result to `cases`. Returns true when the error was fatal.
  bool run(nlohmann::json& cases);

 private:
  enum class Phase { setup, launched };

  void setup();
  Source stage(const std::string& path, std::uint64_t bytes, bool need_device);
  void copy_into(const Source& src, CUdeviceptr dst, std::uint64_t bytes);
  void launch();
  void sync() { KO_CU(drv_.cuStreamSynchronize(s_.stream())); }
  void compare_outputs(LaunchKind kind, nlohmann::json& result);
  void write_output(DeviceArg& d);
  void write_outputs();
  void check_guards(nlohmann::json& result);
  void check_inputs(nlohmann::json& result, bool timed);
  std::optional<ByteDiff> diff_against(CUdeviceptr data, const Source& src, std::uint64_t bytes);
  static void set_status(nlohmann::json& result);
  void run_repeat(nlohmann::json& result);
  void run_timed_check(nlohmann::json& result);
  void prepare_timed_launch(bool flush);
  nlohmann::json occupancy();
  void drain() noexcept { drv_.cuStreamSynchronize(s_.stream()); }

  Session& s_;
  const detail::DriverApi& drv_;
  CUfunction f_;
  const Request& req_;
  const CaseSpec& spec_;
  CaseState st_;
};

}  // namespace kernelopt::detail
