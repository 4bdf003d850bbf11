// The JSON shapes of PROTOCOL.md's answers, in one place so field names cannot drift.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "check.hpp"

namespace kernelopt {

// {"protocol": 1, "status": "ok", "error": null, "device": null, "module_load_ms": null,
//  "steps_ms": null, "function": null, "cases": []}
nlohmann::json empty_response();

// A request-level error: {"kind", "message", "call", "cuda_error", "code"}; the CUDA fields
// are null unless a driver call is to blame.
nlohmann::json request_error(const std::string& kind, const std::string& message);
nlohmann::json request_error(const std::string& kind, const std::string& message,
                             const detail::CudaErrorInfo& cuda);

// Marks `response` failed with `error`, keeping whatever it already holds.
void set_request_error(nlohmann::json& response, nlohmann::json error);

// A case's error: {"call", "cuda_error", "code", "message", "file", "line"}.
nlohmann::json case_error(const detail::CudaErrorInfo& cuda);

// One line of JSON. Invalid UTF-8 (a JIT log, a path) is replaced rather than thrown on.
std::string serialize(const nlohmann::json& j);

}  // namespace kernelopt
