#pragma once

#include <cuda.h>  // CUDA_VERSION: features that need newer driver API headers

namespace kernelopt {

#ifndef KERNELOPT_HARNESS_VERSION
#define KERNELOPT_HARNESS_VERSION "0.1.0"
#endif

inline constexpr const char* harness_version = KERNELOPT_HARNESS_VERSION;
inline constexpr int protocol_version = 2;

// What `--version` lists under "features": the optional parts of protocol 2 that this binary
// implements (PROTOCOL.md), so Python can tell. One entry per line, so parallel additions merge
// cleanly.
inline constexpr const char* harness_features[] = {
    "support_module",   // "support_module": the harness's own kernels, loaded once per session
    "input_cache",      // "input_cache": input and expected files resident on the device
    "device_compare",   // "expected" + "compare": ko_compare_<dtype> after the launch
    "determinism",      // "repeat_validation": a second launch, diffed bit for bit
    "timed_inputs",     // "timed_input" / "timed_expected": one checked launch after timing
    "blocking",         // timing.blocking: ko_spin holds the stream while a batch is queued
    "graph",            // timing.mode "graph": CUDA-graph replays of graph_batch launches
    "adaptive",         // timing.adaptive: sample until the median's rse reaches a target
    "baseline_cublas",  // "op": "baseline", library "cublas", routine "sgemm"
    "fresh_inputs",  // buffer "fresh" + case "fresh_seed": inputs redrawn before every timed launch
    "timed_check",   // "check_module" + case "checked_launches"/"check_launch": reference checks
    "confirm_launch",  // case "confirm_launch": one more fresh launch after timing, timed alone
    "checked_dump",    // case "checked_dump": checked launches' inputs and outputs as files
    "fresh_launches",  // case "fresh_launches": redraw before these measured samples only
    "poison_subset",   // case "poison_subset": with fresh_launches, poison before those only
    "input_draw",      // buffer "input_draw" / "timed_input_draw": inputs drawn on the device
    "expected_dtype",  // buffer "expected_dtype": expected files in the buffer's own dtype
    // answer "staging": input and expected device copies mapped read-only for kernels
    "readonly_staging",
    "device_expected",  // buffer "keep_expected" / expected "kept:KEY": expected values on device
    "progress",         // request "progress": a line on the answer stream before each case
    // case "checked_expected": checked launches against expected values given up front
    "checked_expected",
    // "structure" of "fresh" / "input_draw": the draw's matrices made triangular or symmetric
    "structured_draw",
    // "fresh" / "input_draw" of kind "choice": every element one of a few values
    "choice_draw",
#if CUDA_VERSION >= 12000
    "tensor_maps",  // case "tensor_maps": CUtensorMaps over the case's buffers, after its args
#endif
};

}  // namespace kernelopt
