// The per-request procedure of PROTOCOL.md; each case runs in a CaseRunner (case_runner.hpp).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "request.hpp"
#include "session.hpp"

namespace kernelopt {

// Writes one progress line (request "progress") on the answer stream; may be empty.
using ProgressFn = std::function<void(const nlohmann::json&)>;

// Runs `req` on `session`, filling `response` (built by empty_response()) as it goes, so that
// whatever escapes still leaves the device, function and finished cases in it.
//
// Returns the exit code: exit_ok when the request was handled (module_load and
// entry_not_found errors included: they are answers, not failures of the harness), or
// exit_fatal_cuda after a runtime_error case; the session is then broken.
// Throws BadRequest (inputs of the wrong size, arguments that do not fit the kernel), IoError
// (unreadable module or input, unwritable output) and, for what no case owns, CudaError.
// With req.progress, `progress` gets {"progress": {"case": name, "index": i}} before case i.
int run_request(Session& session, const Request& req, nlohmann::json& response,
                const ProgressFn& progress = {});

namespace detail {
// Refuses (BadRequest, naming the case's field) a request whose cases do not fit the kernel's
// parameter sizes as cuFuncGetParamInfo lists them: each case's args (a buffer an 8-byte
// pointer, a scalar its dtype's size), then its tensor maps (128 bytes each). An empty list
// (the driver could not tell) checks nothing.
void check_parameter_sizes(const Request& req, const std::vector<std::size_t>& sizes);
}  // namespace detail

}  // namespace kernelopt
