// Turns one request text into one answer and an exit code, whatever goes wrong. Shared by
// `run` (one request) and `serve` (one per line, keeping the session between them).
#pragma once

#include <memory>
#include <string_view>

#include <nlohmann/json.hpp>

#include "runner.hpp"
#include "session.hpp"

namespace kernelopt {

struct Answer {
  nlohmann::json body;
  int exit_code = 0;
};

// Terminal exit codes: `serve` answers and then stops, because nothing later can succeed.
bool ends_session(int exit_code) noexcept;

class Handler {
 public:
  // `progress` writes a request's progress lines (PROTOCOL.md, "progress") before its answer.
  Answer handle(std::string_view request_text, const ProgressFn& progress = {});

 private:
  std::unique_ptr<Session> session_;
};

// Answers for failures outside any request: a usage error, an unreadable request file.
Answer error_answer(const char* kind, const std::string& message, int exit_code);

}  // namespace kernelopt
