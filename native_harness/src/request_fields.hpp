// Typed readers of JSON fields, shared by the translation units of parse_request
// (request.cpp: requests, cases, launches, timing; request_args.cpp: kernel arguments).
// Every reader throws BadRequest("<path>: <problem>") when the value does not fit.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kernelopt::detail {

using nlohmann::json;

[[noreturn]] void fail(const std::string& path, const std::string& problem);

// "parent.key" ("key" at the top level) and "parent[i]": the paths that errors name.
std::string member_path(std::string_view parent, const char* key);
std::string index_path(const std::string& parent, std::size_t i);

// "an object", "a string", ...: what a refused value was.
const char* type_name(const json& v);

// The member `key` of `obj`, or nullptr when it is absent or null.
const json* find(const json& obj, const char* key);
// The member `key` of `obj`; fails with "<parent>.<key>: is required" when it is absent or null.
const json& require(const json& obj, std::string_view parent, const char* key);
void expect_object(const json& v, const std::string& path);

std::uint64_t as_uint(const json& v, const std::string& path, std::uint64_t max,
                      const char* what = "a non-negative integer");
std::string as_string(const json& v, const std::string& path, bool allow_empty = false);
double as_non_negative(const json& v, const std::string& path);
bool as_bool(const json& v, const std::string& path);
std::array<unsigned, 3> as_dim3(const json& v, const std::string& path);
double as_finite(const json& v, const std::string& path);
std::int64_t as_int64(const json& v, const std::string& path);
double as_positive_number(const json& v, const std::string& path);

}  // namespace kernelopt::detail
