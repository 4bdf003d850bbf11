// Request-level failures that are not CUDA errors. Each maps to one exit code and one
// error "kind" of PROTOCOL.md; CUDA errors are detail::CudaError (check.hpp).
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kernelopt {

// Exit codes of PROTOCOL.md.
enum exit_code : int {
  exit_ok = 0,
  exit_internal = 1,
  exit_bad_request = 2,
  exit_driver_unavailable = 3,
  exit_io_error = 4,
  exit_fatal_cuda = 5,
};

// A request that is malformed or inconsistent; the message starts with the field path,
// e.g. "cases[2].args[1].bytes: must be a non-negative integer".
class BadRequest : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A module, input, output or request file that could not be read or written.
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Expected values named "kept:KEY" that the input cache does not hold (feature
// device_expected): a new process, or the entry was evicted. Exit 4 like a missing file; the
// answer's error lists the keys as "missing".
class ExpectedMissing : public std::runtime_error {
 public:
  ExpectedMissing(const std::string& message, std::vector<std::string> keys)
      : std::runtime_error(message), keys_(std::move(keys)) {}
  const std::vector<std::string>& keys() const noexcept { return keys_; }

 private:
  std::vector<std::string> keys_;
};

// No usable driver or device: libcuda.so.1 missing or too old, cuInit failed, bad ordinal.
// Carries the CUresult (as int, 0 when none) so the answer can name it.
class DriverUnavailable : public std::runtime_error {
 public:
  explicit DriverUnavailable(const std::string& message, int code = 0, std::string call = {},
                             std::string cuda_error = {})
      : std::runtime_error(message),
        code_(code),
        call_(std::move(call)),
        cuda_error_(std::move(cuda_error)) {}
  int code() const noexcept { return code_; }
  const std::string& call() const noexcept { return call_; }
  const std::string& cuda_error() const noexcept { return cuda_error_; }

 private:
  int code_;
  std::string call_;
  std::string cuda_error_;
};

}  // namespace kernelopt
