// The timing procedure of PROTOCOL.md ("Timing"): warm-up, events or graph mode, optional
// blocking kernel, adaptive stopping, launch overhead. Independent of what is being timed: a
// kernel case (case_runner.cpp) and a library baseline (baseline.cpp) both hand it a TimedWork.
#pragma once

#include <cstddef>
#include <functional>

#include <nlohmann/json_fwd.hpp>

#include "request.hpp"
#include "session.hpp"

namespace kernelopt {

// What one measured launch does. Both callbacks only enqueue work on session.stream().
struct TimedWork {
  // Before the start event, outside the timed window: re-initialise outputs, restore inout
  // buffers, flush L2. May be empty.
  std::function<void()> prepare;
  // Between the events: the measured work. In graph mode it is captured into a CUDA graph,
  // so it must be capturable (kernel launches, library calls on the stream).
  std::function<void()> launch;
  // After the stop event of measured sample `sample` (0-based, adaptive rounds included),
  // outside the timed window: enqueue the checks of that sample (the case's checked launches).
  // Returns true when it enqueued a check whose verdict lies in device memory: the sampler
  // then ends its batch after this sample, synchronizes and calls `settle` before it enqueues
  // any later launch, so no kernel of the candidate's runs between a check and its read-back.
  // Not called for warm-up launches or the launch-overhead measurement. May be empty.
  std::function<bool(std::size_t sample)> after;
  // With the stream idle: copy what `after` left on the device to host memory. May be empty.
  std::function<void()> settle;
};

// Runs warm-up and measurement as `timing` asks and returns the answer's "timing" object
// (PROTOCOL.md). `flush_l2` is reported as-is: whether `prepare` flushes. Uses
// session.support(): ko_spin for blocking mode, ko_empty for launch_overhead_ms (null when no
// support module is loaded). Everything is synchronized when it returns.
// Throws CudaError (the caller decides whether it is fatal) and BadRequest (blocking mode and
// the support module lacks ko_spin).
nlohmann::json time_work(Session& session, const TimingConfig& timing, const TimedWork& work,
                         bool flush_l2);

// One launch exactly like a measured events-mode launch, for extra checked launches after the
// measurement: prepare, start event, launch, stop event, synchronize. Returns milliseconds.
// Throws CudaError.
double time_one_launch(Session& session, const TimedWork& work);

// Event times are floats; going through the shortest decimal that round-trips the float
// keeps "0.512" from being printed as 0.5120000243186951.
double float_to_double(float value);

}  // namespace kernelopt
