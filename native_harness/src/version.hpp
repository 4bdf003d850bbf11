#pragma once

namespace kernelopt {

#ifndef KERNELOPT_HARNESS_VERSION
#define KERNELOPT_HARNESS_VERSION "0.1.0"
#endif

inline constexpr const char* harness_version = KERNELOPT_HARNESS_VERSION;
inline constexpr int protocol_version = 2;

// What `--version` lists under "features": the optional parts of protocol 2 that this binary
// implements (PROTOCOL.md). One entry per line, so parallel additions merge cleanly.
inline constexpr const char* harness_features[] = {
    "support_module",
    "input_cache",
    "device_compare",
    "determinism",
    "timed_inputs",
};

}  // namespace kernelopt
