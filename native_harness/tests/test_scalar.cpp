#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "request.hpp"
#include "test_util.hpp"

using kernelopt::detail::decode_hex;
using nlohmann::json;

namespace {

std::string scalar_error(const std::string& dtype, const std::string& raw) {
  json doc = {{"protocol", 1}, {"module", "/m"}, {"entry", "k"}};
  doc["cases"] = json::array(
      {{{"name", "c"},
        {"args",
         json::array({{{"kind", "scalar"}, {"name", "s"}, {"dtype", dtype}, {"raw", raw}}})},
        {"launch", {{"grid", {1, 1, 1}}, {"block", {1, 1, 1}}}}}});
  try {
    kernelopt::parse_request(doc);
  } catch (const kernelopt::BadRequest& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("hex decodes little-endian bytes in order, either case") {
  CHECK(decode_hex("00100000", 4) == (std::vector<std::uint8_t>{0x00, 0x10, 0x00, 0x00}));
  CHECK(decode_hex("0000803F", 4) == (std::vector<std::uint8_t>{0x00, 0x00, 0x80, 0x3f}));
  CHECK(decode_hex("ffFE", 2) == (std::vector<std::uint8_t>{0xff, 0xfe}));
  CHECK(decode_hex("", 0) == std::vector<std::uint8_t>{});
}

TEST_CASE("hex of the wrong length or with bad digits is rejected") {
  CHECK(!decode_hex("001000", 4));
  CHECK(!decode_hex("0010000000", 4));
  CHECK(!decode_hex("0x100000", 4));
  CHECK(!decode_hex("0g", 1));
  CHECK(!decode_hex(" 1", 1));
}

TEST_CASE("every dtype has its size") {
  using kernelopt::ScalarType;
  CHECK(kernelopt::scalar_size(ScalarType::int8) == 1);
  CHECK(kernelopt::scalar_size(ScalarType::uint8) == 1);
  CHECK(kernelopt::scalar_size(ScalarType::int16) == 2);
  CHECK(kernelopt::scalar_size(ScalarType::float16) == 2);
  CHECK(kernelopt::scalar_size(ScalarType::bfloat16) == 2);
  CHECK(kernelopt::scalar_size(ScalarType::uint32) == 4);
  CHECK(kernelopt::scalar_size(ScalarType::float32) == 4);
  CHECK(kernelopt::scalar_size(ScalarType::int64) == 8);
  CHECK(kernelopt::scalar_size(ScalarType::float64) == 8);
  for (const char* name : {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                           "float16", "bfloat16", "float32", "float64"}) {
    const auto t = kernelopt::scalar_type_from_name(name);
    CHECK(t && std::string(kernelopt::scalar_type_name(*t)) == name);
  }
  CHECK(!kernelopt::scalar_type_from_name("float8"));
  CHECK(!kernelopt::scalar_type_from_name("Float32"));
}

TEST_CASE("scalar validation names the field and the expected width") {
  CHECK(scalar_error("float64", "0000000000000040").empty());
  CHECK(scalar_error("bfloat16", "803f").empty());
  const auto short_raw = scalar_error("int32", "0010");
  CHECK_MSG(test::contains(short_raw, "cases[0].args[0].raw: must be 8 hex digits"), short_raw);
  const auto dtype = scalar_error("complex64", "00");
  CHECK_MSG(test::contains(dtype, "cases[0].args[0].dtype: unknown dtype \"complex64\""), dtype);
  const auto bad = scalar_error("uint8", "zz");
  CHECK_MSG(test::contains(bad, "cases[0].args[0].raw"), bad);
}

TEST_MAIN()
