// End-to-end: fresh inputs and checked launches (PROTOCOL.md). Part of test_end_to_end
// (see test_end_to_end.cpp).

#include "e2e.hpp"

using namespace e2e;

TEST_CASE("fresh inputs: every timed launch redrawn, checked launches agree with the reference") {
  const auto r = run_request(
      with_reference(request_v2(
          "copy_kernel", {fresh_case("fr", {{"warmup", 2}, {"iterations", 5}}, {1, 4}, true)})),
      {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& res = r.answer["cases"][0];
  CHECK_MSG(res["status"] == "ok", res.dump());
  const auto& t = res["timing"];
  CHECK(t["fresh_buffers"] == json::array({"in"}));
  // 2 warm-up + 5 measured + the confirm launch, each its own draw.
  CHECK_MSG(t["fresh_draws"] == 8, t.dump());
  CHECK(t["confirm_launch_ms"].is_number());
  const auto& checks = res["timed_checks"];
  CHECK_MSG(checks.size() == 3, res.dump());
  if (checks.size() == 3) {
    CHECK(checks[0]["launch"] == "measured" && checks[0]["sample"] == 1 && checks[0]["draw"] == 3);
    CHECK(checks[1]["sample"] == 4 && checks[1]["draw"] == 6);
    CHECK(checks[2]["launch"] == "confirm" && checks[2]["sample"].is_null() &&
          checks[2]["draw"] == 7);
    CHECK(checks[2]["time_ms"] == t["confirm_launch_ms"]);
    CHECK(checks[0]["time_ms"] == t["times_ms"][1]);
    for (const auto& c : checks)
      CHECK(c["buffer"] == "out" && c["mismatches"] == 0 && c["elements"] == 4);
  }
  const auto st = stats_of(r);
  // 8 candidate draws + 3 reference redraws of the same draws; one reference compare per check.
  CHECK_MSG(st.fills == 11 && st.ref_compares == 3, r.err);
  // The validation launch still saw the request's input (its expected values matched).
  CHECK(res["compares"][0]["mismatches"] == 0);
}

TEST_CASE("fresh inputs: a kernel that replays its first result fails the checked launches") {
  for (const bool fresh : {true, false}) {
    auto c = fresh_case("rp", {{"warmup", 1}, {"iterations", 4}}, {0, 3});
    if (!fresh) {
      c["args"][0].erase("fresh");
    }
    const auto r = run_request(with_reference(request_v2("replay_kernel", {c})));
    CHECK_MSG(r.rc == 0, r.out + r.err);
    const auto& checks = r.answer["cases"][0]["timed_checks"];
    CHECK_MSG(checks.size() == 2, r.answer.dump());
    if (checks.size() != 2) continue;
    // On fresh inputs the replayed first result is wrong; on the same bytes every launch it
    // is right, which is the hole fresh inputs close.
    CHECK_MSG(checks[0]["mismatches"] == (fresh ? 4 : 0), checks.dump());
    CHECK(checks[1]["mismatches"] == (fresh ? 4 : 0));
    if (fresh) CHECK(checks[0]["first_mismatch"] == 0);
    CHECK(r.answer["cases"][0]["timing"]["fresh_buffers"] ==
          (fresh ? json::array({"in"}) : json::array()));
  }
}

TEST_CASE(
    "fresh inputs: an inout buffer is redrawn instead of restored; the reference gets the same") {
  // axpy_kernel: y = a * x + y, x in and y inout, both redrawn; the reference is axpy_kernel too.
  const std::size_t n = 8;
  spit(path("ax_x.bin"), raw_of(std::vector<float>(n, 1.0f)));
  spit(path("ax_y.bin"), raw_of(std::vector<float>(n, 2.0f)));
  json x = buffer("x", "in", n * 4, path("ax_x.bin"));
  json y = buffer("y", "inout", n * 4, path("ax_y.bin"), path("ax_y_out.bin"));
  for (json* b : {&x, &y}) {
    (*b)["dtype"] = "float32";
    (*b)["fresh"] = {{"kind", "normal"}, {"mean", 0.0}, {"std", 1.0}};
  }
  y["compare"] = {{"abs_tol", 1e-6}, {"rtol", 1e-6}, {"rel_floor", 1.0}};
  json c = {{"name", "ax"},
            {"args",
             {scalar("a", "float32", raw_hex<float>(3.0f)), x, y,
              scalar("n", "uint32", raw_hex<std::uint32_t>(n))}},
            {"launch", launch()},
            {"timing", {{"warmup", 1}, {"iterations", 3}, {"blocking", true}}},
            {"fresh_seed", 7},
            {"checked_launches", {0, 1, 2}},
            {"check_launch", launch()}};
  const auto r = run_request(with_reference(request_v2("axpy_kernel", {c}), "axpy_kernel"),
                             {"FAKE_CUDA_STATS=1", "FAKE_CUDA_WATCH_SEED=7"});
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& res = r.answer["cases"][0];
  CHECK_MSG(res["status"] == "ok" && res["timed_checks"].size() == 3, res.dump());
  for (const auto& e : res["timed_checks"]) CHECK_MSG(e["mismatches"] == 0, e.dump());
  // The validation launch ran on the files: y = 3 * 1 + 2.
  CHECK(slurp(path("ax_y_out.bin")) == raw_of(std::vector<float>(n, 5.0f)));
  // 4 launches x 2 buffers, plus 3 checks x 2 buffers for the reference; one spin per batch,
  // and a batch ends after each checked launch (its verdict is read back before the next
  // launch): 3 measured batches and the launch-overhead one.
  const auto st = stats_of(r);
  CHECK_MSG(st.fills == 8 + 6 && st.spins == 3 + 1, r.err);
  // Each (draw, buffer) has its own key, which the reference's redraws share; the request's
  // fresh_seed itself never reaches the device (draw_key.hpp).
  CHECK_MSG(st.fill_keys == 8 && st.watched_fills == 0, r.err);
}

TEST_CASE(
    "fresh_launches: draws before the first warm-up and the listed samples; the reference "
    "checks a launch on inputs drawn for an earlier one") {
  auto c = fresh_case("fl", {{"warmup", 2}, {"iterations", 6}}, {1, 4}, true);
  c["fresh_launches"] = {2, 4};
  const auto r = run_request(with_reference(request_v2("copy_kernel", {c})), {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& res = r.answer["cases"][0];
  CHECK_MSG(res["status"] == "ok", res.dump());
  // Draw 0 before the first warm-up launch, 1 before sample 2, 2 before sample 4, 3 for the
  // confirm launch; samples 0, 1, 3 and 5 reuse the inputs drawn before them.
  CHECK_MSG(res["timing"]["fresh_draws"] == 4, res.dump());
  const auto& checks = res["timed_checks"];
  CHECK_MSG(checks.size() == 3, res.dump());
  if (checks.size() == 3) {
    CHECK(checks[0]["sample"] == 1 && checks[0]["draw"] == 0);
    CHECK(checks[1]["sample"] == 4 && checks[1]["draw"] == 2);
    CHECK(checks[2]["launch"] == "confirm" && checks[2]["draw"] == 3);
    for (const auto& e : checks) CHECK_MSG(e["mismatches"] == 0, e.dump());
  }
  // 4 candidate draws + 3 reference redraws.
  CHECK_MSG(stats_of(r).fills == 7, r.err);
}

TEST_CASE(
    "poison_subset: outputs poisoned before the first warm-up, the redrawn and the checked "
    "samples only; zeroed outputs before every launch; refused without fresh_launches") {
  // warm-up 2, samples 0-5: redrawn {2, 4}, checked {1, 4}. With fresh_launches alone every
  // launch is poisoned: 8 timed poisons; with poison_subset the first warm-up and samples 1, 2
  // and 4, so 4 fewer.
  const auto run = [](const json& c) {
    return run_request(with_reference(request_v2("copy_kernel", {c})), {"FAKE_CUDA_STATS=1"});
  };
  auto c = fresh_case("fp", {{"warmup", 2}, {"iterations", 6}}, {1, 4}, true);
  c["poison_subset"] = true;
  const auto refused = run(c);
  const std::string why = refused.answer["error"]["message"].get<std::string>();
  CHECK_MSG(refused.rc == 2 && test::contains(why, "poison_subset: needs \"fresh_launches\""),
            refused.out + refused.err);
  c.erase("poison_subset");
  const auto every = run(c);
  c["fresh_launches"] = {2, 4};
  const auto fresh_only = run(c);
  c["poison_subset"] = true;
  const auto subset = run(c);
  for (const auto* r : {&every, &fresh_only, &subset}) {
    CHECK_MSG(r->rc == 0 && r->answer["cases"][0]["status"] == "ok", r->out + r->err);
    for (const auto& e : r->answer["cases"][0]["timed_checks"])
      CHECK_MSG(e["mismatches"] == 0, e.dump());
  }
  CHECK_MSG(stats_of(every).poisons == stats_of(fresh_only).poisons, every.err + fresh_only.err);
  CHECK_MSG(stats_of(fresh_only).poisons == stats_of(subset).poisons + 4,
            fresh_only.err + subset.err);
  CHECK_MSG(stats_of(fresh_only).zeroes == stats_of(subset).zeroes, fresh_only.err + subset.err);
  // an output the request zeroes (a kernel may accumulate into it) is zeroed before every launch
  c["args"][1]["init"] = "zero";
  const auto zero_subset = run(c);
  c.erase("poison_subset");
  const auto zero_every = run(c);
  CHECK_MSG(zero_subset.rc == 0 && zero_every.rc == 0, zero_subset.out + zero_every.out);
  CHECK_MSG(stats_of(zero_every).zeroes == stats_of(zero_subset).zeroes,
            zero_every.err + zero_subset.err);
  CHECK_MSG(stats_of(zero_every).zeroes > stats_of(every).zeroes + 8, zero_every.err + every.err);
}

TEST_CASE("checked launches: a kernel resetting compare results in device memory still fails") {
  // hush_kernel replays its first answer (wrong on fresh inputs) and, at every launch, resets
  // whatever compare results it finds on the device. Each checked launch's verdict is read
  // back before any later launch runs, and its slot is reset right before its compare, so
  // neither a later launch nor an earlier one can change it. In blocking mode (the default
  // path) and without, and in graph mode.
  for (const json& timing :
       {json{{"warmup", 1}, {"iterations", 6}},
        json{{"warmup", 1}, {"iterations", 6}, {"blocking", true}},
        json{{"warmup", 1}, {"iterations", 6}, {"mode", "graph"}, {"graph_batch", 1}}}) {
    const auto c = fresh_case("hs", timing, {1, 2, 5}, true);
    const auto r =
        run_request(with_reference(request_v2("hush_kernel", {c})), {"FAKE_CUDA_STATS=1"});
    CHECK_MSG(r.rc == 0, r.out + r.err);
    const auto& res = r.answer["cases"][0];
    const auto& checks = res["timed_checks"];
    CHECK_MSG(checks.size() == 4, timing.dump() + ": " + res.dump());
    for (const auto& e : checks) CHECK_MSG(e["mismatches"] == 4, timing.dump() + ": " + e.dump());
    // the kernel did find and reset compare results (after they were read)
    CHECK_MSG(stats_of(r).hushed > 0, r.err);
  }
}

TEST_CASE("checked launches: the reference's copy of a fixed input is out of a kernel's reach") {
  // blank_kernel passes validation, then writes zeros and zeroes whatever else starts with its
  // input: had the reference's private copy of the (never redrawn) input been writable, the
  // reference would compute zeros too and every check would agree. It is staged read-only.
  auto c = fresh_case("bl", {{"warmup", 1}, {"iterations", 4}, {"blocking", true}}, {1, 2});
  c["args"][0].erase("fresh");
  c["repeat_validation"] = true;
  const auto r =
      run_request(with_reference(request_v2("blank_kernel", {c})), {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 5, r.out + r.err);
  const auto& res = r.answer["cases"][0];
  CHECK_MSG(res["status"] == "runtime_error", res.dump());
  CHECK(res["error"]["cuda_error"] == "CUDA_ERROR_ILLEGAL_ADDRESS");
  CHECK_MSG(stats_of(r).mmu_faults > 0, r.err);
}

TEST_CASE("fresh_launches: a kernel copying an earlier reference check's outputs finds none") {
  // Draw 0 serves samples 0-2 (fresh_launches {3}); the reference (plus1) checks samples 0 and 2.
  // crib copies plus1's answer from wherever it lies: after check 0 the reference's outputs
  // held the answer for the inputs sample 2 reuses; they are wiped right after their compare.
  auto c = fresh_case("cr", {{"warmup", 1}, {"iterations", 4}}, {0, 2});
  c["fresh_launches"] = {3};
  for (bool blocking : {false, true}) {
    c["timing"]["blocking"] = blocking;
    const auto r = run_request(with_reference(request_v2("crib_kernel", {c}), "plus1_kernel"));
    CHECK_MSG(r.rc == 0, r.out + r.err);
    const auto& checks = r.answer["cases"][0]["timed_checks"];
    CHECK_MSG(checks.size() == 2, r.answer.dump());
    for (const auto& e : checks) CHECK_MSG(e["mismatches"] == 4, e.dump());
  }
}

TEST_CASE("adaptive timing: a checked launch in a later round runs, one past the stop does not") {
  // 4 samples, then rounds of 16 up to 20 (the target is never reached): sample 17 is in the
  // second round. A kernel honest only in the first round is caught there.
  const json timing = {{"warmup", 1},
                       {"iterations", 4},
                       {"adaptive", {{"target_rse", 1e-9}, {"max_iterations", 20}}}};
  for (const std::string entry : {"copy_kernel", "replay_kernel"}) {
    const auto r =
        run_request(with_reference(request_v2(entry, {fresh_case("lr", timing, {1, 17})})));
    CHECK_MSG(r.rc == 0, r.out + r.err);
    const auto& checks = r.answer["cases"][0]["timed_checks"];
    CHECK_MSG(checks.size() == 2, r.answer.dump());
    if (checks.size() != 2) continue;
    CHECK(checks[0]["sample"] == 1 && checks[1]["sample"] == 17);
    for (const auto& e : checks)
      CHECK_MSG(e["mismatches"] == (entry == "copy_kernel" ? 0 : 4), e.dump());
  }
  // converged after the first round: the later pick never runs, and nothing claims it did
  json quiet = timing;
  quiet["adaptive"]["target_rse"] = 0.5;
  const auto r =
      run_request(with_reference(request_v2("copy_kernel", {fresh_case("lq", quiet, {1, 17})})));
  CHECK_MSG(r.rc == 0 && r.answer["cases"][0]["timing"]["times_ms"].size() == 4, r.out + r.err);
  CHECK_MSG(r.answer["cases"][0]["timed_checks"].size() == 1, r.answer.dump());
  // past max_iterations: refused, naming the bound
  const auto bad =
      run_request(with_reference(request_v2("copy_kernel", {fresh_case("lb", timing, {1, 20})})));
  CHECK_MSG(bad.rc == 2 && bad.out.find("timing.adaptive.max_iterations (20)") != std::string::npos,
            bad.out + bad.err);
}

TEST_CASE("fresh_launches: a kernel replaying its first result still fails a checked launch") {
  auto c = fresh_case("flr", {{"warmup", 1}, {"iterations", 4}}, {3});
  c["fresh_launches"] = {3};
  const auto r = run_request(with_reference(request_v2("replay_kernel", {c})));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& checks = r.answer["cases"][0]["timed_checks"];
  CHECK_MSG(checks.size() == 1 && checks[0]["mismatches"] == 4, r.answer.dump());
}

TEST_CASE(
    "fresh inputs: with fresh_timed false the checked launches see the input, the confirm a draw") {
  auto c = fresh_case("nt", {{"warmup", 1}, {"iterations", 3}}, {0, 2}, true);
  c["fresh_timed"] = false;
  const auto r = run_request(with_reference(request_v2("copy_kernel", {c})), {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& res = r.answer["cases"][0];
  CHECK_MSG(res["timing"]["fresh_buffers"] == json::array() && res["timing"]["fresh_draws"] == 1,
            res.dump());
  const auto& checks = res["timed_checks"];
  CHECK_MSG(checks.size() == 3, res.dump());
  for (const auto& e : checks) CHECK_MSG(e["mismatches"] == 0, e.dump());
  if (checks.size() == 3) CHECK(checks[0]["draw"].is_null() && checks[2]["draw"] == 0);
  // one draw for the confirm launch and one for its reference
  CHECK_MSG(stats_of(r).fills == 2, r.err);
}

TEST_CASE(
    "checked_dump: the checked launches' redrawn inputs and outputs are written for the oracle") {
  for (const std::string entry : {"copy_kernel", "replay_kernel"}) {
    auto c =
        fresh_case("dump_" + entry, {{"warmup", 1}, {"iterations", 4}, {"blocking", true}}, {1, 3});
    c.erase("check_launch");
    std::filesystem::create_directories(path("dump_" + entry));
    c["checked_dump"] = path("dump_" + entry);
    const auto r = run_request(request_v2(entry, {c}), {"FAKE_CUDA_STATS=1"});
    CHECK_MSG(r.rc == 0, r.out + r.err);
    const auto& res = r.answer["cases"][0];
    const auto& dumps = res["timed_dumps"];
    CHECK_MSG(dumps.size() == 2 && !res.contains("timed_checks"), res.dump());
    if (dumps.size() != 2) continue;
    CHECK(dumps[0]["sample"] == 1 && dumps[0]["draw"] == 2 && dumps[1]["sample"] == 3);
    CHECK(dumps[1]["time_ms"] == res["timing"]["times_ms"][3]);
    for (const auto& d : dumps) {
      const auto in = slurp(d["files"]["inputs"]["in"].get<std::string>());
      const auto out = slurp(d["files"]["outputs"]["out"].get<std::string>());
      CHECK(in.size() == 16 && out.size() == 16);
      // the input file is the launch's own draw (not the request's input); a copy kernel's
      // output equals it, a kernel replaying its first result's does not
      CHECK(in != raw_of(std::vector<float>{1, 2, 3, 4}));
      CHECK_MSG((in == out) == (entry == "copy_kernel"), entry);
    }
  }
  {
    // cover_kernel replays a wrong answer and rewrites copies of it left on the device with
    // what its previous launch should have output: the dumps were read back before that.
    auto c =
        fresh_case("dump_cover", {{"warmup", 1}, {"iterations", 4}, {"blocking", true}}, {1, 3});
    c.erase("check_launch");
    std::filesystem::create_directories(path("dump_cover"));
    c["checked_dump"] = path("dump_cover");
    const auto r = run_request(request_v2("cover_kernel", {c}), {"FAKE_CUDA_STATS=1"});
    CHECK_MSG(r.rc == 0, r.out + r.err);
    const auto& dumps = r.answer["cases"][0]["timed_dumps"];
    CHECK_MSG(dumps.size() == 2, r.answer.dump());
    for (const auto& d : dumps) {
      const auto in = slurp(d["files"]["inputs"]["in"].get<std::string>());
      CHECK_MSG(in != slurp(d["files"]["outputs"]["out"].get<std::string>()), d.dump());
    }
    CHECK_MSG(stats_of(r).hushed > 0, r.err);
  }
  // without fresh inputs nothing is redrawn: only the outputs are written
  auto c = fresh_case("dump_plain", {{"iterations", 2}}, {0});
  c["args"][0].erase("fresh");
  c.erase("check_launch");
  std::filesystem::create_directories(path("dump_plain"));
  c["checked_dump"] = path("dump_plain");
  const auto r = run_request(request_v2("copy_kernel", {c}));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& d = r.answer["cases"][0]["timed_dumps"];
  CHECK_MSG(d.size() == 1 && d[0]["files"]["inputs"].empty() && d[0]["draw"].is_null(),
            r.answer.dump());
  // checked_dump needs checked_launches
  c.erase("checked_launches");
  CHECK(run_request(request_v2("copy_kernel", {c})).rc == 2);
}

TEST_CASE("fresh inputs: graph mode redraws before every replay and checks after it") {
  const auto r = run_request(
      with_reference(request_v2(
          "copy_kernel",
          {fresh_case("fg",
                      {{"warmup", 1}, {"iterations", 3}, {"mode", "graph"}, {"graph_batch", 2}},
                      {2})})),
      {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& res = r.answer["cases"][0];
  CHECK_MSG(res["timed_checks"].size() == 1 && res["timed_checks"][0]["mismatches"] == 0,
            res.dump());
  // 1 warm-up + 1 upload replay + 3 measured replays, each prepared with its own draw.
  CHECK_MSG(res["timing"]["fresh_draws"] == 5, res.dump());
  CHECK(res["timed_checks"][0]["draw"] == 4);
}

TEST_CASE("fresh inputs: malformed fields exit 2 naming the field") {
  auto base = [] { return fresh_case("bad", {{"iterations", 2}}, {0}); };
  struct Bad {
    std::function<void(json&, json&)> edit;
    std::string message;
  };
  const std::vector<Bad> bads = {
      {[](json&, json& c) {
         c["args"][1]["fresh"] = {{"kind", "uniform"}, {"low", 0}, {"high", 1}};
       },
       "cases[0].args[1].fresh: an \"out\" buffer has no input to redraw"},
      {[](json&, json& c) { c["args"][0].erase("dtype"); },
       "cases[0].args[0].dtype: is required with \"fresh\""},
      {[](json&, json& c) { c.erase("fresh_seed"); }, "cases[0].fresh_seed: is required"},
      {[](json&, json& c) { c["args"][0]["fresh"]["kind"] = "zipf"; },
       "cases[0].args[0].fresh.kind: must be"},
      {[](json&, json& c) {
         c["args"][0]["fresh"] = {{"kind", "randint"}, {"low", 5}, {"high", 5}};
       },
       "cases[0].args[0].fresh.high: must be greater than low"},
      {[](json&, json& c) {
         c["args"][0]["fresh"]["structure"] = {{"kind", "triu"}, {"rows", 3}, {"cols", 1}};
       },
       "cases[0].args[0].fresh.structure: 3 x 1 matrices do not tile the buffer's 4 elements"},
      {[](json&, json& c) { c["checked_launches"] = {2}; },
       "cases[0].checked_launches[0]: must be below timing.iterations (2)"},
      {[](json&, json& c) { c["checked_launches"] = {1, 1}; }, "duplicate index 1"},
      {[](json&, json& c) { c.erase("check_launch"); }, "cases[0].check_launch: is required"},
      {[](json&, json& c) {
         c["args"][1].erase("compare");
         c["args"][1].erase("expected");
       },
       "cases[0].args[1].compare: is required on every"},
      {[](json& r, json&) {
         r.erase("check_module");
         r.erase("check_entry");
       },
       "check_module: is required by cases[0]"},
      {[](json& r, json&) { r.erase("check_entry"); }, "check_entry: is required"},
      {[](json&, json& c) { c["fresh_launches"] = {1, 1}; },
       "cases[0].fresh_launches[1]: indices must be increasing"},
      {[](json&, json& c) { c["fresh_launches"] = 3; },
       "cases[0].fresh_launches: must be an array"},
      {[](json&, json& c) {
         c["timing"]["mode"] = "graph";
         c["fresh_launches"] = {0};
       },
       "cases[0].fresh_launches: needs timing mode \"events\""},
  };
  for (const auto& bad : bads) {
    auto req = with_reference(request_v2("copy_kernel", {base()}));
    bad.edit(req, req["cases"][0]);
    const auto r = run_request(req);
    CHECK_MSG(r.rc == 2, bad.message + ": " + r.out);
    CHECK_MSG(test::contains(r.answer["error"]["message"].get<std::string>(), bad.message),
              bad.message + " vs " + r.answer.dump());
  }
  // A check module the driver refuses is a bad request, not the candidate's module_load.
  auto req = with_reference(request_v2("copy_kernel", {base()}));
  spit(path("broken_ref.fake"), "not a module");
  req["check_module"] = path("broken_ref.fake");
  auto r = run_request(req);
  CHECK_MSG(
      r.rc == 2 && test::contains(r.answer["error"]["message"].get<std::string>(), "check_module:"),
      r.out);
  req = with_reference(request_v2("copy_kernel", {base()}), "no_such_kernel");
  r = run_request(req);
  CHECK_MSG(
      r.rc == 2 && test::contains(r.answer["error"]["message"].get<std::string>(), "check_entry:"),
      r.out);
}
