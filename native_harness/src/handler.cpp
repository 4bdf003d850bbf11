#include "handler.hpp"

#include <new>

#include "baseline.hpp"
#include "check.hpp"
#include "errors.hpp"
#include "request.hpp"
#include "response.hpp"
#include "runner.hpp"
#include "support.hpp"

namespace kernelopt {

bool ends_session(int exit_code) noexcept {
  return exit_code == exit_driver_unavailable || exit_code == exit_fatal_cuda;
}

Answer error_answer(const char* kind, const std::string& message, int exit_code) {
  auto body = empty_response();
  set_request_error(body, request_error(kind, message));
  return {std::move(body), exit_code};
}

Answer Handler::handle(std::string_view request_text, const ProgressFn& progress) {
  auto response = empty_response();
  try {
    // Fully validated before the driver is touched: bad requests get exit 2 on any machine.
    const Request req = parse_request(request_text);
    if (!session_ || session_->ordinal() != req.device) {
      session_.reset();  // release the old device's context before retaining another
      session_ = std::make_unique<Session>(req.device);
    }
    // The session's support module is always the request's own (time_work measures the launch
    // overhead exactly when one is loaded). Every support kernel the request needs is looked up
    // before anything runs, so an outdated module is a bad request up front, not a failure
    // after a launch.
    if (req.support_module.empty()) {
      session_->support().reset();
    } else {
      session_->support().load(req.support_module);
      session_->support().require(support_kernels_needed(req));
    }
    const int code = req.op == RequestOp::baseline
                         ? run_baseline(*session_, req, response)
                         : run_request(*session_, req, response, progress);
    return {std::move(response), code};
  } catch (const BadRequest& e) {
    set_request_error(response, request_error("bad_request", e.what()));
    return {std::move(response), exit_bad_request};
  } catch (const ExpectedMissing& e) {
    auto error = request_error("expected_missing", e.what());
    error["missing"] = e.keys();
    set_request_error(response, std::move(error));
    return {std::move(response), exit_io_error};
  } catch (const IoError& e) {
    set_request_error(response, request_error("io_error", e.what()));
    return {std::move(response), exit_io_error};
  } catch (const DriverUnavailable& e) {
    auto error = request_error("driver_unavailable", e.what());
    if (e.code() != 0) {
      error["call"] = e.call();
      error["cuda_error"] = e.cuda_error();
      error["code"] = e.code();
    }
    set_request_error(response, std::move(error));
    session_.reset();
    return {std::move(response), exit_driver_unavailable};
  } catch (const detail::CudaError& e) {
    // A driver call outside any case failed (e.g. a function attribute query). If it took
    // the context with it, this process is done.
    set_request_error(response, request_error("internal", e.what(), e.info()));
    if (detail::is_context_fatal(e.code())) {
      if (session_) session_->mark_broken();
      return {std::move(response), exit_fatal_cuda};
    }
    return {std::move(response), exit_internal};
  } catch (const std::bad_alloc&) {
    set_request_error(response,
                      request_error("internal", "out of host memory while handling the request"));
    return {std::move(response), exit_internal};
  } catch (const std::exception& e) {
    set_request_error(response, request_error("internal", e.what()));
    return {std::move(response), exit_internal};
  }
}

}  // namespace kernelopt
