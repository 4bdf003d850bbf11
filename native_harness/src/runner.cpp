#include "runner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "check.hpp"
#include "cuda_raii.hpp"
#include "errors.hpp"
#include "file_io.hpp"
#include "guard.hpp"
#include "response.hpp"
#include "support.hpp"
#include "timing.hpp"

namespace kernelopt {
namespace {

using detail::CudaError;
using detail::DeviceBuffer;
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

// Every file a case reads must be readable and of the right size before any case runs, so a
// request never half-runs because of a file that was wrong from the start. `input` and
// `timed_input` hold the buffer's bytes; `expected` and `timed_expected` one float64 per
// element.
void check_input_files(const Request& req) {
  for (std::size_t c = 0; c < req.cases.size(); ++c) {
    const auto& spec = req.cases[c];
    for (std::size_t a = 0; a < spec.args.size(); ++a) {
      const auto& arg = spec.args[a];
      if (arg.kind != ArgKind::buffer) continue;
      const auto& b = arg.buffer;
      const std::uint64_t elements = b.dtype ? b.bytes / scalar_size(*b.dtype) : 0;
      const struct {
        const char* field;
        const std::string& file;
        std::uint64_t bytes;
      } files[] = {{"input", b.input, b.bytes},
                   {"timed_input", b.timed_input, b.bytes},
                   {"expected", b.expected, elements * expected_item_bytes},
                   {"timed_expected", b.timed_expected, elements * expected_item_bytes}};
      for (const auto& f : files) {
        if (f.file.empty()) continue;
        const auto field = arg_path(c, a) + "." + f.field;
        std::uint64_t size = 0;
        try {
          size = file_size(f.file);
        } catch (const IoError& e) {
          throw IoError(field + " (buffer \"" + arg.name + "\"): " + e.what());
        }
        if (size == f.bytes) continue;
        if (f.bytes == b.bytes) {
          throw BadRequest(field + ": buffer \"" + arg.name + "\" is " + std::to_string(b.bytes) +
                           " bytes but " + f.file + " has " + std::to_string(size) + " bytes");
        }
        throw BadRequest(field + ": buffer \"" + arg.name + "\" has " +
                         std::to_string(elements) + " " + scalar_type_name(*b.dtype) +
                         " elements, so " + f.file + " must hold as many float64 values (" +
                         std::to_string(f.bytes) + " bytes), but it has " +
                         std::to_string(size) + " bytes");
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

struct ModuleLoad {
  CUresult result = CUDA_SUCCESS;
  CUmodule module = nullptr;  // the caller owns it when result is CUDA_SUCCESS
  std::string log;            // the JIT's error and info log
  double ms = 0;              // wall time of cuModuleLoadDataEx
};

ModuleLoad load_module_image(const detail::DriverApi& drv, std::vector<std::uint8_t> image) {
  // PTX is text and must be NUL-terminated; an ELF image ignores bytes past its end.
  image.push_back(0);
  std::vector<char> error_log(jit_log_bytes, '\0');
  std::vector<char> info_log(jit_log_bytes, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  // The driver writes to the buffers up to the given size; keep the last byte a terminator.
  void* values[] = {error_log.data(), reinterpret_cast<void*>(std::uintptr_t{jit_log_bytes - 1}),
                    info_log.data(), reinterpret_cast<void*>(std::uintptr_t{jit_log_bytes - 1})};
  ModuleLoad load;
  const auto t0 = std::chrono::steady_clock::now();
  load.result = drv.cuModuleLoadDataEx(&load.module, image.data(),
                                       sizeof options / sizeof options[0], options, values);
  const auto t1 = std::chrono::steady_clock::now();
  load.ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  if (load.result != CUDA_SUCCESS) load.log = jit_log(error_log, info_log);
  return load;
}

// ---------------------------------------------------------------------------------------------
// One case
// ---------------------------------------------------------------------------------------------

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

const char* launch_kind_name(LaunchKind k) {
  switch (k) {
    case LaunchKind::validation: return "validation";
    case LaunchKind::repeat: return "repeat";
    case LaunchKind::timed: return "timed";
  }
  return "?";
}

// JSON has no infinity: PROTOCOL.md prints it as the string "inf".
json error_figure(double value) {
  if (std::isinf(value)) return "inf";
  return value;
}

class CaseRunner {
 public:
  CaseRunner(Session& s, CUfunction f, const Request& req, const CaseSpec& spec)
      : s_(s), drv_(s.drv()), f_(f), req_(req), spec_(spec) {}

  // Appends the case's result to `cases`. Returns true when the error was fatal.
  bool run(json& cases);

 private:
  enum class Phase { setup, launched };

  void setup();
  Source stage(const std::string& path, std::uint64_t bytes, bool need_device);
  void copy_into(const Source& src, CUdeviceptr dst, std::uint64_t bytes);
  void launch();
  void sync() { KO_CU(drv_.cuStreamSynchronize(s_.stream())); }
  void compare_outputs(LaunchKind kind, json& result);
  void write_output(DeviceArg& d);
  void write_outputs();
  void check_guards(json& result);
  void check_inputs(json& result, bool timed);
  std::optional<ByteDiff> diff_against(CUdeviceptr data, const Source& src, std::uint64_t bytes);
  static void set_status(json& result);
  void run_repeat(json& result);
  void run_timed_check(json& result);
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
  if (spec_.has_compare()) result["compares"] = json::array();
  if (spec_.repeat_validation) result["determinism"] = json::array();

  Phase phase = Phase::setup;
  try {
    setup();
    result["occupancy_blocks_per_sm"] = occupancy();
    launch();
    phase = Phase::launched;
    sync();

    compare_outputs(LaunchKind::validation, result);
    write_outputs();
    check_guards(result);
    check_inputs(result, false);
    set_status(result);
    if (result["status"] == "ok" && spec_.repeat_validation) run_repeat(result);
    if (result["status"] == "ok" && spec_.timing) {
      const bool flush = req_.flush_l2 && s_.can_flush_l2();
      result["timing"] = time_work(
          s_, *spec_.timing, {[&] { prepare_timed_launch(flush); }, [&] { launch(); }}, flush);
      if (spec_.has_timed_check()) run_timed_check(result);
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

Source CaseRunner::stage(const std::string& path, std::uint64_t bytes, bool need_device) {
  Source src;
  if (req_.input_cache) {
    src.device = s_.input_cache().get(path, bytes, s_.stream());
    return src;
  }
  src.host = read_file(path);
  if (src.host.size() != bytes) {
    throw IoError(path + " changed size while the harness was running");
  }
  if (need_device && bytes > 0) {
    auto device = std::make_shared<DeviceBuffer>(s_.allocate(bytes));
    KO_CU(drv_.cuMemcpyHtoDAsync(device->get(), src.host.data(), bytes, s_.stream()));
    src.device = std::move(device);
    // The host copy is dropped once setup() has synchronized.
  }
  return src;
}

void CaseRunner::copy_into(const Source& src, CUdeviceptr dst, std::uint64_t bytes) {
  if (bytes == 0) return;
  if (src.device) {
    KO_CU(drv_.cuMemcpyDtoDAsync(dst, src.device->get(), bytes, s_.stream()));
  } else {
    KO_CU(drv_.cuMemcpyHtoDAsync(dst, src.host.data(), bytes, s_.stream()));
  }
}

void CaseRunner::setup() {
  const CUstream stream = s_.stream();
  const bool timed_check = spec_.timing.has_value() && spec_.has_timed_check();
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
    // Files first (reads, cache look-ups): only then the guarded buffer and its uploads.
    if (b.role != BufferRole::out) {
      d.input = stage(b.input, b.bytes, b.role == BufferRole::inout);
      if (timed_check && !b.timed_input.empty()) {
        d.timed_input = stage(b.timed_input, b.bytes, false);
      }
    }
    const std::uint64_t expected_bytes =
        b.dtype ? b.bytes / scalar_size(*b.dtype) * expected_item_bytes : 0;
    if (!b.expected.empty()) d.expected = stage(b.expected, expected_bytes, true);
    if (timed_check && !b.timed_expected.empty()) {
      d.timed_expected = stage(b.timed_expected, expected_bytes, true);
    }

    d.layout = make_layout(b.bytes, req_.guard_bytes);
    d.allocation = s_.allocate(d.layout.total_bytes);
    d.data = d.allocation.get() + d.layout.data_offset;
    if (spec_.repeat_validation && b.role != BufferRole::in && b.bytes > 0) {
      d.saved = s_.allocate(b.bytes);
    }
    // Guards, the alignment slack and (until overwritten below) the data all start as the
    // pattern; only the guard and slack bytes are checked for it.
    KO_CU(drv_.cuMemsetD8Async(d.allocation.get(), guard_pattern, d.layout.total_bytes, stream));
    if (b.bytes > 0) {
      if (b.role == BufferRole::out) {
        KO_CU(drv_.cuMemsetD8Async(
            d.data, b.init == BufferInit::zero ? std::uint8_t{0} : b.poison_byte, b.bytes,
            stream));
      } else {
        copy_into(d.input, d.data, b.bytes);
      }
    }
    std::memcpy(slot.bytes, &d.data, sizeof d.data);
  }

  // Every allocation happens before the validation launch: running out of memory is then a
  // refused case (invalid_launch), never mistaken for a kernel fault.
  if (spec_.timing && req_.flush_l2) s_.prepare_flush_l2();
  if (!req_.support_module.empty()) s_.support_scratch();

  if (spec_.launch.shared_bytes > default_dynamic_shared_limit) {
    KO_CU(drv_.cuFuncSetAttribute(f_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  static_cast<int>(spec_.launch.shared_bytes)));
  }
  sync();
  // Host copies that only fed an upload are no longer needed; `in` inputs keep theirs for
  // the unchanged-input check.
  for (auto& d : st_.buffers) {
    for (Source* src : {&d.input, &d.timed_input, &d.expected, &d.timed_expected}) {
      if (src->device) src->host = {};
    }
  }
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

// Device-side comparison of every output that has expected values for this launch. The
// output file is written when the comparison finds a mismatch (unless an earlier launch of
// the case already wrote it) or, after validation, when write_output asks for it.
void CaseRunner::compare_outputs(LaunchKind kind, json& result) {
  for (auto& d : st_.buffers) {
    const auto& b = d.spec->buffer;
    const Source& expected = kind == LaunchKind::timed ? d.timed_expected : d.expected;
    const std::string& expected_path = kind == LaunchKind::timed ? b.timed_expected : b.expected;
    if (b.role == BufferRole::in || expected_path.empty() || !b.dtype) continue;
    const std::uint64_t elements = b.bytes / scalar_size(*b.dtype);
    const CUfunction compare = s_.support().function(compare_kernel_name(*b.dtype));
    const CompareFigures fig = device_compare(
        drv_, compare, s_.sm_count(), s_.stream(), d.data,
        expected.device ? expected.device->get() : CUdeviceptr{0}, elements, b.compare,
        s_.support_scratch());
    const bool write = !d.output_written && (fig.mismatches > 0 ||
                                             (kind == LaunchKind::validation && b.write_output));
    if (write) write_output(d);

    json c = json::object();
    c["buffer"] = d.spec->name;
    c["launch"] = launch_kind_name(kind);
    c["elements"] = fig.elements;
    c["mismatches"] = fig.mismatches;
    c["nonfinite"] = fig.nonfinite;
    c["max_abs_error"] = error_figure(fig.max_abs_error);
    c["max_rel_error"] = error_figure(fig.max_rel_error);
    c["err_sq"] = error_figure(fig.err_sq);
    c["first_mismatch"] = fig.first_mismatch ? json(*fig.first_mismatch) : json(nullptr);
    c["output_written"] = write;
    c["compare_ms"] = float_to_double(static_cast<float>(fig.kernel_ms));
    result["compares"].push_back(std::move(c));
  }
}

void CaseRunner::write_output(DeviceArg& d) {
  const auto& b = d.spec->buffer;
  std::vector<std::uint8_t> host(b.bytes);
  if (b.bytes > 0) {
    KO_CU(drv_.cuMemcpyDtoHAsync(host.data(), d.data, b.bytes, s_.stream()));
    sync();
  }
  write_file(b.output, host.data(), host.size());
  d.output_written = true;
}

// After validation: every output without expected values (the comparison decided for the
// others).
void CaseRunner::write_outputs() {
  for (auto& d : st_.buffers) {
    const auto& b = d.spec->buffer;
    if (b.role == BufferRole::in || !b.expected.empty()) continue;
    write_output(d);
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

// Differences between the `bytes` at `data` and `src`: on the host when the source is there,
// else with ko_bitwise_diff when the request has a support module, else by copying both back.
std::optional<ByteDiff> CaseRunner::diff_against(CUdeviceptr data, const Source& src,
                                                 std::uint64_t bytes) {
  if (bytes == 0) return std::nullopt;
  // Only with this request's support module: its scratch was allocated before the launch.
  if (src.device && !req_.support_module.empty()) {
    if (const CUfunction diff = s_.support().find(bitwise_diff_kernel_name)) {
      return device_bitwise_diff(drv_, diff, s_.sm_count(), s_.stream(), data,
                                 src.device->get(), bytes, s_.support_scratch());
    }
  }
  std::vector<std::uint8_t> now(bytes);
  KO_CU(drv_.cuMemcpyDtoHAsync(now.data(), data, bytes, s_.stream()));
  std::vector<std::uint8_t> reference;
  if (src.device) {
    reference.resize(bytes);
    KO_CU(drv_.cuMemcpyDtoHAsync(reference.data(), src.device->get(), bytes, s_.stream()));
  }
  sync();
  return find_differences(now.data(), src.device ? reference.data() : src.host.data(), bytes);
}

// Every `in` buffer must still equal what it started the launch with: its timed input after
// the timed check launch, else its input.
void CaseRunner::check_inputs(json& result, bool timed) {
  for (const auto& d : st_.buffers) {
    const auto& b = d.spec->buffer;
    if (b.role != BufferRole::in || b.bytes == 0) continue;
    const bool use_timed = timed && !b.timed_input.empty();
    if (const auto diff = diff_against(d.data, use_timed ? d.timed_input : d.input, b.bytes)) {
      json m = json::object();
      m["buffer"] = d.spec->name;
      m["first_offset"] = diff->first_offset;
      m["bytes_changed"] = diff->bytes_changed;
      result["modified_inputs"].push_back(std::move(m));
    }
  }
}

void CaseRunner::set_status(json& result) {
  if (!result["guard_violations"].empty()) {
    result["status"] = "out_of_bounds_write";
  } else if (!result["modified_inputs"].empty()) {
    result["status"] = "input_modified";
  }
}

// repeat_validation: keep the validation launch's outputs, launch again from the same
// starting state, compare again and diff the two launches bit for bit.
void CaseRunner::run_repeat(json& result) {
  const CUstream stream = s_.stream();
  for (const auto& d : st_.buffers) {
    if (d.saved.get() != 0) {
      KO_CU(drv_.cuMemcpyDtoDAsync(d.saved.get(), d.data, d.spec->buffer.bytes, stream));
    }
  }
  prepare_timed_launch(false);
  launch();
  sync();
  compare_outputs(LaunchKind::repeat, result);
  const CUfunction diff = s_.support().function(bitwise_diff_kernel_name);
  for (const auto& d : st_.buffers) {
    const auto& b = d.spec->buffer;
    if (b.role == BufferRole::in) continue;
    std::optional<ByteDiff> differ;
    if (d.saved.get() != 0) {
      differ = device_bitwise_diff(drv_, diff, s_.sm_count(), stream, d.saved.get(), d.data,
                                   b.bytes, s_.support_scratch());
    }
    json det = json::object();
    det["buffer"] = d.spec->name;
    det["bytes_differ"] = differ ? differ->bytes_changed : 0;
    det["first_offset"] = differ ? json(differ->first_offset) : json(nullptr);
    result["determinism"].push_back(std::move(det));
  }
  check_guards(result);
  check_inputs(result, false);
  set_status(result);
}

// Timed inputs: after the measured launches, one more launch like a measured one, on inputs
// the kernel has not seen during validation, then the same checks as after validation. Its
// time is reported apart (timing.check_launch_ms), never mixed into times_ms.
void CaseRunner::run_timed_check(json& result) {
  const CUstream stream = s_.stream();
  const bool flush = req_.flush_l2 && s_.can_flush_l2();
  TimedWork check;
  // Outside the timed window, like every measured launch: outputs re-initialised, in/inout
  // buffers given their timed inputs (or their inputs, where none is given), L2 flushed.
  check.prepare = [&] {
    for (const auto& d : st_.buffers) {
      const auto& b = d.spec->buffer;
      if (b.bytes == 0) continue;
      if (b.role == BufferRole::out) {
        KO_CU(drv_.cuMemsetD8Async(d.data,
                                   b.init == BufferInit::zero ? std::uint8_t{0} : b.poison_byte,
                                   b.bytes, stream));
      } else {
        copy_into(b.timed_input.empty() ? d.input : d.timed_input, d.data, b.bytes);
      }
    }
    if (flush) s_.flush_l2();
  };
  check.launch = [&] { launch(); };
  result["timing"]["check_launch_ms"] = time_one_launch(s_, check);

  compare_outputs(LaunchKind::timed, result);
  check_guards(result);
  check_inputs(result, true);
  set_status(result);
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
      KO_CU(drv_.cuMemcpyDtoDAsync(d.data, d.input.device->get(), b.bytes, stream));
    }
  }
  if (flush) s_.flush_l2();
}

}  // namespace

namespace {

json cache_counters(Session& session) {
  const auto& cache = session.input_cache();
  return {{"hits", cache.counters().hits},
          {"misses", cache.counters().misses},
          {"evictions", cache.counters().evictions},
          {"resident_bytes", cache.resident_bytes()}};
}

// The default input_cache_bytes: 30% of the device's memory.
std::uint64_t default_cache_budget(const Session& session) {
  return static_cast<std::uint64_t>(session.total_memory_bytes()) / 10 * 3;
}

}  // namespace

int run_request(Session& session, const Request& req, json& response) {
  const auto& drv = session.drv();
  response["device"] = {{"ordinal", session.ordinal()},
                        {"name", session.name()},
                        {"arch", session.arch()}};

  auto image = read_file(req.module_path);
  check_input_files(req);

  const ModuleLoad load = load_module_image(drv, std::move(image));
  if (load.result != CUDA_SUCCESS) {
    const auto info =
        detail::make_cuda_error_info(load.result, "cuModuleLoadDataEx(...)", __FILE__, __LINE__);
    auto error = request_error("module_load",
                               req.module_path + " could not be loaded: " + info.name + " (" +
                                   info.description + ")",
                               info);
    error["log"] = load.log;
    set_request_error(response, std::move(error));
    if (detail::is_context_fatal(load.result)) {
      session.mark_broken();
      return exit_fatal_cuda;
    }
    return exit_ok;
  }
  const detail::Module module(load.module);
  response["module_load_ms"] = load.ms;
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

  if (req.input_cache) {
    session.input_cache().begin_request(req.input_cache_bytes.value_or(
        default_cache_budget(session)));
    response["input_cache"] = cache_counters(session);
  }
  for (const auto& spec : req.cases) {
    CaseRunner runner(session, f, req, spec);
    const bool fatal = runner.run(response["cases"]);
    if (req.input_cache) response["input_cache"] = cache_counters(session);
    if (fatal) return exit_fatal_cuda;
  }
  return exit_ok;
}

}  // namespace kernelopt
