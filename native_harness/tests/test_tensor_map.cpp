// Tensor maps (feature "tensor_maps"): parsing cases[i].tensor_maps, every rule of PROTOCOL.md
// "Tensor maps" with the path it names, reach, and the kernel parameter sizes they take.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "request.hpp"
#include "request_errors.hpp"
#include "runner.hpp"
#include "tensor_map.hpp"
#include "test_util.hpp"

using kernelopt::BadRequest;
using kernelopt::ScalarType;
using kernelopt::TensorMapSpec;
using nlohmann::json;

namespace {

constexpr const char* map0 = "cases[0].tensor_maps[0]";

// A 64 x 32 bfloat16 matrix, packed (4096 bytes), in A; a map over all of it.
json valid() {
  return json::parse(R"({
    "protocol": 2, "module": "/m.cubin", "entry": "k",
    "cases": [{
      "name": "c0",
      "args": [
        {"kind": "buffer", "name": "A", "role": "in", "bytes": 4096, "input": "/a"},
        {"kind": "buffer", "name": "C", "role": "out", "bytes": 4096, "output": "/c"},
        {"kind": "scalar", "name": "n", "dtype": "int32", "raw": "00100000"}
      ],
      "tensor_maps": [
        {"buffer": "A", "dtype": "bfloat16", "dims": [64, 32], "box": [64, 8]}
      ],
      "launch": {"grid": [1, 1, 1], "block": [128, 1, 1]}
    }]
  })");
}

json with_map(const json& map) {
  auto doc = valid();
  doc["cases"][0]["tensor_maps"] = json::array({map});
  return doc;
}

json& map_of(json& doc) { return doc["cases"][0]["tensor_maps"][0]; }

// The BadRequest message of validate_tensor_map, or "".
std::string validate_error(const TensorMapSpec& m, std::uint64_t bytes) {
  try {
    kernelopt::detail::validate_tensor_map(m, bytes, "m");
  } catch (const BadRequest& e) {
    return e.what();
  }
  return "";
}

TensorMapSpec spec_2d(std::uint64_t rows, std::uint64_t cols, std::uint64_t pitch) {
  TensorMapSpec m;
  m.buffer = "A";
  m.dtype = ScalarType::float32;
  m.dims = {cols, rows};
  m.strides = {pitch};
  m.box = {16, 4};
  m.element_strides = {1, 1};
  return m;
}

kernelopt::Request parse(const json& doc) { return kernelopt::parse_request(doc); }

}  // namespace

TEST_CASE("a tensor map parses with its defaults: packed strides, element strides 1") {
  const auto r = parse(valid());
  const auto& maps = r.cases[0].tensor_maps;
  CHECK(maps.size() == 1);
  const auto& m = maps[0];
  CHECK(m.buffer == "A" && m.arg == 0 && m.dtype == ScalarType::bfloat16);
  CHECK(m.dims == (std::vector<std::uint64_t>{64, 32}));
  CHECK(m.packed && m.strides == std::vector<std::uint64_t>{128});
  CHECK(m.box == (std::vector<std::uint32_t>{64, 8}));
  CHECK(m.element_strides == (std::vector<std::uint32_t>{1, 1}));
  CHECK(m.swizzle == kernelopt::TensorSwizzle::none);
  CHECK(m.l2_promotion == kernelopt::TensorL2Promotion::none);
  CHECK(m.oob_fill == kernelopt::TensorOobFill::zero);
  CHECK(kernelopt::detail::tensor_map_reach(m) == 4096u);
}

TEST_CASE("every tensor map field parses; any role; maps keep their order") {
  auto doc = valid();
  doc["cases"][0]["tensor_maps"] = json::parse(R"([
    {"buffer": "C", "dtype": "float32", "dims": [16, 8, 4], "strides": [64, 1024],
     "box": [8, 2, 1], "element_strides": [1, 2, 1], "swizzle": "32B", "l2_promotion": "256B",
     "oob_fill": "nan"},
    {"buffer": "A", "dtype": "uint8", "dims": [4096], "box": [256], "swizzle": "none",
     "l2_promotion": "64B", "oob_fill": "zero"}
  ])");
  const auto r = parse(doc);
  const auto& maps = r.cases[0].tensor_maps;
  CHECK(maps.size() == 2);
  CHECK(maps[0].buffer == "C" && maps[0].arg == 1 && !maps[0].packed);
  CHECK(maps[0].strides == (std::vector<std::uint64_t>{64, 1024}));
  CHECK(maps[0].element_strides == (std::vector<std::uint32_t>{1, 2, 1}));
  CHECK(maps[0].swizzle == kernelopt::TensorSwizzle::b32);
  CHECK(maps[0].l2_promotion == kernelopt::TensorL2Promotion::b256);
  CHECK(maps[0].oob_fill == kernelopt::TensorOobFill::nan);
  CHECK(maps[1].arg == 0 && maps[1].strides.empty() && maps[1].packed);
  CHECK(maps[1].l2_promotion == kernelopt::TensorL2Promotion::b64);
  // strides: 3 * 1024 + 15 * 4 + 7 * 64 + 4 = 3584 bytes of C's 4096
  CHECK(kernelopt::detail::tensor_map_reach(maps[0]) == 3584u);
  // no tensor_maps, an empty list, or null: none
  doc = valid();
  doc["cases"][0].erase("tensor_maps");
  CHECK(parse(doc).cases[0].tensor_maps.empty());
  doc["cases"][0]["tensor_maps"] = json::array();
  CHECK(parse(doc).cases[0].tensor_maps.empty());
  doc["cases"][0]["tensor_maps"] = nullptr;
  CHECK(parse(doc).cases[0].tensor_maps.empty());
}

TEST_CASE("reach: a map exactly covering its buffer passes, one byte more fails") {
  auto doc = valid();
  doc["cases"][0]["args"][0]["bytes"] = 4095;
  EXPECT_ERROR(doc, std::string(map0) + ": reaches past buffer \"A\" (4095 bytes)");
  CHECK(test::contains(test::error_of(doc), "ends at byte 4096"));
  // a pitched 2D map: 32 rows of 64 bf16 (128 bytes) 256 bytes apart: 31 * 256 + 128 = 8064
  auto pitched = valid();
  map_of(pitched)["strides"] = {256};
  pitched["cases"][0]["args"][0]["bytes"] = 8064;
  CHECK(test::error_of(pitched).empty());
  pitched["cases"][0]["args"][0]["bytes"] = 8063;
  EXPECT_ERROR(pitched, std::string(map0) + ": reaches past buffer \"A\" (8063 bytes)");
  // an empty buffer holds no element
  doc["cases"][0]["args"][0]["bytes"] = 0;
  EXPECT_ERROR(doc, std::string(map0) + ": reaches past buffer \"A\" (0 bytes)");
}

TEST_CASE("reach: a strided 2D sub-view of a larger matrix passes") {
  // A 100 x 80 float32 matrix (row pitch 320 bytes, 32000 bytes); the map covers 64 rows of its
  // first 48 columns: 63 * 320 + 47 * 4 + 4 = 20352 bytes.
  const auto m = spec_2d(64, 48, 320);
  CHECK(kernelopt::detail::tensor_map_reach(m) == 20352u);
  CHECK(validate_error(m, 32000).empty());
  CHECK(validate_error(m, 20352).empty());
  CHECK(test::contains(validate_error(m, 20351), "m: reaches past buffer \"A\" (20351 bytes)"));
  // rows further apart than the buffer allows: 99 rows of pitch 320 end at 31680 + 192
  CHECK(validate_error(spec_2d(100, 48, 320), 32000).empty());
  CHECK(!validate_error(spec_2d(101, 48, 320), 32000).empty());
}

TEST_CASE("reach: extents and strides too large for 64 bits are refused, not wrapped") {
  TensorMapSpec m = spec_2d(1, 1, 16);
  m.dims = {1ull << 32, 1ull << 32, 1ull << 32, 1ull << 32, 1ull << 32};
  m.strides = {(1ull << 40) - 16, (1ull << 40) - 16, (1ull << 40) - 16, (1ull << 40) - 16};
  m.box = {16, 1, 1, 1, 1};
  m.element_strides = {1, 1, 1, 1, 1};
  CHECK(!kernelopt::detail::tensor_map_reach(m));
  CHECK(test::contains(validate_error(m, kernelopt::max_buffer_bytes), "2^64 or more"));
  // packed strides that overflow saturate and are refused as too large
  const auto packed =
      kernelopt::detail::packed_tensor_strides({1ull << 32, 1ull << 32, 1ull << 32, 2}, 4);
  CHECK(packed == (std::vector<std::uint64_t>{1ull << 34, UINT64_MAX, UINT64_MAX}));
}

TEST_CASE("tensor map fields are validated with their paths") {
  const std::string p = map0;
  auto doc = valid();
  doc["cases"][0]["tensor_maps"] = json::object();
  EXPECT_ERROR(doc, "cases[0].tensor_maps: must be an array, got an object");
  EXPECT_ERROR(with_map(json::array()), p + ": must be an object");

  const auto bad = [&](const char* key, const json& value) {
    auto d = valid();
    if (value.is_null()) {
      map_of(d).erase(key);
    } else {
      map_of(d)[key] = value;
    }
    return d;
  };
  EXPECT_ERROR(bad("buffer", nullptr), p + ".buffer: is required");
  EXPECT_ERROR(bad("buffer", "Z"), p + ".buffer: no arg of this case is named \"Z\"");
  EXPECT_ERROR(bad("buffer", "n"), p + ".buffer: names the scalar \"n\" (args[2])");
  EXPECT_ERROR(bad("dtype", nullptr), p + ".dtype: is required");
  EXPECT_ERROR(bad("dtype", "float8"), p + ".dtype: unknown dtype \"float8\"");
  EXPECT_ERROR(bad("dtype", "int8"), p + ".dtype: \"int8\" is not a TMA element type");
  EXPECT_ERROR(bad("dtype", "int16"), p + ".dtype: \"int16\" is not a TMA element type");
  EXPECT_ERROR(bad("dims", nullptr), p + ".dims: is required");
  EXPECT_ERROR(bad("dims", 64), p + ".dims: must be an array of integers, got an integer");
  EXPECT_ERROR(bad("dims", {64, -1}), p + ".dims[1]: must be a non-negative integer");
  EXPECT_ERROR(bad("box", nullptr), p + ".box: is required");
  EXPECT_ERROR(bad("box", {64, 1.5}), p + ".box[1]: must be a non-negative integer");
  EXPECT_ERROR(bad("box", {64, 4294967296}), p + ".box[1]: must be at most 4294967295");
  EXPECT_ERROR(bad("strides", "128"), p + ".strides: must be an array of integers, got a string");
  EXPECT_ERROR(bad("swizzle", "16B"),
               p + ".swizzle: must be \"none\", \"32B\", \"64B\" or \"128B\", got \"16B\"");
  EXPECT_ERROR(bad("l2_promotion", "32B"),
               p + ".l2_promotion: must be \"none\", \"64B\", \"128B\" or \"256B\", got \"32B\"");
  EXPECT_ERROR(bad("oob_fill", "one"), p + ".oob_fill: must be \"zero\" or \"nan\", got \"one\"");
  EXPECT_ERROR(bad("oob_fill", true), p + ".oob_fill: must be a string");
  // the second map of the second case is named as such
  auto two = valid();
  two["cases"].push_back(valid()["cases"][0]);
  two["cases"][1]["name"] = "c1";
  two["cases"][1]["tensor_maps"].push_back(map_of(two));
  two["cases"][1]["tensor_maps"][1]["dims"] = {64, 0};
  EXPECT_ERROR(two, "cases[1].tensor_maps[1].dims[1]: must be 1..4294967296 (2^32), got 0");
}

TEST_CASE("rank, extents and strides follow cuTensorMapEncodeTiled") {
  const std::string p = map0;
  json base = valid();
  const json m = map_of(base);
  const auto doc_with = [&](const json& map) { return with_map(map); };
  auto rank0 = m;
  rank0["dims"] = json::array();
  rank0["box"] = json::array();
  EXPECT_ERROR(doc_with(rank0), p + ".dims: must hold 1 to 5 extents (the tensor's rank), got 0");
  auto rank6 = m;
  rank6["dims"] = {64, 1, 1, 1, 1, 1};
  rank6["box"] = {64, 1, 1, 1, 1, 1};
  EXPECT_ERROR(doc_with(rank6), p + ".dims: must hold 1 to 5 extents (the tensor's rank), got 6");
  auto rank5 = rank6;
  rank5["dims"] = {64, 2, 2, 2, 2};
  rank5["box"] = {64, 1, 1, 1, 1};
  auto doc5 = doc_with(rank5);
  doc5["cases"][0]["args"][0]["bytes"] = 64 * 2 * 16;
  CHECK(test::error_of(doc5).empty());
  auto huge = m;
  huge["dims"] = {64, 4294967297ull};
  EXPECT_ERROR(doc_with(huge), p + ".dims[1]: must be 1..4294967296 (2^32), got 4294967297");
  auto zero = m;
  zero["dims"] = {0, 32};
  EXPECT_ERROR(doc_with(zero), p + ".dims[0]: must be 1..4294967296 (2^32), got 0");

  auto strides = m;
  strides["strides"] = {128, 4096};
  EXPECT_ERROR(doc_with(strides),
               p + ".strides: must hold rank - 1 = 1 byte strides (of dimensions 1..1), got 2");
  strides["strides"] = {136};
  EXPECT_ERROR(doc_with(strides), p + ".strides[0]: must be a multiple of 16 bytes, got 136");
  strides["strides"] = {1ull << 40};
  EXPECT_ERROR(doc_with(strides),
               p + ".strides[0]: must be below 2^40 (1099511627776) bytes, got 1099511627776");
  // packed rows that are not a multiple of 16 bytes: 12 bf16 = 24 bytes
  auto packed = m;
  packed["dims"] = {12, 32};
  packed["box"] = {8, 8};
  EXPECT_ERROR(doc_with(packed),
               p + ".strides: omitted, so dimension 1's stride is the packed 24 bytes (dims "
                   "[12, 32] of 2-byte elements), which must be a multiple of 16 bytes");
  // a rank-1 map takes no strides
  auto flat = m;
  flat["dims"] = {2048};
  flat["box"] = {256};
  CHECK(test::error_of(doc_with(flat)).empty());
  flat["strides"] = {16};
  EXPECT_ERROR(doc_with(flat),
               p + ".strides: must hold rank - 1 = 0 byte strides (of dimensions 1..0), got 1");
}

TEST_CASE("box, element strides, swizzle and oob_fill follow cuTensorMapEncodeTiled") {
  const std::string p = map0;
  json base = valid();
  const json m = map_of(base);
  const auto with = [&](const char* key, const json& value) {
    auto map = m;
    map[key] = value;
    return with_map(map);
  };
  EXPECT_ERROR(with("box", {64}), p + ".box: must hold one entry per dimension (2), got 1");
  EXPECT_ERROR(with("box", {64, 0}), p + ".box[1]: must be 1..256, got 0");
  EXPECT_ERROR(with("box", {64, 257}), p + ".box[1]: must be 1..256, got 257");
  CHECK(test::error_of(with("box", {8, 256})).empty());
  // 12 bf16 are 24 bytes
  EXPECT_ERROR(
      with("box", {12, 8}),
      p + ".box[0]: box[0] * element size must be a multiple of 16 bytes, got 12 * 2 = 24");
  EXPECT_ERROR(with("element_strides", {1}),
               p + ".element_strides: must hold one entry per dimension (2), got 1");
  EXPECT_ERROR(with("element_strides", {1, 0}), p + ".element_strides[1]: must be 1..8, got 0");
  EXPECT_ERROR(with("element_strides", {9, 1}), p + ".element_strides[0]: must be 1..8, got 9");
  CHECK(test::error_of(with("element_strides", {8, 8})).empty());

  // with a swizzle, box[0] * size (here 64 bf16 = 128 bytes) is at most its span
  CHECK(test::error_of(with("swizzle", "128B")).empty());
  EXPECT_ERROR(with("swizzle", "64B"),
               p + ".swizzle: \"64B\" needs box[0] * element size <= 64 bytes (the swizzle's "
                   "span), got 128");
  auto narrow = m;
  narrow["box"] = {16, 8};  // 32 bytes
  narrow["swizzle"] = "32B";
  CHECK(test::error_of(with_map(narrow)).empty());
  narrow["box"] = {32, 8};
  EXPECT_ERROR(with_map(narrow), p + ".swizzle: \"32B\" needs box[0] * element size <= 32");

  // oob_fill "nan" is for float types only
  CHECK(test::error_of(with("oob_fill", "nan")).empty());
  auto ints = m;
  ints["dtype"] = "int32";
  ints["dims"] = {32, 32};  // 4096 bytes
  ints["box"] = {4, 8};
  CHECK(test::error_of(with_map(ints)).empty());
  ints["oob_fill"] = "nan";
  EXPECT_ERROR(with_map(ints), p + ".oob_fill: \"nan\" needs a float dtype (float16, bfloat16, "
                                   "float32, float64), got \"int32\"");
}

TEST_CASE("every TMA dtype is accepted with its element size") {
  for (const auto& [dtype, size] : std::vector<std::pair<const char*, int>>{{"uint8", 1},
                                                                            {"uint16", 2},
                                                                            {"uint32", 4},
                                                                            {"int32", 4},
                                                                            {"uint64", 8},
                                                                            {"int64", 8},
                                                                            {"float16", 2},
                                                                            {"bfloat16", 2},
                                                                            {"float32", 4},
                                                                            {"float64", 8}}) {
    auto doc =
        with_map({{"buffer", "A"}, {"dtype", dtype}, {"dims", {4096 / size}}, {"box", {16}}});
    CHECK_MSG(test::error_of(doc).empty(), dtype + std::string(": ") + test::error_of(doc));
    doc["cases"][0]["args"][0]["bytes"] = 4095;
    CHECK_MSG(!test::error_of(doc).empty(), dtype);
  }
}

TEST_CASE("parameter sizes: the args, then one 128-byte parameter per tensor map") {
  const auto req = parse(valid());
  const auto error = [&](const std::vector<std::size_t>& sizes) {
    try {
      kernelopt::detail::check_parameter_sizes(req, sizes);
    } catch (const BadRequest& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error({8, 8, 4, 128}).empty());
  CHECK(error({}).empty());  // the driver could not tell
  CHECK(test::contains(error({8, 8, 4}),
                       "cases[0].tensor_maps: kernel \"k\" takes 3 parameter(s) but 4 are given "
                       "(3 args, then 1 tensor maps)"));
  CHECK(test::contains(error({8, 8, 4, 128, 128}), "takes 5 parameter(s) but 4 are given"));
  CHECK(test::contains(error({8, 8, 4, 8}),
                       "cases[0].tensor_maps[0]: kernel parameter 3 of \"k\" is 8 bytes but a "
                       "tensor map is passed as a 128-byte CUtensorMap"));
  CHECK(test::contains(error({8, 8, 8, 128}),
                       "cases[0].args[2]: kernel parameter 2 of \"k\" is 8 bytes but dtype int32 "
                       "is 4 bytes"));
  // without tensor maps the count names the args, as before
  auto plain = valid();
  plain["cases"][0].erase("tensor_maps");
  const auto req2 = parse(plain);
  try {
    kernelopt::detail::check_parameter_sizes(req2, {8, 8, 4, 128});
    CHECK(false);
  } catch (const BadRequest& e) {
    CHECK(test::contains(e.what(),
                         "cases[0].args: kernel \"k\" takes 4 parameter(s) but 3 are "
                         "given"));
  }
}

TEST_MAIN()
