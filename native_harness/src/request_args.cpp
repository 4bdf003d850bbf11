// Kernel arguments of a request (buffers and scalars) and the names of their types.
#include "request_args.hpp"

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "choice_bits.hpp"
#include "request_fields.hpp"

namespace kernelopt {
namespace detail {
namespace {

BufferRole parse_role(const json& v, const std::string& path) {
  const auto s = as_string(v, path);
  if (s == "in") return BufferRole::in;
  if (s == "out") return BufferRole::out;
  if (s == "inout") return BufferRole::inout;
  fail(path, "must be one of \"in\", \"out\", \"inout\", got \"" + s + "\"");
}

ScalarType parse_dtype(const json& v, const std::string& path) {
  const auto name = as_string(v, path);
  const auto type = scalar_type_from_name(name);
  if (!type) {
    fail(path, "unknown dtype \"" + name +
                   "\" (known: int8, int16, int32, int64, uint8, uint16, uint32, uint64, "
                   "float16, bfloat16, float32, float64)");
  }
  return *type;
}

CompareTolerance parse_compare(const json& c, const std::string& path) {
  expect_object(c, path);
  CompareTolerance t;
  t.abs_tol = as_non_negative(require(c, path, "abs_tol"), member_path(path, "abs_tol"));
  t.rtol = as_non_negative(require(c, path, "rtol"), member_path(path, "rtol"));
  t.rel_floor = as_non_negative(require(c, path, "rel_floor"), member_path(path, "rel_floor"));
  if (t.rel_floor == 0) {
    fail(member_path(path, "rel_floor"),
         "must be > 0 (the RMS of the expected values, or 1.0 when that is 0)");
  }
  return t;
}

// {"kind": "triu" | "tril" | "symmetric", "diagonal" (default 0), "rows", "cols"}: the draw's
// matrices after the fill (kernelopt_mcp/input_structure.py). Whether rows x cols fits the buffer
// is checked with the buffer (check_structure).
DrawStructure parse_structure(const json& s, const std::string& path) {
  expect_object(s, path);
  DrawStructure st;
  const auto kind_path = member_path(path, "kind");
  const auto kind = as_string(require(s, path, "kind"), kind_path);
  if (kind == "triu") {
    st.kind = StructureKind::triu;
  } else if (kind == "tril") {
    st.kind = StructureKind::tril;
  } else if (kind == "symmetric") {
    st.kind = StructureKind::symmetric;
  } else {
    fail(kind_path, "must be \"triu\", \"tril\" or \"symmetric\", got \"" + kind + "\"");
  }
  if (const json* v = find(s, "diagonal")) {
    const auto p = member_path(path, "diagonal");
    st.diagonal = as_int64(*v, p);
    constexpr std::int64_t bound = std::int64_t{1} << 48;  // no matrix is wider
    if (st.diagonal < -bound || st.diagonal > bound) fail(p, "must be within -2^48..2^48");
  }
  st.rows = as_uint(require(s, path, "rows"), member_path(path, "rows"), max_buffer_bytes);
  st.cols = as_uint(require(s, path, "cols"), member_path(path, "cols"), max_buffer_bytes);
  if (st.rows == 0 || st.cols == 0) fail(path, "rows and cols must be >= 1");
  if (st.kind == StructureKind::symmetric && (st.rows != st.cols || st.diagonal != 0)) {
    fail(path, "symmetric needs square matrices (rows == cols) and diagonal 0, got " +
                   std::to_string(st.rows) + " x " + std::to_string(st.cols) + ", diagonal " +
                   std::to_string(st.diagonal));
  }
  return st;
}

// A structure's matrices must tile the buffer: its element count a whole multiple of rows x cols.
void check_structure(const FreshSpec& spec, const BufferArg& b, const std::string& path) {
  if (!spec.structure) return;
  const auto& st = *spec.structure;
  const std::uint64_t elements = b.bytes / scalar_size(*b.dtype);
  if (st.cols > elements || st.rows > elements / st.cols || elements % (st.rows * st.cols) != 0) {
    fail(member_path(path, "structure"), std::to_string(st.rows) + " x " + std::to_string(st.cols) +
                                             " matrices do not tile the buffer's " +
                                             std::to_string(elements) + " elements");
  }
}

// A choice's values must each be exactly a value of the buffer's dtype: their bits are ko_choice's
// table (choice_bits.hpp; Python rounds them once, and nothing is rounded again here).
void check_choice(FreshSpec& spec, const BufferArg& b, const std::string& path) {
  if (spec.kind != FreshKind::choice) return;
  const auto p = member_path(path, "values");
  for (std::size_t i = 0; i < spec.values.size(); ++i) {
    const auto bits = choice_bits(spec.values[i], *b.dtype);
    if (!bits) {
      char shown[32];
      std::snprintf(shown, sizeof shown, "%.17g", spec.values[i]);
      fail(index_path(p, i), std::string(shown) + " is not exactly representable in " +
                                 scalar_type_name(*b.dtype) +
                                 " (the buffer's dtype: values are sent rounded to it)");
    }
    spec.choice_bits[i] = *bits;
  }
}

// What a draw's spec needs of its buffer: a structure's matrices tile it, a choice's values are
// of its dtype.
void check_draw(FreshSpec& spec, const BufferArg& b, const std::string& path) {
  check_structure(spec, b, path);
  check_choice(spec, b, path);
}

// {"kind": "uniform", "low", "high"} | {"kind": "normal", "mean", "std"} |
// {"kind": "randint", "low", "high"} (integers, high exclusive) | {"kind": "choice", "values":
// [1 to 16 finite numbers]}, each with an optional "structure".
FreshSpec parse_fresh(const json& f, const std::string& path) {
  expect_object(f, path);
  FreshSpec spec;
  const auto kind_path = member_path(path, "kind");
  const auto kind = as_string(require(f, path, "kind"), kind_path);
  if (kind == "uniform" || kind == "normal") {
    const char* first = kind == "uniform" ? "low" : "mean";
    const char* second = kind == "uniform" ? "high" : "std";
    spec.kind = kind == "uniform" ? FreshKind::uniform : FreshKind::normal;
    spec.a = as_finite(require(f, path, first), member_path(path, first));
    spec.b = as_finite(require(f, path, second), member_path(path, second));
    if (spec.kind == FreshKind::normal && spec.b < 0)
      fail(member_path(path, "std"), "must be >= 0");
  } else if (kind == "randint") {
    spec.kind = FreshKind::randint;
    spec.low = as_int64(require(f, path, "low"), member_path(path, "low"));
    const auto high = as_int64(require(f, path, "high"), member_path(path, "high"));
    if (high <= spec.low) fail(member_path(path, "high"), "must be greater than low");
    spec.range = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(spec.low);
  } else if (kind == "choice") {
    spec.kind = FreshKind::choice;
    const auto p = member_path(path, "values");
    const json& values = require(f, path, "values");
    if (!values.is_array())
      fail(p, std::string("must be an array of numbers, got ") + type_name(values));
    if (values.empty() || values.size() > max_choice_values) {
      fail(p, "must hold 1 to " + std::to_string(max_choice_values) + " numbers, got " +
                  std::to_string(values.size()));
    }
    for (std::size_t i = 0; i < values.size(); ++i) {
      spec.values.push_back(as_finite(values[i], index_path(p, i)));
    }
  } else {
    fail(kind_path,
         "must be \"uniform\", \"normal\", \"randint\" or \"choice\", got \"" + kind + "\"");
  }
  if (const json* v = find(f, "structure")) {
    spec.structure = parse_structure(*v, member_path(path, "structure"));
  }
  return spec;
}

// "input_draw" / "timed_input_draw": {"seed": u64, "kind", ...as "fresh"}, each instead of
// the file field it replaces (input / timed_input), on a buffer that reads an input.
void parse_input_draws(const json& a, const std::string& path, BufferArg& b) {
  const struct {
    const char* key;
    const char* file_key;
    std::optional<InputDraw>& draw;
  } fields[] = {{"input_draw", "input", b.input_draw},
                {"timed_input_draw", "timed_input", b.timed_input_draw}};
  for (const auto& f : fields) {
    const json* v = find(a, f.key);
    if (v == nullptr) continue;
    const auto p = member_path(path, f.key);
    if (b.role == BufferRole::out) {
      fail(p, "an \"out\" buffer has no input; drawn inputs belong to \"in\" or \"inout\" buffers");
    }
    if (find(a, f.file_key) != nullptr) {
      fail(p, std::string("is instead of \"") + f.file_key + "\": give one of the two");
    }
    if (!b.dtype)
      fail(member_path(path, "dtype"), std::string("is required with \"") + f.key + "\"");
    InputDraw draw;
    draw.spec = parse_fresh(*v, p);  // an object with "kind" and its parameters
    check_draw(draw.spec, b, p);
    draw.seed = as_uint(require(*v, p, "seed"), member_path(p, "seed"), UINT64_MAX);
    f.draw = draw;
  }
}

// "keep_expected": "KEY" (feature device_expected): the output kept on the device as expected
// values. Needs dtype (the answer's figures) and is refused beside "expected" (the buffer is the
// reference's, not a candidate's). "input_cache" is checked by parse_request.
void parse_keep_expected(const json& a, const std::string& path, BufferArg& b) {
  const json* v = find(a, "keep_expected");
  if (v == nullptr) return;
  const auto p = member_path(path, "keep_expected");
  if (b.role == BufferRole::in) {
    fail(p,
         "an \"in\" buffer is not written; expected values are kept from \"out\" or \"inout\" "
         "buffers");
  }
  b.keep_expected = as_string(*v, p);
  if (!valid_kept_key(b.keep_expected)) {
    fail(p, "must be a key of 1.." + std::to_string(max_kept_key_chars) +
                " characters from A-Z a-z 0-9 . _ : -, got \"" + b.keep_expected + "\"");
  }
  if (!b.dtype) fail(member_path(path, "dtype"), "is required with \"keep_expected\"");
  if (!b.expected.empty()) {
    fail(p,
         "is refused beside \"expected\": the buffer either is compared or keeps its output as "
         "expected values");
  }
}

// The protocol 2 fields of a buffer: dtype, expected, timed_expected, timed_input, compare,
// write_output. Each is refused on a role it cannot act on, like input/output are.
void parse_buffer_v2(const json& a, const std::string& path, BufferArg& b) {
  const bool reads_input = b.role != BufferRole::out;
  const bool writes_output = b.role != BufferRole::in;
  if (const json* v = find(a, "dtype")) {
    b.dtype = parse_dtype(*v, member_path(path, "dtype"));
    const auto item = scalar_size(*b.dtype);
    if (b.bytes % item != 0) {
      fail(member_path(path, "bytes"), std::to_string(b.bytes) + " is not a whole number of " +
                                           scalar_type_name(*b.dtype) + " elements (" +
                                           std::to_string(item) + " bytes each)");
    }
  }
  for (const char* key : {"expected", "timed_expected"}) {
    const json* v = find(a, key);
    if (v == nullptr) continue;
    const auto p = member_path(path, key);
    if (!writes_output) {
      fail(p,
           "an \"in\" buffer is not compared; expected values belong to \"out\" or "
           "\"inout\" buffers");
    }
    auto& value = std::string(key) == "expected" ? b.expected : b.timed_expected;
    value = as_string(*v, p);
    if (is_kept_ref(value) && !valid_kept_key(std::string_view(value).substr(kept_prefix.size()))) {
      fail(p, "\"kept:\" must be followed by a key of 1.." + std::to_string(max_kept_key_chars) +
                  " characters from A-Z a-z 0-9 . _ : -, got \"" + value + "\"");
    }
    if (!b.dtype) fail(member_path(path, "dtype"), std::string("is required with \"") + key + "\"");
    if (find(a, "compare") == nullptr) {
      fail(member_path(path, "compare"), std::string("is required with \"") + key +
                                             "\" ({\"abs_tol\", \"rtol\", \"rel_floor\"})");
    }
  }
  if (const json* v = find(a, "expected_dtype")) {
    const auto p = member_path(path, "expected_dtype");
    if (b.role == BufferRole::in) {
      fail(p,
           "an \"in\" buffer is not compared; expected values belong to \"out\" or \"inout\" "
           "buffers");
    }
    // that it describes some file (expected, timed_expected or a checked_expected entry) is
    // checked with the case (request.cpp)
    if (!b.dtype) fail(member_path(path, "dtype"), "is required with \"expected_dtype\"");
    const auto t = parse_dtype(*v, p);
    if (t != ScalarType::float64 && t != *b.dtype) {
      fail(p, std::string("must be \"float64\" or the buffer's dtype \"") +
                  scalar_type_name(*b.dtype) + "\", got \"" + scalar_type_name(t) + "\"");
    }
    b.expected_dtype = t;
  }
  if (b.expected_kept() || b.timed_expected_kept()) {
    // A kept copy holds the reference's outputs as it wrote them: the buffer's own dtype.
    if (b.expected_dtype.value_or(ScalarType::float64) != *b.dtype) {
      fail(member_path(path, "expected_dtype"),
           std::string("must be the buffer's dtype \"") + scalar_type_name(*b.dtype) +
               "\" when expected values are \"kept:\" (a kept copy holds the buffer's own "
               "dtype), got \"" +
               scalar_type_name(b.expected_dtype.value_or(ScalarType::float64)) + "\"");
    }
  }
  if (const json* v = find(a, "timed_input")) {
    const auto p = member_path(path, "timed_input");
    if (!reads_input) {
      fail(p,
           "an \"out\" buffer is not uploaded; timed inputs belong to \"in\" or \"inout\" "
           "buffers");
    }
    b.timed_input = as_string(*v, p);
  }
  if (const json* v = find(a, "compare")) {
    // Without expected values it still serves checked launches (parse_case refuses it there
    // when the case has none).
    b.compare = parse_compare(*v, member_path(path, "compare"));
    b.has_compare = true;
  }
  if (const json* v = find(a, "fresh")) {
    const auto p = member_path(path, "fresh");
    if (!reads_input) {
      fail(p,
           "an \"out\" buffer has no input to redraw; fresh inputs belong to \"in\" or "
           "\"inout\" buffers");
    }
    if (!b.dtype) fail(member_path(path, "dtype"), "is required with \"fresh\"");
    b.fresh = parse_fresh(*v, p);
    check_draw(*b.fresh, b, p);
  }
  if (const json* v = find(a, "write_output")) {
    b.write_output = as_bool(*v, member_path(path, "write_output"));
  }
  parse_input_draws(a, path, b);
  parse_keep_expected(a, path, b);
}

BufferArg parse_buffer(const json& a, const std::string& path) {
  BufferArg b;
  b.role = parse_role(require(a, path, "role"), member_path(path, "role"));
  b.bytes = as_uint(require(a, path, "bytes"), member_path(path, "bytes"), max_buffer_bytes);

  const bool reads_input = b.role != BufferRole::out;
  const bool writes_output = b.role != BufferRole::in;
  if (const json* v = find(a, "input")) {
    if (!reads_input) {
      fail(member_path(path, "input"),
           "an \"out\" buffer is not uploaded; use role \"inout\" to start from an input file");
    }
    b.input = as_string(*v, member_path(path, "input"));
  } else if (reads_input && find(a, "input_draw") == nullptr) {
    fail(member_path(path, "input"), std::string("is required for role \"") + role_name(b.role) +
                                         "\" (or \"input_draw\": drawn on the device)");
  }
  if (const json* v = find(a, "output")) {
    if (!writes_output) {
      fail(member_path(path, "output"),
           "an \"in\" buffer is not written back; use role \"inout\" to get its contents");
    }
    b.output = as_string(*v, member_path(path, "output"));
  } else if (writes_output) {
    fail(member_path(path, "output"),
         std::string("is required for role \"") + role_name(b.role) + "\"");
  }

  // init and poison_byte only act on "out" buffers. They are validated on every buffer, so a
  // typo is never silently ignored, but a client that always sends them is accepted.
  if (const json* v = find(a, "init")) {
    const auto p = member_path(path, "init");
    const auto s = as_string(*v, p);
    if (s == "poison") {
      b.init = BufferInit::poison;
    } else if (s == "zero") {
      b.init = BufferInit::zero;
    } else {
      fail(p, "must be \"poison\" or \"zero\", got \"" + s + "\"");
    }
  }
  if (const json* v = find(a, "poison_byte")) {
    b.poison_byte = static_cast<std::uint8_t>(
        as_uint(*v, member_path(path, "poison_byte"), 255, "an integer 0..255"));
  }
  parse_buffer_v2(a, path, b);
  return b;
}

ScalarArg parse_scalar(const json& a, const std::string& path) {
  ScalarArg s;
  s.dtype = parse_dtype(require(a, path, "dtype"), member_path(path, "dtype"));
  const std::string dtype = scalar_type_name(s.dtype);
  const auto raw_path = member_path(path, "raw");
  const auto raw = as_string(require(a, path, "raw"), raw_path, true);
  const auto size = scalar_size(s.dtype);
  auto bytes = detail::decode_hex(raw, size);
  if (!bytes) {
    fail(raw_path, "must be " + std::to_string(2 * size) + " hex digits (the " +
                       std::to_string(size) + " little-endian bytes of a " + dtype + "), got \"" +
                       raw + "\"");
  }
  s.raw = std::move(*bytes);
  // "value" is informational only: "raw" is what the kernel receives.
  return s;
}

}  // namespace

KernelArg parse_arg(const json& a, const std::string& path) {
  expect_object(a, path);
  KernelArg arg;
  const auto kind_path = member_path(path, "kind");
  const auto kind = as_string(require(a, path, "kind"), kind_path);
  arg.name = as_string(require(a, path, "name"), member_path(path, "name"));
  if (kind == "buffer") {
    arg.kind = ArgKind::buffer;
    arg.buffer = parse_buffer(a, path);
  } else if (kind == "scalar") {
    arg.kind = ArgKind::scalar;
    arg.scalar = parse_scalar(a, path);
  } else {
    fail(kind_path, "must be \"buffer\" or \"scalar\", got \"" + kind + "\"");
  }
  return arg;
}

std::optional<std::vector<std::uint8_t>> decode_hex(std::string_view hex, std::size_t size) {
  if (hex.size() != 2 * size) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<std::uint8_t> out(size);
  for (std::size_t i = 0; i < size; ++i) {
    const int hi = nibble(hex[2 * i]);
    const int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return out;
}

}  // namespace detail

bool is_kept_ref(std::string_view value) noexcept {
  return value.substr(0, kept_prefix.size()) == kept_prefix;
}

bool valid_kept_key(std::string_view key) noexcept {
  if (key.empty() || key.size() > max_kept_key_chars) return false;
  for (const char c : key) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool BufferArg::expected_kept() const noexcept { return is_kept_ref(expected); }
bool BufferArg::timed_expected_kept() const noexcept { return is_kept_ref(timed_expected); }

std::uint64_t BufferArg::expected_item_size() const noexcept {
  return native_expected() ? scalar_size(*dtype) : expected_item_bytes;
}

std::size_t scalar_size(ScalarType t) noexcept {
  switch (t) {
    case ScalarType::int8:
    case ScalarType::uint8: return 1;
    case ScalarType::int16:
    case ScalarType::uint16:
    case ScalarType::float16:
    case ScalarType::bfloat16: return 2;
    case ScalarType::int32:
    case ScalarType::uint32:
    case ScalarType::float32: return 4;
    case ScalarType::int64:
    case ScalarType::uint64:
    case ScalarType::float64: return 8;
  }
  return 0;
}

const char* scalar_type_name(ScalarType t) noexcept {
  switch (t) {
    case ScalarType::int8: return "int8";
    case ScalarType::int16: return "int16";
    case ScalarType::int32: return "int32";
    case ScalarType::int64: return "int64";
    case ScalarType::uint8: return "uint8";
    case ScalarType::uint16: return "uint16";
    case ScalarType::uint32: return "uint32";
    case ScalarType::uint64: return "uint64";
    case ScalarType::float16: return "float16";
    case ScalarType::bfloat16: return "bfloat16";
    case ScalarType::float32: return "float32";
    case ScalarType::float64: return "float64";
  }
  return "?";
}

std::optional<ScalarType> scalar_type_from_name(std::string_view name) noexcept {
  static constexpr ScalarType all[] = {
      ScalarType::int8,    ScalarType::int16,    ScalarType::int32,   ScalarType::int64,
      ScalarType::uint8,   ScalarType::uint16,   ScalarType::uint32,  ScalarType::uint64,
      ScalarType::float16, ScalarType::bfloat16, ScalarType::float32, ScalarType::float64,
  };
  for (const auto t : all) {
    if (name == scalar_type_name(t)) return t;
  }
  return std::nullopt;
}

const char* role_name(BufferRole r) noexcept {
  switch (r) {
    case BufferRole::in: return "in";
    case BufferRole::out: return "out";
    case BufferRole::inout: return "inout";
  }
  return "?";
}

}  // namespace kernelopt
