// Typed readers of JSON fields for parse_request: each checks the value's type and range
// before converting it, and a refusal names the field's full path ("cases[0].args[1].bytes")
// and what it must be, so a malformed request is answered with a message a client can act on.
#include "request_fields.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "errors.hpp"

namespace kernelopt::detail {

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw BadRequest(path + ": " + problem);
}

std::string member_path(std::string_view parent, const char* key) {
  return parent.empty() ? std::string(key) : std::string(parent) + "." + key;
}

std::string index_path(const std::string& parent, std::size_t i) {
  return parent + "[" + std::to_string(i) + "]";
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a floating-point number";
    default: return "an unsupported value";
  }
}

// A JSON null counts as absent: serializers commonly emit `"output": null` for unset fields.
const json* find(const json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// `parent` by value: a temporary std::string bound to a reference parameter of a function
// that returns a reference trips GCC 13's -Wdangling-reference.
const json& require(const json& obj, std::string_view parent, const char* key) {
  const json* v = find(obj, key);
  if (v == nullptr) fail(member_path(parent, key), "is required");
  return *v;
}

void expect_object(const json& v, const std::string& path) {
  if (!v.is_object()) fail(path, std::string("must be an object, got ") + type_name(v));
}

std::uint64_t as_uint(const json& v, const std::string& path, std::uint64_t max, const char* what) {
  // Floats are refused even when integral (4096.0): sizes must be exact. Parsed text gives
  // unsigned values, but a document built in code may hold non-negative signed ones.
  const bool non_negative =
      v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0);
  if (!non_negative) {
    fail(path, std::string("must be ") + what + ", got " +
                   (v.is_number() ? v.dump() : std::string(type_name(v))));
  }
  const auto value = v.get<std::uint64_t>();
  if (value > max) fail(path, "must be at most " + std::to_string(max) + ", got " + v.dump());
  return value;
}

std::string as_string(const json& v, const std::string& path, bool allow_empty) {
  if (!v.is_string()) fail(path, std::string("must be a string, got ") + type_name(v));
  auto s = v.get<std::string>();
  if (!allow_empty && s.empty()) fail(path, "must be a non-empty string");
  return s;
}

// A finite number >= 0 (integers accepted: 0 is a common tolerance).
double as_non_negative(const json& v, const std::string& path) {
  if (!v.is_number()) fail(path, std::string("must be a number, got ") + type_name(v));
  const double value = v.get<double>();
  if (!std::isfinite(value) || value < 0) {
    fail(path, "must be a finite number >= 0, got " + v.dump());
  }
  return value;
}

bool as_bool(const json& v, const std::string& path) {
  if (!v.is_boolean()) fail(path, std::string("must be true or false, got ") + type_name(v));
  return v.get<bool>();
}

std::array<unsigned, 3> as_dim3(const json& v, const std::string& path) {
  if (!v.is_array() || v.size() != 3) {
    fail(path, "must be an array of 3 positive integers, got " +
                   (v.is_array() ? "an array of " + std::to_string(v.size())
                                 : std::string(type_name(v))));
  }
  std::array<unsigned, 3> dim{};
  for (std::size_t i = 0; i < 3; ++i) {
    const auto p = index_path(path, i);
    const auto value = as_uint(v[i], p, std::numeric_limits<unsigned>::max(), "a positive integer");
    if (value == 0) fail(p, "must be a positive integer, got 0");
    dim[i] = static_cast<unsigned>(value);
  }
  return dim;
}

double as_finite(const json& v, const std::string& path) {
  if (!v.is_number() || !std::isfinite(v.get<double>())) {
    fail(path, std::string("must be a finite number, got ") +
                   (v.is_number() ? v.dump() : std::string(type_name(v))));
  }
  return v.get<double>();
}

std::int64_t as_int64(const json& v, const std::string& path) {
  if (v.is_number_unsigned() && v.get<std::uint64_t>() <= std::uint64_t(INT64_MAX)) {
    return static_cast<std::int64_t>(v.get<std::uint64_t>());
  }
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<std::int64_t>();
  fail(path, std::string("must be an integer within int64, got ") +
                 (v.is_number() ? v.dump() : std::string(type_name(v))));
}

double as_positive_number(const json& v, const std::string& path) {
  if (!v.is_number() || !(v.get<double>() > 0)) {
    fail(path, std::string("must be a positive number, got ") +
                   (v.is_number() ? v.dump() : std::string(type_name(v))));
  }
  return v.get<double>();
}

}  // namespace kernelopt::detail
