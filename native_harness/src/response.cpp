#include "response.hpp"

#include "version.hpp"

namespace kernelopt {

nlohmann::json empty_response() {
  nlohmann::json r = nlohmann::json::object();
  r["protocol"] = protocol_version;
  r["status"] = "ok";
  r["error"] = nullptr;
  r["device"] = nullptr;
  r["module_load_ms"] = nullptr;
  r["steps_ms"] = nullptr;
  r["function"] = nullptr;
  r["cases"] = nlohmann::json::array();
  return r;
}

nlohmann::json request_error(const std::string& kind, const std::string& message) {
  nlohmann::json e = nlohmann::json::object();
  e["kind"] = kind;
  e["message"] = message;
  e["call"] = nullptr;
  e["cuda_error"] = nullptr;
  e["code"] = nullptr;
  return e;
}

nlohmann::json request_error(const std::string& kind, const std::string& message,
                             const detail::CudaErrorInfo& cuda) {
  auto e = request_error(kind, message);
  e["call"] = cuda.call;
  e["cuda_error"] = cuda.name;
  e["code"] = static_cast<int>(cuda.code);
  return e;
}

void set_request_error(nlohmann::json& response, nlohmann::json error) {
  response["status"] = "error";
  response["error"] = std::move(error);
}

nlohmann::json case_error(const detail::CudaErrorInfo& cuda) {
  nlohmann::json e = nlohmann::json::object();
  e["call"] = cuda.call;
  e["cuda_error"] = cuda.name;
  e["code"] = static_cast<int>(cuda.code);
  e["message"] = cuda.description;
  e["file"] = cuda.file;
  e["line"] = cuda.line;
  return e;
}

std::string serialize(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kernelopt
