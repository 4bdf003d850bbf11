// End-to-end, protocol 2: timing modes (graph, blocking, adaptive) and the baseline op.
// Part of test_end_to_end (see test_end_to_end.cpp).

#include "e2e.hpp"

using namespace e2e;

TEST_CASE("graph mode: one graph of graph_batch launches per sample, time per launch") {
  auto req = request(
      "axpy_kernel",
      {axpy_case("g", {{"warmup", 2}, {"iterations", 5}, {"mode", "graph"}, {"graph_batch", 4}})});
  req["protocol"] = 2;
  const auto r = run_request(req, {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& c = r.answer["cases"][0];
  CHECK(c["status"] == "ok");
  const auto& t = c["timing"];
  CHECK(t["mode"] == "graph" && t["graph_batch"] == 4 && t["times_ms"].size() == 5);
  for (const auto& ms : t["times_ms"]) CHECK_MSG(near_ms(ms, 0.126, 0.002), ms.dump());
  const auto st = stats_of(r);
  // 1 validation + 2 warm-up launches; one untimed upload replay + 5 measured replays of 4.
  CHECK_MSG(st.graph_launches == 6 && st.graph_kernels == 24, r.err);
  CHECK_MSG(st.launches == 3 + 24, r.err);
  // The output after replays is the validation launch's (written before timing).
  std::vector<float> got(4);
  const auto out = slurp(path("g_y_out.bin"));
  if (out.size() == 16) std::memcpy(got.data(), out.data(), 16);
  CHECK(got == (std::vector<float>{12, 14, 16, 18}));
}

TEST_CASE("graph mode without graph_batch: chosen from the warm-up for >= 0.2 ms per graph") {
  const auto r =
      run_request(request("axpy_kernel",
                          {axpy_case("ga", {{"warmup", 3}, {"iterations", 4}, {"mode", "graph"}})}),
                  {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& t = r.answer["cases"][0]["timing"];
  // The fake's axpy takes 0.125-0.1275 ms: ceil(0.2 / 0.12625) = 2.
  CHECK_MSG(t["graph_batch"] == 2, t.dump());
  CHECK(t["times_ms"].size() == 4);
  CHECK(stats_of(r).graph_launches == 5);
}

TEST_CASE("blocking mode: ko_spin holds each batch of at most 32 samples; overhead measured") {
  auto req = request("axpy_kernel",
                     {axpy_case("b", {{"warmup", 1}, {"iterations", 70}, {"blocking", true}})});
  req["support_module"] = support_module();
  const auto r = run_request(req, {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& t = r.answer["cases"][0]["timing"];
  CHECK(t["blocking"] == true && t["blocking_timed_out"] == false);
  CHECK(t["times_ms"].size() == 70);
  // ko_empty measured the same way: the fake's empty kernel takes 0.002 ms.
  CHECK_MSG(near_ms(t["launch_overhead_ms"], 0.00202, 0.0001), t["launch_overhead_ms"].dump());
  // 70 samples in batches of 32: 3 spins; the overhead's 70 samples: 3 more.
  CHECK_MSG(stats_of(r).spins == 6, r.err);
  // pipelined: batch 1 is queued before the host waits for batch 0's last event, batch 2
  // before it waits for batch 1's; the last batch ends with the stream synchronized. Twice.
  CHECK_MSG(stats_of(r).event_syncs == 2 * 2, r.err);
}

TEST_CASE("the launch overhead is measured once per way of timing and reused by later cases") {
  auto req = request("axpy_kernel",
                     {axpy_case("o1", {{"warmup", 1}, {"iterations", 70}, {"blocking", true}}),
                      axpy_case("o2", {{"warmup", 1}, {"iterations", 70}, {"blocking", true}}),
                      axpy_case("o3", {{"warmup", 1}, {"iterations", 40}, {"blocking", true}})});
  req["support_module"] = support_module();
  const auto r = run_request(req, {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& cases = r.answer["cases"];
  for (const auto& c : cases) {
    CHECK_MSG(near_ms(c["timing"]["launch_overhead_ms"], 0.00202, 0.0001), c["timing"].dump());
  }
  // o1: 3 spins + 3 for the overhead's 70 samples; o2 the same way: 3 spins, the overhead
  // reused; o3 (40 samples, another way): 2 spins + 2 for its own overhead.
  CHECK_MSG(stats_of(r).spins == 13, r.err);
}

TEST_CASE("blocking mode: a spin kernel that timed out is reported") {
  auto req = request("axpy_kernel", {axpy_case("bt", {{"iterations", 3}, {"blocking", true}})});
  req["support_module"] = support_module();
  const auto r = run_request(req, {"FAKE_CUDA_SPIN_TIMEOUT=1"});
  CHECK_MSG(r.rc == 0, r.out + r.err);
  CHECK(r.answer["cases"][0]["timing"]["blocking_timed_out"] == true);
}

TEST_CASE("graph and blocking together, and the overhead in graph mode") {
  auto req = request(
      "axpy_kernel",
      {axpy_case("gb",
                 {{"iterations", 5}, {"mode", "graph"}, {"graph_batch", 3}, {"blocking", true}})});
  req["support_module"] = support_module();
  const auto r = run_request(req, {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& t = r.answer["cases"][0]["timing"];
  CHECK(t["mode"] == "graph" && t["blocking"] == true && t["graph_batch"] == 3);
  CHECK_MSG(near_ms(t["launch_overhead_ms"], 0.00202, 0.0001), t.dump());
  const auto st = stats_of(r);
  // Kernel: upload + 5 replays; ko_empty: upload + 5 replays. One spin each.
  CHECK_MSG(st.graph_launches == 12 && st.spins == 2, r.err);
}

TEST_CASE("adaptive: more samples until the median's rse reaches the target, or a limit") {
  auto req = request(
      "axpy_kernel",
      {axpy_case("ad", {{"iterations", 10}, {"adaptive", {{"target_rse", 0.001}}}}),
       axpy_case("cap", {{"iterations", 10},
                         {"adaptive", {{"target_rse", 1e-9}, {"max_iterations", 42}}}}),
       axpy_case("wall",
                 {{"iterations", 10}, {"adaptive", {{"target_rse", 1e-9}, {"max_ms", 1e-6}}}})});
  const auto r = run_request(req);
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& cases = r.answer["cases"];
  // The fake's times cycle 1.00/1.01/1.02 x: rse ~ 0.0093 / sqrt(n), so ~90 samples are needed.
  const auto& a = cases[0]["timing"];
  CHECK_MSG(a["adaptive"]["converged"] == true, a["adaptive"].dump());
  CHECK(a["adaptive"]["samples"].get<std::size_t>() > 10);
  CHECK(a["adaptive"]["samples"] == a["times_ms"].size());
  CHECK(a["adaptive"]["rse"].get<double>() <= 0.001 && a["adaptive"]["rse"].get<double>() > 0);
  CHECK(a["iterations"] == 10);
  const auto& cap = cases[1]["timing"];
  CHECK_MSG(cap["adaptive"]["converged"] == false && cap["adaptive"]["samples"] == 42,
            cap["adaptive"].dump());
  CHECK(cap["times_ms"].size() == 42);
  const auto& wall = cases[2]["timing"];
  CHECK_MSG(wall["adaptive"]["converged"] == false && wall["adaptive"]["samples"] == 10,
            wall["adaptive"].dump());
}

TEST_CASE(
    "support module problems: blocking without one, unreadable, not loadable, serve goes on") {
  auto req = request("axpy_kernel", {axpy_case("s", {{"iterations", 2}, {"blocking", true}})});
  auto r = run_request(req);
  CHECK(r.rc == 2 && r.answer["error"]["kind"] == "bad_request");
  CHECK(test::contains(r.answer["error"]["message"], "cases[0].timing.blocking: needs"));

  req["support_module"] = path("no_such_support.cubin");
  r = run_request(req);
  CHECK(r.rc == 4 && r.answer["error"]["kind"] == "io_error");

  spit(path("bad_support.cubin"), "garbage");
  req["support_module"] = path("bad_support.cubin");
  auto good = req;
  good["support_module"] = support_module();
  r = run({"serve"}, req.dump() + "\n" + good.dump() + "\n");
  CHECK_MSG(r.rc == 0 && r.lines.size() == 2, r.out + r.err);
  if (r.lines.size() == 2) {
    CHECK(r.lines[0]["error"]["kind"] == "bad_request");
    CHECK(test::contains(r.lines[0]["error"]["message"], "support_module: "));
    CHECK(r.lines[1]["status"] == "ok" && r.lines[1]["cases"][0]["timing"]["blocking"] == true);
  }
}

json baseline_request(const std::string& library_path, unsigned m, unsigned n, unsigned k) {
  return {{"protocol", 2},
          {"op", "baseline"},
          {"device", 0},
          {"library", "cublas"},
          {"library_path", library_path},
          {"routine", "sgemm"},
          {"m", m},
          {"n", n},
          {"k", k},
          {"flush_l2", true},
          {"timing", {{"warmup", 1}, {"iterations", 3}}}};
}

TEST_CASE("baseline: a missing library is library_unavailable and serve goes on") {
  const auto missing = baseline_request(path("no/libcublas.so.13"), 8, 8, 8).dump();
  const auto good = request("copy_kernel", {copy_case("c", 8, "bl_serve")}).dump();
  const auto r = run({"serve"}, missing + "\n" + good + "\n");
  CHECK_MSG(r.rc == 0 && r.lines.size() == 2, r.out + r.err);
  if (r.lines.size() == 2) {
    const auto& a = r.lines[0];
    CHECK(a["status"] == "error" && a["op"] == "baseline");
    CHECK(a["error"]["kind"] == "library_unavailable");
    CHECK(test::contains(a["error"]["message"], "no/libcublas.so.13 could not be loaded"));
    CHECK(a["timing"].is_null());
    CHECK(r.lines[1]["status"] == "ok");
  }
  // A library without the cuBLAS entry points: also unavailable.
  const auto r2 = run({"serve"}, baseline_request(g_fake, 8, 8, 8).dump() + "\n");
  CHECK(r2.rc == 0 && r2.answer["error"]["kind"] == "library_unavailable");
  CHECK(test::contains(r2.answer["error"]["message"], "lacks cublasCreate_v2"));
}

TEST_CASE("baseline: sgemm through the column-major call, timed like a kernel") {
  const auto r = run_request(baseline_request(g_fake_cublas, 48, 40, 24), {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& a = r.answer;
  CHECK_MSG(a["status"] == "ok" && a["error"].is_null(), a.dump());
  CHECK(a["protocol"] == 2 && a["op"] == "baseline" && a["library"] == "cublas" &&
        a["routine"] == "sgemm");
  CHECK(a["library_version"] == 130100);
  CHECK(a["m"] == 48 && a["n"] == 40 && a["k"] == 24 && a["flops"] == 2.0 * 48 * 40 * 24);
  CHECK(a["math_mode"] == "default");
  CHECK(a["result_ok"] == true);  // every C element is k * 0.5 * 0.25 = 3
  CHECK(!a.contains("cases") && !a.contains("function"));
  const auto& t = a["timing"];
  CHECK(t["times_ms"].size() == 3 && t["flush_l2"] == true && t["mode"] == "events");
}

TEST_CASE("support module: one built from compare.cu alone serves compare requests only") {
  spit(path("compare_only.fake"), "FAKE-MODULE NO-TIMING-KERNELS\n");
  auto req = request_v2("copy_kernel", {compare_case("co", {1, 2}, {1, 2})});
  req["support_module"] = path("compare_only.fake");
  auto r = run_request(req);
  CHECK_MSG(r.rc == 0 && r.answer["cases"][0]["compares"][0]["mismatches"] == 0, r.out + r.err);
  // Timing measures launch_overhead_ms with ko_empty; blocking also needs ko_spin.
  req["cases"][0]["timing"] = {{"iterations", 2}};
  r = run_request(req);
  CHECK(r.rc == 2 && r.answer["error"]["kind"] == "bad_request");
  CHECK_MSG(test::contains(r.answer["error"]["message"], "lacks kernel(s) ko_empty:"),
            r.answer.dump());
  req["cases"][0]["timing"]["blocking"] = true;
  r = run_request(req);
  CHECK_MSG(test::contains(r.answer["error"]["message"], "lacks kernel(s) ko_spin, ko_empty:"),
            r.answer.dump());
  CHECK(r.answer["cases"].empty());
}

TEST_CASE("serve: a request without support_module gets no launch overhead after one with it") {
  auto with = request("axpy_kernel", {axpy_case("ov", {{"iterations", 3}})});
  with["support_module"] = support_module();
  const auto without = request("axpy_kernel", {axpy_case("ov2", {{"iterations", 3}})});
  const auto r = run({"serve"}, with.dump() + "\n" + without.dump() + "\n" + with.dump() + "\n");
  CHECK_MSG(r.rc == 0 && r.lines.size() == 3, r.out + r.err);
  if (r.lines.size() != 3) return;
  CHECK(r.lines[0]["cases"][0]["timing"]["launch_overhead_ms"].is_number());
  CHECK(r.lines[1]["cases"][0]["timing"]["launch_overhead_ms"].is_null());
  CHECK(r.lines[2]["cases"][0]["timing"]["launch_overhead_ms"].is_number());
}

TEST_CASE("timed inputs after graph and blocking timing: one events-style checked launch") {
  for (const std::string entry : {"copy_kernel", "replay_kernel"}) {
    auto c = compare_case("tg_" + entry, {1, 2, 3, 4}, {1, 2, 3, 4},
                          {{"warmup", 1},
                           {"iterations", 4},
                           {"mode", "graph"},
                           {"graph_batch", 2},
                           {"blocking", true}});
    spit(path("tg_in.bin"), raw_of(std::vector<float>{5, 6, 7, 8}));
    spit(path("tg_expected.bin"), raw_of(std::vector<double>{5, 6, 7, 8}));
    c["args"][0]["timed_input"] = path("tg_in.bin");
    c["args"][1]["timed_expected"] = path("tg_expected.bin");
    const auto r = run_request(request_v2(entry, {c}), {"FAKE_CUDA_STATS=1"});
    CHECK_MSG(r.rc == 0, r.out + r.err);
    const auto& res = r.answer["cases"][0];
    const auto& t = res["timing"];
    CHECK(t["mode"] == "graph" && t["blocking"] == true && t["times_ms"].size() == 4);
    // The check launch is timed on its own and kept out of the samples.
    CHECK_MSG(near_ms(t["check_launch_ms"], 0.5, 0.02), t.dump());
    CHECK(t["launch_overhead_ms"].is_number());
    CHECK_MSG(res["compares"].size() == 2, res.dump());
    if (res["compares"].size() != 2) continue;
    CHECK(res["compares"][1]["launch"] == "timed");
    CHECK(res["compares"][1]["mismatches"] == (entry == "replay_kernel" ? 4 : 0));
    // Kernel: 1 validation + 1 warm-up + 1 upload replay and 4 measured replays of 2 + 1 check.
    const auto st = stats_of(r);
    CHECK_MSG(st.graph_launches == 2 * 5 && st.spins == 2, r.err);
  }
}

TEST_CASE("flush_l2: by reading (ko_flush_l2) with a support module, by a memset without one") {
  // The fake's L2 is 1 MiB: the scratch is 2 MiB, read before each of 2 warm-up + 5 measured.
  auto req = request("axpy_kernel", {axpy_case("fr", {{"warmup", 2}, {"iterations", 5}})});
  req["support_module"] = support_module();
  auto r = run_request(req, {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0 && r.answer["cases"][0]["timing"]["flush_l2"] == true, r.out + r.err);
  auto st = stats_of(r);
  CHECK_MSG(st.flush_reads == 7 && st.flush_bytes == 7ul * (2u << 20), r.err);
  req.erase("support_module");
  r = run_request(req, {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0 && r.answer["cases"][0]["timing"]["times_ms"].size() == 5, r.out + r.err);
  CHECK_MSG(stats_of(r).flush_reads == 0, r.err);
  req["flush_l2"] = false;
  req["support_module"] = support_module();
  r = run_request(req, {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0 && stats_of(r).flush_reads == 0, r.out + r.err);
}
