#include "runner.hpp"

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "check.hpp"
#include "cuda_raii.hpp"
#include "errors.hpp"
#include "file_io.hpp"
#include "guard.hpp"
#include "response.hpp"
#include "timing.hpp"

namespace kernelopt {
namespace {

using detail::CudaError;
using detail::DeviceBuffer;
using detail::Event;
using nlohmann::json;

// Above this a kernel must opt in to dynamic shared memory (CUDA's static 48 KiB limit).
constexpr unsigned default_dynamic_shared_limit = 48 * 1024;
constexpr std::size_t jit_log_bytes = 64 * 1024;

std::string arg_path(std::size_t case_index, std::size_t arg_index) {
  return "cases[" + std::to_string(case_index) + "].args[" + std::to_string(arg_index) + "]";
}

// ---------------------------------------------------------------------------------------------
// Request-level steps
// ---------------------------------------------------------------------------------------------

// Every input must be readable and exactly the buffer's size before any case runs, so a
// request never half-runs because of a file that was wrong from the start.
void check_input_files(const Request& req) {
  for (std::size_t c = 0; c < req.cases.size(); ++c) {
    const auto& spec = req.cases[c];
    for (std::size_t a = 0; a < spec.args.size(); ++a) {
      const auto& arg = spec.args[a];
      if (arg.kind != ArgKind::buffer || arg.buffer.input.empty()) continue;
      std::uint64_t size = 0;
      try {
        size = file_size(arg.buffer.input);
      } catch (const IoError& e) {
        throw IoError(arg_path(c, a) + ".input (buffer \"" + arg.name + "\"): " + e.what());
      }
      if (size != arg.buffer.bytes) {
        throw BadRequest(arg_path(c, a) + ".input: buffer \"" + arg.name + "\" is " +
                         std::to_string(arg.buffer.bytes) + " bytes but " + arg.buffer.input +
                         " has " + std::to_string(size) + " bytes");
      }
    }
  }
}

json function_attributes(const detail::DriverApi& drv, CUfunction f) {
  auto attr = [&](CUfunction_attribute a) {
    int value = 0;
    KO_CU(drv.cuFuncGetAttribute(&value, a, f));
    return value;
  };
  json j = json::object();
  j["num_regs"] = attr(CU_FUNC_ATTRIBUTE_NUM_REGS);
  j["static_shared_bytes"] = attr(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
  j["local_bytes"] = attr(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
  j["const_bytes"] = attr(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES);
  j["max_threads_per_block"] = attr(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  j["binary_version"] = attr(CU_FUNC_ATTRIBUTE_BINARY_VERSION);
  return j;
}

// cuLaunchKernel reads one pointer per kernel parameter from kernelParams and copies as many
// bytes as the parameter's size: too few arguments make it read past our array, a scalar of
// the wrong width silently passes garbage. Where the driver can list the parameters
// (cuFuncGetParamInfo, 12.4+), mismatches become bad requests instead.
void check_parameters(const detail::DriverApi& drv, CUfunction f, const Request& req) {
#if CUDA_VERSION >= 12040
  if (drv.cuFuncGetParamInfo == nullptr) return;
  std::vector<std::size_t> sizes;
  // CUDA caps a kernel's parameters at 32764 bytes, so at most that many parameters.
  for (std::size_t i = 0; i < 32768; ++i) {
    std::size_t offset = 0;
    std::size_t size = 0;
    const CUresult r = drv.cuFuncGetParamInfo(f, i, &offset, &size);
    if (r == CUDA_ERROR_INVALID_VALUE) break;  // past the last parameter
    if (r != CUDA_SUCCESS) return;             // the driver cannot tell: launch unchecked
    sizes.push_back(size);
  }
  // A kernel listed with no parameters may also be a driver that cannot introspect this
  // module; extra kernelParams entries are harmless, so only a real list is enforced.
  if (sizes.empty()) return;

  for (std::size_t c = 0; c < req.cases.size(); ++c) {
    const auto& args = req.cases[c].args;
    if (args.size() != sizes.size()) {
      throw BadRequest("cases[" + std::to_string(c) + "].args: kernel \"" + req.entry +
                       "\" takes " + std::to_string(sizes.size()) + " parameter(s) but " +
                       std::to_string(args.size()) + " are given");
    }
    for (std::size_t a = 0; a < args.size(); ++a) {
      const bool is_buffer = args[a].kind == ArgKind::buffer;
      const std::size_t given =
          is_buffer ? sizeof(CUdeviceptr) : scalar_size(args[a].scalar.dtype);
      if (given != sizes[a]) {
        throw BadRequest(
            arg_path(c, a) + ": kernel parameter " + std::to_string(a) + " of \"" + req.entry +
            "\" is " + std::to_string(sizes[a]) + " bytes but " +
            (is_buffer ? std::string("a buffer is passed as an 8-byte pointer")
                       : "dtype " + std::string(scalar_type_name(args[a].scalar.dtype)) +
                             " is " + std::to_string(given) + " bytes"));
      }
    }
  }
#else
  (void)drv;
  (void)f;
  (void)req;
#endif
}

std::string jit_log(const std::vector<char>& error_log, const std::vector<char>& info_log) {
  const std::string error(error_log.data(), strnlen(error_log.data(), error_log.size()));
  const std::string info(info_log.data(), strnlen(info_log.data(), info_log.size()));
  if (error.empty()) return info;
  if (info.empty()) return error;
  return error + "\n" + info;
}

// ---------------------------------------------------------------------------------------------
// One case
// ---------------------------------------------------------------------------------------------

struct DeviceArg {
  const KernelArg* spec = nullptr;
  BufferLayout layout;
  DeviceBuffer allocation;
  CUdeviceptr data = 0;
  DeviceBuffer pristine;                  // inout: the input, to restore before timed launches
  std::vector<std::uint8_t> host_input;   // in: what the buffer must still hold afterwards
};

// Kernel parameter storage: every slot is 16-byte aligned and wide enough for a pointer or
// any supported scalar, and the vector never reallocates after the pointers are taken.
struct alignas(16) ParamSlot {
  unsigned char bytes[16];
};

struct CaseState {
  // Host copies of in/inout inputs until their uploads have completed.
  std::vector<std::vector<std::uint8_t>> inputs;
  std::vector<DeviceArg> buffers;
  std::vector<ParamSlot> slots;
  std::vector<void*> params;
};

class CaseRunner {
 public:
  CaseRunner(Session& s, CUfunction f, const Request& req, const CaseSpec& spec)
      : s_(s), drv_(s.drv()), f_(f), req_(req), spec_(spec) {}

  // Appends the case's result to `cases`. Returns true when the error was fatal.
  bool run(json& cases);

 private:
  enum class Phase { setup, launched };

  void setup();
  void launch();
  void sync() { KO_CU(drv_.cuStreamSynchronize(s_.stream())); }
  void write_outputs();
  void check_guards(json& result);
  void check_inputs(json& result);
  void prepare_timed_launch(bool flush);
  json occupancy();
  void drain() noexcept { drv_.cuStreamSynchronize(s_.stream()); }

  Session& s_;
  const detail::DriverApi& drv_;
  CUfunction f_;
  const Request& req_;
  const CaseSpec& spec_;
  CaseState st_;
};

bool CaseRunner::run(json& cases) {
  json result = json::object();
  result["name"] = spec_.name;
  result["status"] = "ok";
  result["error"] = nullptr;
  result["guard_violations"] = json::array();
  result["modified_inputs"] = json::array();
  result["occupancy_blocks_per_sm"] = nullptr;
  result["timing"] = nullptr;

  Phase phase = Phase::setup;
  try {
    setup();
    result["occupancy_blocks_per_sm"] = occupancy();
    launch();
    phase = Phase::launched;
    sync();

    write_outputs();
    check_guards(result);
    check_inputs(result);
    if (!result["guard_violations"].empty()) {
      result["status"] = "out_of_bounds_write";
    } else if (!result["modified_inputs"].empty()) {
      result["status"] = "input_modified";
    }
    if (result["status"] == "ok" && spec_.timing) {
      const bool flush = req_.flush_l2 && s_.can_flush_l2();
      result["timing"] = time_work(
          s_, *spec_.timing, {[&] { prepare_timed_launch(flush); }, [&] { launch(); }}, flush);
    }
  } catch (const CudaError& e) {
    result["error"] = case_error(e.info());
    // Once the kernel has run, any failure means the context may be poisoned: the launch
    // itself was accepted, so what fails now is the kernel's doing.
    const bool fatal = phase == Phase::launched || detail::is_context_fatal(e.code());
    result["status"] = fatal ? "runtime_error" : "invalid_launch";
    if (fatal) {
      s_.mark_broken();
    } else {
      drain();  // cuMemFree must not race copies still queued on the stream
    }
    cases.push_back(std::move(result));
    return fatal;
  } catch (...) {
    // IoError, bad_alloc: the request fails, but queued work must finish before the case's
    // buffers are freed on the way out.
    if (!s_.broken()) drain();
    throw;
  }
  cases.push_back(std::move(result));
  return false;
}

void CaseRunner::setup() {
  // Read every input before enqueuing any device work: a failing read then leaves nothing
  // in flight.
  auto& inputs = st_.inputs;
  inputs.resize(spec_.args.size());
  for (std::size_t i = 0; i < spec_.args.size(); ++i) {
    const auto& arg = spec_.args[i];
    if (arg.kind != ArgKind::buffer || arg.buffer.role == BufferRole::out) continue;
    inputs[i] = read_file(arg.buffer.input);
    if (inputs[i].size() != arg.buffer.bytes) {
      throw IoError(arg.buffer.input + " changed size while the harness was running");
    }
  }

  const CUstream stream = s_.stream();
  st_.slots.resize(spec_.args.size());
  st_.params.resize(spec_.args.size());
  st_.buffers.reserve(spec_.args.size());
  for (std::size_t i = 0; i < spec_.args.size(); ++i) {
    const auto& arg = spec_.args[i];
    ParamSlot& slot = st_.slots[i];
    std::memset(slot.bytes, 0, sizeof slot.bytes);
    st_.params[i] = slot.bytes;

    if (arg.kind == ArgKind::scalar) {
      std::memcpy(slot.bytes, arg.scalar.raw.data(), arg.scalar.raw.size());
      continue;
    }

    const auto& b = arg.buffer;
    // Owned by the case state before anything is queued on it, so an exception below frees
    // it only after run() has drained the stream.
    DeviceArg& d = st_.buffers.emplace_back();
    d.spec = &arg;
    d.layout = make_layout(b.bytes, req_.guard_bytes);
    d.allocation = DeviceBuffer(d.layout.total_bytes);
    d.data = d.allocation.get() + d.layout.data_offset;
    // Guards, the alignment slack and (until overwritten below) the data all start as the
    // pattern; only the guard and slack bytes are checked for it.
    KO_CU(drv_.cuMemsetD8Async(d.allocation.get(), guard_pattern, d.layout.total_bytes, stream));
    if (b.bytes > 0) {
      switch (b.role) {
        case BufferRole::in:
          KO_CU(drv_.cuMemcpyHtoDAsync(d.data, inputs[i].data(), b.bytes, stream));
          d.host_input = std::move(inputs[i]);
          break;
        case BufferRole::inout:
          d.pristine = DeviceBuffer(b.bytes);
          KO_CU(drv_.cuMemcpyHtoDAsync(d.pristine.get(), inputs[i].data(), b.bytes, stream));
          KO_CU(drv_.cuMemcpyDtoDAsync(d.data, d.pristine.get(), b.bytes, stream));
          break;
        case BufferRole::out:
          KO_CU(drv_.cuMemsetD8Async(
              d.data, b.init == BufferInit::zero ? std::uint8_t{0} : b.poison_byte, b.bytes,
              stream));
          break;
      }
    }
    std::memcpy(slot.bytes, &d.data, sizeof d.data);
  }

  // Every allocation happens before the validation launch: running out of memory is then a
  // refused case (invalid_launch), never mistaken for a kernel fault.
  if (spec_.timing && req_.flush_l2) s_.prepare_flush_l2();

  if (spec_.launch.shared_bytes > default_dynamic_shared_limit) {
    KO_CU(drv_.cuFuncSetAttribute(f_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  static_cast<int>(spec_.launch.shared_bytes)));
  }
  sync();
  inputs.clear();
}

json CaseRunner::occupancy() {
  const auto& b = spec_.launch.block;
  const std::uint64_t threads = std::uint64_t{b[0]} * b[1] * b[2];
  if (threads > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) return nullptr;
  int blocks = 0;
  const CUresult r = drv_.cuOccupancyMaxActiveBlocksPerMultiprocessor(
      &blocks, f_, static_cast<int>(threads), spec_.launch.shared_bytes);
  if (r == CUDA_SUCCESS) return blocks;
  if (detail::is_context_fatal(r)) {
    detail::throw_cuda_error(r, "cuOccupancyMaxActiveBlocksPerMultiprocessor(...)", __FILE__,
                             __LINE__);
  }
  return nullptr;  // e.g. a block too large for the kernel: the launch will say so
}

void CaseRunner::launch() {
  const auto& l = spec_.launch;
  KO_CU(drv_.cuLaunchKernel(f_, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1],
                            l.block[2], l.shared_bytes, s_.stream(),
                            st_.params.empty() ? nullptr : st_.params.data(), nullptr));
}

void CaseRunner::write_outputs() {
  for (const auto& d : st_.buffers) {
    const auto& b = d.spec->buffer;
    if (b.role == BufferRole::in) continue;
    std::vector<std::uint8_t> host(b.bytes);
    if (b.bytes > 0) {
      KO_CU(drv_.cuMemcpyDtoHAsync(host.data(), d.data, b.bytes, s_.stream()));
      sync();
    }
    write_file(b.output, host.data(), host.size());
  }
}

void CaseRunner::check_guards(json& result) {
  for (const auto& d : st_.buffers) {
    const auto& l = d.layout;
    std::vector<std::uint8_t> before(l.before_bytes);
    std::vector<std::uint8_t> after(l.after_bytes);
    if (!before.empty()) {
      KO_CU(drv_.cuMemcpyDtoHAsync(before.data(), d.allocation.get() + l.before_offset,
                                   before.size(), s_.stream()));
    }
    if (!after.empty()) {
      KO_CU(drv_.cuMemcpyDtoHAsync(after.data(), d.allocation.get() + l.after_offset,
                                   after.size(), s_.stream()));
    }
    sync();
    const struct {
      const char* side;
      const std::vector<std::uint8_t>& bytes;
    } sides[] = {{"before", before}, {"after", after}};
    for (const auto& side : sides) {
      if (const auto diff =
              find_pattern_changes(side.bytes.data(), side.bytes.size(), guard_pattern)) {
        json v = json::object();
        v["buffer"] = d.spec->name;
        v["side"] = side.side;
        v["first_offset"] = diff->first_offset;
        v["bytes_changed"] = diff->bytes_changed;
        result["guard_violations"].push_back(std::move(v));
      }
    }
  }
}

void CaseRunner::check_inputs(json& result) {
  for (const auto& d : st_.buffers) {
    const auto& b = d.spec->buffer;
    if (b.role != BufferRole::in || b.bytes == 0) continue;
    std::vector<std::uint8_t> now(b.bytes);
    KO_CU(drv_.cuMemcpyDtoHAsync(now.data(), d.data, b.bytes, s_.stream()));
    sync();
    if (const auto diff = find_differences(now.data(), d.host_input.data(), now.size())) {
      json m = json::object();
      m["buffer"] = d.spec->name;
      m["first_offset"] = diff->first_offset;
      m["bytes_changed"] = diff->bytes_changed;
      result["modified_inputs"].push_back(std::move(m));
    }
  }
}

void CaseRunner::prepare_timed_launch(bool flush) {
  const CUstream stream = s_.stream();
  for (const auto& d : st_.buffers) {
    const auto& b = d.spec->buffer;
    if (b.bytes == 0) continue;
    if (b.role == BufferRole::out) {
      KO_CU(drv_.cuMemsetD8Async(
          d.data, b.init == BufferInit::zero ? std::uint8_t{0} : b.poison_byte, b.bytes, stream));
    } else if (b.role == BufferRole::inout) {
      KO_CU(drv_.cuMemcpyDtoDAsync(d.data, d.pristine.get(), b.bytes, stream));
    }
  }
  if (flush) s_.flush_l2();
}

}  // namespace

int run_request(Session& session, const Request& req, json& response) {
  const auto& drv = session.drv();
  response["device"] = {{"ordinal", session.ordinal()},
                        {"name", session.name()},
                        {"arch", session.arch()}};

  auto image = read_file(req.module_path);
  check_input_files(req);
  // PTX is text and must be NUL-terminated; an ELF image ignores bytes past its end.
  image.push_back(0);

  std::vector<char> error_log(jit_log_bytes, '\0');
  std::vector<char> info_log(jit_log_bytes, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  // The driver writes to the buffers up to the given size; keep the last byte a terminator.
  void* values[] = {error_log.data(), reinterpret_cast<void*>(std::uintptr_t{jit_log_bytes - 1}),
                    info_log.data(), reinterpret_cast<void*>(std::uintptr_t{jit_log_bytes - 1})};
  CUmodule raw_module = nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  const CUresult load = drv.cuModuleLoadDataEx(&raw_module, image.data(),
                                               sizeof options / sizeof options[0], options, values);
  const auto t1 = std::chrono::steady_clock::now();
  if (load != CUDA_SUCCESS) {
    const auto info =
        detail::make_cuda_error_info(load, "cuModuleLoadDataEx(...)", __FILE__, __LINE__);
    auto error = request_error("module_load",
                               req.module_path + " could not be loaded: " + info.name + " (" +
                                   info.description + ")",
                               info);
    error["log"] = jit_log(error_log, info_log);
    set_request_error(response, std::move(error));
    if (detail::is_context_fatal(load)) {
      session.mark_broken();
      return exit_fatal_cuda;
    }
    return exit_ok;
  }
  const detail::Module module(raw_module);
  response["module_load_ms"] = std::chrono::duration<double, std::milli>(t1 - t0).count();

  CUfunction f = nullptr;
  const CUresult get = drv.cuModuleGetFunction(&f, module.get(), req.entry.c_str());
  if (get != CUDA_SUCCESS) {
    const auto info =
        detail::make_cuda_error_info(get, "cuModuleGetFunction(...)", __FILE__, __LINE__);
    set_request_error(
        response,
        request_error("entry_not_found",
                      "no kernel named \"" + req.entry + "\" in " + req.module_path + " (" +
                          info.name + "): declare it extern \"C\" __global__ so its name is "
                          "not C++-mangled, or pass the mangled name",
                      info));
    if (detail::is_context_fatal(get)) {
      session.mark_broken();
      return exit_fatal_cuda;
    }
    return exit_ok;
  }

  response["function"] = function_attributes(drv, f);
  check_parameters(drv, f, req);

  for (const auto& spec : req.cases) {
    CaseRunner runner(session, f, req, spec);
    if (runner.run(response["cases"])) return exit_fatal_cuda;
  }
  return exit_ok;
}

}  // namespace kernelopt
