#include "runner.hpp"

#include <chrono>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "case_runner.hpp"
#include "check.hpp"
#include "cuda_raii.hpp"
#include "errors.hpp"
#include "file_io.hpp"
#include "response.hpp"
#include "tensor_map.hpp"

namespace kernelopt {
namespace {

using nlohmann::json;

constexpr std::size_t jit_log_bytes = std::size_t{64} * 1024;

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
    // checked_expected: one value per element of its buffer, in the buffer's expected_dtype
    for (std::size_t k = 0; k < spec.checked_expected.size() && spec.timing; ++k) {
      const auto& e = spec.checked_expected[k];
      const auto& b = spec.args[e.arg].buffer;
      const std::uint64_t elements = b.bytes / scalar_size(*b.dtype);
      const std::uint64_t bytes = elements * b.expected_item_size();
      const auto field =
          "cases[" + std::to_string(c) + "].checked_expected[" + std::to_string(k) + "].expected";
      std::uint64_t size = 0;
      try {
        size = file_size(e.expected);
      } catch (const IoError& err) {
        throw IoError(field + " (buffer \"" + e.buffer + "\"): " + err.what());
      }
      if (size == bytes) continue;
      const char* values = b.native_expected() ? scalar_type_name(*b.dtype) : "float64";
      throw BadRequest(field + ": buffer \"" + e.buffer + "\" has " + std::to_string(elements) +
                       " " + scalar_type_name(*b.dtype) + " elements, so " + e.expected +
                       " must hold as many " + values + " values (" + std::to_string(bytes) +
                       " bytes, as the buffer's expected_dtype says), but it has " +
                       std::to_string(size) + " bytes");
    }
    for (std::size_t a = 0; a < spec.args.size(); ++a) {
      const auto& arg = spec.args[a];
      if (arg.kind != ArgKind::buffer) continue;
      const auto& b = arg.buffer;
      const std::uint64_t elements = b.dtype ? b.bytes / scalar_size(*b.dtype) : 0;
      const struct {
        const char* field;
        const std::string& file;
        std::uint64_t bytes;
        bool expected;
      } files[] = {{"input", b.input, b.bytes, false},
                   {"timed_input", b.timed_input, b.bytes, false},
                   {"expected", b.expected, elements * b.expected_item_size(), true},
                   {"timed_expected", b.timed_expected, elements * b.expected_item_size(), true}};
      for (const auto& f : files) {
        // a "kept:KEY" value names a device copy (find_kept_copies), never a file
        if (f.file.empty() || (f.expected && is_kept_ref(f.file))) continue;
        const auto field = arg_path(c, a) + "." + f.field;
        std::uint64_t size = 0;
        try {
          size = file_size(f.file);
        } catch (const IoError& e) {
          throw IoError(field + " (buffer \"" + arg.name + "\"): " + e.what());
        }
        if (size == f.bytes) continue;
        if (!f.expected) {
          throw BadRequest(field + ": buffer \"" + arg.name + "\" is " + std::to_string(b.bytes) +
                           " bytes but " + f.file + " has " + std::to_string(size) + " bytes");
        }
        const char* values = b.native_expected() ? scalar_type_name(*b.dtype) : "float64";
        throw BadRequest(field + ": buffer \"" + arg.name + "\" has " + std::to_string(elements) +
                         " " + scalar_type_name(*b.dtype) + " elements, so " + f.file +
                         " must hold as many " + values + " values (" + std::to_string(f.bytes) +
                         " bytes), but it has " + std::to_string(size) + " bytes");
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
// (cuFuncGetParamInfo, 12.4+), mismatches become bad requests instead (check_parameter_sizes).
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
  detail::check_parameter_sizes(req, sizes);
#else
  (void)drv;
  (void)f;
  (void)req;
#endif
}

std::string jit_log(const std::vector<char>& error_log, const std::vector<char>& info_log) {
  std::string error(error_log.data(), strnlen(error_log.data(), error_log.size()));
  std::string info(info_log.data(), strnlen(info_log.data(), info_log.size()));
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

json cache_counters(Session& session) {
  const auto& cache = session.input_cache();
  return {{"hits", cache.counters().hits},
          {"misses", cache.counters().misses},
          {"evictions", cache.counters().evictions},
          {"resident_bytes", cache.resident_bytes()}};
}

// Whether staged data (input and expected copies) is mapped read-only for kernels, and why
// not (PROTOCOL.md, "Read-only staging"). Can turn false during a request (the driver refused).
json staging_answer(const Session& session) {
  const auto& st = session.staging();
  return {{"readonly", st.readonly()},
          {"reason", st.readonly() ? json(nullptr) : json(st.reason())},
          {"expected_hidden", st.hides()},
          {"hide_reason", st.hides() ? json(nullptr) : json(st.hide_reason())}};
}

// The default input_cache_bytes: 30% of the device's memory.
std::uint64_t default_cache_budget(const Session& session) {
  return static_cast<std::uint64_t>(session.total_memory_bytes()) / 10 * 3;
}

}  // namespace

namespace detail {

void check_parameter_sizes(const Request& req, const std::vector<std::size_t>& sizes) {
  // A kernel listed with no parameters may also be a driver that cannot introspect this
  // module; extra kernelParams entries are harmless, so only a real list is enforced.
  if (sizes.empty()) return;
  for (std::size_t c = 0; c < req.cases.size(); ++c) {
    const auto& args = req.cases[c].args;
    const auto& maps = req.cases[c].tensor_maps;
    const std::size_t given = args.size() + maps.size();
    if (given != sizes.size()) {
      throw BadRequest("cases[" + std::to_string(c) + "]." +
                       (maps.empty() ? "args" : "tensor_maps") + ": kernel \"" + req.entry +
                       "\" takes " + std::to_string(sizes.size()) + " parameter(s) but " +
                       std::to_string(given) + " are given" +
                       (maps.empty() ? std::string()
                                     : " (" + std::to_string(args.size()) + " args, then " +
                                           std::to_string(maps.size()) + " tensor maps)"));
    }
    for (std::size_t a = 0; a < args.size(); ++a) {
      const bool is_buffer = args[a].kind == ArgKind::buffer;
      const std::size_t bytes = is_buffer ? sizeof(CUdeviceptr) : scalar_size(args[a].scalar.dtype);
      if (bytes != sizes[a]) {
        throw BadRequest(arg_path(c, a) + ": kernel parameter " + std::to_string(a) + " of \"" +
                         req.entry + "\" is " + std::to_string(sizes[a]) + " bytes but " +
                         (is_buffer
                              ? std::string("a buffer is passed as an 8-byte pointer")
                              : "dtype " + std::string(scalar_type_name(args[a].scalar.dtype)) +
                                    " is " + std::to_string(bytes) + " bytes"));
      }
    }
    for (std::size_t j = 0; j < maps.size(); ++j) {
      const std::size_t p = args.size() + j;
      if (sizes[p] == tensor_map_param_bytes) continue;
      throw BadRequest("cases[" + std::to_string(c) + "].tensor_maps[" + std::to_string(j) +
                       "]: kernel parameter " + std::to_string(p) + " of \"" + req.entry +
                       "\" is " + std::to_string(sizes[p]) +
                       " bytes but a tensor map is passed as a 128-byte CUtensorMap (declare it "
                       "const __grid_constant__ CUtensorMap, after the args)");
    }
  }
}

}  // namespace detail

int run_request(Session& session, const Request& req, json& response, const ProgressFn& progress) {
  const auto& drv = session.drv();
  response["device"] = {
      {"ordinal", session.ordinal()}, {"name", session.name()}, {"arch", session.arch()}};
  response["staging"] = staging_answer(session);
  detail::StepClock steps;

  auto image = read_file(req.module_path);
  check_input_files(req);
  detail::require_tensor_map_support(drv, req);
  steps.mark("read_files");

  const ModuleLoad load = load_module_image(drv, std::move(image));
  steps.mark("module_load");
  if (load.result != CUDA_SUCCESS) {
    const auto info =
        detail::make_cuda_error_info(load.result, "cuModuleLoadDataEx(...)", __FILE__, __LINE__);
    auto error = request_error(
        "module_load",
        req.module_path + " could not be loaded: " + info.name + " (" + info.description + ")",
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
    set_request_error(response,
                      request_error("entry_not_found",
                                    "no kernel named \"" + req.entry + "\" in " + req.module_path +
                                        " (" + info.name +
                                        "): declare it extern \"C\" __global__ so its name is "
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
    session.input_cache().begin_request(
        req.input_cache_bytes.value_or(default_cache_budget(session)));
    response["input_cache"] = cache_counters(session);
  }
  // Kept expected values (feature device_expected), looked up before anything is allocated or
  // launched and held for the whole request: exit 4 when one is gone.
  const detail::KeptCopies kept = detail::find_kept_copies(session, req);
  if (req.input_cache) response["input_cache"] = cache_counters(session);
  steps.mark("prepare");
  // The CUDA reference that checks timed launches: the tool's (validated), so a module that
  // does not load is a bad request, never the candidate's module_load.
  std::optional<detail::Module> check_module;
  CUfunction check = nullptr;
  if (!req.check_module.empty()) {
    const ModuleLoad ref = load_module_image(drv, read_file(req.check_module));
    if (ref.result != CUDA_SUCCESS) {
      if (detail::is_context_fatal(ref.result)) {
        detail::throw_cuda_error(ref.result, "cuModuleLoadDataEx(check_module)", __FILE__,
                                 __LINE__);
      }
      throw BadRequest("check_module: " + req.check_module + " could not be loaded: " + ref.log);
    }
    check_module.emplace(ref.module);
    const CUresult r = drv.cuModuleGetFunction(&check, ref.module, req.check_entry.c_str());
    if (r != CUDA_SUCCESS) {
      if (detail::is_context_fatal(r)) {
        detail::throw_cuda_error(r, "cuModuleGetFunction(check_module)", __FILE__, __LINE__);
      }
      throw BadRequest("check_entry: no kernel named \"" + req.check_entry + "\" in " +
                       req.check_module);
    }
  }
  if (check_module) steps.mark("check_module_load");
  bool fatal = false;
  for (std::size_t i = 0; i < req.cases.size(); ++i) {
    const auto& spec = req.cases[i];
    if (req.progress && progress) {
      progress({{"progress", {{"case", spec.name}, {"index", i}}}});
    }
    {
      detail::CaseRunner runner(session, f, req, spec, check, &kept);
      fatal = runner.run(response["cases"]);
      steps.mark("cases");
    }  // the case's buffers are freed here
    steps.mark("teardown");
    if (req.input_cache) response["input_cache"] = cache_counters(session);
    response["staging"] = staging_answer(session);
    if (fatal) break;
  }
  response["steps_ms"] = steps.json();
  return fatal ? exit_fatal_cuda : exit_ok;
}

}  // namespace kernelopt
