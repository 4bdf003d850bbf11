// Runs the real kernelopt-harness executable against the fake driver (fake_libcuda.cpp) and
// checks the answers, exit codes and output files of PROTOCOL.md.
//
// usage: test_end_to_end HARNESS FAKE_LIBCUDA FAKE_LIBCUBLAS
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.hpp"

using nlohmann::json;

namespace {

std::string g_harness;
std::string g_fake;
std::string g_fake_cublas;
std::string g_dir;

struct Run {
  int rc = -1;
  std::string out;
  std::string err;
  json answer;  // the first stdout line, parsed
  std::vector<json> lines;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spit(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << data;
}

std::string path(const std::string& name) { return g_dir + "/" + name; }

// env: extra "NAME=value" entries; KERNELOPT_LIBCUDA defaults to the fake.
Run run(const std::vector<std::string>& args, const std::string& stdin_text = "",
        std::vector<std::string> env = {}) {
  static int counter = 0;
  const std::string base = path("proc" + std::to_string(counter++));
  spit(base + ".in", stdin_text);
  bool has_lib = false;
  for (const auto& e : env) has_lib |= e.rfind("KERNELOPT_LIBCUDA=", 0) == 0;
  if (!has_lib) env.push_back("KERNELOPT_LIBCUDA=" + g_fake);

  const pid_t pid = fork();
  if (pid == 0) {
    const int in = open((base + ".in").c_str(), O_RDONLY);
    const int out = open((base + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open((base + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> argv{const_cast<char*>(g_harness.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(g_harness.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  Run r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    try {
      r.lines.push_back(json::parse(line));
    } catch (const json::exception& e) {
      std::fprintf(stderr, "  stdout line is not JSON: %s\n", line.c_str());
      ++test::failures();
    }
  }
  if (!r.lines.empty()) r.answer = r.lines.front();
  return r;
}

Run run_request(const json& req, std::vector<std::string> env = {}) {
  static int counter = 0;
  const std::string file = path("request" + std::to_string(counter++) + ".json");
  spit(file, req.dump(2));
  return run({"run", file}, "", std::move(env));
}

std::string bytes_of(std::initializer_list<int> values) {
  std::string s;
  for (int v : values) s.push_back(static_cast<char>(v));
  return s;
}

std::string pattern(std::size_t n, int seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7 + seed) & 0xff);
  return s;
}

template <typename T>
std::string raw_hex(T value) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &value, sizeof b);
  std::string s;
  char h[3];
  for (unsigned char c : b) {
    std::snprintf(h, sizeof h, "%02x", c);
    s += h;
  }
  return s;
}

json buffer(const std::string& name, const std::string& role, std::size_t bytes,
            const std::string& input = "", const std::string& output = "") {
  json b = {{"kind", "buffer"}, {"name", name}, {"role", role}, {"bytes", bytes}};
  if (!input.empty()) b["input"] = input;
  if (!output.empty()) b["output"] = output;
  return b;
}

json scalar(const std::string& name, const std::string& dtype, const std::string& raw) {
  return {{"kind", "scalar"}, {"name", name}, {"dtype", dtype}, {"raw", raw}};
}

json launch(unsigned block = 128, unsigned shared = 0) {
  return {{"grid", {4, 1, 1}}, {"block", {block, 1, 1}}, {"shared_bytes", shared}};
}

// A copy-style case: in -> out, n bytes, inputs written to disk.
json copy_case(const std::string& name, std::size_t n, const std::string& tag,
               json timing = nullptr, unsigned block = 128, unsigned shared = 0) {
  const auto in = path(tag + "_in.bin");
  spit(in, pattern(n, 3));
  json c = {{"name", name},
            {"args",
             {buffer("in", "in", n, in), buffer("out", "out", n, "", path(tag + "_out.bin")),
              scalar("n", "uint64", raw_hex<std::uint64_t>(n))}},
            {"launch", launch(block, shared)}};
  if (!timing.is_null()) c["timing"] = timing;
  return c;
}

json request(const std::string& entry, json cases, std::uint64_t guard = 1024) {
  const auto module = path("module.fake");
  spit(module, "FAKE-MODULE v1\n");
  return {{"protocol", 1},        {"device", 0},      {"module", module},         {"entry", entry},
          {"guard_bytes", guard}, {"flush_l2", true}, {"cases", std::move(cases)}};
}

// The fake's counters, printed at exit with FAKE_CUDA_STATS=1.
struct Stats {
  unsigned long launches = 0, spins = 0, graph_launches = 0, graph_kernels = 0, fills = 0,
                ref_compares = 0;
};
Stats stats_of(const Run& r) {
  Stats s;
  const auto at = r.err.find("fake libcuda stats:");
  if (at == std::string::npos) {
    std::fprintf(stderr, "  no fake stats in stderr: %s\n", r.err.c_str());
    ++test::failures();
    return s;
  }
  std::sscanf(r.err.c_str() + at,
              "fake libcuda stats: launches=%lu spins=%lu graph_launches=%lu graph_kernels=%lu "
              "fills=%lu ref_compares=%lu",
              &s.launches, &s.spins, &s.graph_launches, &s.graph_kernels, &s.fills,
              &s.ref_compares);
  return s;
}

}  // namespace

TEST_CASE("--version") {
  const auto r = run({"--version"});
  CHECK(r.rc == 0);
  CHECK(r.answer ==
        json({{"harness", "0.1.0"},
              {"protocol", 2},
              {"features",
               {"support_module", "input_cache", "device_compare", "determinism", "timed_inputs",
                "blocking", "graph", "adaptive", "baseline_cublas", "fresh_inputs", "timed_check",
                "confirm_launch", "checked_dump", "fresh_launches"}}}));
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
  // Exactly one line on stdout.
  CHECK(r.lines.size() == 1);
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

// ---------------------------------------------------------------------------------------------
// Protocol 2: the support module, device compare, determinism, timed inputs, the input cache
// ---------------------------------------------------------------------------------------------

namespace {

template <typename T>
std::string raw_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::string support_module() {
  const auto file = path("support.fake");
  spit(file, "FAKE-MODULE support\n");
  return file;
}

// copy_kernel over float32 elements: in -> out, compared with `expected` (float64 values).
json compare_case(const std::string& name, const std::vector<float>& in,
                  const std::vector<double>& expected, json timing = nullptr) {
  const std::size_t n = in.size() * 4;
  spit(path(name + "_in.bin"), raw_of(in));
  spit(path(name + "_expected.bin"), raw_of(expected));
  json out = buffer("out", "out", n, "", path(name + "_out.bin"));
  out["dtype"] = "float32";
  out["expected"] = path(name + "_expected.bin");
  out["compare"] = {{"abs_tol", 1e-6}, {"rtol", 1e-3}, {"rel_floor", 1.0}};
  json c = {{"name", name},
            {"args",
             {buffer("in", "in", n, path(name + "_in.bin")), out,
              scalar("n", "uint64", raw_hex<std::uint64_t>(n))}},
            {"launch", launch()}};
  if (!timing.is_null()) c["timing"] = timing;
  return c;
}

json request_v2(const std::string& entry, json cases) {
  auto req = request(entry, std::move(cases));
  req["protocol"] = 2;
  req["support_module"] = support_module();
  return req;
}

bool exists(const std::string& file) {
  struct stat st{};
  return stat(file.c_str(), &st) == 0;
}

}  // namespace

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

// ---------------------------------------------------------------------------------------------
// Protocol 2: timing modes, the baseline op
// ---------------------------------------------------------------------------------------------

// An axpy case (the fake's 0.125 ms kernel) with the given timing object.
json axpy_case(const std::string& name, json timing) {
  const std::vector<float> x{1, 2, 3, 4}, y{10, 10, 10, 10};
  spit(path(name + "_x.bin"), std::string(reinterpret_cast<const char*>(x.data()), 16));
  spit(path(name + "_y.bin"), std::string(reinterpret_cast<const char*>(y.data()), 16));
  return {{"name", name},
          {"args",
           {scalar("a", "float32", raw_hex(2.0f)), buffer("x", "in", 16, path(name + "_x.bin")),
            buffer("y", "inout", 16, path(name + "_y.bin"), path(name + "_y_out.bin")),
            scalar("n", "uint32", raw_hex<std::uint32_t>(4))}},
          {"launch", launch()},
          {"timing", std::move(timing)}};
}

bool near_ms(const json& v, double expected, double tol) {
  return v.is_number() && std::fabs(v.get<double>() - expected) <= tol;
}

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

namespace {

// compare_case with fresh inputs: `in` redrawn (uniform [1, 2) float32) before every timed
// launch, the outputs of `checked` measured samples compared with copy_kernel as the reference.
json fresh_case(const std::string& name, json timing, json checked, bool confirm = false) {
  auto c = compare_case(name, {1, 2, 3, 4}, {1, 2, 3, 4}, std::move(timing));
  c["args"][0]["dtype"] = "float32";
  c["args"][0]["fresh"] = {{"kind", "uniform"}, {"low", 1.0}, {"high", 2.0}};
  c["fresh_seed"] = 12345;
  c["checked_launches"] = std::move(checked);
  c["check_launch"] = launch();
  if (confirm) c["confirm_launch"] = true;
  return c;
}

json with_reference(json req, const std::string& entry = "copy_kernel") {
  req["check_module"] = path("module.fake");
  req["check_entry"] = entry;
  return req;
}

}  // namespace

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
                             {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& res = r.answer["cases"][0];
  CHECK_MSG(res["status"] == "ok" && res["timed_checks"].size() == 3, res.dump());
  for (const auto& e : res["timed_checks"]) CHECK_MSG(e["mismatches"] == 0, e.dump());
  // The validation launch ran on the files: y = 3 * 1 + 2.
  CHECK(slurp(path("ax_y_out.bin")) == raw_of(std::vector<float>(n, 5.0f)));
  // 4 launches x 2 buffers, plus 3 checks x 2 buffers for the reference; one spin per batch.
  const auto st = stats_of(r);
  CHECK_MSG(st.fills == 8 + 6 && st.spins == 2, r.err);
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

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: test_end_to_end HARNESS FAKE_LIBCUDA FAKE_LIBCUBLAS\n");
    return 2;
  }
  g_harness = argv[1];
  g_fake = argv[2];
  g_fake_cublas = argv[3];
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
