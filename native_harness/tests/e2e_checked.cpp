// End-to-end: checked launches against expected values given up front (checked_expected,
// PROTOCOL.md "Checked launches against expected values"). Part of test_end_to_end (see
// test_end_to_end.cpp). The expected values are what the caller (a PyTorch process) would
// compute: copy_kernel's answer on the inputs the launch saw, the fake's fill of the draw that
// planned_draw names (fake_fill.hpp), so a wrong draw rule fails here as a wrong draw.

#include <optional>

#include "checked_expected.hpp"
#include "draw_key.hpp"
#include "e2e.hpp"
#include "fake_fill.hpp"
#include "request.hpp"

using namespace e2e;

namespace {

constexpr std::uint64_t fresh_seed = 12345;       // fresh_case's
const std::vector<float> file_input{1, 2, 3, 4};  // fresh_case's `in` file

// The 4 float32 values the fake draws into argument `arg` for draw `draw` (fresh_case's uniform
// [1, 2)), under `seed`.
std::vector<float> fake_draw(std::uint64_t draw, std::uint64_t seed = fresh_seed,
                             unsigned arg = 0) {
  std::vector<float> v(4);
  const std::uint64_t key = kernelopt::draw_key(seed, draw, arg);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>(fake::fill_value(key, draw, arg, i, 0, 1.0, 2.0, 0, 0));
  }
  return v;
}

// The case of `c` as the harness parses it (with a reference, so it parses without entries).
kernelopt::CaseSpec spec_of(json c) {
  if (!c.contains("check_launch")) c["check_launch"] = launch();
  return kernelopt::parse_request(with_reference(request_v2("copy_kernel", {c}))).cases.at(0);
}

// fresh_case (changed by `edit`) checked against values given up front instead of the CUDA
// reference: for every checked sample (and the confirm launch) copy_kernel's answer on the draw
// the launch gets (or on `inputs` when it gets none, or the draw is not known before it runs),
// as float32 (`native`) or float64 values.
json expected_case(const std::string& name, json timing, const std::vector<unsigned>& checked,
                   bool confirm, bool native, const std::function<void(json&)>& edit = {},
                   const std::vector<float>& inputs = file_input) {
  json c = fresh_case(name, std::move(timing), checked, confirm);
  if (edit) edit(c);
  const auto spec = spec_of(c);
  c.erase("check_launch");
  json entries = json::array();
  std::vector<std::optional<std::size_t>> launches(checked.begin(), checked.end());
  if (confirm) launches.emplace_back(std::nullopt);
  for (const auto& sample : launches) {
    const auto planned = kernelopt::planned_draw(spec, sample);
    const bool drawn = planned.known && planned.draw.has_value();
    const std::uint64_t draw = drawn ? *planned.draw : 0;
    const std::vector<float> in = drawn ? fake_draw(draw) : inputs;
    const auto file =
        path(name + "_" + (sample ? "s" + std::to_string(*sample) : "confirm") + ".bin");
    spit(file, native ? raw_of(in) : raw_of(std::vector<double>(in.begin(), in.end())));
    json e = {{"buffer", "out"}, {"expected", file}};
    if (sample) {
      e["sample"] = *sample;
    } else {
      e["launch"] = "confirm";
    }
    if (drawn) e["draw"] = draw;
    entries.push_back(std::move(e));
  }
  c["checked_expected"] = std::move(entries);
  if (native) c["args"][1]["expected_dtype"] = "float32";
  c["args"][1].erase("expected");  // only the checked launches: nothing else to compare
  return c;
}

// Whether the harness loaded the fake driver and made no launch (stats are printed only when
// it was loaded: a request refused while parsing never loads it).
bool no_launch(const Run& r) {
  return !test::contains(r.err, "fake libcuda stats:") || stats_of(r).launches == 0;
}

}  // namespace

TEST_CASE("checked_expected: a correct kernel passes its checked launches in every timing mode") {
  // The harness's own draws decide what the launches see; the values are computed from
  // planned_draw's: a rule that differed from the harness would fail each check as a wrong draw.
  const json timings[] = {
      {{"warmup", 2}, {"iterations", 5}},
      {{"warmup", 1}, {"iterations", 5}, {"blocking", true}},
      {{"iterations", 5}},
      {{"warmup", 1}, {"iterations", 5}, {"mode", "graph"}, {"graph_batch", 2}},
      {{"iterations", 5}, {"mode", "graph"}},
      {{"warmup", 3}, {"iterations", 5}, {"mode", "graph"}, {"blocking", true}},
  };
  for (const bool native : {true, false}) {
    for (const auto& timing : timings) {
      const auto c = expected_case("ok", timing, {1, 4}, true, native);
      const auto r = run_request(request_v2("copy_kernel", {c}), {"FAKE_CUDA_STATS=1"});
      CHECK_MSG(r.rc == 0, timing.dump() + ": " + r.out + r.err);
      const auto& res = r.answer["cases"][0];
      CHECK_MSG(res["status"] == "ok", res.dump());
      const auto& checks = res["timed_checks"];
      CHECK_MSG(checks.size() == 3, timing.dump() + ": " + res.dump());
      if (checks.size() != 3) continue;
      CHECK(checks[0]["launch"] == "measured" && checks[0]["sample"] == 1);
      CHECK(checks[1]["sample"] == 4 && checks[2]["launch"] == "confirm");
      CHECK(checks[0]["time_ms"] == res["timing"]["times_ms"][1]);
      CHECK(checks[2]["time_ms"] == res["timing"]["confirm_launch_ms"]);
      for (const auto& e : checks) {
        CHECK_MSG(e["buffer"] == "out" && e["elements"] == 4 && e["mismatches"] == 0 &&
                      e["nonfinite"] == 0 && e["first_mismatch"].is_null() && !e.contains("error"),
                  timing.dump() + ": " + e.dump());
      }
      // the entries' draws are the ones the harness reports
      for (std::size_t k = 0; k < 3; ++k)
        CHECK(checks[k]["draw"] == c["checked_expected"][k]["draw"]);
      // no reference ran: one compare per check, in the output's dtype rule
      CHECK_MSG(stats_of(r).ref_compares == (native ? 3u : 0u), r.err);
    }
  }
  // samples 1 and 4 of warm-up 2: draws 3 and 6; the confirm launch draw 7
  const auto c = expected_case("ok_draws", {{"warmup", 2}, {"iterations", 5}}, {1, 4}, true, true);
  CHECK(c["checked_expected"][0]["draw"] == 3 && c["checked_expected"][1]["draw"] == 6 &&
        c["checked_expected"][2]["draw"] == 7);
}

TEST_CASE(
    "checked_expected: fresh_launches and fresh_timed false: launches on earlier draws, or none") {
  const json timing = {{"warmup", 2}, {"iterations", 6}};
  const auto listed = [](json& c) { c["fresh_launches"] = {2, 4}; };
  auto c = expected_case("fl", timing, {1, 4}, true, true, listed);
  // sample 1 reuses draw 0 (the first warm-up's), sample 4 gets draw 2, the confirm launch 3
  CHECK_MSG(c["checked_expected"][0]["draw"] == 0 && c["checked_expected"][1]["draw"] == 2 &&
                c["checked_expected"][2]["draw"] == 3,
            c.dump());
  auto r = run_request(request_v2("copy_kernel", {c}));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& checks = r.answer["cases"][0]["timed_checks"];
  CHECK_MSG(checks.size() == 3, r.answer.dump());
  for (const auto& x : checks) CHECK_MSG(x["mismatches"] == 0 && !x.contains("error"), x.dump());

  // fresh_timed false: the measured samples see the input file (no "draw"), the confirm launch
  // draw 0
  const auto untimed = [](json& c) { c["fresh_timed"] = false; };
  c = expected_case("nt", {{"warmup", 1}, {"iterations", 3}}, {0, 2}, true, false, untimed);
  CHECK_MSG(!c["checked_expected"][0].contains("draw") && c["checked_expected"][2]["draw"] == 0,
            c.dump());
  r = run_request(request_v2("copy_kernel", {c}));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& nt = r.answer["cases"][0]["timed_checks"];
  CHECK_MSG(nt.size() == 3, r.answer.dump());
  for (const auto& x : nt) CHECK_MSG(x["mismatches"] == 0 && !x.contains("error"), x.dump());
  if (nt.size() == 3) CHECK(nt[0]["draw"].is_null() && nt[2]["draw"] == 0);
}

TEST_CASE(
    "checked_expected: a kernel wrong only on timed launches is caught on the listed samples") {
  // replay_kernel returns its first (validation) answer whatever the input: right on the input
  // file, wrong on every draw. hush_kernel does the same and resets every compare result it
  // finds in device memory; the values are compared after its launch, with the stream idle, and
  // read back before it runs again.
  for (const std::string entry : {"replay_kernel", "hush_kernel"}) {
    for (const json& timing :
         {json{{"warmup", 1}, {"iterations", 5}},
          json{{"warmup", 1}, {"iterations", 5}, {"blocking", true}},
          json{{"warmup", 1}, {"iterations", 5}, {"mode", "graph"}, {"graph_batch", 1}}}) {
      auto c = expected_case("wrong", timing, {1, 3}, true, false);
      c["args"][1]["expected"] = path("wrong_validation.bin");  // the validation launch passes
      spit(path("wrong_validation.bin"), raw_of(std::vector<double>{1, 2, 3, 4}));
      const auto r = run_request(request_v2(entry, {c}));
      CHECK_MSG(r.rc == 0, r.out + r.err);
      const auto& res = r.answer["cases"][0];
      CHECK_MSG(res["compares"][0]["mismatches"] == 0, res.dump());
      const auto& checks = res["timed_checks"];
      CHECK_MSG(checks.size() == 3, entry + " " + timing.dump() + ": " + res.dump());
      for (const auto& e : checks) {
        CHECK_MSG(e["mismatches"] == 4 && e["first_mismatch"] == 0 && !e.contains("error"),
                  entry + " " + timing.dump() + ": " + e.dump());
      }
    }
  }
}

TEST_CASE(
    "checked_expected: values for another draw are not compared; the check fails, saying why") {
  // Adaptive timing: the confirm launch's draw is known only when the samples are taken (here
  // max_iterations stops them at 4: draw 1 + 4 = 5), so a miscounted draw reaches the run.
  const json timing = {{"warmup", 1},
                       {"iterations", 4},
                       {"adaptive", {{"target_rse", 1e-9}, {"max_iterations", 4}}}};
  for (const std::uint64_t draw : {5, 6}) {
    auto c = expected_case("ad", timing, {1}, true, true);
    c["checked_expected"][1]["draw"] = draw;
    spit(c["checked_expected"][1]["expected"].get<std::string>(), raw_of(fake_draw(draw)));
    const auto r = run_request(request_v2("copy_kernel", {c}));
    CHECK_MSG(r.rc == 0, r.out + r.err);
    const auto& res = r.answer["cases"][0];
    CHECK_MSG(res["timing"]["times_ms"].size() == 4, res.dump());
    const auto& checks = res["timed_checks"];
    CHECK_MSG(checks.size() == 2, res.dump());
    if (checks.size() != 2) continue;
    CHECK_MSG(checks[0]["mismatches"] == 0 && !checks[0].contains("error"), checks.dump());
    const auto& confirm = checks[1];
    CHECK(confirm["launch"] == "confirm" && confirm["draw"] == 5);
    if (draw == 5) {
      CHECK_MSG(confirm["mismatches"] == 0 && !confirm.contains("error"), confirm.dump());
    } else {
      // failed: every element unconfirmed, no figures, and the reason
      CHECK_MSG(confirm["mismatches"] == 4 && confirm["first_mismatch"].is_null() &&
                    confirm["max_abs_error"].is_null(),
                confirm.dump());
      CHECK_MSG(test::contains(confirm.value("error", ""),
                               "the expected values are for draw 6, but the launch got draw 5"),
                confirm.dump());
    }
  }
  // A draw that can be told up front is refused before any launch.
  auto c = expected_case("ad_bad", {{"warmup", 1}, {"iterations", 4}}, {1}, true, true);
  c["checked_expected"][0]["draw"] = 7;
  const auto r = run_request(request_v2("copy_kernel", {c}), {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 2 && r.answer["error"]["kind"] == "bad_request", r.out);
  CHECK_MSG(test::contains(
                r.answer["error"]["message"].get<std::string>(),
                "cases[0].checked_expected[0].draw: sample 1 of this case gets draw 2, not draw 7"),
            r.out);
  CHECK_MSG(no_launch(r), r.err);
}

TEST_CASE("checked_expected: the values are hidden from the candidate until their compare") {
  // peek_kernel computes nothing and copies float64 values that start like its answer (its
  // input) if it finds them: at a checked sample the staged values of that sample would do.
  const auto c = expected_case("peek", {{"warmup", 1}, {"iterations", 4}}, {1, 2}, false, false);
  auto r = run_request(request_v2("peek_kernel", {c}),
                       {"FAKE_CUDA_STATS=1", "KERNELOPT_HARNESS_REPORT_STAGED=1"});
  CHECK_MSG(r.rc == 0 && r.answer["staging"]["expected_hidden"] == true, r.out + r.err);
  const auto& res = r.answer["cases"][0];
  for (const auto& e : res["timed_checks"]) CHECK_MSG(e["mismatches"] == 4, e.dump());
  std::size_t staged = 0;
  for (const auto& s : res["staged"]) staged += s["source"] == "checked_expected" ? 1 : 0;
  CHECK_MSG(staged == 2, res["staged"].dump());
  // hidden at setup and again after each of the 2 compares
  CHECK_MSG(stats_of(r).unmaps >= 4, r.err);
  // Readable values (hiding turned off): the copy passes, which is what hiding prevents.
  r = run_request(request_v2("peek_kernel", {c}), {"KERNELOPT_HARNESS_HIDE_EXPECTED=0"});
  CHECK_MSG(r.rc == 0, r.out + r.err);
  for (const auto& e : r.answer["cases"][0]["timed_checks"])
    CHECK_MSG(e["mismatches"] == 0, e.dump());
}

TEST_CASE("checked_expected: inputs drawn on the device (input_draw) are allowed") {
  // fresh_timed false: the measured samples see the input_draw's bytes (the fake's fill of draw
  // 0 under the draw's own seed), the confirm launch draw 0 of fresh_seed.
  const std::uint64_t seed = 777;
  const auto drawn = [&](json& c) {
    c["fresh_timed"] = false;
    c["args"][0].erase("input");
    c["args"][0]["input_draw"] = {{"seed", seed}, {"kind", "uniform"}, {"low", 1.0}, {"high", 2.0}};
  };
  const auto c = expected_case("id", {{"warmup", 1}, {"iterations", 3}}, {0, 2}, true, true, drawn,
                               fake_draw(0, seed));
  const auto r = run_request(request_v2("copy_kernel", {c}));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& checks = r.answer["cases"][0]["timed_checks"];
  CHECK_MSG(checks.size() == 3, r.answer.dump());
  for (const auto& e : checks) CHECK_MSG(e["mismatches"] == 0 && !e.contains("error"), e.dump());
  // the input_draw's bytes are not the file's: the values really are for the drawn input
  CHECK(fake_draw(0, seed) != file_input);
}

TEST_CASE("checked_expected: refusals exit 2 (or 4 for a missing file) naming the field") {
  auto base = [] {
    return expected_case("bad", {{"warmup", 1}, {"iterations", 4}}, {1, 3}, true, true);
  };
  struct Bad {
    std::function<void(json&, json&)> edit;
    int rc;
    std::string message;
  };
  const std::vector<Bad> bads = {
      {[](json&, json& c) { c["checked_expected"].erase(1); }, 2,
       "cases[0].checked_expected: no entry for sample 3, buffer \"out\""},
      {[](json&, json& c) { c["checked_expected"][0]["sample"] = 2; }, 2,
       "cases[0].checked_expected[0].sample: 2 is not one of the case's \"checked_launches\""},
      {[](json& r, json&) {
         r["check_module"] = path("module.fake");
         r["check_entry"] = "copy_kernel";
       },
       2, "check_module: is refused with cases[0].checked_expected"},
      {[](json&, json& c) { c["check_launch"] = launch(); }, 2,
       "cases[0].check_launch: is refused with \"checked_expected\""},
      {[](json&, json& c) {
         spit(c["checked_expected"][1]["expected"].get<std::string>(), std::string(32, '\0'));
       },
       2,
       "cases[0].checked_expected[1].expected: buffer \"out\" has 4 float32 elements, so " +
           path("bad_s3.bin") + " must hold as many float32 values (16 bytes"},
      {[](json&, json& c) { c["checked_expected"][2]["expected"] = path("no_such_file.bin"); }, 4,
       "cases[0].checked_expected[2].expected (buffer \"out\")"},
  };
  for (const auto& bad : bads) {
    auto c = base();
    auto req = request_v2("copy_kernel", {c});
    bad.edit(req, req["cases"][0]);
    const auto r = run_request(req, {"FAKE_CUDA_STATS=1"});
    CHECK_MSG(r.rc == bad.rc, bad.message + ": " + r.out);
    CHECK_MSG(test::contains(r.answer["error"]["message"].get<std::string>(), bad.message),
              bad.message + " vs " + r.answer.dump());
    CHECK_MSG(no_launch(r), bad.message + ": " + r.err);  // refused before any launch
  }
}

TEST_CASE(
    "checked_expected: values that do not fit in device memory are a bad request naming the need") {
  // A device that holds 3 staged copies: the validation's expected values and two entries.
  auto c = expected_case("mem", {{"warmup", 1}, {"iterations", 4}}, {1, 3}, true, true);
  c["args"][1]["expected"] = path("mem_validation.bin");
  spit(path("mem_validation.bin"), raw_of(file_input));  // float32 values: expected_dtype
  const auto r =
      run_request(request_v2("copy_kernel", {c}), {"FAKE_CUDA_VMM_HANDLES=3", "FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 2 && r.answer["error"]["kind"] == "bad_request", r.out + r.err);
  const auto message = r.answer["error"]["message"].get<std::string>();
  CHECK_MSG(
      test::contains(message, "cases[0].checked_expected[2]: the device has no memory left") &&
          test::contains(message, "3 entries, 48 bytes in all"),
      message);
  CHECK_MSG(no_launch(r), r.err);  // refused at the case's setup, before its validation launch
  // with room for them all, the same request runs
  const auto ok = run_request(request_v2("copy_kernel", {c}), {"FAKE_CUDA_VMM_HANDLES=4"});
  CHECK_MSG(ok.rc == 0 && ok.answer["cases"][0]["timed_checks"].size() == 3, ok.out + ok.err);
}
