// Runs the real kernelopt-harness executable against the fake driver (fake_libcuda.cpp) and
// checks the answers, exit codes and output files of PROTOCOL.md.
//
// usage: test_end_to_end HARNESS FAKE_LIBCUDA FAKE_LIBCUBLAS FAKE_LIBCUDA_OLD

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "e2e.hpp"
#include "test_util.hpp"

using namespace e2e;

TEST_CASE("--version") {
  const auto r = run({"--version"});
  CHECK(r.rc == 0);
  CHECK(r.answer ==
        json({{"harness", "0.1.0"},
              {"protocol", 2},
              {"features",
               {"support_module",   "input_cache",      "device_compare",  "determinism",
                "timed_inputs",     "blocking",         "graph",           "adaptive",
                "baseline_cublas",  "fresh_inputs",     "timed_check",     "confirm_launch",
                "checked_dump",     "fresh_launches",   "poison_subset",   "input_draw",
                "expected_dtype",   "readonly_staging", "device_expected", "progress",
                "checked_expected", "structured_draw",  "choice_draw",     "tensor_maps"}}}));
}

TEST_CASE("usage errors exit 2 with a JSON answer and usage on stderr") {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {}, {"frobnicate"}, {"run"}, {"run", "a", "b"}, {"--device-info", "--device", "x"}}) {
    const auto r = run(args);
    CHECK(r.rc == 2);
    CHECK(r.answer["status"] == "error" && r.answer["error"]["kind"] == "bad_request");
    CHECK(test::contains(r.err, "usage:"));
  }
}

TEST_CASE("--device-info from the driver") {
  const auto r = run({"--device-info"});
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& j = r.answer;
  CHECK(j["name"] == "Fake GPU");
  CHECK(j["arch"] == "sm_90");
  CHECK(j["compute_capability"] == json({9, 0}));
  CHECK(j["device_count"] == 1);
  CHECK(j["uuid"] == "00112233-4455-6677-8899-aabbccddeeff");
  CHECK(j["pci_bus_id"] == "00000000:01:00.0");
  CHECK(j["clock_khz"].is_null());  // the fake retires this attribute
  CHECK(j["driver_version"] == 13000 && j["driver_version_str"] == "13.0");
  CHECK(j["l2_cache_bytes"] == 1 << 20);
  CHECK(j["peak_memory_bandwidth_bytes_per_s"].get<double>() == 2.0 * 2619000e3 * 640);
  CHECK(j["ecc_enabled"] == true && j["concurrent_kernels"] == true);
  CHECK(j["max_block_dim"].size() == 3 && j["max_grid_dim"].size() == 3);
  for (const char* key :
       {"ordinal", "sm_count", "memory_clock_khz", "memory_bus_width_bits", "total_memory_bytes",
        "persisting_l2_max_bytes", "shared_memory_per_sm_bytes", "shared_memory_per_block_bytes",
        "shared_memory_per_block_optin_bytes", "registers_per_sm", "registers_per_block",
        "max_threads_per_block", "max_threads_per_sm", "max_blocks_per_sm", "warp_size",
        "async_engine_count"}) {
    CHECK_MSG(j.contains(key), key);
  }
}

TEST_CASE("--device-info: no driver, no device, cuInit failure all exit 3") {
  auto r = run({"--device-info"}, "", {"KERNELOPT_LIBCUDA=/nonexistent/libcuda.so.1"});
  CHECK(r.rc == 3);
  CHECK(r.answer["error"]["kind"] == "driver_unavailable");
  CHECK(test::contains(r.answer["error"]["message"], "install the NVIDIA driver"));
  r = run({"--device-info", "--device", "1"});
  CHECK(r.rc == 3);
  CHECK(test::contains(r.answer["error"]["message"], "device 1 does not exist"));
  r = run({"--device-info"}, "", {"FAKE_CUDA_INIT_ERROR=100"});
  CHECK(r.rc == 3);
  CHECK(r.answer["error"]["cuda_error"] == "CUDA_ERROR_NO_DEVICE");
  CHECK(r.answer["error"]["call"] == "cuInit");
}

TEST_CASE("a clean case: outputs written, guards intact, timed") {
  const auto req =
      request("copy_kernel", {copy_case("c", 1000, "clean", {{"warmup", 2}, {"iterations", 5}})});
  const auto r = run_request(req);
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& a = r.answer;
  CHECK(a["protocol"] == 2 && a["status"] == "ok" && a["error"].is_null());
  CHECK(!a.contains("input_cache"));  // only when the request asks for the cache
  CHECK(!a["cases"][0].contains("compares") && !a["cases"][0].contains("determinism"));
  CHECK(a["device"] == json({{"ordinal", 0}, {"name", "Fake GPU"}, {"arch", "sm_90"}}));
  CHECK(a["module_load_ms"].is_number());
  CHECK(a["function"]["num_regs"] == 32 && a["function"]["binary_version"] == 90);
  CHECK(a["function"].contains("static_shared_bytes") && a["function"].contains("local_bytes") &&
        a["function"].contains("const_bytes") && a["function"].contains("max_threads_per_block"));
  CHECK(a["cases"].size() == 1);
  const auto& c = a["cases"][0];
  CHECK(c["name"] == "c" && c["status"] == "ok" && c["error"].is_null());
  CHECK(c["guard_violations"].empty() && c["modified_inputs"].empty());
  CHECK(c["occupancy_blocks_per_sm"] == 16);
  CHECK(slurp(path("clean_out.bin")) == pattern(1000, 3));
  const auto& t = c["timing"];
  CHECK(t["warmup"] == 2 && t["iterations"] == 5 && t["flush_l2"] == true);
  CHECK(t["times_ms"].size() == 5);
  for (const auto& ms : t["times_ms"]) {
    const double v = ms.get<double>();
    // The fake's launches take 0.5, 0.505 or 0.51 ms, and floats print short.
    CHECK_MSG(v == 0.5 || v == 0.505 || v == 0.51, ms.dump());
  }
  CHECK(t["min_ms"].get<double>() <= t["median_ms"].get<double>());
  CHECK(t["median_ms"].get<double>() <= t["max_ms"].get<double>());
  CHECK(t["stdev_ms"].get<double>() > 0);
  // Protocol 2 fields of an old request: events mode, nothing else asked for.
  CHECK(t["q1_ms"].get<double>() <= t["median_ms"].get<double>());
  CHECK(t["median_ms"].get<double>() <= t["q3_ms"].get<double>());
  CHECK(t["mode"] == "events" && t["blocking"] == false && t["graph_batch"].is_null());
  CHECK(t["adaptive"].is_null() && t["launch_overhead_ms"].is_null());
  CHECK(t["blocking_timed_out"] == false);
  // Where the time went: the request's steps and the case's, each a non-negative wall time.
  const auto keys = [](const json& steps) {
    std::vector<std::string> out;
    for (const auto& [k, v] : steps.items()) {
      CHECK_MSG(v.is_number() && v.get<double>() >= 0, k);
      out.push_back(k);
    }
    return out;
  };
  const std::vector<std::string> request_steps{"cases", "module_load", "prepare", "read_files",
                                               "teardown"};
  const std::vector<std::string> case_steps{
      "reference_checks",  "setup",        "timing", "validation_checks", "validation_compare",
      "validation_launch", "write_outputs"};
  CHECK(keys(a["steps_ms"]) == request_steps);
  CHECK(keys(c["steps_ms"]) == case_steps);
  // the request's "cases" step holds every step of its case
  double in_case = 0;
  for (const auto& [k, v] : c["steps_ms"].items()) in_case += v.get<double>();
  CHECK(a["steps_ms"]["cases"].get<double>() >= in_case);
  // Exactly one line on stdout.
  CHECK(r.lines.size() == 1);
}

TEST_CASE(
    "a case without buffers: the evaluator's warm-up launch of the support module's ko_empty") {
  auto req =
      request("ko_empty", {{{"name", "warm-up"}, {"args", json::array()}, {"launch", launch(1)}}});
  req["module"] = support_module();
  req["support_module"] = support_module();
  req["flush_l2"] = false;
  const auto r = run_request(req, {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& c = r.answer["cases"][0];
  CHECK_MSG(c["status"] == "ok" && c["error"].is_null() && c["guard_violations"].empty(), c.dump());
  CHECK(stats_of(r).launches == 1);
}

TEST_CASE("an old request launches exactly what it did before: validation, warm-up, measured") {
  const auto r = run_request(
      request("copy_kernel", {copy_case("c", 64, "old", {{"warmup", 2}, {"iterations", 5}})}),
      {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto st = stats_of(r);
  CHECK_MSG(st.launches == 1 + 2 + 5 && st.spins == 0 && st.graph_launches == 0, r.err);
  CHECK(r.lines.size() == 1);
}

TEST_CASE("out-of-bounds writes are reported per side, slack included, output still written") {
  const auto r =
      run_request(request("oob_kernel", {copy_case("c", 1000, "oob", {{"iterations", 3}})}));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& c = r.answer["cases"][0];
  CHECK(c["status"] == "out_of_bounds_write");
  CHECK(c["timing"].is_null());
  const json expected = json::array({
      {{"buffer", "out"}, {"side", "before"}, {"first_offset", 1024 - 3}, {"bytes_changed", 3}},
      {{"buffer", "out"}, {"side", "after"}, {"first_offset", 0}, {"bytes_changed", 1}},
  });
  CHECK_MSG(c["guard_violations"] == expected, c["guard_violations"].dump());
  CHECK(slurp(path("oob_out.bin")) == pattern(1000, 3));
}

TEST_CASE("modified inputs are reported") {
  const auto r = run_request(request("clobber_kernel", {copy_case("c", 64, "clobber")}));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& c = r.answer["cases"][0];
  CHECK(c["status"] == "input_modified");
  CHECK(c["modified_inputs"] ==
        json::array({{{"buffer", "in"}, {"first_offset", 3}, {"bytes_changed", 2}}}));
}

TEST_CASE("a refused launch is invalid_launch and the next case still runs") {
  const auto r = run_request(request(
      "copy_kernel", {copy_case("too_big", 64, "big", nullptr, 2048), copy_case("fine", 64, "fine"),
                      copy_case("smem_ok", 64, "smem1", nullptr, 128, 100000),
                      copy_case("smem_bad", 64, "smem2", nullptr, 128, 300000)}));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& cases = r.answer["cases"];
  CHECK(cases.size() == 4);
  CHECK(cases[0]["status"] == "invalid_launch");
  CHECK(cases[0]["error"]["call"] == "cuLaunchKernel");
  CHECK(cases[0]["error"]["cuda_error"] == "CUDA_ERROR_INVALID_VALUE");
  CHECK(cases[0]["error"]["code"] == 1);
  CHECK(cases[0]["error"]["message"] == "invalid argument");
  CHECK(cases[0]["error"]["file"] == "case_runner.cpp" && cases[0]["error"]["line"].is_number());
  CHECK(cases[0]["occupancy_blocks_per_sm"].is_null());
  CHECK(cases[1]["status"] == "ok");
  CHECK(cases[2]["status"] == "ok");
  CHECK(cases[3]["status"] == "invalid_launch");
  CHECK(cases[3]["error"]["call"] == "cuFuncSetAttribute");
}

TEST_CASE("an allocation that does not fit is invalid_launch, not fatal") {
  auto c = copy_case("huge", 64, "huge");
  c["args"][1]["bytes"] = 1ull << 40;
  const auto r = run_request(request("copy_kernel", {c, copy_case("after", 64, "after")}),
                             {"FAKE_CUDA_NO_PARAM_INFO=1"});
  CHECK_MSG(r.rc == 0, r.out + r.err);
  CHECK(r.answer["cases"][0]["status"] == "invalid_launch");
  CHECK(r.answer["cases"][0]["error"]["call"] == "cuMemAlloc");
  CHECK(r.answer["cases"][0]["error"]["cuda_error"] == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(r.answer["cases"][1]["status"] == "ok");
}

TEST_CASE("a fault is runtime_error: later cases are absent, exit 5") {
  const auto module = path("module.fake");
  auto req = request("fault_kernel", {copy_case("a", 64, "f1"), copy_case("b", 64, "f2")});
  const auto r = run_request(req);
  CHECK_MSG(r.rc == 5, r.out + r.err);
  CHECK(r.answer["cases"].size() == 1);
  const auto& c = r.answer["cases"][0];
  CHECK(c["status"] == "runtime_error");
  CHECK(c["error"]["cuda_error"] == "CUDA_ERROR_ILLEGAL_ADDRESS");
  CHECK(c["error"]["call"] == "cuStreamSynchronize");
  // the steps up to the fault, and the failed one; the request's own steps end with the case
  CHECK(c["steps_ms"].contains("setup") && c["steps_ms"].contains("failed"));
  CHECK(!c["steps_ms"].contains("timing"));
  CHECK(r.answer["steps_ms"].contains("teardown"));
}

TEST_CASE("progress: a line before each case on the answer stream, then the answer") {
  auto req = request("copy_kernel", {copy_case("a", 64, "p1"), copy_case("b", 64, "p2")});
  req["progress"] = true;
  const auto r = run_request(req);
  CHECK_MSG(r.rc == 0, r.out + r.err);
  CHECK_MSG(r.lines.size() == 3, r.out);
  CHECK(r.lines[0] == json({{"progress", {{"case", "a"}, {"index", 0}}}}));
  CHECK(r.lines[1] == json({{"progress", {{"case", "b"}, {"index", 1}}}}));
  CHECK(r.lines[2]["cases"].size() == 2 && r.lines[2]["cases"][1]["status"] == "ok");
  // without it, the answer alone, as before
  req.erase("progress");
  const auto plain = run_request(req);
  CHECK_MSG(plain.lines.size() == 1 && plain.answer["cases"].size() == 2, plain.out);
  // a fault ends the request: the faulting case's line is the last before the answer
  auto fault = request("fault_kernel", {copy_case("a", 64, "p3"), copy_case("b", 64, "p4")});
  fault["progress"] = true;
  const auto f = run_request(fault);
  CHECK_MSG(f.rc == 5 && f.lines.size() == 2, f.out + f.err);
  CHECK(f.lines[0]["progress"]["case"] == "a");
  CHECK(f.lines[1]["cases"].size() == 1 && f.lines[1]["cases"][0]["status"] == "runtime_error");
}

TEST_CASE("inout buffers and scalars reach the kernel") {
  const std::vector<float> x{1, 2, 3, 4}, y{10, 10, 10, 10};
  spit(path("x.bin"), std::string(reinterpret_cast<const char*>(x.data()), 16));
  spit(path("y.bin"), std::string(reinterpret_cast<const char*>(y.data()), 16));
  json c = {{"name", "axpy"},
            {"args",
             {scalar("a", "float32", raw_hex(2.0f)), buffer("x", "in", 16, path("x.bin")),
              buffer("y", "inout", 16, path("y.bin"), path("y_out.bin")),
              scalar("n", "uint32", raw_hex<std::uint32_t>(4))}},
            {"launch", launch()},
            {"timing", {{"warmup", 1}, {"iterations", 4}}}};
  const auto r = run_request(request("axpy_kernel", {c}));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  CHECK(r.answer["cases"][0]["status"] == "ok");
  const auto out = slurp(path("y_out.bin"));
  std::vector<float> got(4);
  CHECK(out.size() == 16);
  if (out.size() == 16) std::memcpy(got.data(), out.data(), 16);
  CHECK(got == (std::vector<float>{12, 14, 16, 18}));
}

TEST_CASE("out buffers start as poison or zero") {
  auto make = [&](const std::string& name, const std::string& init) {
    json out = buffer("out", "out", 8, "", path(name + ".bin"));
    out["init"] = init;
    return json{{"name", name},
                {"args", {out, scalar("n", "uint32", raw_hex<std::uint32_t>(2))}},
                {"launch", launch()},
                {"timing", {{"iterations", 2}}}};
  };
  const auto r =
      run_request(request("count_kernel", {make("zero", "zero"), make("poison", "poison")}));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  CHECK(slurp(path("zero.bin")) == bytes_of({1, 0, 0, 0, 1, 0, 0, 0}));
  CHECK(slurp(path("poison.bin")) == bytes_of({0, 0, 0, 0, 0, 0, 0, 0}));  // 0xFFFFFFFF + 1
}

TEST_CASE("empty buffers get a valid pointer and an empty output file") {
  json c = copy_case("empty", 0, "empty");
  const auto r = run_request(request("copy_kernel", {c}, 0));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  CHECK(r.answer["cases"][0]["status"] == "ok");
  struct stat st{};
  CHECK(stat(path("empty_out.bin").c_str(), &st) == 0 && st.st_size == 0);
}

TEST_CASE("arguments that do not match the kernel's parameters are bad requests") {
  auto c = copy_case("c", 8, "mismatch");
  c["args"].erase(2);
  auto r = run_request(request("copy_kernel", {c}));
  CHECK(r.rc == 2);
  CHECK_MSG(
      test::contains(r.answer["error"]["message"],
                     "cases[0].args: kernel \"copy_kernel\" takes 3 parameter(s) but 2 are given"),
      r.answer.dump());
  c = copy_case("c", 8, "mismatch");
  c["args"][2] = scalar("n", "uint32", "08000000");
  r = run_request(request("copy_kernel", {c}));
  CHECK(r.rc == 2);
  CHECK_MSG(test::contains(r.answer["error"]["message"], "cases[0].args[2]: kernel parameter 2"),
            r.answer.dump());
}

TEST_CASE("module_load and entry_not_found are answers: exit 0, status error") {
  auto req = request("copy_kernel", {copy_case("c", 8, "ml")});
  spit(path("bad.module"), "not a module");
  req["module"] = path("bad.module");
  auto r = run_request(req);
  CHECK(r.rc == 0);
  CHECK(r.answer["status"] == "error");
  CHECK(r.answer["error"]["kind"] == "module_load");
  CHECK(r.answer["error"]["cuda_error"] == "CUDA_ERROR_INVALID_IMAGE");
  CHECK(r.answer["error"]["log"] == "fake ptxas: not a fake module");
  CHECK(r.answer["cases"].empty());

  r = run_request(request("no_such_kernel", {copy_case("c", 8, "enf")}));
  CHECK(r.rc == 0);
  CHECK(r.answer["error"]["kind"] == "entry_not_found");
  CHECK(test::contains(r.answer["error"]["message"], "extern \"C\""));
}

TEST_CASE("file problems: missing module or input exit 4, wrong input size exits 2") {
  auto req = request("copy_kernel", {copy_case("c", 8, "io")});
  req["module"] = path("missing.module");
  auto r = run_request(req);
  CHECK(r.rc == 4 && r.answer["error"]["kind"] == "io_error");
  CHECK(test::contains(r.answer["error"]["message"], "missing.module"));

  req = request("copy_kernel", {copy_case("c", 8, "io")});
  req["cases"][0]["args"][0]["input"] = path("missing.bin");
  r = run_request(req);
  CHECK(r.rc == 4);
  CHECK(test::contains(r.answer["error"]["message"], "buffer \"in\""));

  req = request("copy_kernel", {copy_case("c", 8, "io")});
  req["cases"][0]["args"][0]["bytes"] = 9;
  req["cases"][0]["args"][1]["bytes"] = 9;
  r = run_request(req);
  CHECK(r.rc == 2 && r.answer["error"]["kind"] == "bad_request");
  CHECK_MSG(test::contains(r.answer["error"]["message"],
                           "cases[0].args[0].input: buffer \"in\" is 9 bytes but"),
            r.answer.dump());

  req = request("copy_kernel", {copy_case("ok", 8, "io"), copy_case("c", 8, "io2")});
  req["cases"][1]["args"][1]["output"] = path("no/such/dir/out.bin");
  r = run_request(req);
  CHECK(r.rc == 4 && r.answer["error"]["kind"] == "io_error");
  CHECK(r.answer["cases"].size() == 1);  // the finished case is kept
}

TEST_CASE("malformed requests exit 2 naming the field, even without a driver") {
  auto req = request("copy_kernel", {copy_case("c", 8, "bad")});
  req["cases"][0]["args"][1]["bytes"] = -5;
  const auto r = run_request(req, {"KERNELOPT_LIBCUDA=/nonexistent/libcuda.so.1"});
  CHECK(r.rc == 2);
  CHECK(r.answer["error"]["kind"] == "bad_request");
  CHECK(test::contains(r.answer["error"]["message"],
                       "cases[0].args[1].bytes: must be a non-negative integer"));
  spit(path("garbage.json"), "{not json");
  const auto g = run({"run", path("garbage.json")});
  CHECK(g.rc == 2 && g.answer["error"]["kind"] == "bad_request");
}

TEST_CASE("a valid request without a driver exits 3") {
  const auto r = run_request(request("copy_kernel", {copy_case("c", 8, "nodrv")}),
                             {"KERNELOPT_LIBCUDA=/nonexistent/libcuda.so.1"});
  CHECK(r.rc == 3);
  CHECK(r.answer["status"] == "error" && r.answer["error"]["kind"] == "driver_unavailable");
}

TEST_CASE("run - reads the request from stdin") {
  const auto r = run({"run", "-"}, request("copy_kernel", {copy_case("c", 8, "stdin")}).dump());
  CHECK_MSG(r.rc == 0, r.out + r.err);
  CHECK(r.answer["cases"][0]["status"] == "ok");
}

TEST_CASE("serve: one answer per line, bad lines answered, fatal ends with 5") {
  const auto good = request("copy_kernel", {copy_case("c", 8, "serve")}).dump();
  const auto fault = request("fault_kernel", {copy_case("c", 8, "serve_f")}).dump();
  auto r = run({"serve"}, good + "\n{oops\n\n" + good + "\n");
  CHECK_MSG(r.rc == 0, r.out + r.err);
  CHECK(r.lines.size() == 3);
  if (r.lines.size() == 3) {
    CHECK(r.lines[0]["status"] == "ok");
    CHECK(r.lines[1]["error"]["kind"] == "bad_request");
    CHECK(r.lines[2]["cases"][0]["status"] == "ok");
  }
  r = run({"serve"}, good + "\n" + fault + "\n" + good + "\n");
  CHECK(r.rc == 5);
  CHECK(r.lines.size() == 2);
  r = run({"serve"}, good + "\n", {"KERNELOPT_LIBCUDA=/nonexistent/libcuda.so.1"});
  CHECK(r.rc == 3 && r.lines.size() == 1);
}

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr,
                 "usage: test_end_to_end HARNESS FAKE_LIBCUDA FAKE_LIBCUBLAS FAKE_LIBCUDA_OLD\n");
    return 2;
  }
  g_harness = argv[1];
  g_fake = argv[2];
  g_fake_cublas = argv[3];
  g_fake_old = argv[4];
  char dir[] = "/tmp/kernelopt-harness-test-XXXXXX";
  if (mkdtemp(dir) == nullptr) return 2;
  g_dir = dir;
  const int rc = test::run_all();
  if (rc == 0) {
    std::error_code ignored;
    std::filesystem::remove_all(g_dir, ignored);
  } else {
    std::fprintf(stderr, "files kept in %s\n", g_dir.c_str());
  }
  return rc;
}
