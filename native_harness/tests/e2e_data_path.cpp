// End-to-end, protocol 2: the support module, device compare, determinism, timed inputs,
// the input cache. Part of test_end_to_end (see test_end_to_end.cpp).

#include "e2e.hpp"

using namespace e2e;

TEST_CASE("device compare: a matching output is not written, its figures are reported") {
  const std::vector<float> in{1, 2, 3, 4};
  const auto r = run_request(request_v2("copy_kernel", {compare_case("match", in, {1, 2, 3, 4})}));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  auto c = r.answer["cases"][0];
  CHECK(c["status"] == "ok");
  CHECK(c["compares"][0]["compare_ms"].is_number());
  c["compares"][0].erase("compare_ms");
  CHECK_MSG(c["compares"] == json::array({{{"buffer", "out"},
                                           {"launch", "validation"},
                                           {"elements", 4},
                                           {"mismatches", 0},
                                           {"nonfinite", 0},
                                           {"max_abs_error", 0.0},
                                           {"max_rel_error", 0.0},
                                           {"err_sq", 0.0},
                                           {"first_mismatch", nullptr},
                                           {"output_written", false}}}),
            c["compares"].dump());
  CHECK(!exists(path("match_out.bin")));
}

TEST_CASE("device compare: a mismatch writes the output and names the first index") {
  const std::vector<float> in{1, 2, 3, 4, 5};
  const auto r =
      run_request(request_v2("copy_kernel", {compare_case("wrong", in, {1, 2, 3.5, 4, 7})}));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& c = r.answer["cases"][0];
  CHECK(c["status"] == "ok");  // Python decides "mismatch"
  const auto& cmp = c["compares"][0];
  CHECK(cmp["mismatches"] == 2 && cmp["first_mismatch"] == 2 && cmp["nonfinite"] == 0);
  // the values at the first mismatch: the float64 expected file's 3.5, the kernel's 3
  CHECK_MSG(cmp["first_mismatch_expected"] == 3.5 && cmp["first_mismatch_actual"] == 3.0,
            cmp.dump());
  CHECK(cmp["max_abs_error"] == 2.0);
  CHECK(cmp["max_rel_error"] == 2.0 / 7.0);
  CHECK(cmp["err_sq"] == 0.25 + 4.0);
  CHECK(cmp["output_written"] == true);
  CHECK(slurp(path("wrong_out.bin")) == raw_of(in));
}

TEST_CASE("device compare: unwritten (NaN) elements are nonfinite and the maxima are \"inf\"") {
  auto c = compare_case("nan", {1, 2, 3, 4}, {1, 2, 3, 4});
  c["args"][2] = scalar("n", "uint64", raw_hex<std::uint64_t>(8));  // copies 2 of 4 floats
  const auto r = run_request(request_v2("copy_kernel", {c}));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& cmp = r.answer["cases"][0]["compares"][0];
  CHECK(cmp["mismatches"] == 2 && cmp["nonfinite"] == 2 && cmp["first_mismatch"] == 2);
  CHECK_MSG(cmp["first_mismatch_expected"] == 3.0 && cmp["first_mismatch_actual"] == "nan",
            cmp.dump());
  CHECK(cmp["max_abs_error"] == "inf" && cmp["max_rel_error"] == "inf");
  CHECK(cmp["err_sq"] == 0.0);
  CHECK(exists(path("nan_out.bin")));
}

TEST_CASE("device compare: write_output writes a matching output") {
  auto c = compare_case("wo", {1, 2}, {1, 2});
  c["args"][1]["write_output"] = true;
  const auto r = run_request(request_v2("copy_kernel", {c}));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  CHECK(r.answer["cases"][0]["compares"][0]["output_written"] == true);
  CHECK(slurp(path("wo_out.bin")) == raw_of(std::vector<float>{1, 2}));
}

TEST_CASE("device compare: expected of the wrong size exits 2 naming both sizes") {
  auto req = request_v2("copy_kernel", {compare_case("size", {1, 2, 3}, {1, 2})});
  const auto r = run_request(req);
  CHECK(r.rc == 2 && r.answer["error"]["kind"] == "bad_request");
  CHECK_MSG(test::contains(r.answer["error"]["message"],
                           "cases[0].args[1].expected: buffer \"out\" has 3 float32 elements, so"),
            r.answer.dump());
  CHECK(test::contains(r.answer["error"]["message"], "(24 bytes), but it has 16 bytes"));
  req["cases"][0]["args"][1]["expected"] = path("no_such_expected.bin");
  CHECK(run_request(req).rc == 4);
}

TEST_CASE("support module: required, loaded from its file, checked for its kernels") {
  auto req = request_v2("copy_kernel", {compare_case("sm", {1}, {1})});
  req.erase("support_module");
  auto r = run_request(req);
  CHECK(r.rc == 2);
  CHECK(test::contains(r.answer["error"]["message"],
                       "support_module: is required by cases[0].args[1].expected"));
  req["support_module"] = path("no_such_support.cubin");
  r = run_request(req);
  CHECK(r.rc == 4 && test::contains(r.answer["error"]["message"], "no_such_support.cubin"));
  // A module the harness cannot use is the tool's problem, not the kernel's: bad_request.
  spit(path("bad_support.fake"), "not a module");
  req["support_module"] = path("bad_support.fake");
  r = run_request(req);
  CHECK(r.rc == 2 && r.answer["error"]["kind"] == "bad_request");
  CHECK(test::contains(r.answer["error"]["message"], "support_module: "));
  spit(path("old_support.fake"), "FAKE-MODULE NO-SUPPORT-KERNELS\n");
  req["support_module"] = path("old_support.fake");
  r = run_request(req);
  CHECK(r.rc == 2 && r.answer["error"]["kind"] == "bad_request");
  CHECK_MSG(test::contains(r.answer["error"]["message"], "lacks kernel(s) ko_compare_float32:"),
            r.answer.dump());
  CHECK(r.answer["cases"].empty());
}

TEST_CASE("serve: the support module is loaded once and reloaded when its path changes") {
  const auto a = request_v2("copy_kernel", {compare_case("s1", {1}, {1})});
  auto b = a;
  spit(path("old2.fake"), "FAKE-MODULE NO-SUPPORT-KERNELS\n");
  b["support_module"] = path("old2.fake");
  const auto r =
      run({"serve"}, a.dump() + "\n" + a.dump() + "\n" + b.dump() + "\n" + a.dump() + "\n");
  CHECK_MSG(r.rc == 0 && r.lines.size() == 4, r.out + r.err);
  if (r.lines.size() == 4) {
    CHECK(r.lines[0]["cases"][0]["compares"][0]["mismatches"] == 0);
    CHECK(r.lines[1]["cases"][0]["compares"][0]["mismatches"] == 0);
    CHECK(r.lines[2]["error"]["kind"] == "bad_request");  // the other file was loaded
    CHECK(r.lines[3]["cases"][0]["compares"][0]["mismatches"] == 0);
  }
}

TEST_CASE("determinism: identical launches differ in 0 bytes, a launch counter does not") {
  auto copy = compare_case("det", {1, 2, 3}, {1, 2, 3});
  copy["repeat_validation"] = true;
  auto r = run_request(request_v2("copy_kernel", {copy}));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& c = r.answer["cases"][0];
  CHECK(c["determinism"] ==
        json::array({{{"buffer", "out"}, {"bytes_differ", 0}, {"first_offset", nullptr}}}));
  CHECK(c["compares"].size() == 2 && c["compares"][1]["launch"] == "repeat");
  CHECK(c["compares"][1]["mismatches"] == 0);

  json stamp = {{"name", "stamp"},
                {"args",
                 {buffer("out", "out", 16, "", path("stamp_out.bin")),
                  scalar("n", "uint32", raw_hex<std::uint32_t>(4))}},
                {"launch", launch()},
                {"repeat_validation", true}};
  r = run_request(request_v2("stamp_kernel", {stamp}));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& d = r.answer["cases"][0]["determinism"][0];
  CHECK_MSG(d["bytes_differ"] == 4 && d["first_offset"] == 0, d.dump());  // low byte of each
  CHECK(!r.answer["cases"][0].contains("compares"));

  // mend_kernel also rewrites the saved copy of its first output with its second: the copy
  // is staged read-only once saved, so the write faults instead of hiding the difference
  r = run_request(request_v2("mend_kernel", {stamp}), {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 5, r.out + r.err);
  CHECK_MSG(r.answer["cases"][0]["status"] == "runtime_error", r.answer.dump());
  CHECK_MSG(stats_of(r).mmu_faults > 0, r.err);
}

TEST_CASE("checks after a launch: a case with more buffers than 16 still waits once") {
  // wide_kernel copies, with 20 more outputs after its three parameters (a PyTorch problem's many
  // tensors), and stamps the launch count into the last: after the repeat, each of the 21 outputs
  // takes a determinism diff. The support scratch has a slot for every buffer, so all of them are
  // read with the guards in one wait (it held 16 once, and the diffs past them waited one by one),
  // and the last slot is the one that differs.
  spit(path("m_in.bin"), raw_of(std::vector<float>{1, 2, 3, 4}));
  json args = {buffer("in", "in", 16, path("m_in.bin")),
               buffer("out", "out", 16, "", path("m_out.bin")),
               scalar("n", "uint64", raw_hex<std::uint64_t>(16))};
  for (int k = 0; k < 20; ++k) {
    const std::string name = "extra" + std::to_string(k);
    args.push_back(buffer(name, "out", 16, "", path("m_" + name + ".bin")));
  }
  json c = {{"name", "m"}, {"args", args}, {"launch", launch()}};
  auto once = request_v2("wide_kernel", {c});
  c["repeat_validation"] = true;
  auto twice = request_v2("wide_kernel", {c});
  for (json* req : {&once, &twice}) {
    (*req)["guard_bytes"] = 256;
    (*req)["input_cache"] = true;  // the input's diff on the device too
  }
  const auto a = run_request(once, {"FAKE_CUDA_STATS=1"});
  const auto b = run_request(twice, {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(a.rc == 0 && b.rc == 0, a.err + b.err + b.out);
  if (b.rc != 0) return;
  const json& det = b.answer["cases"][0]["determinism"];
  CHECK_MSG(det.size() == 21, b.answer.dump());
  if (det.size() != 21) return;
  for (std::size_t k = 0; k + 1 < det.size(); ++k)
    CHECK_MSG(det[k]["bytes_differ"] == 0, det[k].dump());
  CHECK_MSG(det[20]["buffer"] == "extra19", det[20].dump());
  CHECK_MSG(det[20]["bytes_differ"] == 1, det[20].dump());  // launch counts 1 and 2: one byte apart
  CHECK_MSG(
      stats_of(b).stream_syncs == stats_of(a).stream_syncs + 3,
      std::to_string(stats_of(a).stream_syncs) + " " + std::to_string(stats_of(b).stream_syncs));
}

TEST_CASE("checks after a launch: guards, inputs and the repeat's diffs are read with one wait") {
  // copy_kernel with an `in` buffer staged on the device (the input cache) and an `out` buffer
  // without expected values (no compare), guarded: after a launch the guards of both buffers and
  // the input's diff were three waits, and after the repeat launch the determinism diff a fourth;
  // they are queued into pinned memory and read with one wait.
  spit(path("w_in.bin"), raw_of(std::vector<float>{1, 2, 3, 4}));
  json c = {
      {"name", "w"},
      {"args",
       {buffer("in", "in", 16, path("w_in.bin")), buffer("out", "out", 16, "", path("w_out.bin")),
        scalar("n", "uint64", raw_hex<std::uint64_t>(16))}},
      {"launch", launch()}};
  auto once = request_v2("copy_kernel", {c});
  c["repeat_validation"] = true;
  auto twice = request_v2("copy_kernel", {c});
  for (json* req : {&once, &twice}) {
    (*req)["guard_bytes"] = 256;
    (*req)["input_cache"] = true;
  }
  const auto a = run_request(once, {"FAKE_CUDA_STATS=1"});
  const auto b = run_request(twice, {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(a.rc == 0 && b.rc == 0, a.err + b.err);
  CHECK_MSG(b.answer["cases"][0]["determinism"][0]["bytes_differ"] == 0, b.answer.dump());
  // the repeat: its outputs saved (one wait), its launch (one), its checks (one)
  CHECK_MSG(
      stats_of(b).stream_syncs == stats_of(a).stream_syncs + 3,
      std::to_string(stats_of(a).stream_syncs) + " " + std::to_string(stats_of(b).stream_syncs));
}

TEST_CASE("timed inputs: a fresh input passes, a replayed first result fails the timed compare") {
  for (const std::string entry : {"copy_kernel", "replay_kernel"}) {
    auto c = compare_case("timed_" + entry, {1, 2, 3, 4}, {1, 2, 3, 4},
                          {{"warmup", 1}, {"iterations", 3}});
    spit(path("t_in.bin"), raw_of(std::vector<float>{5, 6, 7, 8}));
    spit(path("t_expected.bin"), raw_of(std::vector<double>{5, 6, 7, 8}));
    c["args"][0]["timed_input"] = path("t_in.bin");
    c["args"][1]["timed_expected"] = path("t_expected.bin");
    const auto r = run_request(request_v2(entry, {c}));
    CHECK_MSG(r.rc == 0, r.out + r.err);
    const auto& res = r.answer["cases"][0];
    CHECK(res["status"] == "ok");
    CHECK(res["timing"]["times_ms"].size() == 3);
    CHECK(res["timing"]["check_launch_ms"].is_number());
    CHECK_MSG(res["compares"].size() == 2, res.dump());
    if (res["compares"].size() != 2) continue;
    CHECK(res["compares"][0]["launch"] == "validation" && res["compares"][0]["mismatches"] == 0);
    CHECK(res["compares"][1]["launch"] == "timed");
    const bool replays = entry == "replay_kernel";
    CHECK(res["compares"][1]["mismatches"] == (replays ? 4 : 0));
    CHECK(res["compares"][1]["output_written"] == replays);
    CHECK(exists(path("timed_" + entry + "_out.bin")) == replays);
    if (replays) {
      CHECK(slurp(path("timed_" + entry + "_out.bin")) == raw_of(std::vector<float>{1, 2, 3, 4}));
    }
  }
}

TEST_CASE("timed inputs: hidden from every launch before the timed check's") {
  // With the input cache the timed check's input has a device copy from the start; until the
  // check launch it is unmapped, so no earlier launch can precompute the check's answer.
  auto c = compare_case("spied", {1, 2, 3, 4}, {1, 2, 3, 4}, {{"warmup", 1}, {"iterations", 3}});
  spit(path("spied_t_in.bin"), raw_of(std::vector<float>{5, 6, 7, 8}));
  spit(path("spied_t_expected.bin"), raw_of(std::vector<double>{5, 6, 7, 8}));
  c["args"][0]["timed_input"] = path("spied_t_in.bin");
  c["args"][1]["timed_expected"] = path("spied_t_expected.bin");
  auto req = request_v2("spy_kernel", {c});
  req["input_cache"] = true;
  auto r = run_request(req, {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0 && r.answer["cases"][0]["compares"][1]["mismatches"] == 0, r.out + r.err);
  // the check launch itself sees the copy it was given its input from, no launch before it
  CHECK_MSG(stats_of(r).spied == 1, r.err);
  r = run_request(req, {"FAKE_CUDA_STATS=1", "KERNELOPT_HARNESS_HIDE_EXPECTED=0"});
  CHECK_MSG(stats_of(r).spied == 6, r.err);  // validation, warm-up, 3 measured, the check
}

TEST_CASE("timed inputs: a wrong size exits 2; without timing they are not used") {
  auto c = compare_case("tsize", {1, 2}, {1, 2}, {{"iterations", 2}});
  spit(path("tsize_timed.bin"), raw_of(std::vector<float>{1, 2, 3}));
  c["args"][0]["timed_input"] = path("tsize_timed.bin");
  auto r = run_request(request_v2("copy_kernel", {c}));
  CHECK(r.rc == 2);
  CHECK_MSG(test::contains(r.answer["error"]["message"],
                           "cases[0].args[0].timed_input: buffer \"in\" is 8 bytes but"),
            r.answer.dump());
  spit(path("tsize_timed.bin"), raw_of(std::vector<float>{9, 9}));
  c.erase("timing");
  r = run_request(request_v2("copy_kernel", {c}));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  CHECK(r.answer["cases"][0]["compares"].size() == 1);
  CHECK(r.answer["cases"][0]["timing"].is_null());
}

TEST_CASE("timed inputs: an input modified by the timed launch is input_modified") {
  // late_clobber_kernel leaves its input alone on the validation launch only. The timed check
  // (here without timed_expected, so without a support module) catches it.
  auto c = copy_case("tclob", 64, "tclob", {{"iterations", 2}});
  spit(path("tclob_timed.bin"), pattern(64, 9));
  c["args"][0]["timed_input"] = path("tclob_timed.bin");
  auto r = run_request(request("late_clobber_kernel", {c}));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& res = r.answer["cases"][0];
  CHECK_MSG(res["status"] == "input_modified", res.dump());
  CHECK(res["modified_inputs"] ==
        json::array({{{"buffer", "in"}, {"first_offset", 0}, {"bytes_changed", 1}}}));
  CHECK(res["timing"]["check_launch_ms"].is_number());
  CHECK(!res.contains("compares"));
  CHECK(slurp(path("tclob_out.bin")) == pattern(64, 3));  // the validation launch's output
  // Without timed inputs the same kernel passes: nothing looks at its inputs after validation.
  c["args"][0].erase("timed_input");
  r = run_request(request("late_clobber_kernel", {c}));
  CHECK(r.answer["cases"][0]["status"] == "ok");
}

TEST_CASE("input cache: misses, then hits across serve requests; a replaced file reloads") {
  auto req = request("copy_kernel", {copy_case("c1", 1000, "cache_a")});
  req["input_cache"] = true;
  const auto first = req.dump();
  const auto r = run({"serve"}, first + "\n" + first + "\n");
  CHECK_MSG(r.rc == 0 && r.lines.size() == 2, r.out + r.err);
  if (r.lines.size() != 2) return;
  CHECK_MSG(r.lines[0]["input_cache"] ==
                json({{"hits", 0}, {"misses", 1}, {"evictions", 0}, {"resident_bytes", 1000}}),
            r.lines[0].dump());
  CHECK(r.lines[1]["input_cache"] ==
        json({{"hits", 1}, {"misses", 0}, {"evictions", 0}, {"resident_bytes", 1000}}));
  CHECK(r.lines[1]["cases"][0]["status"] == "ok");
  CHECK(slurp(path("cache_a_out.bin")) == pattern(1000, 3));
}

TEST_CASE("input cache: a file replaced on disk is reloaded, not served stale") {
  const auto in = path("cache_r_in.bin");
  spit(in, pattern(64, 1));
  json c = {{"name", "r"},
            {"args",
             {buffer("in", "in", 64, in), buffer("out", "out", 64, "", path("cache_r_out.bin")),
              scalar("n", "uint64", raw_hex<std::uint64_t>(64))}},
            {"launch", launch()}};
  auto req = request("copy_kernel", {c});
  req["input_cache"] = true;
  // Between the two requests the file is replaced (a new inode, as write_atomic does): serve
  // reads from a pipe that delivers the second request only after the replacement.
  spit(path("cache_r_new.bin"), pattern(64, 2));
  const std::string cmd = "( head -n1 " + path("cache_r.req") + "; sleep 0.5; mv " +
                          path("cache_r_new.bin") + " " + in + "; sleep 0.2; tail -n1 " +
                          path("cache_r.req") + " ) | KERNELOPT_LIBCUDA=" + g_fake + " " +
                          g_harness + " serve > " + path("cache_r.out") + " 2>/dev/null";
  spit(path("cache_r.req"), req.dump() + "\n" + req.dump() + "\n");
  CHECK(std::system(cmd.c_str()) == 0);
  std::istringstream lines(slurp(path("cache_r.out")));
  std::string l1, l2;
  std::getline(lines, l1);
  std::getline(lines, l2);
  const auto a = json::parse(l1.empty() ? "{}" : l1);
  const auto b = json::parse(l2.empty() ? "{}" : l2);
  CHECK_MSG(a["input_cache"]["misses"] == 1, l1);
  CHECK_MSG(b["input_cache"]["misses"] == 1 && b["input_cache"]["hits"] == 0, l2);
  CHECK(slurp(path("cache_r_out.bin")) == pattern(64, 2));
}

TEST_CASE("input cache: LRU eviction within input_cache_bytes") {
  auto req = request("copy_kernel", {copy_case("a", 1000, "lru_a"), copy_case("b", 1000, "lru_b")});
  req["input_cache"] = true;
  req["input_cache_bytes"] = 1500;  // room for one input
  const auto r = run({"serve"}, req.dump() + "\n" + req.dump() + "\n");
  CHECK_MSG(r.rc == 0 && r.lines.size() == 2, r.out + r.err);
  if (r.lines.size() != 2) return;
  // b evicts a; on the second request a evicts b and b evicts a again: never a hit.
  CHECK_MSG(r.lines[0]["input_cache"] ==
                json({{"hits", 0}, {"misses", 2}, {"evictions", 1}, {"resident_bytes", 1000}}),
            r.lines[0].dump());
  CHECK_MSG(r.lines[1]["input_cache"] ==
                json({{"hits", 0}, {"misses", 2}, {"evictions", 2}, {"resident_bytes", 1000}}),
            r.lines[1].dump());
  for (const auto& line : r.lines) {
    CHECK(line["cases"][0]["status"] == "ok" && line["cases"][1]["status"] == "ok");
  }
  // A file larger than the budget is used but never kept.
  req["input_cache_bytes"] = 500;
  const auto small = run({"serve"}, req.dump() + "\n");
  CHECK(small.answer["input_cache"] ==
        json({{"hits", 0}, {"misses", 2}, {"evictions", 0}, {"resident_bytes", 0}}));
  CHECK(small.answer["cases"][1]["status"] == "ok");
}

TEST_CASE("input cache: expected files are cached; modified inputs still caught") {
  auto req = request_v2("copy_kernel", {compare_case("ce", {1, 2, 3}, {1, 2, 3})});
  req["input_cache"] = true;
  auto r = run({"serve"}, req.dump() + "\n" + req.dump() + "\n");
  CHECK_MSG(r.lines.size() == 2, r.out + r.err);
  if (r.lines.size() == 2) {
    CHECK(r.lines[0]["input_cache"]["misses"] == 2);  // input and expected
    CHECK(r.lines[1]["input_cache"]["hits"] == 2 && r.lines[1]["input_cache"]["misses"] == 0);
    CHECK(r.lines[1]["cases"][0]["compares"][0]["mismatches"] == 0);
  }
  // With the cache the unchanged-input check compares on the device (ko_bitwise_diff) or,
  // without a support module, against a copy of the cached input.
  for (const bool with_support : {true, false}) {
    auto clob = request("clobber_kernel", {copy_case("c", 64, "cclob")});
    clob["input_cache"] = true;
    if (with_support) clob["support_module"] = support_module();
    r = run_request(clob);
    CHECK_MSG(r.rc == 0, r.out + r.err);
    CHECK(r.answer["cases"][0]["status"] == "input_modified");
    CHECK(r.answer["cases"][0]["modified_inputs"] ==
          json::array({{{"buffer", "in"}, {"first_offset", 3}, {"bytes_changed", 2}}}));
  }
}
