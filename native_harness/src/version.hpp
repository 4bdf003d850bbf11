#pragma once

namespace kernelopt {

#ifndef KERNELOPT_HARNESS_VERSION
#define KERNELOPT_HARNESS_VERSION "0.1.0"
#endif

inline constexpr const char* harness_version = KERNELOPT_HARNESS_VERSION;
inline constexpr int protocol_version = 1;

}  // namespace kernelopt
