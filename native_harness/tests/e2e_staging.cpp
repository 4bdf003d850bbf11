// End-to-end tests of read-only staging (PROTOCOL.md, "Read-only staging"): the harness's
// device copies of inputs and expected values are mapped read-only, so a kernel writing into
// them faults instead of passing its own validation or poisoning the input cache. The fake
// driver simulates the mappings and the MMU (fake_libcuda.cpp).

#include <string>

#include "e2e.hpp"
#include "test_util.hpp"

using namespace e2e;

namespace {

const json protected_staging = {{"readonly", true}, {"reason", nullptr}};

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
    const unsigned long staged = cache ? 2 : 1;
    CHECK_MSG(st.maps == staged && st.protects == staged && st.mmu_faults == 0, r.err);
  }
}

TEST_CASE("staged data: a kernel overwriting its expected values faults, never passes") {
  for (bool cache : {false, true}) {
    const auto r =
        run_request(forge_request(cache ? "forge_c" : "forge", cache), {"FAKE_CUDA_STATS=1"});
    CHECK_MSG(r.rc == 5, r.out + r.err);
    const auto& c = r.answer["cases"][0];
    CHECK_MSG(c["status"] == "runtime_error", c.dump());
    CHECK(c["error"]["cuda_error"] == "CUDA_ERROR_ILLEGAL_ADDRESS");
    CHECK(r.answer["staging"] == protected_staging);
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
    CHECK_MSG(r.answer["staging"] == json({{"readonly", false}, {"reason", reason}}),
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
