// Expected values kept on the device (feature device_expected): the request fields
// (keep_expected, "kept:KEY" expected values) and the figures of a kept copy (kept.hpp): elements,
// finite values and their sum of squares, with float16 and bfloat16 widened exactly and integers
// counted as finite. (test_request.cpp holds the other fields' validation.)

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "kept.hpp"
#include "request.hpp"
#include "request_errors.hpp"
#include "test_util.hpp"

using kernelopt::ScalarType;
using kernelopt::detail::bfloat16_bits_to_double;
using kernelopt::detail::half_bits_to_double;
using kernelopt::detail::kept_figures;
using kernelopt::detail::KeptFigures;
using nlohmann::json;

namespace {

template <typename T>
KeptFigures figures_of(const std::vector<T>& v, ScalarType dtype) {
  return kept_figures(reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * sizeof(T), dtype);
}

// A reference's case (C kept as "ref.C") and a candidate's (D compared with "kept:ref.C").
json valid_kept() {
  return json::parse(R"({
    "protocol": 2, "module": "/m.cubin", "entry": "k", "input_cache": true,
    "support_module": "/support.cubin",
    "cases": [{
      "name": "ref",
      "args": [
        {"kind": "buffer", "name": "A", "role": "in", "bytes": 16, "input": "/a"},
        {"kind": "buffer", "name": "C", "role": "out", "bytes": 16, "output": "/c",
         "dtype": "float32", "keep_expected": "ref.C"}
      ],
      "launch": {"grid": [1, 1, 1], "block": [32, 1, 1]}
    }, {
      "name": "cand",
      "args": [
        {"kind": "buffer", "name": "A", "role": "in", "bytes": 16, "input": "/a"},
        {"kind": "buffer", "name": "D", "role": "inout", "bytes": 16, "input": "/d", "output": "/do",
         "dtype": "float32", "expected": "kept:ref.C", "expected_dtype": "float32",
         "compare": {"abs_tol": 0, "rtol": 0.001, "rel_floor": 1.0}}
      ],
      "launch": {"grid": [1, 1, 1], "block": [32, 1, 1]}
    }]
  })");
}

}  // namespace

TEST_CASE("keep_expected and kept: expected values parse") {
  const auto r = kernelopt::parse_request(valid_kept());
  const auto& c = r.cases[0].args[1].buffer;
  CHECK(c.keep_expected == "ref.C" && c.expected.empty() && r.cases[0].has_keep_expected());
  CHECK(!r.cases[0].has_compare());
  const auto& d = r.cases[1].args[1].buffer;
  CHECK(d.expected == "kept:ref.C" && d.expected_kept() && !d.timed_expected_kept());
  CHECK(d.native_expected() && !r.cases[1].has_keep_expected() && r.cases[1].has_compare());
  // Every allowed character, 128 of them; write_output beside keep_expected; no support module
  // needed to keep.
  auto doc = valid_kept();
  doc["cases"][0]["args"][1]["keep_expected"] = "aZ09._:-" + std::string(120, 'x');
  doc["cases"][0]["args"][1]["write_output"] = true;
  doc["cases"][1]["args"][1]["timed_expected"] = "kept:" + std::string(128, 'k');
  CHECK(test::error_of(doc).empty());
  doc["cases"].erase(1);
  doc.erase("support_module");
  CHECK(test::error_of(doc).empty());
  // A float64 buffer's kept copy is float64: the default expected_dtype fits.
  doc = valid_kept();
  doc["cases"][1]["args"][1]["dtype"] = "float64";
  doc["cases"][1]["args"][1].erase("expected_dtype");
  CHECK(test::error_of(doc).empty());
}

TEST_CASE("keep_expected is validated with its path") {
  const std::string c = "cases[0].args[1].";
  auto doc = valid_kept();
  doc["cases"][0]["args"][0]["keep_expected"] = "a";
  EXPECT_ERROR(doc, "cases[0].args[0].keep_expected: an \"in\" buffer is not written");
  doc = valid_kept();
  doc.erase("input_cache");
  EXPECT_ERROR(doc, c + "keep_expected: needs \"input_cache\": true");
  doc = valid_kept();
  doc["cases"][0]["args"][1].erase("dtype");
  EXPECT_ERROR(doc, c + "dtype: is required with \"keep_expected\"");
  for (const json& bad :
       {json(""), json("a b"), json("a/b"), json("ü"), json(std::string(129, 'a')), json(5)}) {
    doc = valid_kept();
    doc["cases"][0]["args"][1]["keep_expected"] = bad;
    EXPECT_ERROR(doc, c + "keep_expected: must be ");
  }
  doc = valid_kept();
  doc["cases"][1]["args"][1]["keep_expected"] = "ref.C";
  EXPECT_ERROR(doc, "cases[1].args[1].keep_expected: is refused beside \"expected\"");
  doc["cases"][1]["args"][1].erase("expected");
  doc["cases"][1]["args"][1].erase("expected_dtype");
  doc["cases"][1]["args"][1].erase("compare");
  EXPECT_ERROR(doc,
               "cases[1].args[1].keep_expected: duplicate key \"ref.C\" (also "
               "cases[0].args[1].keep_expected)");
  doc["cases"][1]["args"][1]["keep_expected"] = "other";
  CHECK(test::error_of(doc).empty());
}

TEST_CASE("kept: expected values are validated with their path") {
  const std::string d = "cases[1].args[1].";
  auto doc = valid_kept();
  doc["cases"][1]["args"][1].erase("expected_dtype");
  EXPECT_ERROR(doc, d + "expected_dtype: must be the buffer's dtype \"float32\" when expected "
                        "values are \"kept:\"");
  doc["cases"][1]["args"][1]["expected_dtype"] = "float64";
  EXPECT_ERROR(doc, d + "expected_dtype: must be the buffer's dtype \"float32\"");
  doc = valid_kept();
  doc["cases"][1]["args"][1]["timed_expected"] = "kept:t";  // expected_dtype covers both
  CHECK(test::error_of(doc).empty());
  doc["cases"][1]["args"][1]["expected"] = "/e.bin";
  CHECK(test::error_of(doc).empty());  // a float32 file beside a kept timed copy
  doc["cases"][1]["args"][1].erase("expected_dtype");
  EXPECT_ERROR(doc, d + "expected_dtype: must be the buffer's dtype");
  for (const char* bad : {"kept:", "kept:a b", "kept:a/b"}) {
    doc = valid_kept();
    doc["cases"][1]["args"][1]["expected"] = bad;
    EXPECT_ERROR(doc, d + "expected: \"kept:\" must be followed by a key");
    doc = valid_kept();
    doc["cases"][1]["args"][1]["timed_expected"] = bad;
    EXPECT_ERROR(doc, d + "timed_expected: \"kept:\" must be followed by a key");
  }
  doc = valid_kept();
  doc.erase("input_cache");
  doc["cases"].erase(0);
  EXPECT_ERROR(doc, "cases[0].args[1].expected: a \"kept:\" value needs \"input_cache\": true");
  doc = valid_kept();
  doc.erase("support_module");
  EXPECT_ERROR(doc, "support_module: is required by cases[1].args[1].expected");
}

TEST_CASE("float16 and bfloat16 widen exactly") {
  CHECK(half_bits_to_double(0x3C00) == 1.0);
  CHECK(half_bits_to_double(0xC000) == -2.0);
  CHECK(half_bits_to_double(0x7BFF) == 65504.0);
  CHECK(half_bits_to_double(0x0001) == std::ldexp(1.0, -24));  // the smallest subnormal
  CHECK(half_bits_to_double(0x3555) == 0x1.554p-2);
  CHECK(half_bits_to_double(0x8000) == 0.0 && std::signbit(half_bits_to_double(0x8000)));
  CHECK(std::isinf(half_bits_to_double(0xFC00)) && half_bits_to_double(0xFC00) < 0);
  CHECK(std::isnan(half_bits_to_double(0x7E00)));
  CHECK(bfloat16_bits_to_double(0x3F80) == 1.0);
  CHECK(bfloat16_bits_to_double(0x4049) == 3.140625);
  CHECK(bfloat16_bits_to_double(0x0001) == std::ldexp(1.0, -133));
  CHECK(std::isinf(bfloat16_bits_to_double(0xFF80)));
  CHECK(std::isnan(bfloat16_bits_to_double(0x7FC0)));
}

TEST_CASE("figures count finite values and sum their squares in double") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto f = figures_of(std::vector<float>{1, -2, nan, 0.5f, -inf, 3}, ScalarType::float32);
  CHECK(f.elements == 6 && f.finite == 4 && f.sum_sq == 1 + 4 + 0.25 + 9);
  // float32 values squared in double: no float rounding of 3.4e38^2.
  f = figures_of(std::vector<float>{std::numeric_limits<float>::max()}, ScalarType::float32);
  const double m = std::numeric_limits<float>::max();
  CHECK(f.finite == 1 && f.sum_sq == m * m);
  f = figures_of(std::vector<double>{1e200, 1e200, 2}, ScalarType::float64);
  CHECK(f.finite == 3 && std::isinf(f.sum_sq));  // overflows: the answer prints "inf"
  f = figures_of(std::vector<std::uint16_t>{0x3C00, 0xC000, 0x7C00, 0x7E00, 0x0001},
                 ScalarType::float16);
  CHECK(f.elements == 5 && f.finite == 3 && f.sum_sq == 1 + 4 + std::ldexp(1.0, -48));
  f = figures_of(std::vector<std::uint16_t>{0x3F80, 0x4049, 0xFF80}, ScalarType::bfloat16);
  CHECK(f.elements == 3 && f.finite == 2 && f.sum_sq == 1 + 3.140625 * 3.140625);
}

TEST_CASE("integers are all finite, widened to double") {
  auto f = figures_of(std::vector<std::int8_t>{-128, 127, 0}, ScalarType::int8);
  CHECK(f.elements == 3 && f.finite == 3 && f.sum_sq == 16384 + 16129);
  f = figures_of(std::vector<std::uint8_t>{255, 1}, ScalarType::uint8);
  CHECK(f.finite == 2 && f.sum_sq == 65025 + 1);
  f = figures_of(std::vector<std::int32_t>{-3, 4}, ScalarType::int32);
  CHECK(f.sum_sq == 25);
  const double big = static_cast<double>(UINT64_MAX);
  f = figures_of(std::vector<std::uint64_t>{UINT64_MAX}, ScalarType::uint64);
  CHECK(f.finite == 1 && f.sum_sq == big * big);
  f = figures_of(std::vector<std::int64_t>{}, ScalarType::int64);
  CHECK(f.elements == 0 && f.finite == 0 && f.sum_sq == 0);
  // bytes / itemsize elements
  f = figures_of(std::vector<std::int16_t>{1, 2, 3, 4}, ScalarType::int16);
  CHECK(f.elements == 4 && f.sum_sq == 30);
}

TEST_MAIN()
