// checked_expected on the request's side: the draw rule (planned_draw) and the refusals of
// parse_request. The harness's behaviour is in e2e_checked.cpp, which also holds the rule to the
// draws the harness really makes.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "checked_expected.hpp"
#include "request.hpp"
#include "request_errors.hpp"
#include "test_util.hpp"

using kernelopt::LaunchDraw;
using kernelopt::planned_draw;
using nlohmann::json;

namespace {

// A copy case: A (in, fresh), C (out), timed 2 warm-up + 5 measured, samples 1 and 4 checked
// against values given up front for their draws 3 and 6.
json valid() {
  return json::parse(R"({
    "protocol": 2, "device": 0, "module": "/m.cubin", "entry": "k", "support_module": "/s.cubin",
    "cases": [{
      "name": "c0",
      "args": [
        {"kind": "buffer", "name": "A", "role": "in", "bytes": 16, "input": "/a", "dtype": "float32",
         "fresh": {"kind": "uniform", "low": 1, "high": 2}},
        {"kind": "buffer", "name": "C", "role": "out", "bytes": 16, "output": "/c", "dtype": "float32",
         "compare": {"abs_tol": 1e-6, "rtol": 1e-3, "rel_floor": 1}},
        {"kind": "scalar", "name": "n", "dtype": "uint64", "raw": "1000000000000000"}
      ],
      "launch": {"grid": [1, 1, 1], "block": [32, 1, 1]},
      "timing": {"warmup": 2, "iterations": 5},
      "fresh_seed": 99, "checked_launches": [1, 4], "confirm_launch": true,
      "checked_expected": [
        {"sample": 1, "draw": 3, "buffer": "C", "expected": "/s1_C.bin"},
        {"sample": 4, "draw": 6, "buffer": "C", "expected": "/s4_C.bin"},
        {"launch": "confirm", "draw": 7, "buffer": "C", "expected": "/confirm_C.bin"}
      ]
    }]
  })");
}

kernelopt::CaseSpec case_of(const json& doc) { return kernelopt::parse_request(doc).cases.at(0); }

// The draw of `sample` (none: the confirm launch) of the case of `doc`.
LaunchDraw draw_of(const json& doc, std::optional<std::size_t> sample) {
  return planned_draw(case_of(doc), sample);
}

bool is(const LaunchDraw& d, std::optional<std::uint64_t> draw) {
  return d.known && d.draw == draw;
}

// valid() without its checked_expected (the draws of other timings, no values to agree with).
json plain(json timing) {
  auto doc = valid();
  auto& c = doc["cases"][0];
  c.erase("checked_expected");
  c.erase("checked_launches");
  c.erase("confirm_launch");
  c["args"][1].erase("compare");
  c["timing"] = std::move(timing);
  return doc;
}

}  // namespace

TEST_CASE("a case with checked_expected parses: entries, their buffer and draw") {
  const auto spec = case_of(valid());
  CHECK(spec.checked_expected.size() == 3);
  CHECK(spec.checked_expected[0].sample == 1u && spec.checked_expected[0].draw == 3u);
  CHECK(spec.checked_expected[0].arg == 1 && spec.checked_expected[0].buffer == "C");
  CHECK(!spec.checked_expected[2].sample && spec.checked_expected[2].expected == "/confirm_C.bin");
  CHECK(spec.has_expected_checks() && spec.confirm_expected() && !spec.has_reference_checks());
  // the confirm launch may go unchecked; the measured ones may not (refusals below)
  auto doc = valid();
  doc["cases"][0]["checked_expected"].erase(2);
  CHECK(!case_of(doc).confirm_expected());
}

TEST_CASE("planned_draw: events mode, one draw per warm-up and measured launch") {
  const auto doc = plain({{"warmup", 2}, {"iterations", 5}});
  CHECK(is(draw_of(doc, 0), 2));
  CHECK(is(draw_of(doc, 4), 6));
  CHECK(is(draw_of(doc, std::nullopt), 7));              // the confirm launch: after 2 + 5 draws
  CHECK(is(draw_of(plain({{"iterations", 3}}), 0), 0));  // no warm-up: sample 0 draws first
}

TEST_CASE("planned_draw: graph mode counts the probe and the upload replay") {
  // with graph_batch: the warm-up launches and one upload replay before sample 0
  CHECK(is(
      draw_of(plain({{"warmup", 1}, {"iterations", 3}, {"mode", "graph"}, {"graph_batch", 2}}), 2),
      4));
  // without: at least one probe launch chooses the batch
  CHECK(is(draw_of(plain({{"iterations", 3}, {"mode", "graph"}}), 0), 2));
  CHECK(is(draw_of(plain({{"warmup", 30}, {"iterations", 3}, {"mode", "graph"}}), 1), 32));
  CHECK(is(draw_of(plain({{"warmup", 1}, {"iterations", 3}, {"mode", "graph"}}), std::nullopt), 5));
}

TEST_CASE("planned_draw: fresh_launches draw at the first timed launch and the listed samples") {
  auto doc = plain({{"warmup", 2}, {"iterations", 6}});
  doc["cases"][0]["fresh_launches"] = {2, 4};
  CHECK(is(draw_of(doc, 0), 0) && is(draw_of(doc, 1), 0));  // draw 0 at the first warm-up
  CHECK(is(draw_of(doc, 2), 1) && is(draw_of(doc, 3), 1));
  CHECK(is(draw_of(doc, 4), 2) && is(draw_of(doc, 5), 2));
  CHECK(is(draw_of(doc, std::nullopt), 3));
  // no warm-up: sample 0 is the first timed launch, listed or not it draws once
  doc["cases"][0]["timing"] = {{"iterations", 4}};
  doc["cases"][0]["fresh_launches"] = {0, 3};
  CHECK(is(draw_of(doc, 0), 0) && is(draw_of(doc, 2), 0) && is(draw_of(doc, 3), 1));
  CHECK(is(draw_of(doc, std::nullopt), 2));
  // a listed sample past the last one taken draws nothing before the confirm launch
  doc["cases"][0]["fresh_launches"] = {1, 9};
  CHECK(is(draw_of(doc, std::nullopt), 2));
}

TEST_CASE(
    "planned_draw: no draws without fresh_timed or a fresh buffer; adaptive confirm unknown") {
  auto doc = plain({{"warmup", 2}, {"iterations", 5}});
  doc["cases"][0]["fresh_timed"] = false;
  CHECK(is(draw_of(doc, 3), std::nullopt));
  CHECK(is(draw_of(doc, std::nullopt), 0));  // the confirm launch draws all the same
  doc["cases"][0].erase("fresh_timed");
  doc["cases"][0]["args"][0].erase("fresh");
  CHECK(is(draw_of(doc, 3), std::nullopt) && is(draw_of(doc, std::nullopt), std::nullopt));
  const auto adaptive =
      plain({{"warmup", 2}, {"iterations", 5}, {"adaptive", {{"max_iterations", 50}}}});
  CHECK(is(draw_of(adaptive, 30), 32));  // a measured sample's draw does not depend on the stop
  CHECK(!draw_of(adaptive, std::nullopt).known);
}

TEST_CASE("checked_expected: refusals name the field") {
  struct Bad {
    void (*edit)(json& req, json& c);
    const char* message;
  };
  const Bad bads[] = {
      {[](json&, json& c) { c["checked_expected"].erase(1); },
       "cases[0].checked_expected: no entry for sample 4, buffer \"C\""},
      {[](json&, json& c) { c["checked_expected"][0]["sample"] = 2; },
       "cases[0].checked_expected[0].sample: 2 is not one of the case's \"checked_launches\""},
      {[](json&, json& c) { c["checked_expected"][0].erase("sample"); },
       "cases[0].checked_expected[0].sample: is required"},
      {[](json&, json& c) { c["checked_expected"][0]["draw"] = 4; },
       "cases[0].checked_expected[0].draw: sample 1 of this case gets draw 3, not draw 4"},
      {[](json&, json& c) { c["checked_expected"][0].erase("draw"); },
       "cases[0].checked_expected[0].draw: sample 1 of this case gets draw 3, not no draw"},
      {[](json&, json& c) { c["checked_expected"][2]["draw"] = 6; },
       "cases[0].checked_expected[2].draw: the confirm launch of this case gets draw 7"},
      {[](json&, json& c) { c["checked_expected"][0]["buffer"] = "A"; },
       "cases[0].checked_expected[0].buffer: \"A\" is not an \"out\" or \"inout\" buffer"},
      {[](json&, json& c) { c["checked_expected"][0]["buffer"] = "n"; },
       "cases[0].checked_expected[0].buffer: \"n\" is not an \"out\" or \"inout\" buffer"},
      {[](json&, json& c) { c["checked_expected"][0].erase("expected"); },
       "cases[0].checked_expected[0].expected: is required"},
      {[](json&, json& c) { c["checked_expected"][1] = c["checked_expected"][0]; },
       "cases[0].checked_expected[1]: a second entry for sample 1, buffer \"C\""},
      {[](json&, json& c) { c["checked_expected"][2]["launch"] = "timed"; },
       "cases[0].checked_expected[2].launch: must be \"measured\" or \"confirm\""},
      {[](json&, json& c) { c["confirm_launch"] = false; },
       "cases[0].checked_expected[2].launch: \"confirm\" needs the case's \"confirm_launch\": "
       "true"},
      {[](json&, json& c) { c["checked_expected"] = "s1.bin"; },
       "cases[0].checked_expected: must be an array"},
      {[](json&, json& c) { c["check_launch"] = {{"grid", {1, 1, 1}}, {"block", {32, 1, 1}}}; },
       "cases[0].check_launch: is refused with \"checked_expected\""},
      {[](json& r, json&) {
         r["check_module"] = "/ref.cubin";
         r["check_entry"] = "k";
       },
       "check_module: is refused with cases[0].checked_expected"},
      {[](json&, json& c) { c["checked_dump"] = "/tmp"; },
       "cases[0].checked_dump: is refused with \"checked_expected\""},
      {[](json&, json& c) { c["args"][1].erase("compare"); },
       "cases[0].args[1].compare: is required on every \"out\"/\"inout\" buffer"},
      {[](json& r, json&) { r.erase("support_module"); },
       "support_module: is required by cases[0].checked_expected"},
      {[](json&, json& c) { c["args"][0]["expected_dtype"] = "float32"; },
       "cases[0].args[0].expected_dtype: an \"in\" buffer is not compared"},
  };
  for (const auto& bad : bads) {
    auto doc = valid();
    bad.edit(doc, doc["cases"][0]);
    EXPECT_ERROR(doc, bad.message);
  }
}

TEST_CASE("checked_expected: expected_dtype describes its files; check_launch is not needed") {
  auto doc = valid();
  doc["cases"][0]["args"][1]["expected_dtype"] = "float32";  // no expected / timed_expected
  const auto spec = case_of(doc);
  CHECK(spec.args[1].buffer.native_expected());
  // an expected_dtype that describes no file at all is still refused
  doc["cases"][0].erase("checked_expected");
  doc["cases"][0]["check_launch"] = {{"grid", {1, 1, 1}}, {"block", {32, 1, 1}}};
  doc["check_module"] = "/ref.cubin";
  doc["check_entry"] = "k";
  EXPECT_ERROR(doc, "cases[0].args[1].expected_dtype: needs \"expected\" or \"timed_expected\"");
  // without values or a reference, checked launches still need a check_launch
  doc = valid();
  doc["cases"][0].erase("checked_expected");
  EXPECT_ERROR(doc, "cases[0].check_launch: is required with \"checked_launches\"");
}

TEST_MAIN()
