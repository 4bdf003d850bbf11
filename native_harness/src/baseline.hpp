// "op": "baseline": a vendor library routine measured by the same timing code as kernels, so
// a candidate's speed can be stated as a ratio to it (cuBLAS SGEMM).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "request.hpp"
#include "session.hpp"

namespace kernelopt {

// Runs req.baseline on `session`, filling `response` (built by empty_response()).
// A library that cannot be loaded is an answer (error kind "library_unavailable", exit_ok), as
// is a library call that fails ("library_error"): the serve loop goes on.
// Throws CudaError (driver failures: allocation, copies, timing) and BadRequest.
int run_baseline(Session& session, const Request& req, nlohmann::json& response);

}  // namespace kernelopt
