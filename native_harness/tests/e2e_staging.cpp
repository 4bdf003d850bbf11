// End-to-end tests of read-only staging (PROTOCOL.md, "Read-only staging"): the harness's
// device copies of inputs and expected values are mapped read-only, so a kernel writing into
// them faults instead of passing its own validation or poisoning the input cache. The fake
// driver simulates the mappings and the MMU (fake_libcuda.cpp).

#include <string>

#include "e2e.hpp"
#include "test_util.hpp"

using namespace e2e;

namespace {

const json protected_staging = {
    {"readonly", true}, {"reason", nullptr}, {"expected_hidden", true}, {"hide_reason", nullptr}};
const char* no_hiding = "KERNELOPT_HARNESS_HIDE_EXPECTED=0";

json mismatches_of(const Run& r) { return r.answer["cases"][0]["compares"][0]["mismatches"]; }

// copy_kernel's compare case run by `entry`: forge_kernel writes in + 1 and overwrites every
// copy of the expected values it finds with that.
json forge_request(const std::string& name, bool cache) {
  auto req = request_v2("forge_kernel", {compare_case(name, {1, 2, 3, 4}, {1, 2, 3, 4})});
  if (cache) req["input_cache"] = true;
  return req;
}

}  // namespace

TEST_CASE("staged data: uploads map read-only, a clean case passes, everything is freed") {
  auto req = request_v2("copy_kernel", {compare_case("clean_ro", {1, 2, 3, 4}, {1, 2, 3, 4})});
  for (bool cache : {false, true}) {
    req["input_cache"] = cache;
    const auto r = run_request(req, {"FAKE_CUDA_STATS=1"});
    // rc 99 would be the fake's leak check: a mapping, reservation or handle left behind.
    CHECK_MSG(r.rc == 0, r.out + r.err);
    CHECK_MSG(r.answer["staging"] == protected_staging, r.answer.dump());
    CHECK(r.answer["cases"][0]["status"] == "ok");
    const auto st = stats_of(r);
    // Without the cache only the expected values need a device copy; with it the input too.
    // The expected values are mapped once more, for their compare, and unmapped twice: after
    // the upload and after the compare (the cached input's unmap is its free at exit).
    const unsigned long staged = cache ? 2 : 1;
    CHECK_MSG(st.maps == staged + 1 && st.protects == staged + 1 && st.unmaps == staged + 1 &&
                  st.mmu_faults == 0,
              r.err);
  }
}

TEST_CASE("staged data: a kernel looking for its expected values finds none, so cannot copy them") {
  // peek_kernel computes nothing and copies the answer if it can find it in the address space.
  for (bool cache : {false, true}) {
    auto req = request_v2("peek_kernel",
                          {compare_case(cache ? "peek_c" : "peek", {1, 2, 3, 4}, {1, 2, 3, 4})});
    req["input_cache"] = cache;
    auto r = run_request(req);
    CHECK_MSG(r.rc == 0 && r.answer["staging"] == protected_staging, r.out + r.err);
    CHECK_MSG(mismatches_of(r) == 4, r.answer.dump());
    // Readable expected values (read-only is no defense against a read): the copy passes.
    r = run_request(req, {no_hiding});
    CHECK_MSG(mismatches_of(r) == 0, r.answer.dump());
    CHECK(r.answer["staging"]["readonly"] == true &&
          r.answer["staging"]["expected_hidden"] == false);
    CHECK(r.answer["staging"]["hide_reason"] == "disabled by KERNELOPT_HARNESS_HIDE_EXPECTED=0");
  }
  // Cached expected values stay hidden between requests: the second one hits the cache and
  // still finds nothing.
  auto req = request_v2("peek_kernel", {compare_case("peek_twice", {1, 2, 3, 4}, {1, 2, 3, 4})});
  req["input_cache"] = true;
  const auto r = run({"serve"}, req.dump() + "\n" + req.dump() + "\n");
  CHECK_MSG(r.rc == 0 && r.lines.size() == 2, r.out + r.err);
  if (r.lines.size() == 2) {
    CHECK(r.lines[1]["input_cache"]["hits"] == 2);
    for (const auto& line : r.lines) CHECK(line["cases"][0]["compares"][0]["mismatches"] == 4);
  }
}

TEST_CASE("staged data: a file that is both an input and expected values stays mapped") {
  // One cache entry serves both: hiding it would fault the copies that restore the inout
  // buffer before every timed launch. The candidate is given those bytes anyway. (8 float32
  // inputs = 4 float64 values.)
  auto c = compare_case("both", {1, 2, 3, 4}, {1, 2, 3, 4}, {{"warmup", 1}, {"iterations", 2}});
  c["args"][0]["input"] = c["args"][1]["expected"];
  c["args"][0]["bytes"] = 32;
  c["args"][0]["role"] = "inout";
  c["args"][0]["output"] = path("both_inout.bin");
  auto req = request_v2("copy_kernel", {c});
  req["input_cache"] = true;
  const auto r = run_request(req);
  CHECK_MSG(r.rc == 0 && r.answer["cases"][0]["status"] == "ok", r.out + r.err);
  CHECK_MSG(r.answer["cases"][0]["timing"]["times_ms"].size() == 2, r.answer.dump());
}

TEST_CASE("staged data: a kernel overwriting its expected values cannot reach them") {
  for (bool cache : {false, true}) {
    // Hidden, they are nowhere to be found: the forger's own answer is compared, and is wrong.
    auto r = run_request(forge_request(cache ? "forge_c" : "forge", cache), {"FAKE_CUDA_STATS=1"});
    CHECK_MSG(r.rc == 0 && mismatches_of(r) == 4, r.out + r.err);
    CHECK(r.answer["staging"] == protected_staging);
    CHECK_MSG(stats_of(r).mmu_faults == 0, r.err);
    // Only read-only, the write into them faults.
    r = run_request(forge_request(cache ? "forge_rc" : "forge_r", cache),
                    {"FAKE_CUDA_STATS=1", no_hiding});
    CHECK_MSG(r.rc == 5, r.out + r.err);
    const auto& c = r.answer["cases"][0];
    CHECK_MSG(c["status"] == "runtime_error", c.dump());
    CHECK(c["error"]["cuda_error"] == "CUDA_ERROR_ILLEGAL_ADDRESS");
    CHECK_MSG(stats_of(r).mmu_faults == 1, r.err);
  }
}

TEST_CASE("staged data: without read-only mappings the same forger passes (what it stops)") {
  // The fallbacks, each reported with its reason: no VMM on the device, the opt-out, and a
  // driver that refuses PROT_READ (the buffer stays writable, the session stops trying).
  const std::vector<std::pair<std::string, std::string>> fallbacks = {
      {"FAKE_CUDA_NO_VMM=1", "the device does not support virtual memory management"},
      {"KERNELOPT_HARNESS_READONLY_STAGING=0", "disabled by KERNELOPT_HARNESS_READONLY_STAGING=0"},
      {"FAKE_CUDA_NO_READONLY=1", "cuMemSetAccess(PROT_READ) returned CUDA_ERROR_NOT_SUPPORTED"},
  };
  for (const auto& [env, reason] : fallbacks) {
    const auto r = run_request(forge_request("forge_open", false), {env});
    CHECK_MSG(r.rc == 0, env + ": " + r.out + r.err);
    CHECK_MSG(r.answer["cases"][0]["status"] == "ok", env + ": " + r.answer.dump());
    CHECK_MSG(r.answer["staging"] == json({{"readonly", false},
                                           {"reason", reason},
                                           {"expected_hidden", false},
                                           {"hide_reason", reason}}),
              r.answer.dump());
  }
}

TEST_CASE("staged data: a kernel poisoning the input cache faults before a later request") {
  auto req = request("scribble_kernel", {copy_case("s", 256, "scribble")});
  req["input_cache"] = true;
  auto next = request("copy_kernel", {copy_case("n", 256, "scribble")});
  next["input_cache"] = true;
  const std::string stream = req.dump() + "\n" + next.dump() + "\n";

  auto r = run({"serve"}, stream);
  CHECK_MSG(r.rc == 5 && r.lines.size() == 1, r.out + r.err);
  if (!r.lines.empty()) {
    CHECK(r.lines[0]["cases"][0]["status"] == "runtime_error");
    CHECK(r.lines[0]["cases"][0]["error"]["cuda_error"] == "CUDA_ERROR_ILLEGAL_ADDRESS");
  }

  // Unprotected, the cached copy is poisoned and the next request's kernel reads the poison.
  r = run({"serve"}, stream, {"FAKE_CUDA_NO_VMM=1"});
  CHECK_MSG(r.rc == 0 && r.lines.size() == 2, r.out + r.err);
  if (r.lines.size() == 2) {
    CHECK(r.lines[1]["input_cache"]["hits"] == 1);
    CHECK(r.lines[1]["cases"][0]["status"] == "ok");
    CHECK(slurp(path("scribble_out.bin")) == std::string(256, '\xEE'));
  }
}
