// End-to-end, feature tensor_maps: CUtensorMaps encoded over the case's buffers and passed after
// its args to every launch (validation, determinism, warm-up, measured, graph and blocking
// batches, checked and confirm launches), and every refusal. The fake driver's
// cuTensorMapEncodeTiled writes the map's fields, and its tma_copy_kernel copies through two
// maps, faulting on a map it did not encode (fake_libcuda_tma.cpp).
// Part of test_end_to_end (see test_end_to_end.cpp).

#include "e2e.hpp"

using namespace e2e;

namespace {

// A 6 x 12 float32 matrix (48-byte rows) in A; the maps copy its 5 x 4 top-left sub-view into
// C, packed (80 bytes). tma_copy_kernel(A, C, n, src map, dst map).
json tma_case(const std::string& name, json timing = nullptr) {
  std::vector<float> a(6 * 12);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i);
  spit(path(name + "_a.bin"), raw_of(a));
  json c = {{"name", name},
            {"args",
             {buffer("A", "in", a.size() * 4, path(name + "_a.bin")),
              buffer("C", "out", 80, "", path(name + "_c.bin")),
              scalar("n", "uint64", raw_hex<std::uint64_t>(80))}},
            {"tensor_maps",
             {{{"buffer", "A"},
               {"dtype", "float32"},
               {"dims", {4, 5}},
               {"strides", {48}},
               {"box", {4, 5}},
               {"swizzle", "none"},
               {"l2_promotion", "128B"}},
              {{"buffer", "C"}, {"dtype", "float32"}, {"dims", {4, 5}}, {"box", {4, 5}}}}},
            {"launch", launch()}};
  if (!timing.is_null()) c["timing"] = std::move(timing);
  return c;
}

std::vector<float> sub_view() {
  std::vector<float> out;
  for (int r = 0; r < 5; ++r) {
    for (int col = 0; col < 4; ++col) out.push_back(static_cast<float>(r * 12 + col));
  }
  return out;
}

}  // namespace

TEST_CASE("tensor maps: a strided sub-view copied through two maps, in every timed launch") {
  auto c = tma_case("tm", {{"warmup", 2}, {"iterations", 3}});
  c["repeat_validation"] = true;
  auto graph = tma_case("tm_graph", {{"warmup", 1},
                                     {"iterations", 3},
                                     {"mode", "graph"},
                                     {"graph_batch", 2},
                                     {"blocking", true}});
  const auto r = run_request(request_v2("tma_copy_kernel", {c, graph}), {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0, r.out + r.err);
  for (const auto& name : {"tm", "tm_graph"}) {
    const auto& got = r.answer["cases"][name == std::string("tm") ? 0 : 1];
    CHECK_MSG(got["status"] == "ok", got.dump());
    CHECK_MSG(got["timing"]["times_ms"].size() == 3, got.dump());
    CHECK(slurp(path(std::string(name) + "_c.bin")) == raw_of(sub_view()));
  }
  CHECK(r.answer["cases"][0]["determinism"].size() == 1);
  // A launch without the maps, or with a map the fake did not encode, faults: every one of
  // them (2 validation + 1 repeat + 2 + 3 events + 1 + 3 * 2 graph) got both.
  const auto st = stats_of(r);
  CHECK_MSG(st.mmu_faults == 0, r.err);
  CHECK_MSG(st.graph_kernels >= 6, r.err);
}

TEST_CASE("tensor maps: checked and confirm launches of fresh inputs get the maps too") {
  auto c = fresh_case("tmf", {{"warmup", 1}, {"iterations", 4}}, {1, 3}, true);
  c["tensor_maps"] = {{{"buffer", "in"}, {"dtype", "float32"}, {"dims", {4}}, {"box", {4}}},
                      {{"buffer", "out"}, {"dtype", "float32"}, {"dims", {4}}, {"box", {4}}}};
  const auto r = run_request(with_reference(request_v2("tma_copy_kernel", {c})));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  const auto& got = r.answer["cases"][0];
  CHECK_MSG(got["status"] == "ok", got.dump());
  CHECK_MSG(got["timing"]["confirm_launch_ms"].is_number(), got.dump());
}

TEST_CASE("tensor maps: a store's 16-byte chunk past a row's end lands in the guard bytes") {
  // 5 floats (20 bytes) copied into C through a map of exactly C: the store writes the chunk of
  // bytes 16..31 whole, 12 bytes past C, into its own guard: out_of_bounds_write, not another
  // buffer (every buffer starts 256-byte aligned, padded to 256, then guarded)
  std::vector<float> a{1, 2, 3, 4, 5};
  spit(path("tmt_a.bin"), raw_of(a));
  json c = {
      {"name", "tmt"},
      {"args",
       {buffer("A", "in", 20, path("tmt_a.bin")), buffer("C", "out", 20, "", path("tmt_c.bin")),
        scalar("n", "uint64", raw_hex<std::uint64_t>(20))}},
      {"tensor_maps",
       {{{"buffer", "A"}, {"dtype", "float32"}, {"dims", {5}}, {"box", {8}}},
        {{"buffer", "C"}, {"dtype", "float32"}, {"dims", {5}}, {"box", {8}}}}},
      {"launch", launch()}};
  const auto r = run_request(request_v2("tma_copy_kernel", {c}));
  const auto& got = r.answer["cases"][0];
  CHECK_MSG(got["status"] == "out_of_bounds_write", r.out + r.err);
  CHECK_MSG(got["guard_violations"].size() == 1, got.dump());
  CHECK(got["guard_violations"][0]["buffer"] == "C");
  CHECK(got["guard_violations"][0]["side"] == "after");
  CHECK(got["guard_violations"][0]["bytes_changed"] == 12);
}

TEST_CASE("tensor maps: the driver's refusal is a bad request naming the map and the error") {
  const auto req = request_v2("tma_copy_kernel", {tma_case("tmr")});
  auto r = run_request(req, {"FAKE_CUDA_TENSOR_MAP_ERROR=1"});
  CHECK_MSG(r.rc == 2, r.out + r.err);
  CHECK(r.answer["error"]["kind"] == "bad_request");
  const std::string msg = r.answer["error"]["message"];
  CHECK_MSG(msg.rfind("cases[0].tensor_maps[0]: cuTensorMapEncodeTiled refused the map over "
                      "buffer \"A\": CUDA_ERROR_INVALID_VALUE",
                      0) == 0,
            msg);
  // the process serves the next request
  r = run({"serve"}, req.dump() + "\n" + req.dump() + "\n", {"FAKE_CUDA_TENSOR_MAP_ERROR=1"});
  CHECK_MSG(r.rc == 0 && r.lines.size() == 2, r.out + r.err);
}

TEST_CASE("tensor maps: a driver without cuTensorMapEncodeTiled refuses them before any case") {
  const auto r = run_request(request_v2("tma_copy_kernel", {tma_case("tmo")}),
                             {"KERNELOPT_LIBCUDA=" + g_fake_old, "FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 2, r.out + r.err);
  CHECK(test::contains(r.answer["error"]["message"],
                       "cases[0].tensor_maps: this CUDA driver cannot encode tensor maps"));
  CHECK_MSG(stats_of(r).launches == 0, r.err);
  // requests without tensor maps still run on it
  const auto plain = run_request(request("copy_kernel", {copy_case("c", 64, "tmo_plain")}),
                                 {"KERNELOPT_LIBCUDA=" + g_fake_old});
  CHECK_MSG(plain.rc == 0 && plain.answer["cases"][0]["status"] == "ok", plain.out + plain.err);
}

TEST_CASE("tensor maps: the kernel must take them, 128 bytes each, after the args") {
  // copy_kernel takes the 3 args only
  auto r = run_request(request_v2("copy_kernel", {tma_case("tmp")}));
  CHECK_MSG(r.rc == 2, r.out + r.err);
  CHECK(test::contains(r.answer["error"]["message"],
                       "cases[0].tensor_maps: kernel \"copy_kernel\" takes 3 parameter(s) but 5 "
                       "are given (3 args, then 2 tensor maps)"));
  // ko_bitwise_diff takes 4 pointers: its 4th parameter is no CUtensorMap
  auto c = tma_case("tmq");
  c["tensor_maps"].erase(1);
  r = run_request(request_v2("ko_bitwise_diff", {c}));
  CHECK_MSG(r.rc == 2, r.out + r.err);
  CHECK(test::contains(r.answer["error"]["message"],
                       "cases[0].tensor_maps[0]: kernel parameter 3 of \"ko_bitwise_diff\" is 8 "
                       "bytes but a tensor map is passed as a 128-byte CUtensorMap"));
}

TEST_CASE("tensor maps: a map reaching past its buffer is refused before the driver is opened") {
  auto c = tma_case("tmx");
  c["tensor_maps"][0]["dims"] = {4, 6};  // the 6th row ends at 5 * 48 + 16 = 256 bytes: fits
  auto r = run_request(request_v2("tma_copy_kernel", {c}),
                       {"KERNELOPT_LIBCUDA=/nonexistent/libcuda.so.1"});
  CHECK_MSG(r.rc == 3, r.out + r.err);   // valid: only the driver is missing
  c["tensor_maps"][0]["dims"] = {4, 7};  // 6 * 48 + 16 = 304 > 288
  r = run_request(request_v2("tma_copy_kernel", {c}),
                  {"KERNELOPT_LIBCUDA=/nonexistent/libcuda.so.1"});
  CHECK_MSG(r.rc == 2, r.out + r.err);
  CHECK(test::contains(r.answer["error"]["message"],
                       "cases[0].tensor_maps[0]: reaches past buffer \"A\" (288 bytes)"));
}
