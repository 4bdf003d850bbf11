#include "request.hpp"

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "version.hpp"

namespace kernelopt {
namespace {

using nlohmann::json;

// Large enough for any real buffer, small enough that bytes + 2 * guard + padding cannot
// overflow 64 bits anywhere downstream.
constexpr std::uint64_t max_buffer_bytes = 1ull << 48;

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw BadRequest(path + ": " + problem);
}

std::string member_path(std::string_view parent, const char* key) {
  return parent.empty() ? std::string(key) : std::string(parent) + "." + key;
}

std::string index_path(const std::string& parent, std::size_t i) {
  return parent + "[" + std::to_string(i) + "]";
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a floating-point number";
    default: return "an unsupported value";
  }
}

// A JSON null counts as absent: serializers commonly emit `"output": null` for unset fields.
const json* find(const json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// `parent` by value: a temporary std::string bound to a reference parameter of a function
// that returns a reference trips GCC 13's -Wdangling-reference.
const json& require(const json& obj, std::string_view parent, const char* key) {
  const json* v = find(obj, key);
  if (v == nullptr) fail(member_path(parent, key), "is required");
  return *v;
}

void expect_object(const json& v, const std::string& path) {
  if (!v.is_object()) fail(path, std::string("must be an object, got ") + type_name(v));
}

std::uint64_t as_uint(const json& v, const std::string& path, std::uint64_t max,
                      const char* what = "a non-negative integer") {
  // Floats are refused even when integral (4096.0): sizes must be exact. Parsed text gives
  // unsigned values, but a document built in code may hold non-negative signed ones.
  const bool non_negative =
      v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0);
  if (!non_negative) {
    fail(path, std::string("must be ") + what + ", got " +
                   (v.is_number() ? v.dump() : std::string(type_name(v))));
  }
  const auto value = v.get<std::uint64_t>();
  if (value > max) fail(path, "must be at most " + std::to_string(max) + ", got " + v.dump());
  return value;
}

std::string as_string(const json& v, const std::string& path, bool allow_empty = false) {
  if (!v.is_string()) fail(path, std::string("must be a string, got ") + type_name(v));
  auto s = v.get<std::string>();
  if (!allow_empty && s.empty()) fail(path, "must be a non-empty string");
  return s;
}

// A finite number >= 0 (integers accepted: 0 is a common tolerance).
double as_non_negative(const json& v, const std::string& path) {
  if (!v.is_number()) fail(path, std::string("must be a number, got ") + type_name(v));
  const double value = v.get<double>();
  if (!std::isfinite(value) || value < 0) {
    fail(path, "must be a finite number >= 0, got " + v.dump());
  }
  return value;
}

bool as_bool(const json& v, const std::string& path) {
  if (!v.is_boolean()) fail(path, std::string("must be true or false, got ") + type_name(v));
  return v.get<bool>();
}

std::array<unsigned, 3> as_dim3(const json& v, const std::string& path) {
  if (!v.is_array() || v.size() != 3) {
    fail(path, "must be an array of 3 positive integers, got " +
                   (v.is_array() ? "an array of " + std::to_string(v.size()) : std::string(type_name(v))));
  }
  std::array<unsigned, 3> dim{};
  for (std::size_t i = 0; i < 3; ++i) {
    const auto p = index_path(path, i);
    const auto value = as_uint(v[i], p, std::numeric_limits<unsigned>::max(), "a positive integer");
    if (value == 0) fail(p, "must be a positive integer, got 0");
    dim[i] = static_cast<unsigned>(value);
  }
  return dim;
}

BufferRole parse_role(const json& v, const std::string& path) {
  const auto s = as_string(v, path);
  if (s == "in") return BufferRole::in;
  if (s == "out") return BufferRole::out;
  if (s == "inout") return BufferRole::inout;
  fail(path, "must be one of \"in\", \"out\", \"inout\", got \"" + s + "\"");
}

ScalarType parse_dtype(const json& v, const std::string& path) {
  const auto name = as_string(v, path);
  const auto type = scalar_type_from_name(name);
  if (!type) {
    fail(path, "unknown dtype \"" + name +
                   "\" (known: int8, int16, int32, int64, uint8, uint16, uint32, uint64, "
                   "float16, bfloat16, float32, float64)");
  }
  return *type;
}

CompareTolerance parse_compare(const json& c, const std::string& path) {
  expect_object(c, path);
  CompareTolerance t;
  t.abs_tol = as_non_negative(require(c, path, "abs_tol"), member_path(path, "abs_tol"));
  t.rtol = as_non_negative(require(c, path, "rtol"), member_path(path, "rtol"));
  t.rel_floor = as_non_negative(require(c, path, "rel_floor"), member_path(path, "rel_floor"));
  if (t.rel_floor == 0) {
    fail(member_path(path, "rel_floor"),
         "must be > 0 (the RMS of the expected values, or 1.0 when that is 0)");
  }
  return t;
}

double as_finite(const json& v, const std::string& path) {
  if (!v.is_number() || !std::isfinite(v.get<double>())) {
    fail(path, std::string("must be a finite number, got ") +
                   (v.is_number() ? v.dump() : std::string(type_name(v))));
  }
  return v.get<double>();
}

std::int64_t as_int64(const json& v, const std::string& path) {
  if (v.is_number_unsigned() && v.get<std::uint64_t>() <= std::uint64_t(INT64_MAX)) {
    return static_cast<std::int64_t>(v.get<std::uint64_t>());
  }
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<std::int64_t>();
  fail(path, std::string("must be an integer within int64, got ") +
                 (v.is_number() ? v.dump() : std::string(type_name(v))));
}

// {"kind": "uniform", "low", "high"} | {"kind": "normal", "mean", "std"} |
// {"kind": "randint", "low", "high"} (integers, high exclusive).
FreshSpec parse_fresh(const json& f, const std::string& path) {
  expect_object(f, path);
  FreshSpec spec;
  const auto kind_path = member_path(path, "kind");
  const auto kind = as_string(require(f, path, "kind"), kind_path);
  if (kind == "uniform" || kind == "normal") {
    const char* first = kind == "uniform" ? "low" : "mean";
    const char* second = kind == "uniform" ? "high" : "std";
    spec.kind = kind == "uniform" ? FreshKind::uniform : FreshKind::normal;
    spec.a = as_finite(require(f, path, first), member_path(path, first));
    spec.b = as_finite(require(f, path, second), member_path(path, second));
    if (spec.kind == FreshKind::normal && spec.b < 0) fail(member_path(path, "std"), "must be >= 0");
  } else if (kind == "randint") {
    spec.kind = FreshKind::randint;
    spec.low = as_int64(require(f, path, "low"), member_path(path, "low"));
    const auto high = as_int64(require(f, path, "high"), member_path(path, "high"));
    if (high <= spec.low) fail(member_path(path, "high"), "must be greater than low");
    spec.range = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(spec.low);
  } else {
    fail(kind_path, "must be \"uniform\", \"normal\" or \"randint\", got \"" + kind + "\"");
  }
  return spec;
}

// The protocol 2 fields of a buffer: dtype, expected, timed_expected, timed_input, compare,
// write_output. Each is refused on a role it cannot act on, like input/output are.
void parse_buffer_v2(const json& a, const std::string& path, BufferArg& b) {
  const bool reads_input = b.role != BufferRole::out;
  const bool writes_output = b.role != BufferRole::in;
  if (const json* v = find(a, "dtype")) {
    b.dtype = parse_dtype(*v, member_path(path, "dtype"));
    const auto item = scalar_size(*b.dtype);
    if (b.bytes % item != 0) {
      fail(member_path(path, "bytes"), std::to_string(b.bytes) + " is not a whole number of " +
                                           scalar_type_name(*b.dtype) + " elements (" +
                                           std::to_string(item) + " bytes each)");
    }
  }
  for (const char* key : {"expected", "timed_expected"}) {
    const json* v = find(a, key);
    if (v == nullptr) continue;
    const auto p = member_path(path, key);
    if (!writes_output) {
      fail(p, "an \"in\" buffer is not compared; expected values belong to \"out\" or "
              "\"inout\" buffers");
    }
    (std::string(key) == "expected" ? b.expected : b.timed_expected) = as_string(*v, p);
    if (!b.dtype) fail(member_path(path, "dtype"), std::string("is required with \"") + key + "\"");
    if (find(a, "compare") == nullptr) {
      fail(member_path(path, "compare"),
           std::string("is required with \"") + key + "\" ({\"abs_tol\", \"rtol\", \"rel_floor\"})");
    }
  }
  if (const json* v = find(a, "timed_input")) {
    const auto p = member_path(path, "timed_input");
    if (!reads_input) {
      fail(p, "an \"out\" buffer is not uploaded; timed inputs belong to \"in\" or \"inout\" "
              "buffers");
    }
    b.timed_input = as_string(*v, p);
  }
  if (const json* v = find(a, "compare")) {
    // Without expected values it still serves checked launches (parse_case refuses it there
    // when the case has none).
    b.compare = parse_compare(*v, member_path(path, "compare"));
    b.has_compare = true;
  }
  if (const json* v = find(a, "fresh")) {
    const auto p = member_path(path, "fresh");
    if (!reads_input) {
      fail(p, "an \"out\" buffer has no input to redraw; fresh inputs belong to \"in\" or "
              "\"inout\" buffers");
    }
    if (!b.dtype) fail(member_path(path, "dtype"), "is required with \"fresh\"");
    b.fresh = parse_fresh(*v, p);
  }
  if (const json* v = find(a, "write_output")) {
    b.write_output = as_bool(*v, member_path(path, "write_output"));
  }
}

BufferArg parse_buffer(const json& a, const std::string& path) {
  BufferArg b;
  b.role = parse_role(require(a, path, "role"), member_path(path, "role"));
  b.bytes = as_uint(require(a, path, "bytes"), member_path(path, "bytes"), max_buffer_bytes);

  const bool reads_input = b.role != BufferRole::out;
  const bool writes_output = b.role != BufferRole::in;
  if (const json* v = find(a, "input")) {
    if (!reads_input) {
      fail(member_path(path, "input"),
           "an \"out\" buffer is not uploaded; use role \"inout\" to start from an input file");
    }
    b.input = as_string(*v, member_path(path, "input"));
  } else if (reads_input) {
    fail(member_path(path, "input"), std::string("is required for role \"") +
                                         role_name(b.role) + "\"");
  }
  if (const json* v = find(a, "output")) {
    if (!writes_output) {
      fail(member_path(path, "output"),
           "an \"in\" buffer is not written back; use role \"inout\" to get its contents");
    }
    b.output = as_string(*v, member_path(path, "output"));
  } else if (writes_output) {
    fail(member_path(path, "output"), std::string("is required for role \"") +
                                          role_name(b.role) + "\"");
  }

  // init and poison_byte only act on "out" buffers. They are validated on every buffer, so a
  // typo is never silently ignored, but a client that always sends them is accepted.
  if (const json* v = find(a, "init")) {
    const auto p = member_path(path, "init");
    const auto s = as_string(*v, p);
    if (s == "poison") {
      b.init = BufferInit::poison;
    } else if (s == "zero") {
      b.init = BufferInit::zero;
    } else {
      fail(p, "must be \"poison\" or \"zero\", got \"" + s + "\"");
    }
  }
  if (const json* v = find(a, "poison_byte")) {
    b.poison_byte = static_cast<std::uint8_t>(
        as_uint(*v, member_path(path, "poison_byte"), 255, "an integer 0..255"));
  }
  parse_buffer_v2(a, path, b);
  return b;
}

ScalarArg parse_scalar(const json& a, const std::string& path) {
  ScalarArg s;
  s.dtype = parse_dtype(require(a, path, "dtype"), member_path(path, "dtype"));
  const std::string dtype = scalar_type_name(s.dtype);
  const auto raw_path = member_path(path, "raw");
  const auto raw = as_string(require(a, path, "raw"), raw_path, true);
  const auto size = scalar_size(s.dtype);
  auto bytes = detail::decode_hex(raw, size);
  if (!bytes) {
    fail(raw_path, "must be " + std::to_string(2 * size) + " hex digits (the " +
                       std::to_string(size) + " little-endian bytes of a " + dtype +
                       "), got \"" + raw + "\"");
  }
  s.raw = std::move(*bytes);
  // "value" is informational only: "raw" is what the kernel receives.
  return s;
}

KernelArg parse_arg(const json& a, const std::string& path) {
  expect_object(a, path);
  KernelArg arg;
  const auto kind_path = member_path(path, "kind");
  const auto kind = as_string(require(a, path, "kind"), kind_path);
  arg.name = as_string(require(a, path, "name"), member_path(path, "name"));
  if (kind == "buffer") {
    arg.kind = ArgKind::buffer;
    arg.buffer = parse_buffer(a, path);
  } else if (kind == "scalar") {
    arg.kind = ArgKind::scalar;
    arg.scalar = parse_scalar(a, path);
  } else {
    fail(kind_path, "must be \"buffer\" or \"scalar\", got \"" + kind + "\"");
  }
  return arg;
}

LaunchConfig parse_launch(const json& l, const std::string& path) {
  expect_object(l, path);
  LaunchConfig launch;
  launch.grid = as_dim3(require(l, path, "grid"), member_path(path, "grid"));
  launch.block = as_dim3(require(l, path, "block"), member_path(path, "block"));
  if (const json* v = find(l, "shared_bytes")) {
    launch.shared_bytes = static_cast<unsigned>(as_uint(
        *v, member_path(path, "shared_bytes"), std::numeric_limits<unsigned>::max()));
  }
  return launch;
}

double as_positive_number(const json& v, const std::string& path) {
  if (!v.is_number() || !(v.get<double>() > 0)) {
    fail(path, std::string("must be a positive number, got ") +
                   (v.is_number() ? v.dump() : std::string(type_name(v))));
  }
  return v.get<double>();
}

AdaptiveConfig parse_adaptive(const json& a, const std::string& path, unsigned iterations) {
  expect_object(a, path);
  AdaptiveConfig c;
  if (const json* v = find(a, "target_rse")) {
    c.target_rse = as_positive_number(*v, member_path(path, "target_rse"));
    if (c.target_rse >= 1) {
      fail(member_path(path, "target_rse"),
           "must be below 1 (a relative standard error, e.g. 0.01 for 1%), got " + v->dump());
    }
  }
  if (const json* v = find(a, "max_ms")) {
    c.max_ms = as_positive_number(*v, member_path(path, "max_ms"));
    if (c.max_ms > 600000) fail(member_path(path, "max_ms"), "must be at most 600000 (10 minutes), got " + v->dump());
  }
  if (const json* v = find(a, "max_iterations")) {
    c.max_iterations =
        static_cast<unsigned>(as_uint(*v, member_path(path, "max_iterations"), max_iterations));
  }
  if (c.max_iterations < iterations) {
    fail(member_path(path, "max_iterations"),
         "must be at least the timing's iterations (" + std::to_string(iterations) + "), got " +
             std::to_string(c.max_iterations));
  }
  return c;
}

TimingConfig parse_timing(const json& t, const std::string& path) {
  expect_object(t, path);
  TimingConfig timing;
  if (const json* v = find(t, "warmup")) {
    timing.warmup = static_cast<unsigned>(as_uint(*v, member_path(path, "warmup"), max_warmup));
  }
  timing.iterations = static_cast<unsigned>(
      as_uint(require(t, path, "iterations"), member_path(path, "iterations"), max_iterations));
  if (const json* v = find(t, "mode")) {
    const auto p = member_path(path, "mode");
    const auto s = as_string(*v, p);
    if (s == "events") {
      timing.mode = TimingMode::events;
    } else if (s == "graph") {
      timing.mode = TimingMode::graph;
    } else {
      fail(p, "must be \"events\" or \"graph\", got \"" + s + "\"");
    }
  }
  if (const json* v = find(t, "blocking")) timing.blocking = as_bool(*v, member_path(path, "blocking"));
  if (const json* v = find(t, "graph_batch")) {
    const auto p = member_path(path, "graph_batch");
    const auto b = as_uint(*v, p, max_graph_batch, "an integer 1..1000");
    if (b == 0) fail(p, "must be an integer 1..1000, got 0 (omit it to choose from the warm-up)");
    if (timing.mode != TimingMode::graph) {
      fail(p, "only applies to \"mode\": \"graph\"; drop it or set the mode");
    }
    timing.graph_batch = static_cast<unsigned>(b);
  }
  if (const json* v = find(t, "adaptive")) {
    timing.adaptive = parse_adaptive(*v, member_path(path, "adaptive"), timing.iterations);
  }
  return timing;
}

// Blocking mode launches ko_spin from the support module, so it cannot run without one.
void require_support_for(const TimingConfig& timing, const std::string& path, bool has_support) {
  if (timing.blocking && !has_support) {
    fail(member_path(path, "blocking"),
         "needs the harness's support kernels: pass \"support_module\" (the CUBIN from "
         "kernelopt_mcp.support_module.support_module(arch))");
  }
}

BaselineSpec parse_baseline(const json& doc) {
  BaselineSpec b;
  b.library = as_string(require(doc, "", "library"), "library");
  if (b.library != "cublas") fail("library", "must be \"cublas\", got \"" + b.library + "\"");
  b.library_path = as_string(require(doc, "", "library_path"), "library_path");
  b.routine = as_string(require(doc, "", "routine"), "routine");
  if (b.routine != "sgemm") fail("routine", "must be \"sgemm\", got \"" + b.routine + "\"");
  for (auto [key, slot] : {std::pair{"m", &b.m}, std::pair{"n", &b.n}, std::pair{"k", &b.k}}) {
    *slot = as_uint(require(doc, "", key), key, max_gemm_dim, "a positive integer");
    if (*slot == 0) fail(key, "must be a positive integer, got 0");
  }
  if (const json* t = find(doc, "timing")) {
    b.timing = parse_timing(*t, "timing");
  } else {
    b.timing.warmup = 10;
    b.timing.iterations = 100;
  }
  if (b.timing.iterations == 0) fail("timing.iterations", "must be positive for a baseline");
  return b;
}

// The case fields of "Fresh inputs and checked launches" (PROTOCOL.md).
void parse_fresh_checks(const json& c, const std::string& path, CaseSpec& spec) {
  if (const json* v = find(c, "fresh_seed")) {
    spec.fresh_seed = as_uint(*v, member_path(path, "fresh_seed"), UINT64_MAX);
  }
  if (const json* v = find(c, "fresh_timed")) {
    spec.fresh_timed = as_bool(*v, member_path(path, "fresh_timed"));
  }
  if (spec.has_fresh() && !spec.fresh_seed) {
    fail(member_path(path, "fresh_seed"), "is required when a buffer has \"fresh\"");
  }
  if (const json* v = find(c, "check_launch")) {
    spec.check_launch = parse_launch(*v, member_path(path, "check_launch"));
  }
  if (const json* v = find(c, "confirm_launch")) {
    spec.confirm_launch = as_bool(*v, member_path(path, "confirm_launch"));
    if (spec.confirm_launch && !spec.timing) {
      fail(member_path(path, "confirm_launch"), "needs \"timing\" (it runs after the measured launches)");
    }
  }
  if (const json* v = find(c, "checked_launches")) {
    const auto p = member_path(path, "checked_launches");
    if (!v->is_array()) fail(p, std::string("must be an array, got ") + type_name(*v));
    if (!v->empty() && !spec.timing) fail(p, "needs \"timing\" (indices of measured samples)");
    std::set<unsigned> seen;
    for (std::size_t i = 0; i < v->size(); ++i) {
      const auto ip = index_path(p, i);
      const auto index = static_cast<unsigned>(as_uint((*v)[i], ip, max_iterations));
      if (index >= spec.timing->iterations) {
        fail(ip, "must be below timing.iterations (" + std::to_string(spec.timing->iterations) +
                     "), got " + std::to_string(index));
      }
      if (!seen.insert(index).second) fail(ip, "duplicate index " + std::to_string(index));
      spec.checked_launches.push_back(index);
    }
    if (spec.checked_launches.size() > max_checked_launches) {
      fail(p, "at most " + std::to_string(max_checked_launches) + " checked launches");
    }
  }
  if (const json* v = find(c, "checked_dump")) {
    const auto p = member_path(path, "checked_dump");
    spec.checked_dump = as_string(*v, p);
    if (spec.checked_launches.empty()) {
      fail(p, "needs \"checked_launches\" (the launches whose inputs and outputs are written)");
    }
  }
  if (!spec.checked_launches.empty() && spec.checked_dump.empty() && !spec.check_launch) {
    fail(member_path(path, "check_launch"), "is required with \"checked_launches\" (the CUDA "
                                             "reference's grid, block and shared_bytes), unless "
                                             "\"checked_dump\" asks for files instead");
  }
  if (spec.has_reference_checks()) {
    for (std::size_t a = 0; a < spec.args.size(); ++a) {
      const auto& arg = spec.args[a];
      if (arg.kind != ArgKind::buffer || arg.buffer.role == BufferRole::in) continue;
      const auto ap = index_path(member_path(path, "args"), a);
      if (!arg.buffer.dtype || !arg.buffer.has_compare) {
        fail(member_path(ap, arg.buffer.dtype ? "compare" : "dtype"),
             "is required on every \"out\"/\"inout\" buffer of a case with checked launches");
      }
    }
  }
  for (std::size_t a = 0; a < spec.args.size(); ++a) {
    const auto& b = spec.args[a].buffer;
    if (spec.args[a].kind != ArgKind::buffer || !b.has_compare) continue;
    if (b.expected.empty() && b.timed_expected.empty() && spec.checked_launches.empty() &&
        !spec.check_launch) {
      fail(member_path(index_path(member_path(path, "args"), a), "compare"),
           "compares against nothing: give \"expected\" (or \"timed_expected\") too");
    }
  }
}

CaseSpec parse_case(const json& c, const std::string& path) {
  expect_object(c, path);
  CaseSpec spec;
  spec.name = as_string(require(c, path, "name"), member_path(path, "name"));

  const auto args_path = member_path(path, "args");
  const json& args = require(c, path, "args");
  if (!args.is_array()) fail(args_path, std::string("must be an array, got ") + type_name(args));
  std::map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto arg_path = index_path(args_path, i);
    auto arg = parse_arg(args[i], arg_path);
    // Guard violations and modified inputs are reported by argument name.
    if (const auto [it, fresh] = seen.emplace(arg.name, i); !fresh) {
      fail(member_path(arg_path, "name"), "duplicate argument name \"" + arg.name + "\" (also " +
                                              index_path(args_path, it->second) + ")");
    }
    spec.args.push_back(std::move(arg));
  }

  spec.launch = parse_launch(require(c, path, "launch"), member_path(path, "launch"));
  if (const json* t = find(c, "timing")) {
    auto timing = parse_timing(*t, member_path(path, "timing"));
    if (timing.iterations > 0) spec.timing = timing;
  }
  if (const json* v = find(c, "repeat_validation")) {
    spec.repeat_validation = as_bool(*v, member_path(path, "repeat_validation"));
  }
  parse_fresh_checks(c, path, spec);
  return spec;
}

// The first field of the request that needs the support module's kernels, or "" if none.
std::string first_support_user(const Request& req) {
  for (std::size_t c = 0; c < req.cases.size(); ++c) {
    const auto& spec = req.cases[c];
    const auto case_path = index_path("cases", c);
    if (spec.repeat_validation) return member_path(case_path, "repeat_validation");
    for (std::size_t a = 0; a < spec.args.size(); ++a) {
      const auto& b = spec.args[a].buffer;
      if (spec.args[a].kind != ArgKind::buffer) continue;
      const auto arg = index_path(member_path(case_path, "args"), a);
      if (!b.expected.empty()) return member_path(arg, "expected");
      if (!b.timed_expected.empty()) return member_path(arg, "timed_expected");
    }
  }
  return {};
}

}  // namespace

std::size_t scalar_size(ScalarType t) noexcept {
  switch (t) {
    case ScalarType::int8:
    case ScalarType::uint8: return 1;
    case ScalarType::int16:
    case ScalarType::uint16:
    case ScalarType::float16:
    case ScalarType::bfloat16: return 2;
    case ScalarType::int32:
    case ScalarType::uint32:
    case ScalarType::float32: return 4;
    case ScalarType::int64:
    case ScalarType::uint64:
    case ScalarType::float64: return 8;
  }
  return 0;
}

const char* scalar_type_name(ScalarType t) noexcept {
  switch (t) {
    case ScalarType::int8: return "int8";
    case ScalarType::int16: return "int16";
    case ScalarType::int32: return "int32";
    case ScalarType::int64: return "int64";
    case ScalarType::uint8: return "uint8";
    case ScalarType::uint16: return "uint16";
    case ScalarType::uint32: return "uint32";
    case ScalarType::uint64: return "uint64";
    case ScalarType::float16: return "float16";
    case ScalarType::bfloat16: return "bfloat16";
    case ScalarType::float32: return "float32";
    case ScalarType::float64: return "float64";
  }
  return "?";
}

std::optional<ScalarType> scalar_type_from_name(std::string_view name) noexcept {
  static constexpr ScalarType all[] = {
      ScalarType::int8,    ScalarType::int16,    ScalarType::int32,   ScalarType::int64,
      ScalarType::uint8,   ScalarType::uint16,   ScalarType::uint32,  ScalarType::uint64,
      ScalarType::float16, ScalarType::bfloat16, ScalarType::float32, ScalarType::float64,
  };
  for (const auto t : all) {
    if (name == scalar_type_name(t)) return t;
  }
  return std::nullopt;
}

bool CaseSpec::has_timed_check() const noexcept {
  for (const auto& a : args) {
    if (a.kind == ArgKind::buffer &&
        (!a.buffer.timed_input.empty() || !a.buffer.timed_expected.empty())) {
      return true;
    }
  }
  return false;
}

bool CaseSpec::has_expected() const noexcept {
  for (const auto& a : args) {
    if (a.kind == ArgKind::buffer && !a.buffer.expected.empty()) return true;
  }
  return false;
}

bool CaseSpec::has_compare() const noexcept {
  for (const auto& a : args) {
    if (a.kind == ArgKind::buffer &&
        (!a.buffer.expected.empty() || !a.buffer.timed_expected.empty())) {
      return true;
    }
  }
  return false;
}

bool CaseSpec::has_fresh() const noexcept {
  for (const auto& a : args) {
    if (a.kind == ArgKind::buffer && a.buffer.fresh) return true;
  }
  return false;
}

bool CaseSpec::has_reference_checks() const noexcept {
  return check_launch.has_value() && (!checked_launches.empty() || confirm_launch);
}

const char* role_name(BufferRole r) noexcept {
  switch (r) {
    case BufferRole::in: return "in";
    case BufferRole::out: return "out";
    case BufferRole::inout: return "inout";
  }
  return "?";
}

namespace detail {

std::optional<std::vector<std::uint8_t>> decode_hex(std::string_view hex, std::size_t size) {
  if (hex.size() != 2 * size) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<std::uint8_t> out(size);
  for (std::size_t i = 0; i < size; ++i) {
    const int hi = nibble(hex[2 * i]);
    const int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return out;
}

}  // namespace detail

Request parse_request(const json& doc) {
  if (!doc.is_object()) {
    throw BadRequest(std::string("request: must be a JSON object, got ") + type_name(doc));
  }
  Request req;

  const json& protocol = require(doc, "", "protocol");
  if (!protocol.is_number_integer() || protocol.get<std::int64_t>() < 1 ||
      protocol.get<std::int64_t>() > protocol_version) {
    fail("protocol", "must be 1 or " + std::to_string(protocol_version) +
                         " (this harness speaks protocol " + std::to_string(protocol_version) +
                         " and accepts protocol 1 requests), got " + protocol.dump());
  }
  if (const json* v = find(doc, "device")) {
    req.device = static_cast<int>(as_uint(*v, "device", std::numeric_limits<int>::max()));
  }
  if (const json* v = find(doc, "support_module")) {
    req.support_module = as_string(*v, "support_module");
  }
  if (const json* v = find(doc, "flush_l2")) req.flush_l2 = as_bool(*v, "flush_l2");
  if (const json* v = find(doc, "op")) {
    const auto op = as_string(*v, "op");
    if (op == "baseline") {
      req.op = RequestOp::baseline;
    } else if (op != "run") {
      fail("op", "must be \"run\" or \"baseline\", got \"" + op + "\"");
    }
  }
  if (req.op == RequestOp::baseline) {
    req.baseline = parse_baseline(doc);
    require_support_for(req.baseline.timing, "timing", !req.support_module.empty());
    return req;
  }
  req.module_path = as_string(require(doc, "", "module"), "module");
  req.entry = as_string(require(doc, "", "entry"), "entry");
  if (const json* v = find(doc, "guard_bytes")) {
    req.guard_bytes = as_uint(*v, "guard_bytes", max_guard_bytes);
    if (req.guard_bytes % 256 != 0) {
      fail("guard_bytes", "must be a multiple of 256, got " + v->dump());
    }
  }
  if (const json* v = find(doc, "input_cache")) req.input_cache = as_bool(*v, "input_cache");
  if (const json* v = find(doc, "check_module")) req.check_module = as_string(*v, "check_module");
  if (const json* v = find(doc, "check_entry")) req.check_entry = as_string(*v, "check_entry");
  if (req.check_module.empty() != req.check_entry.empty()) {
    fail(req.check_module.empty() ? "check_module" : "check_entry",
         "is required with \"check_module\"/\"check_entry\" (the CUDA reference's module and kernel)");
  }
  if (const json* v = find(doc, "input_cache_bytes")) {
    req.input_cache_bytes = as_uint(*v, "input_cache_bytes", max_buffer_bytes);
  }

  const json& cases = require(doc, "", "cases");
  if (!cases.is_array()) fail("cases", std::string("must be an array, got ") + type_name(cases));
  if (cases.empty()) fail("cases", "must hold at least one case");
  std::map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto path = index_path("cases", i);
    auto spec = parse_case(cases[i], path);
    if (spec.timing) {
      require_support_for(*spec.timing, member_path(path, "timing"), !req.support_module.empty());
    }
    if (spec.has_reference_checks() && spec.check_launch && req.check_module.empty()) {
      fail("check_module", "is required by " + member_path(path, "checked_launches") +
                               " (the CUDA reference that checks the timed launches)");
    }
    if ((spec.has_reference_checks() || (spec.has_fresh() && spec.timing)) &&
        req.support_module.empty()) {
      fail("support_module", "is required by " + member_path(path, spec.has_reference_checks()
                                                                      ? "checked_launches"
                                                                      : "fresh_seed") +
                                 " (ko_fill_<dtype> and ko_compare_ref_<dtype>): compile it with "
                                 "kernelopt_mcp.support_module.support_module(arch)");
    }
    if (const auto [it, fresh] = seen.emplace(spec.name, i); !fresh) {
      fail(member_path(path, "name"), "duplicate case name \"" + spec.name + "\" (also " +
                                          index_path("cases", it->second) + ")");
    }
    req.cases.push_back(std::move(spec));
  }
  if (req.support_module.empty()) {
    if (const auto user = first_support_user(req); !user.empty()) {
      fail("support_module", "is required by " + user +
                                 " (the harness's device-side compare kernels): compile it with "
                                 "kernelopt_mcp.support_module.support_module(arch)");
    }
  }
  return req;
}

Request parse_request(std::string_view text) {
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    throw BadRequest(std::string("request: not valid JSON: ") + e.what());
  }
  try {
    return parse_request(doc);
  } catch (const json::exception& e) {
    // The checks above test every type before converting, so this is a missed case; still a
    // problem with the request, not a crash.
    throw BadRequest(std::string("request: unexpected JSON value: ") + e.what());
  }
}

}  // namespace kernelopt
