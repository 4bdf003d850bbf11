// Host wall time of a request's steps, reported as "steps_ms" (PROTOCOL.md, "Where a request's
// time went"): what the harness spends beyond the kernels' own time, so a per-candidate
// overhead can be taken apart (bench/run.py's overhead section). Internal to the harness.
#pragma once

#include <chrono>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace kernelopt::detail {

class StepClock {
 public:
  StepClock() : last_(std::chrono::steady_clock::now()) {}

  // Adds the time since the last mark (or construction) to `step`; repeated steps add up.
  void mark(const std::string& step) {
    const auto now = std::chrono::steady_clock::now();
    ms_[step] += std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
  }

  // {step: ms}.
  nlohmann::json json() const { return nlohmann::json(ms_); }

 private:
  std::chrono::steady_clock::time_point last_;
  std::map<std::string, double> ms_;
};

}  // namespace kernelopt::detail
