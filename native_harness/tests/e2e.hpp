// Shared by the end-to-end tests (test_end_to_end.cpp and e2e_*.cpp): the harness and fake
// driver paths, running the real executable, and the request builders of PROTOCOL.md.
#pragma once

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

namespace e2e {

using nlohmann::json;

inline std::string g_harness;
inline std::string g_fake;
inline std::string g_fake_cublas;
inline std::string g_fake_old;  // the fake driver without cuTensorMapEncodeTiled
inline std::string g_dir;

struct Run {
  int rc = -1;
  std::string out;
  std::string err;
  json answer;  // the first stdout line, parsed
  std::vector<json> lines;
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void spit(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << data;
}

inline std::string path(const std::string& name) { return g_dir + "/" + name; }

// env: extra "NAME=value" entries; KERNELOPT_LIBCUDA defaults to the fake.
inline Run run(const std::vector<std::string>& args, const std::string& stdin_text = "",
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

inline Run run_request(const json& req, std::vector<std::string> env = {}) {
  static int counter = 0;
  const std::string file = path("request" + std::to_string(counter++) + ".json");
  spit(file, req.dump(2));
  return run({"run", file}, "", std::move(env));
}

inline std::string bytes_of(std::initializer_list<int> values) {
  std::string s;
  for (int v : values) s.push_back(static_cast<char>(v));
  return s;
}

inline std::string pattern(std::size_t n, int seed) {
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

inline json buffer(const std::string& name, const std::string& role, std::size_t bytes,
                   const std::string& input = "", const std::string& output = "") {
  json b = {{"kind", "buffer"}, {"name", name}, {"role", role}, {"bytes", bytes}};
  if (!input.empty()) b["input"] = input;
  if (!output.empty()) b["output"] = output;
  return b;
}

inline json scalar(const std::string& name, const std::string& dtype, const std::string& raw) {
  return {{"kind", "scalar"}, {"name", name}, {"dtype", dtype}, {"raw", raw}};
}

inline json launch(unsigned block = 128, unsigned shared = 0) {
  return {{"grid", {4, 1, 1}}, {"block", {block, 1, 1}}, {"shared_bytes", shared}};
}

// A copy-style case: in -> out, n bytes, inputs written to disk.
inline json copy_case(const std::string& name, std::size_t n, const std::string& tag,
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

inline json request(const std::string& entry, json cases, std::uint64_t guard = 1024) {
  const auto module = path("module.fake");
  spit(module, "FAKE-MODULE v1\n");
  return {{"protocol", 1},        {"device", 0},      {"module", module},         {"entry", entry},
          {"guard_bytes", guard}, {"flush_l2", true}, {"cases", std::move(cases)}};
}

// The fake's counters, printed at exit with FAKE_CUDA_STATS=1.
struct Stats {
  unsigned long launches = 0, spins = 0, graph_launches = 0, graph_kernels = 0, fills = 0,
                ref_compares = 0, maps = 0, protects = 0, mmu_faults = 0, hushed = 0, unmaps = 0,
                spied = 0, fill_keys = 0, watched_fills = 0, sum_sqs = 0, flush_reads = 0,
                flush_bytes = 0, structures = 0, choices = 0, poisons = 0, zeroes = 0,
                event_syncs = 0, stream_syncs = 0;
};
inline Stats stats_of(const Run& r) {
  Stats s;
  const auto at = r.err.find("fake libcuda stats:");
  if (at == std::string::npos) {
    std::fprintf(stderr, "  no fake stats in stderr: %s\n", r.err.c_str());
    ++test::failures();
    return s;
  }
  std::sscanf(r.err.c_str() + at,
              "fake libcuda stats: launches=%lu spins=%lu graph_launches=%lu graph_kernels=%lu "
              "fills=%lu ref_compares=%lu maps=%lu protects=%lu mmu_faults=%lu hushed=%lu "
              "unmaps=%lu spied=%lu fill_keys=%lu watched_fills=%lu sum_sqs=%lu flush_reads=%lu "
              "flush_bytes=%lu structures=%lu choices=%lu poisons=%lu zeroes=%lu event_syncs=%lu "
              "stream_syncs=%lu",
              &s.launches, &s.spins, &s.graph_launches, &s.graph_kernels, &s.fills, &s.ref_compares,
              &s.maps, &s.protects, &s.mmu_faults, &s.hushed, &s.unmaps, &s.spied, &s.fill_keys,
              &s.watched_fills, &s.sum_sqs, &s.flush_reads, &s.flush_bytes, &s.structures,
              &s.choices, &s.poisons, &s.zeroes, &s.event_syncs, &s.stream_syncs);
  return s;
}

template <typename T>
std::string raw_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

inline std::string support_module() {
  const auto file = path("support.fake");
  spit(file, "FAKE-MODULE support\n");
  return file;
}

// copy_kernel over float32 elements: in -> out, compared with `expected` (float64 values).
inline json compare_case(const std::string& name, const std::vector<float>& in,
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

inline json request_v2(const std::string& entry, json cases) {
  auto req = request(entry, std::move(cases));
  req["protocol"] = 2;
  req["support_module"] = support_module();
  return req;
}

inline bool exists(const std::string& file) {
  struct stat st{};
  return stat(file.c_str(), &st) == 0;
}

// An axpy case (the fake's 0.125 ms kernel) with the given timing object.
inline json axpy_case(const std::string& name, json timing) {
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

inline bool near_ms(const json& v, double expected, double tol) {
  return v.is_number() && std::fabs(v.get<double>() - expected) <= tol;
}

// compare_case with fresh inputs: `in` redrawn (uniform [1, 2) float32) before every timed
// launch, the outputs of `checked` measured samples compared with copy_kernel as the reference.
inline json fresh_case(const std::string& name, json timing, json checked, bool confirm = false) {
  auto c = compare_case(name, {1, 2, 3, 4}, {1, 2, 3, 4}, std::move(timing));
  c["args"][0]["dtype"] = "float32";
  c["args"][0]["fresh"] = {{"kind", "uniform"}, {"low", 1.0}, {"high", 2.0}};
  c["fresh_seed"] = 12345;
  c["checked_launches"] = std::move(checked);
  c["check_launch"] = launch();
  if (confirm) c["confirm_launch"] = true;
  return c;
}

inline json with_reference(json req, const std::string& entry = "copy_kernel") {
  req["check_module"] = path("module.fake");
  req["check_entry"] = entry;
  return req;
}

}  // namespace e2e
