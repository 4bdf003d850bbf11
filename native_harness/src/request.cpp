// parse_request: the request, its cases, launches and timing, and the checks that span them.
// Kernel arguments are parsed in request_args.cpp, JSON fields read in request_fields.cpp.
#include "request.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "checked_expected.hpp"
#include "errors.hpp"
#include "request_args.hpp"
#include "request_fields.hpp"
#include "tensor_map.hpp"
#include "version.hpp"

namespace kernelopt {
namespace {

using namespace detail;  // the field readers of request_fields.hpp

LaunchConfig parse_launch(const json& l, const std::string& path) {
  expect_object(l, path);
  LaunchConfig launch;
  launch.grid = as_dim3(require(l, path, "grid"), member_path(path, "grid"));
  launch.block = as_dim3(require(l, path, "block"), member_path(path, "block"));
  if (const json* v = find(l, "shared_bytes")) {
    launch.shared_bytes = static_cast<unsigned>(
        as_uint(*v, member_path(path, "shared_bytes"), std::numeric_limits<unsigned>::max()));
  }
  return launch;
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
    if (c.max_ms > 600000)
      fail(member_path(path, "max_ms"), "must be at most 600000 (10 minutes), got " + v->dump());
  }
  if (const json* v = find(a, "max_iterations")) {
    c.max_iterations =
        static_cast<unsigned>(as_uint(*v, member_path(path, "max_iterations"), max_iterations));
  }
  if (c.max_iterations < iterations) {
    fail(member_path(path, "max_iterations"), "must be at least the timing's iterations (" +
                                                  std::to_string(iterations) + "), got " +
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
  if (const json* v = find(t, "blocking"))
    timing.blocking = as_bool(*v, member_path(path, "blocking"));
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
         "kernelopt_mcp.evaluation.support_module.support_module(arch))");
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
  if (const json* v = find(c, "fresh_launches")) {
    const auto p = member_path(path, "fresh_launches");
    if (!v->is_array()) fail(p, std::string("must be an array, got ") + type_name(*v));
    if (!spec.timing) fail(p, "needs \"timing\" (indices of measured samples)");
    if (spec.timing->mode != TimingMode::events) {
      fail(p, "needs timing mode \"events\" (a graph replays its launches without a redraw)");
    }
    std::vector<unsigned> samples;
    for (std::size_t i = 0; i < v->size(); ++i) {
      const auto ip = index_path(p, i);
      const auto index = static_cast<unsigned>(as_uint((*v)[i], ip, max_iterations));
      if (!samples.empty() && index <= samples.back()) fail(ip, "indices must be increasing");
      samples.push_back(index);
    }
    spec.fresh_launches = std::move(samples);
  }
  if (const json* v = find(c, "poison_subset")) {
    const auto p = member_path(path, "poison_subset");
    spec.poison_subset = as_bool(*v, p);
    if (spec.poison_subset && !spec.fresh_launches) {
      fail(p, "needs \"fresh_launches\" (the samples whose outputs are poisoned)");
    }
  }
  if (const json* v = find(c, "check_launch")) {
    spec.check_launch = parse_launch(*v, member_path(path, "check_launch"));
  }
  if (const json* v = find(c, "confirm_launch")) {
    spec.confirm_launch = as_bool(*v, member_path(path, "confirm_launch"));
    if (spec.confirm_launch && !spec.timing) {
      fail(member_path(path, "confirm_launch"),
           "needs \"timing\" (it runs after the measured launches)");
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
      // With adaptive timing the later rounds' samples may be checked too (the ones that run).
      const auto& t = *spec.timing;
      const unsigned limit = t.adaptive ? t.adaptive->max_iterations : t.iterations;
      if (index >= limit) {
        fail(ip, std::string("must be below ") +
                     (t.adaptive ? "timing.adaptive.max_iterations (" : "timing.iterations (") +
                     std::to_string(limit) + "), got " + std::to_string(index));
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
    if (spec.has_input_draws()) {
      fail(p,
           "needs input files (the oracle reads the inputs of launches that were not redrawn); "
           "give this case's buffers \"input\" files instead of \"input_draw\"");
    }
  }
  parse_checked_expected(c, path, spec);
  // expected_dtype describes the files of expected, timed_expected and checked_expected entries
  for (std::size_t a = 0; a < spec.args.size(); ++a) {
    const auto& b = spec.args[a].buffer;
    if (spec.args[a].kind != ArgKind::buffer || !b.expected_dtype || !b.expected.empty() ||
        !b.timed_expected.empty()) {
      continue;
    }
    const bool listed = std::any_of(spec.checked_expected.begin(), spec.checked_expected.end(),
                                    [&](const CheckedExpected& e) { return e.arg == a; });
    if (!listed) {
      fail(member_path(index_path(member_path(path, "args"), a), "expected_dtype"),
           "needs \"expected\" or \"timed_expected\" (the files it describes), or a "
           "\"checked_expected\" entry for this buffer");
    }
  }
  if (!spec.checked_launches.empty() && spec.checked_dump.empty() && !spec.check_launch &&
      !spec.has_expected_checks()) {
    fail(member_path(path, "check_launch"),
         "is required with \"checked_launches\" (the CUDA "
         "reference's grid, block and shared_bytes), unless "
         "\"checked_dump\" asks for files or \"checked_expected\" gives the expected outputs "
         "instead");
  }
  if (spec.has_reference_checks() || spec.has_expected_checks()) {
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
        !spec.check_launch && !spec.has_expected_checks()) {
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
  if (const json* v = find(c, "tensor_maps")) {
    parse_tensor_maps(*v, member_path(path, "tensor_maps"), spec);
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

// Feature device_expected: kept copies live in the input cache, and one key names one buffer's
// output per request.
void check_kept(const Request& req) {
  std::map<std::string, std::string> keys;  // key -> the field that keeps it
  for (std::size_t c = 0; c < req.cases.size(); ++c) {
    const auto& spec = req.cases[c];
    for (std::size_t a = 0; a < spec.args.size(); ++a) {
      const auto& b = spec.args[a].buffer;
      if (spec.args[a].kind != ArgKind::buffer) continue;
      const auto arg = index_path(member_path(index_path("cases", c), "args"), a);
      if (!b.keep_expected.empty()) {
        const auto p = member_path(arg, "keep_expected");
        if (!req.input_cache) {
          fail(p, "needs \"input_cache\": true (the kept copy lives in the input cache)");
        }
        if (const auto [it, fresh] = keys.emplace(b.keep_expected, p); !fresh) {
          fail(p, "duplicate key \"" + b.keep_expected + "\" (also " + it->second + ")");
        }
      }
      for (const auto& [field, kept] : {std::pair{"expected", b.expected_kept()},
                                        std::pair{"timed_expected", b.timed_expected_kept()}}) {
        if (kept && !req.input_cache) {
          fail(member_path(arg, field),
               "a \"kept:\" value needs \"input_cache\": true (kept copies live in the input "
               "cache)");
        }
      }
    }
  }
}

}  // namespace

bool CaseSpec::has_keep_expected() const noexcept {
  for (const auto& a : args) {
    if (a.kind == ArgKind::buffer && !a.buffer.keep_expected.empty()) return true;
  }
  return false;
}

bool CaseSpec::has_timed_check() const noexcept {
  for (const auto& a : args) {
    if (a.kind == ArgKind::buffer &&
        (a.buffer.has_timed_input() || !a.buffer.timed_expected.empty())) {
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

bool CaseSpec::has_input_draws() const noexcept {
  for (const auto& a : args) {
    if (a.kind == ArgKind::buffer && (a.buffer.input_draw || a.buffer.timed_input_draw)) {
      return true;
    }
  }
  return false;
}

bool CaseSpec::has_reference_checks() const noexcept {
  return check_launch.has_value() && (!checked_launches.empty() || confirm_launch);
}

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
  if (const json* v = find(doc, "progress")) req.progress = as_bool(*v, "progress");
  if (const json* v = find(doc, "check_module")) req.check_module = as_string(*v, "check_module");
  if (const json* v = find(doc, "check_entry")) req.check_entry = as_string(*v, "check_entry");
  if (req.check_module.empty() != req.check_entry.empty()) {
    fail(req.check_module.empty() ? "check_module" : "check_entry",
         "is required with \"check_module\"/\"check_entry\" (the CUDA reference's module and "
         "kernel)");
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
    if (spec.has_expected_checks() && !req.check_module.empty()) {
      fail("check_module",
           "is refused with " + member_path(path, "checked_expected") +
               ": the expected values given are the checked launches' only reference; drop "
               "\"check_module\"/\"check_entry\" or the entries");
    }
    if ((spec.has_reference_checks() || spec.has_expected_checks() ||
         (spec.has_fresh() && spec.timing) || spec.has_input_draws()) &&
        req.support_module.empty()) {
      const char* user = spec.has_reference_checks()       ? "checked_launches"
                         : spec.has_expected_checks()      ? "checked_expected"
                         : spec.has_fresh() && spec.timing ? "fresh_seed"
                                                           : "args (input_draw)";
      fail("support_module", "is required by " + member_path(path, user) +
                                 " (ko_fill_<dtype> and ko_compare_ref_<dtype>): compile it with "
                                 "kernelopt_mcp.evaluation.support_module.support_module(arch)");
    }
    if (const auto [it, fresh] = seen.emplace(spec.name, i); !fresh) {
      fail(member_path(path, "name"), "duplicate case name \"" + spec.name + "\" (also " +
                                          index_path("cases", it->second) + ")");
    }
    req.cases.push_back(std::move(spec));
  }
  check_kept(req);
  if (req.support_module.empty()) {
    if (const auto user = first_support_user(req); !user.empty()) {
      fail("support_module", "is required by " + user +
                                 " (the harness's device-side compare kernels): compile it with "
                                 "kernelopt_mcp.evaluation.support_module.support_module(arch)");
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
