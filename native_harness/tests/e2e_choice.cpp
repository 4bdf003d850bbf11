// End-to-end: choice draws ("kind": "choice" of "input_draw" and "fresh", feature choice_draw;
// PROTOCOL.md "Inputs drawn on the device: a choice of values"). The fake's ko_choice_<bytes>
// follows fill.cu's rule over fake_fill.hpp's randint, so these tests compute every byte a draw
// must hold: the harness's request parsing, its exact conversion of the values to the dtype's
// bits (choice_bits.hpp), the key and the kernel's arguments are all checked here. Part of
// test_end_to_end (see test_end_to_end.cpp).

#include <cmath>
#include <cstring>
#include <functional>
#include <set>

#include "draw_key.hpp"
#include "e2e.hpp"
#include "fake_fill.hpp"

using namespace e2e;

namespace {

constexpr std::size_t n_elements = 64;

// copy_kernel (bytes in -> out) over n_elements of `dtype` (`size` bytes each), `in` drawn as a
// choice of `values` from `seed`, `out` written to `<tag>_out.bin`.
json choice_case(const std::string& tag, const std::string& dtype, std::size_t size,
                 const json& values, std::uint64_t seed) {
  const std::size_t n = n_elements * size;
  json in = buffer("in", "in", n);
  in["dtype"] = dtype;
  in["input_draw"] = {{"seed", seed}, {"kind", "choice"}, {"values", values}};
  return {{"name", tag},
          {"args",
           {in, buffer("out", "out", n, "", path(tag + "_out.bin")),
            scalar("n", "uint64", raw_hex<std::uint64_t>(n))}},
          {"launch", launch()}};
}

// What a choice of `bits` (each value's bits in the element type) drawn from `seed` holds: element
// i is bits[the randint over [0, k) of the draw's key at i], `size` bytes little-endian.
std::string expected_bytes(const std::vector<std::uint64_t>& bits, std::size_t size,
                           std::uint64_t seed) {
  const std::uint64_t key = kernelopt::draw_key(seed, 0, 0);  // input_draw: draw 0, argument 0
  std::string out;
  for (std::size_t i = 0; i < n_elements; ++i) {
    const auto j = fake::choice_index(key, 0, 0, i, static_cast<std::uint32_t>(bits.size()));
    for (std::size_t b = 0; b < size; ++b) out += static_cast<char>((bits[j] >> (8 * b)) & 0xFF);
  }
  return out;
}

template <typename T>
std::uint64_t bits_of(T v) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  return bits;
}

}  // namespace

TEST_CASE("input_draw: a choice is the table of its values' bits at the randint of its key") {
  struct Draw {
    std::string dtype;
    std::size_t size;
    json values;
    std::vector<std::uint64_t> bits;  // what each value is in the dtype
  };
  const std::vector<Draw> draws = {
      {"float32", 4, {-1.0, 1.0, 0.5}, {bits_of(-1.0f), bits_of(1.0f), bits_of(0.5f)}},
      // -1, 1, the smallest subnormal, the largest finite value
      {"float16", 2, {-1.0, 1.0, std::ldexp(1.0, -24), 65504.0}, {0xBC00, 0x3C00, 0x0001, 0x7BFF}},
      {"bfloat16", 2, {-1.0, 3.0}, {0xBF80, 0x4040}},
      {"float64", 8, {-0.0, 0.1}, {bits_of(-0.0), bits_of(0.1)}},
      {"int8", 1, {-128, 127, -1.0}, {0x80, 0x7F, 0xFF}},
      {"uint64", 8, {0, 9223372036854775808.0}, {0, std::uint64_t{1} << 63}},
  };
  for (const auto& d : draws) {
    const auto tag = "choice_" + d.dtype;
    const auto r =
        run_request(request_v2("copy_kernel", {choice_case(tag, d.dtype, d.size, d.values, 77)}),
                    {"FAKE_CUDA_STATS=1"});
    CHECK_MSG(r.rc == 0 && r.answer["cases"][0]["status"] == "ok", d.dtype + ": " + r.out + r.err);
    const auto st = stats_of(r);
    CHECK_MSG(st.choices == 1 && st.fills == 0, d.dtype + ": " + r.err);
    const auto got = slurp(path(tag + "_out.bin"));
    CHECK_MSG(got == expected_bytes(d.bits, d.size, 77),
              d.dtype + ": not the table at the randint");
    std::set<std::string> seen;  // every value is drawn somewhere in 64 elements
    for (std::size_t i = 0; i + d.size <= got.size(); i += d.size)
      seen.insert(got.substr(i, d.size));
    CHECK_MSG(seen.size() == d.bits.size(), d.dtype + ": " + std::to_string(seen.size()));
  }
}

TEST_CASE("input_draw: a choice with a structure is the choice, then the structure") {
  auto c = choice_case("choice_triu", "float32", 4, {-1.0, 1.0}, 78);
  c["args"][0]["input_draw"]["structure"] = {{"kind", "triu"}, {"rows", 4}, {"cols", 4}};
  const auto r = run_request(request_v2("copy_kernel", {c}), {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0 && r.answer["cases"][0]["status"] == "ok", r.out + r.err);
  CHECK_MSG(stats_of(r).choices == 1 && stats_of(r).structures == 1, r.err);
  const auto dense = expected_bytes({bits_of(-1.0f), bits_of(1.0f)}, 4, 78);
  const auto got = slurp(path("choice_triu_out.bin"));
  bool ok = got.size() == dense.size();
  for (std::size_t i = 0; ok && i < n_elements; ++i) {
    const std::size_t row = (i / 4) % 4, col = i % 4;
    ok = got.substr(4 * i, 4) == (col < row ? std::string(4, '\0') : dense.substr(4 * i, 4));
  }
  CHECK_MSG(ok, "the structure after the choice");
}

TEST_CASE("input_draw: a choice is cached apart from another choice of the same seed") {
  auto one = request_v2("copy_kernel", {choice_case("cc_a", "float32", 4, {-1.0, 1.0}, 81)});
  one["input_cache"] = true;
  auto other = one;
  other["cases"][0] = choice_case("cc_b", "float32", 4, {0.0, 1.0}, 81);
  const auto r = run({"serve"}, one.dump() + "\n" + other.dump() + "\n" + other.dump() + "\n");
  CHECK_MSG(r.rc == 0 && r.lines.size() == 3, r.out + r.err);
  if (r.lines.size() != 3) return;
  CHECK_MSG(r.lines[1]["input_cache"]["misses"] == 1, r.lines[1].dump());
  CHECK_MSG(r.lines[2]["input_cache"]["hits"] == 1, r.lines[2].dump());
  CHECK(slurp(path("cc_b_out.bin")) == expected_bytes({bits_of(0.0f), bits_of(1.0f)}, 4, 81));
}

TEST_CASE("fresh: a choice buffer is redrawn by ko_choice before every timed launch") {
  auto c = fresh_case("cfresh", {{"warmup", 1}, {"iterations", 3}}, {1});
  c["args"][0]["fresh"] = {{"kind", "choice"}, {"values", {1.0, 2.0, 4.0}}};
  const auto r = run_request(with_reference(request_v2("copy_kernel", {c})), {"FAKE_CUDA_STATS=1"});
  CHECK_MSG(r.rc == 0 && r.answer["cases"][0]["status"] == "ok", r.out + r.err);
  const auto st = stats_of(r);
  CHECK_MSG(st.choices >= 4 && st.fills == 0, r.err);
}

TEST_CASE("choice: malformed values exit 2 naming the field") {
  struct Bad {
    std::string dtype;
    json values;
    std::string message;
  };
  const std::string at = "cases[0].args[0].input_draw.values";
  const std::vector<Bad> bads = {
      {"float32", json::array(), at + ": must hold 1 to 16 numbers, got 0"},
      {"float32", json(std::vector<double>(17, 1.0)), at + ": must hold 1 to 16 numbers, got 17"},
      {"float32", 1.0, at + ": must be an array of numbers, got a floating-point number"},
      {"float32", {1.0, "x"}, at + "[1]: must be a finite number, got a string"},
      {"float32", {1.0, nullptr}, at + "[1]: must be a finite number, got null"},
      {"float32", {0.1}, at + "[0]: 0.10000000000000001 is not exactly representable in float32"},
      {"float16", {1e5}, at + "[0]: 100000 is not exactly representable in float16"},
      {"float16",
       {std::ldexp(1.0, -25)},
       at + "[0]: 2.9802322387695312e-08 is not exactly representable in float16"},
      {"bfloat16",
       {1.001},
       at + "[0]: 1.0009999999999999 is not exactly representable in bfloat16"},
      {"int32", {1.5}, at + "[0]: 1.5 is not exactly representable in int32"},
      {"uint8", {-1, 300}, at + "[0]: -1 is not exactly representable in uint8"},
      {"uint8", {255, 256}, at + "[1]: 256 is not exactly representable in uint8"},
      {"int64",
       {9223372036854775808.0},
       at + "[0]: 9.2233720368547758e+18 is not exactly representable in int64"},
  };
  for (const auto& bad : bads) {
    const auto r =
        run_request(request_v2("copy_kernel", {choice_case("cbad", bad.dtype, 8, bad.values, 1)}));
    CHECK_MSG(r.rc == 2, bad.message + ": " + r.out);
    CHECK_MSG(test::contains(r.answer["error"]["message"].get<std::string>(), bad.message),
              bad.message + " vs " + r.answer.dump());
  }
  // the same checks on "fresh"
  auto c = fresh_case("cfbad", {{"warmup", 1}, {"iterations", 2}}, {0});
  c["args"][0]["fresh"] = {{"kind", "choice"}, {"values", {0.1}}};
  const auto r = run_request(with_reference(request_v2("copy_kernel", {c})));
  CHECK_MSG(r.rc == 2 && test::contains(r.answer["error"]["message"].get<std::string>(),
                                        "cases[0].args[0].fresh.values[0]: 0.10000000000000001"),
            r.out);
}
