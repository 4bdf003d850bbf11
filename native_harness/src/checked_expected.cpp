// checked_expected on the request's side: the draw rule (planned_draw) and the case field's
// parsing. The harness's side of the checks is case_expected.cpp.
#include "checked_expected.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "request_fields.hpp"

namespace kernelopt {

LaunchDraw planned_draw(const CaseSpec& spec, std::optional<std::size_t> sample) {
  if (!spec.timing || !spec.has_fresh()) return {true, std::nullopt};
  const TimingConfig& t = *spec.timing;
  const std::uint64_t warmup = t.warmup;
  // fresh_timed false: only the confirm launch draws, and it is the first draw
  if (!spec.fresh_timed) return {true, sample ? std::nullopt : std::optional<std::uint64_t>(0)};
  // The confirm launch follows every sample taken: adaptive timing decides how many at run time.
  if (!sample && t.adaptive) return {false, std::nullopt};
  if (!spec.fresh_launches) {
    // every timed launch draws: the ones before measured sample 0, then one per sample
    std::uint64_t before = warmup;
    if (t.mode == TimingMode::graph) {
      // the warm-up launches (the probe that chooses graph_batch is at least one) and the
      // untimed upload replay
      before = (t.graph_batch > 0 ? warmup : std::max<std::uint64_t>(warmup, 1)) + 1;
    }
    return {true, before + (sample ? *sample : t.iterations)};
  }
  // fresh_launches (events mode): draws at the first timed launch and at the listed samples'
  std::set<std::uint64_t> drawn{0};
  for (const unsigned s : *spec.fresh_launches) drawn.insert(warmup + s);
  const std::uint64_t last = warmup + (sample ? *sample : t.iterations - 1);
  const auto made = static_cast<std::uint64_t>(
      std::distance(drawn.begin(), drawn.upper_bound(last)));  // draws at launches 0..last
  return {true, sample ? made - 1 : made};
}

std::string draw_name(std::optional<std::uint64_t> draw) {
  return draw ? "draw " + std::to_string(*draw) : std::string("no draw");
}

namespace detail {
namespace {

std::string launch_name(std::optional<unsigned> sample) {
  return sample ? "sample " + std::to_string(*sample) : std::string("the confirm launch");
}

CheckedExpected parse_entry(const json& e, const std::string& path, const CaseSpec& spec) {
  expect_object(e, path);
  CheckedExpected entry;
  std::string launch = "measured";
  if (const json* v = find(e, "launch")) {
    launch = as_string(*v, member_path(path, "launch"));
    if (launch != "measured" && launch != "confirm") {
      fail(member_path(path, "launch"),
           "must be \"measured\" or \"confirm\", got \"" + launch + "\"");
    }
  }
  const json* sample = find(e, "sample");
  if (launch == "confirm") {
    if (sample != nullptr) {
      fail(member_path(path, "sample"),
           "is refused with \"launch\": \"confirm\" (not a measured sample)");
    }
    if (!spec.confirm_launch) {
      fail(member_path(path, "launch"), "\"confirm\" needs the case's \"confirm_launch\": true");
    }
  } else {
    if (sample == nullptr) {
      fail(member_path(path, "sample"),
           "is required: a measured sample of \"checked_launches\" (or \"launch\": \"confirm\")");
    }
    const auto index =
        static_cast<unsigned>(as_uint(*sample, member_path(path, "sample"), max_iterations));
    const auto& checked = spec.checked_launches;
    if (std::find(checked.begin(), checked.end(), index) == checked.end()) {
      fail(member_path(path, "sample"),
           std::to_string(index) +
               " is not one of the case's \"checked_launches\": list it there "
               "(only those samples are checked)");
    }
    entry.sample = index;
  }
  if (const json* v = find(e, "draw"))
    entry.draw = as_uint(*v, member_path(path, "draw"), UINT64_MAX);

  entry.buffer = as_string(require(e, path, "buffer"), member_path(path, "buffer"));
  const auto arg = std::find_if(spec.args.begin(), spec.args.end(),
                                [&](const KernelArg& a) { return a.name == entry.buffer; });
  if (arg == spec.args.end() || arg->kind != ArgKind::buffer ||
      arg->buffer.role == BufferRole::in) {
    fail(member_path(path, "buffer"),
         "\"" + entry.buffer +
             "\" is not an \"out\" or \"inout\" buffer of the case (expected "
             "values belong to the outputs)");
  }
  entry.arg = static_cast<std::size_t>(arg - spec.args.begin());
  entry.expected = as_string(require(e, path, "expected"), member_path(path, "expected"));

  // The draw the caller computed for must be the one the launch will get, wherever that can be
  // told before the case runs (the confirm launch after adaptive timing is checked as it runs).
  const LaunchDraw planned = planned_draw(spec, entry.sample);
  if (planned.known && planned.draw != entry.draw) {
    fail(member_path(path, "draw"),
         launch_name(entry.sample) + " of this case gets " + draw_name(planned.draw) + ", not " +
             draw_name(entry.draw) +
             " (PROTOCOL.md, \"Checked launches against expected values\": " +
             (planned.draw ? "give \"draw\": " + std::to_string(*planned.draw)
                           : std::string("omit \"draw\": its inputs are not drawn")) +
             ")");
  }
  return entry;
}

}  // namespace

void parse_checked_expected(const json& c, const std::string& path, CaseSpec& spec) {
  const json* v = find(c, "checked_expected");
  if (v == nullptr) return;
  const auto p = member_path(path, "checked_expected");
  if (!v->is_array()) fail(p, std::string("must be an array, got ") + type_name(*v));
  if (v->empty()) return;
  if (!spec.timing) fail(p, "needs \"timing\" (it checks timed launches)");
  // One source of truth per checked launch: these values, or a CUDA reference, or the dump.
  if (spec.check_launch) {
    fail(member_path(path, "check_launch"),
         "is refused with \"checked_expected\": the expected values given are the checked "
         "launches' only reference; drop one of them");
  }
  if (!spec.checked_dump.empty()) {
    fail(member_path(path, "checked_dump"),
         "is refused with \"checked_expected\": the checked launches are compared on the device "
         "against the expected values given; drop one of them");
  }
  std::map<std::pair<std::optional<unsigned>, std::size_t>, std::size_t> seen;
  for (std::size_t i = 0; i < v->size(); ++i) {
    const auto ep = index_path(p, i);
    CheckedExpected entry = parse_entry((*v)[i], ep, spec);
    if (const auto [it, fresh] = seen.emplace(std::pair{entry.sample, entry.arg}, i); !fresh) {
      fail(ep, "a second entry for " + launch_name(entry.sample) + ", buffer \"" + entry.buffer +
                   "\" (also " + index_path(p, it->second) + ")");
    }
    spec.checked_expected.push_back(std::move(entry));
  }
  // Every output of every checked launch is compared: a launch with one output unchecked could
  // write anything there.
  std::vector<std::optional<unsigned>> launches(spec.checked_launches.begin(),
                                                spec.checked_launches.end());
  if (spec.confirm_expected()) launches.emplace_back(std::nullopt);
  for (const auto& launch : launches) {
    for (std::size_t a = 0; a < spec.args.size(); ++a) {
      const auto& arg = spec.args[a];
      if (arg.kind != ArgKind::buffer || arg.buffer.role == BufferRole::in) continue;
      if (seen.count({launch, a}) == 0) {
        fail(p, "no entry for " + launch_name(launch) + ", buffer \"" + arg.name +
                    "\": every \"out\"/\"inout\" buffer of every checked launch needs its expected "
                    "values");
      }
    }
  }
}

}  // namespace detail

bool CaseSpec::confirm_expected() const noexcept {
  return std::any_of(checked_expected.begin(), checked_expected.end(),
                     [](const CheckedExpected& e) { return !e.sample; });
}

}  // namespace kernelopt
