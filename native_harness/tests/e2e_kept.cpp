// End-to-end tests of expected values kept on the device (PROTOCOL.md, "Expected values kept on
// the device", feature device_expected): a reference run keeps its output in the input cache
// under a key and reports its figures; later requests of the same process compare against it
// as "kept:KEY"; a key the process does not hold is expected_missing (exit 4). Part of
// test_end_to_end (see test_end_to_end.cpp).

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "e2e.hpp"
#include "test_util.hpp"

using namespace e2e;

namespace {

// `entry` run on float32 `in` (copy_kernel: out = in; plus1_kernel: out = in + 1), the output
// kept under `key`.
json keep_case(const std::string& name, const std::vector<float>& in, const std::string& key) {
  const std::size_t n = in.size() * 4;
  spit(path(name + "_in.bin"), raw_of(in));
  json out = buffer("out", "out", n, "", path(name + "_out.bin"));
  out["dtype"] = "float32";
  out["keep_expected"] = key;
  return {{"name", name},
          {"args",
           {buffer("in", "in", n, path(name + "_in.bin")), out,
            scalar("n", "uint64", raw_hex<std::uint64_t>(n))}},
          {"launch", launch()}};
}

// A candidate's case on float32 `in`, compared with the copy kept under `key`.
json kept_compare_case(const std::string& name, const std::vector<float>& in,
                       const std::string& key) {
  auto c = compare_case(name, in, std::vector<double>(in.begin(), in.end()));
  c["args"][1]["expected"] = "kept:" + key;
  c["args"][1]["expected_dtype"] = "float32";
  return c;
}

// Protocol 2 with the input cache; the support module only where a compare needs it.
json cached(const std::string& entry, json cases, bool support = false) {
  auto req = request(entry, std::move(cases));
  req["protocol"] = 2;
  req["input_cache"] = true;
  if (support) req["support_module"] = support_module();
  return req;
}

Run serve(const std::vector<json>& requests, std::vector<std::string> env = {}) {
  std::string text;
  for (const auto& r : requests) text += r.dump() + "\n";
  return run({"serve"}, text, std::move(env));
}

const json& compare_of(const json& line) { return line["cases"][0]["compares"][0]; }

}  // namespace

TEST_CASE("kept: a reference's output stays on the device, its figures are reported") {
  const std::vector<float> in{1, -2, 3.5, 0.25};
  auto ref = cached("copy_kernel", {keep_case("keep_ref", in, "case1.out")});
  auto written = cached("copy_kernel", {keep_case("keep_wo", in, "case1.wo")});
  written["cases"][0]["args"][1]["write_output"] = true;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto odd = cached("copy_kernel", {keep_case("keep_odd", {nan, 3, -inf, 4, inf}, "odd")});
  const auto r = serve({ref, written, odd}, {"KERNELOPT_HARNESS_REPORT_STAGED=1"});
  CHECK_MSG(r.rc == 0 && r.lines.size() == 3, r.out + r.err);
  if (r.lines.size() != 3) return;
  const auto& c = r.lines[0]["cases"][0];
  CHECK_MSG(c["status"] == "ok", c.dump());
  CHECK_MSG(c["kept"] == json::array({{{"buffer", "out"},
                                       {"key", "case1.out"},
                                       {"elements", 4},
                                       {"finite", 4},
                                       {"sum_sq", 1.0 + 4.0 + 12.25 + 0.0625},
                                       {"bytes", 16}}}),
            c.dump());
  CHECK(!c.contains("compares"));
  // Like a buffer with expected values: no output file without write_output.
  CHECK(!exists(path("keep_ref_out.bin")));
  CHECK(slurp(path("keep_wo_out.bin")) == raw_of(in));
  CHECK(r.lines[1]["cases"][0]["kept"][0]["key"] == "case1.wo");
  // The input file was a miss; keeping the output is not.
  CHECK_MSG(r.lines[0]["input_cache"]["misses"] == 1 && r.lines[0]["input_cache"]["hits"] == 0,
            r.lines[0].dump());
  // Staged like expected values, allocated with the case's buffers.
  bool staged = false;
  for (const auto& s : c["staged"]) staged |= s["source"] == "kept" && s["bytes"] == 16;
  CHECK_MSG(staged, c.dump());
  // Non-finite values are counted out of finite and sum_sq.
  const auto& k = r.lines[2]["cases"][0]["kept"][0];
  CHECK_MSG(k["elements"] == 5 && k["finite"] == 2 && k["sum_sq"] == 25.0, k.dump());
}

TEST_CASE("kept: with the support module the figures are computed on the device, the same") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> in{nan, 3, -inf, 4, inf, 0.5};
  auto device = cached("copy_kernel", {keep_case("sum_dev", in, "dev")}, true);
  spit(path("old_support_kept.fake"), "FAKE-MODULE NO-SUPPORT-KERNELS\n");
  auto old = cached("copy_kernel", {keep_case("sum_old", in, "old")});
  old["support_module"] = path("old_support_kept.fake");  // an older build without ko_sum_sq_*
  auto host = cached("copy_kernel", {keep_case("sum_host", in, "host")});
  for (const auto& [req, sums] :
       {std::pair<const json&, unsigned long>{device, 1}, {old, 0}, {host, 0}}) {
    const auto r = run_request(req, {"FAKE_CUDA_STATS=1"});
    CHECK_MSG(r.rc == 0, r.out + r.err);
    if (r.rc != 0) continue;
    const auto& k = r.answer["cases"][0]["kept"][0];
    CHECK_MSG(k["elements"] == 6 && k["finite"] == 3 && k["sum_sq"] == 25.25, k.dump());
    CHECK_MSG(stats_of(r).sum_sqs == sums, r.err);
  }
}

TEST_CASE("kept: a later request compares against \"kept:KEY\"; a wrong output mismatches") {
  const std::vector<float> in{1, 2, 3, 4};
  const auto ref = cached("plus1_kernel", {keep_case("kc_ref", in, "plus1")});
  auto good = cached("plus1_kernel", {kept_compare_case("kc_good", in, "plus1")}, true);
  good["cases"][0]["args"][0]["input"] = path("kc_ref_in.bin");  // cached by the reference's run
  const auto bad = cached("copy_kernel", {kept_compare_case("kc_bad", in, "plus1")}, true);
  const auto r = serve({ref, good, bad});
  CHECK_MSG(r.rc == 0 && r.lines.size() == 3, r.out + r.err);
  if (r.lines.size() != 3) return;
  CHECK_MSG(r.lines[0]["cases"][0]["kept"][0]["sum_sq"] == 4.0 + 9 + 16 + 25, r.lines[0].dump());
  const auto& g = compare_of(r.lines[1]);
  CHECK_MSG(g["mismatches"] == 0 && g["elements"] == 4 && g["output_written"] == false,
            r.lines[1].dump());
  CHECK(!g.contains("first_mismatch_expected") && !g.contains("first_mismatch_actual"));
  CHECK(!exists(path("kc_good_out.bin")));
  // The kept copy and the input file (cached by the reference's request) are both hits.
  CHECK_MSG(r.lines[1]["input_cache"]["hits"] == 2 && r.lines[1]["input_cache"]["misses"] == 0,
            r.lines[1].dump());
  const auto& b = compare_of(r.lines[2]);
  CHECK_MSG(b["mismatches"] == 4 && b["first_mismatch"] == 0 && b["output_written"] == true,
            r.lines[2].dump());
  // The first mismatching element, read while the kept copy was mapped: the reference's 1 + 1,
  // the candidate's copy of 1.
  CHECK_MSG(b["first_mismatch_expected"] == 2.0 && b["first_mismatch_actual"] == 1.0, b.dump());
  CHECK(slurp(path("kc_bad_out.bin")) == raw_of(in));
}

TEST_CASE("kept: keeping a key again replaces its copy; timed_expected may name one too") {
  const std::vector<float> a{1, 2, 3, 4}, b{5, 6, 7, 8};
  const auto first = cached("copy_kernel", {keep_case("kr_a", a, "k")});
  const auto second = cached("copy_kernel", {keep_case("kr_b", b, "k")});
  auto cand = kept_compare_case("kr_cand", b, "k");
  cand["args"][1]["timed_expected"] = "kept:k";
  cand["args"][0]["timed_input"] = path("kr_cand_in.bin");
  cand["timing"] = {{"warmup", 1}, {"iterations", 2}};
  const auto r = serve({first, second, cached("copy_kernel", {cand}, true)});
  CHECK_MSG(r.rc == 0 && r.lines.size() == 3, r.out + r.err);
  if (r.lines.size() != 3) return;
  const auto& compares = r.lines[2]["cases"][0]["compares"];
  CHECK_MSG(compares.size() == 2 && compares[0]["mismatches"] == 0 &&
                compares[1]["launch"] == "timed" && compares[1]["mismatches"] == 0,
            r.lines[2].dump());
  // A replacement is not an eviction.
  CHECK(r.lines[1]["input_cache"]["evictions"] == 0);
}

TEST_CASE("kept: a key the process does not hold is expected_missing, exit 4, before any launch") {
  auto req = cached(
      "copy_kernel",
      {kept_compare_case("km_a", {1, 2}, "nope"), kept_compare_case("km_b", {1, 2}, "gone.too"),
       kept_compare_case("km_c", {1, 2}, "nope")},
      true);
  auto r = run_request(req, {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 4, r.out + r.err);
  CHECK(r.answer["status"] == "error");
  const auto& e = r.answer["error"];
  CHECK_MSG(e["kind"] == "expected_missing" && e["missing"] == json({"nope", "gone.too"}),
            e.dump());
  CHECK_MSG(test::contains(e["message"], "\"nope\", \"gone.too\"") &&
                test::contains(e["message"], "run the reference again with keep_expected"),
            e.dump());
  CHECK(r.answer["cases"].empty());
  CHECK_MSG(stats_of(r).launches == 0, r.err);
  // serve answers it and goes on.
  const auto ok = cached("copy_kernel", {keep_case("km_ok", {1, 2}, "nope")});
  r = serve({req, ok, req});
  CHECK_MSG(r.rc == 0 && r.lines.size() == 3, r.out + r.err);
  if (r.lines.size() != 3) return;
  CHECK(r.lines[0]["error"]["kind"] == "expected_missing");
  CHECK(r.lines[1]["status"] == "ok" && r.lines[1]["cases"][0]["kept"].size() == 1);
  CHECK_MSG(r.lines[2]["error"]["missing"] == json({"gone.too"}), r.lines[2].dump());
}

TEST_CASE("kept: a case that is not clean keeps nothing") {
  const std::vector<float> in{1, 2, 3, 4};
  const auto oob = cached("oob_kernel", {keep_case("kn_oob", in, "oob")});
  const auto clobber = cached("clobber_kernel", {keep_case("kn_clob", in, "clobber")});
  const auto use_oob = cached("copy_kernel", {kept_compare_case("kn_u1", in, "oob")}, true);
  const auto use_clobber = cached("copy_kernel", {kept_compare_case("kn_u2", in, "clobber")}, true);
  auto r = serve({oob, clobber, use_oob, use_clobber});
  CHECK_MSG(r.rc == 0 && r.lines.size() == 4, r.out + r.err);
  if (r.lines.size() == 4) {
    CHECK(r.lines[0]["cases"][0]["status"] == "out_of_bounds_write");
    CHECK(r.lines[1]["cases"][0]["status"] == "input_modified");
    for (int i : {0, 1}) CHECK_MSG(r.lines[i]["cases"][0]["kept"] == json::array(), r.out);
    CHECK(r.lines[2]["error"]["missing"] == json({"oob"}));
    CHECK(r.lines[3]["error"]["missing"] == json({"clobber"}));
  }
  // A fault ends the process: nothing kept, the cache goes with the context.
  r = run_request(cached("fault_kernel", {keep_case("kn_fault", in, "fault")}));
  CHECK_MSG(r.rc == 5 && r.answer["cases"][0]["status"] == "runtime_error", r.out + r.err);
  CHECK(!r.answer["cases"][0].contains("kept") || r.answer["cases"][0]["kept"].empty());
}

TEST_CASE("kept: copies are budgeted LRU entries, held by the request that named them") {
  const std::vector<float> in{1, 2, 3, 4};
  // A 16-byte budget holds one 16-byte entry: keeping the output evicts the input file.
  auto ref = cached("copy_kernel", {keep_case("kb_ref", in, "b")});
  ref["input_cache_bytes"] = 16;
  // This request hits the kept copy, then its input file (a miss) evicts it; the compare still
  // reads the copy the request holds. The next request finds the key gone.
  auto use = cached("copy_kernel", {kept_compare_case("kb_use", in, "b")}, true);
  use["input_cache_bytes"] = 16;
  // Larger than the budget: reported, but not kept.
  auto big = cached("copy_kernel", {keep_case("kb_big", in, "big")});
  big["input_cache_bytes"] = 8;
  auto use_big = cached("copy_kernel", {kept_compare_case("kb_ub", in, "big")}, true);
  const auto r = serve({ref, use, use, big, use_big});
  CHECK_MSG(r.rc == 0 && r.lines.size() == 5, r.out + r.err);
  if (r.lines.size() != 5) return;
  CHECK_MSG(r.lines[0]["input_cache"]["evictions"] == 1, r.lines[0].dump());
  CHECK_MSG(r.lines[1]["input_cache"]["hits"] == 1 && r.lines[1]["input_cache"]["evictions"] == 1,
            r.lines[1].dump());
  CHECK_MSG(compare_of(r.lines[1])["mismatches"] == 0, r.lines[1].dump());
  CHECK(r.lines[2]["error"]["kind"] == "expected_missing");
  CHECK(r.lines[3]["cases"][0]["kept"][0]["key"] == "big");
  CHECK(r.lines[4]["error"]["missing"] == json({"big"}));
}

TEST_CASE("kept: a kept copy of another size than the buffer is a bad request naming both") {
  const auto ref = cached("copy_kernel", {keep_case("ks_ref", {1, 2, 3, 4}, "four")});
  const auto use = cached("copy_kernel", {kept_compare_case("ks_use", {1, 2, 3}, "four")}, true);
  const auto r = serve({ref, use});
  CHECK_MSG(r.rc == 0 && r.lines.size() == 2, r.out + r.err);
  if (r.lines.size() != 2) return;
  CHECK(r.lines[1]["error"]["kind"] == "bad_request");
  CHECK_MSG(test::contains(r.lines[1]["error"]["message"],
                           "cases[0].args[1].expected: buffer \"out\" is 12 bytes but the copy "
                           "kept as \"kept:four\" has 16 bytes"),
            r.lines[1].dump());
}

TEST_CASE("kept: refusals exit 2 naming the field") {
  const std::vector<float> in{1, 2};
  const auto refused = [](const json& req, const std::string& start) {
    const auto r = run_request(req);
    CHECK_MSG(r.rc == 2 && r.answer["error"]["kind"] == "bad_request", r.out + r.err);
    CHECK_MSG(r.answer["error"]["message"].get<std::string>().rfind(start, 0) == 0,
              r.answer.dump());
  };
  auto req = cached("copy_kernel", {keep_case("kx", in, "x")});
  req["cases"][0]["args"][0]["keep_expected"] = "x";
  refused(req, "cases[0].args[0].keep_expected: an \"in\" buffer");
  req = cached("copy_kernel", {keep_case("kx", in, "x")});
  req.erase("input_cache");
  refused(req, "cases[0].args[1].keep_expected: needs \"input_cache\": true");
  req = cached("copy_kernel", {keep_case("kx", in, "x")});
  req["cases"][0]["args"][1].erase("dtype");
  refused(req, "cases[0].args[1].dtype: is required with \"keep_expected\"");
  req = cached("copy_kernel", {keep_case("kx", in, "x y")});
  refused(req, "cases[0].args[1].keep_expected: must be a key of 1..128 characters");
  req = cached("copy_kernel", {keep_case("kx", in, "x"), keep_case("ky", in, "x")});
  refused(req, "cases[1].args[1].keep_expected: duplicate key \"x\" (also cases[0]");
  req = cached("copy_kernel", {kept_compare_case("kz", in, "x")}, true);
  req["cases"][0]["args"][1].erase("expected_dtype");
  refused(req, "cases[0].args[1].expected_dtype: must be the buffer's dtype \"float32\"");
  req["cases"][0]["args"][1]["keep_expected"] = "y";
  req["cases"][0]["args"][1]["expected_dtype"] = "float32";
  refused(req, "cases[0].args[1].keep_expected: is refused beside \"expected\"");
}

TEST_CASE("kept: the copy is hidden from kernels, and read-only where it is not hidden") {
  const std::vector<float> in{1, 2, 3, 4};
  const auto ref = cached("plus1_kernel", {keep_case("kh_ref", in, "h")});
  // crib_kernel copies plus1's answer from wherever it finds it: hidden, it finds nothing.
  const auto crib = cached("crib_kernel", {kept_compare_case("kh_crib", in, "h")}, true);
  auto r = serve({ref, crib});
  CHECK_MSG(r.rc == 0 && r.lines.size() == 2, r.out + r.err);
  if (r.lines.size() == 2) CHECK_MSG(compare_of(r.lines[1])["mismatches"] == 4, r.out);
  r = serve({ref, crib}, {"KERNELOPT_HARNESS_HIDE_EXPECTED=0"});
  CHECK_MSG(r.rc == 0 && r.lines.size() == 2, r.out + r.err);
  if (r.lines.size() == 2) CHECK_MSG(compare_of(r.lines[1])["mismatches"] == 0, r.out);

  // forge32_kernel writes a wrong answer and overwrites plus1's wherever it finds it.
  const auto forge = cached("forge32_kernel", {kept_compare_case("kh_forge", in, "h")}, true);
  r = serve({ref, forge}, {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0 && r.lines.size() == 2, r.out + r.err);
  if (r.lines.size() == 2) CHECK_MSG(compare_of(r.lines[1])["mismatches"] == 4, r.out);
  CHECK_MSG(stats_of(r).mmu_faults == 0, r.err);
  // Mapped but read-only: the write faults.
  r = serve({ref, forge}, {"FAKE_CUDA_STATS=1", "KERNELOPT_HARNESS_HIDE_EXPECTED=0"});
  CHECK_MSG(r.rc == 5 && r.lines.size() == 2, r.out + r.err);
  if (r.lines.size() == 2) {
    CHECK(r.lines[1]["cases"][0]["status"] == "runtime_error");
    CHECK(r.lines[1]["cases"][0]["error"]["cuda_error"] == "CUDA_ERROR_ILLEGAL_ADDRESS");
  }
  CHECK_MSG(stats_of(r).mmu_faults == 1, r.err);
  // Writable (no read-only staging): the forger passes, which is what the staging stops.
  r = serve({ref, forge}, {"KERNELOPT_HARNESS_READONLY_STAGING=0"});
  CHECK_MSG(r.rc == 0 && r.lines.size() == 2, r.out + r.err);
  if (r.lines.size() == 2) CHECK_MSG(compare_of(r.lines[1])["mismatches"] == 0, r.out);
}
