// A minimal check framework: CHECK records a failure and carries on, so one run reports
// every broken expectation; main() returns non-zero if any failed.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace test {

inline int& failures() {
  static int n = 0;
  return n;
}

inline std::vector<std::pair<const char*, std::function<void()>>>& registry() {
  static std::vector<std::pair<const char*, std::function<void()>>> r;
  return r;
}

struct Register {
  Register(const char* name, std::function<void()> fn) {
    registry().emplace_back(name, std::move(fn));
  }
};

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

inline int run_all() {
  for (auto& [name, fn] : registry()) {
    const int before = failures();
    try {
      fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "  unexpected exception: %s\n", e.what());
      ++failures();
    }
    std::fprintf(stderr, "%s %s\n", failures() == before ? "[ ok ]" : "[FAIL]", name);
  }
  std::fprintf(stderr, "%d failure(s)\n", failures());
  return failures() == 0 ? 0 : 1;
}

}  // namespace test

#define TEST_CONCAT2(a, b) a##b
#define TEST_CONCAT(a, b) TEST_CONCAT2(a, b)
#define TEST_CASE(name)                                                                          \
  static void TEST_CONCAT(test_fn_, __LINE__)();                                                 \
  static test::Register TEST_CONCAT(test_reg_, __LINE__)(name, TEST_CONCAT(test_fn_, __LINE__)); \
  static void TEST_CONCAT(test_fn_, __LINE__)()

#define CHECK(cond)                                                                   \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      ++test::failures();                                                             \
    }                                                                                 \
  } while (0)

#define CHECK_MSG(cond, msg)                                                             \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "  %s:%d: CHECK(%s) failed: %s\n", __FILE__, __LINE__, #cond, \
                   std::string(msg).c_str());                                            \
      ++test::failures();                                                                \
    }                                                                                    \
  } while (0)

#define TEST_MAIN() \
  int main() { return test::run_all(); }
