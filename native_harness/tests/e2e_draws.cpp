// End-to-end: inputs drawn on the device instead of read from files ("input_draw",
// "timed_input_draw"; PROTOCOL.md). Part of test_end_to_end (see test_end_to_end.cpp).

#include <set>

#include "e2e.hpp"

using namespace e2e;

namespace {

constexpr std::size_t n_floats = 64;

json draw_spec(std::uint64_t seed) {
  return {{"seed", seed}, {"kind", "uniform"}, {"low", 1.0}, {"high", 2.0}};
}

// copy_kernel over n_floats float32: `in` drawn from `seed`, `out` written to `<tag>_out.bin`.
json drawn_copy_case(const std::string& tag, std::uint64_t seed) {
  const std::size_t n = n_floats * 4;
  json in = buffer("in", "in", n);
  in["dtype"] = "float32";
  in["input_draw"] = draw_spec(seed);
  return {{"name", tag},
          {"args",
           {in, buffer("out", "out", n, "", path(tag + "_out.bin")),
            scalar("n", "uint64", raw_hex<std::uint64_t>(n))}},
          {"launch", launch()}};
}

std::vector<float> floats_of(const std::string& raw) {
  std::vector<float> v(raw.size() / 4);
  std::memcpy(v.data(), raw.data(), v.size() * 4);
  return v;
}

// The values copy_kernel writes for an input drawn from `seed` (a request of its own).
std::vector<float> drawn_values(std::uint64_t seed, bool cache = false) {
  const std::string tag = "draw_" + std::to_string(seed) + (cache ? "_c" : "");
  auto req = request_v2("copy_kernel", {drawn_copy_case(tag, seed)});
  if (cache) req["input_cache"] = true;
  const auto r = run_request(req);
  CHECK_MSG(r.rc == 0 && r.answer["cases"][0]["status"] == "ok", r.out + r.err);
  return floats_of(slurp(path(tag + "_out.bin")));
}

// The values copy_kernel writes for an input drawn from `seed` with `structure` (over n_floats).
std::vector<float> structured_values(std::uint64_t seed, const json& structure) {
  const std::string tag =
      "sdraw_" + std::to_string(seed) + "_" + structure["kind"].get<std::string>();
  auto c = drawn_copy_case(tag, seed);
  c["args"][0]["input_draw"]["structure"] = structure;
  const auto r = run_request(request_v2("copy_kernel", {c}), {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0 && r.answer["cases"][0]["status"] == "ok", r.out + r.err);
  CHECK_MSG(stats_of(r).structures == 1, r.err);
  return floats_of(slurp(path(tag + "_out.bin")));
}

json structure(const std::string& kind, int rows, int cols, int diagonal = 0) {
  return {{"kind", kind}, {"rows", rows}, {"cols", cols}, {"diagonal", diagonal}};
}

void write_expected(const std::string& file, const std::vector<float>& values) {
  std::vector<double> wide(values.begin(), values.end());
  spit(file, raw_of(wide));
}

}  // namespace

TEST_CASE("input_draw: the same seed gives the same bytes in every request, another seed others") {
  const auto a = drawn_values(7);
  const auto again = drawn_values(7);
  const auto cached = drawn_values(7, true);
  const auto other = drawn_values(8);
  CHECK(a.size() == n_floats);
  CHECK(a == again);
  CHECK(a == cached);
  CHECK(a != other);
  for (const float x : a) CHECK_MSG(x >= 1.0f && x < 2.0f, std::to_string(x));
  std::set<float> distinct(a.begin(), a.end());
  CHECK_MSG(distinct.size() > n_floats / 2, "the draw is not constant");
}

TEST_CASE("input_draw: the input cache keeps a draw across requests, keyed by its seed") {
  auto req = request_v2("copy_kernel", {drawn_copy_case("kc", 21)});
  req["input_cache"] = true;
  auto other = req;
  other["cases"][0] = drawn_copy_case("kc2", 22);
  // One serve process: the second request of the same draw is a hit, a new seed a miss.
  const auto r = run({"serve"}, req.dump() + "\n" + req.dump() + "\n" + other.dump() + "\n");
  CHECK_MSG(r.rc == 0 && r.lines.size() == 3, r.out + r.err);
  if (r.lines.size() != 3) return;
  CHECK_MSG(r.lines[0]["input_cache"]["misses"] == 1, r.lines[0].dump());
  CHECK(r.lines[1]["input_cache"]["hits"] == 1);
  CHECK(r.lines[1]["input_cache"]["misses"] == 0);
  CHECK(r.lines[2]["input_cache"]["misses"] == 1);
  CHECK(r.lines[2]["input_cache"]["resident_bytes"] == 2 * n_floats * 4);
  CHECK(slurp(path("kc_out.bin")) != slurp(path("kc2_out.bin")));
}

TEST_CASE("input_draw: an inout buffer starts from the draw and is restored to it") {
  // inc_kernel adds 1 to every byte; its argument 0 is drawn like copy_kernel's `in`.
  const auto base = drawn_values(31);
  const std::size_t n = n_floats * 4;
  json d = buffer("d", "inout", n, "", path("inc_out.bin"));
  d["dtype"] = "float32";
  d["input_draw"] = draw_spec(31);
  json c = {{"name", "inc"},
            {"args", {d, scalar("n", "uint64", raw_hex<std::uint64_t>(n))}},
            {"launch", launch()},
            {"timing", {{"warmup", 1}, {"iterations", 3}}}};
  const auto r = run_request(request_v2("inc_kernel", {c}));
  CHECK_MSG(r.rc == 0 && r.answer["cases"][0]["status"] == "ok", r.out + r.err);
  const auto out = slurp(path("inc_out.bin"));
  const auto* before = reinterpret_cast<const std::uint8_t*>(base.data());
  CHECK(out.size() == n);
  bool plus_one = out.size() == n;
  for (std::size_t i = 0; i < out.size() && i < n; ++i) {
    plus_one =
        plus_one && static_cast<std::uint8_t>(out[i]) == static_cast<std::uint8_t>(before[i] + 1);
  }
  CHECK_MSG(plus_one, "the validation launch did not start from the draw");
}

TEST_CASE("input_draw: a structure makes the draw's matrices triangular or symmetric") {
  // n_floats = 64: four 4 x 4 matrices, or two 4 x 8 ones; every drawn value is in [1, 2)
  const auto dense = drawn_values(51);
  const auto triu = structured_values(51, structure("triu", 4, 4, 1));
  const auto tril = structured_values(51, structure("tril", 4, 8, -1));
  const auto sym = structured_values(51, structure("symmetric", 4, 4));
  bool ok = dense.size() == n_floats && triu.size() == n_floats && tril.size() == n_floats &&
            sym.size() == n_floats;
  for (std::size_t i = 0; ok && i < n_floats; ++i) {
    const long long r = (i / 4) % 4, c = i % 4, r8 = (i / 8) % 4, c8 = i % 8;
    ok = triu[i] == (c - r < 1 ? 0.0f : dense[i]) && tril[i] == (c8 - r8 > -1 ? 0.0f : dense[i]) &&
         sym[i] == (r > c ? dense[i - (r - c) * 4 + (r - c)] : dense[i]);
    CHECK_MSG(ok, "element " + std::to_string(i));
  }
}

TEST_CASE("input_draw: a structured draw is cached apart from the dense draw of its seed") {
  auto dense = drawn_copy_case("sc_dense", 61);
  auto tri = drawn_copy_case("sc_triu", 61);
  tri["args"][0]["input_draw"]["structure"] = structure("triu", 8, 8);
  auto req = request_v2("copy_kernel", {dense});
  req["input_cache"] = true;
  auto other = req;
  other["cases"][0] = tri;
  const auto r = run({"serve"}, req.dump() + "\n" + other.dump() + "\n" + other.dump() + "\n");
  CHECK_MSG(r.rc == 0 && r.lines.size() == 3, r.out + r.err);
  if (r.lines.size() != 3) return;
  CHECK_MSG(r.lines[1]["input_cache"]["misses"] == 1, r.lines[1].dump());
  CHECK_MSG(r.lines[2]["input_cache"]["hits"] == 1, r.lines[2].dump());
  const auto d = floats_of(slurp(path("sc_dense_out.bin")));
  const auto t = floats_of(slurp(path("sc_triu_out.bin")));
  CHECK(d.size() == n_floats && t.size() == n_floats && t[8] == 0.0f && d[8] != 0.0f);
}

TEST_CASE("fresh: a structured buffer gets the structure after every redraw") {
  auto c = fresh_case("sfresh", {{"warmup", 1}, {"iterations", 3}}, {1});
  c["args"][0]["fresh"]["structure"] = structure("symmetric", 2, 2);
  const auto r = run_request(with_reference(request_v2("copy_kernel", {c})), {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0 && r.answer["cases"][0]["status"] == "ok", r.out + r.err);
  const auto st = stats_of(r);
  CHECK_MSG(st.fills > 0 && st.structures == st.fills, r.err);
}

TEST_CASE("input_draw: a kernel writing its drawn input is input_modified") {
  auto c = drawn_copy_case("clob", 41);
  const auto r = run_request(request_v2("clobber_kernel", {c}));
  CHECK_MSG(r.rc == 0, r.out + r.err);
  CHECK_MSG(r.answer["cases"][0]["status"] == "input_modified", r.answer.dump());
}

TEST_CASE("timed_input_draw: the timed check launch sees the other seed's draw") {
  const auto v5 = drawn_values(5);
  const auto v6 = drawn_values(6);
  write_expected(path("td_expected.bin"), v6);
  write_expected(path("td_timed_expected.bin"), v5);
  for (const bool right : {true, false}) {
    auto c = drawn_copy_case("td", 6);
    c["args"][0]["timed_input_draw"] = draw_spec(5);
    auto& out = c["args"][1];
    out["dtype"] = "float32";
    out["expected"] = path("td_expected.bin");
    // wrong: the timed launch's outputs are compared with the validation inputs' values
    out["timed_expected"] = path(right ? "td_timed_expected.bin" : "td_expected.bin");
    out["compare"] = {{"abs_tol", 1e-6}, {"rtol", 1e-6}, {"rel_floor", 1.0}};
    c["timing"] = {{"warmup", 1}, {"iterations", 2}};
    const auto r = run_request(request_v2("copy_kernel", {c}));
    CHECK_MSG(r.rc == 0, r.out + r.err);
    const auto& res = r.answer["cases"][0];
    CHECK_MSG(res["status"] == "ok", res.dump());
    int validation = -1, timed = -1;
    for (const auto& cmp : res["compares"]) {
      if (cmp["launch"] == "validation") validation = cmp["mismatches"].get<int>();
      if (cmp["launch"] == "timed") timed = cmp["mismatches"].get<int>();
    }
    CHECK_MSG(validation == 0, res.dump());
    CHECK_MSG(right ? timed == 0 : timed > 0, res.dump());
  }
}

TEST_CASE("input_draw: malformed fields exit 2 naming the field") {
  struct Bad {
    std::function<void(json&, json&)> edit;
    std::string message;
  };
  const std::vector<Bad> bads = {
      {[](json&, json& c) { c["args"][1]["input_draw"] = draw_spec(1); },
       "cases[0].args[1].input_draw: an \"out\" buffer has no input"},
      {[](json&, json& c) { c["args"][0].erase("dtype"); },
       "cases[0].args[0].dtype: is required with \"input_draw\""},
      {[](json&, json& c) { c["args"][0]["input"] = path("x.bin"); },
       "cases[0].args[0].input_draw: is instead of \"input\""},
      {[](json&, json& c) { c["args"][0]["input_draw"].erase("seed"); },
       "cases[0].args[0].input_draw.seed"},
      {[](json&, json& c) { c["args"][0]["input_draw"]["kind"] = "zipf"; },
       "cases[0].args[0].input_draw.kind: must be"},
      {[](json&, json& c) { c["args"][0]["input_draw"]["structure"] = structure("band", 8, 8); },
       "cases[0].args[0].input_draw.structure.kind: must be \"triu\", \"tril\" or"},
      {[](json&, json& c) { c["args"][0]["input_draw"]["structure"] = structure("triu", 3, 4); },
       "cases[0].args[0].input_draw.structure: 3 x 4 matrices do not tile the buffer's 64"},
      {[](json&, json& c) {
         c["args"][0]["input_draw"]["structure"] = structure("symmetric", 4, 16);
       },
       "cases[0].args[0].input_draw.structure: symmetric needs square matrices"},
      {[](json&, json& c) { c["args"][0]["input_draw"]["structure"] = structure("triu", 0, 8); },
       "cases[0].args[0].input_draw.structure: rows and cols must be >= 1"},
      {[](json&, json& c) { c["args"][0]["input_draw"]["structure"] = {{"kind", "tril"}}; },
       "cases[0].args[0].input_draw.structure.rows: is required"},
      {[](json&, json& c) { c["args"][0].erase("input_draw"); },
       "cases[0].args[0].input: is required for role \"in\""},
      {[](json& r, json&) { r.erase("support_module"); },
       "support_module: is required by cases[0].args (input_draw)"},
      {[](json&, json& c) {
         c["timing"] = {{"iterations", 2}};
         c["checked_launches"] = {0};
         c["checked_dump"] = g_dir;
       },
       "cases[0].checked_dump: needs input files"},
  };
  for (const auto& bad : bads) {
    auto req = request_v2("copy_kernel", {drawn_copy_case("bad", 3)});
    bad.edit(req, req["cases"][0]);
    const auto r = run_request(req);
    CHECK_MSG(r.rc == 2, bad.message + ": " + r.out);
    CHECK_MSG(test::contains(r.answer["error"]["message"].get<std::string>(), bad.message),
              bad.message + " vs " + r.answer.dump());
  }
}

TEST_CASE(
    "expected_dtype: expected values in the buffer's own dtype are compared like float64 ones") {
  const std::vector<float> in{1.5f, -2.25f, 3.0f, 1e-3f};
  for (const bool wrong : {false, true}) {
    auto c = compare_case(wrong ? "ed_wrong" : "ed", in, {0, 0, 0, 0});
    std::vector<float> expected = in;
    if (wrong) expected[2] = 3.5f;
    spit(path("ed_native.bin"), raw_of(expected));
    c["args"][1]["expected"] = path("ed_native.bin");
    c["args"][1]["expected_dtype"] = "float32";
    const auto r = run_request(request_v2("copy_kernel", {c}));
    CHECK_MSG(r.rc == 0, r.out + r.err);
    const auto& cmp = r.answer["cases"][0]["compares"][0];
    CHECK_MSG(cmp["mismatches"] == (wrong ? 1 : 0) && cmp["elements"] == 4, cmp.dump());
    if (wrong) CHECK(cmp["first_mismatch"] == 2);
  }
  // "float64" is the default, said out loud
  auto c = compare_case("ed64", in, {1.5, -2.25, 3.0, 1e-3});
  c["args"][1]["expected_dtype"] = "float64";
  const auto r = run_request(request_v2("copy_kernel", {c}));
  CHECK_MSG(r.rc == 0 && r.answer["cases"][0]["compares"][0]["mismatches"] == 0, r.out);
}

TEST_CASE("expected_dtype: malformed fields and wrong file sizes exit 2 naming the field") {
  const std::vector<float> in{1, 2, 3, 4};
  struct Bad {
    std::function<void(json&)> edit;
    std::string message;
  };
  const std::vector<Bad> bads = {
      {[](json& out) { out["expected_dtype"] = "int32"; },
       "cases[0].args[1].expected_dtype: must be \"float64\" or the buffer's dtype \"float32\""},
      {[](json& out) {
         out.erase("expected");
         out["expected_dtype"] = "float32";
       },
       "cases[0].args[1].expected_dtype: needs \"expected\""},
      // the float64 file of compare_case is twice the size float32 values take
      {[](json& out) { out["expected_dtype"] = "float32"; },
       "must hold as many float32 values (16 bytes), but it has 32 bytes"},
  };
  for (const auto& bad : bads) {
    auto c = compare_case("edbad", in, {1, 2, 3, 4});
    bad.edit(c["args"][1]);
    const auto r = run_request(request_v2("copy_kernel", {c}));
    CHECK_MSG(r.rc == 2, bad.message + ": " + r.out);
    CHECK_MSG(test::contains(r.answer["error"]["message"].get<std::string>(), bad.message),
              bad.message + " vs " + r.answer.dump());
  }
}
