// Request-validation checks shared by the unit tests of parse_request (test_request.cpp,
// test_kept.cpp): the message a bad request is refused with, and EXPECT_ERROR on its start.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "request.hpp"
#include "test_util.hpp"

namespace test {

// The message of the BadRequest that parsing `doc` throws, or "" if it parses.
inline std::string error_of(const nlohmann::json& doc) {
  try {
    kernelopt::parse_request(doc);
  } catch (const kernelopt::BadRequest& e) {
    return e.what();
  }
  return "";
}

inline void expect_error(const nlohmann::json& doc, const std::string& prefix, const char* file,
                         int line) {
  const auto msg = error_of(doc);
  if (msg.rfind(prefix, 0) != 0) {
    std::fprintf(stderr, "  %s:%d: expected an error starting with \"%s\", got \"%s\"\n", file,
                 line, prefix.c_str(), msg.c_str());
    ++failures();
  }
}

}  // namespace test

#define EXPECT_ERROR(doc, prefix) test::expect_error(doc, prefix, __FILE__, __LINE__)
