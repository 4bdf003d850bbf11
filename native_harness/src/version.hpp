#pragma once

namespace kernelopt {

#ifndef KERNELOPT_HARNESS_VERSION
#define KERNELOPT_HARNESS_VERSION "0.1.0"
#endif

inline constexpr const char* harness_version = KERNELOPT_HARNESS_VERSION;
inline constexpr int protocol_version = 2;

// What this binary supports beyond protocol 1, printed by --version so Python can tell
// (protocol-v2). One list for every feature: add a name where the feature lands.
inline constexpr const char* harness_features[] = {
    "blocking",         // timing.blocking: ko_spin holds the stream while a batch is queued
    "graph",            // timing.mode "graph": CUDA-graph replays of graph_batch launches
    "adaptive",         // timing.adaptive: sample until the median's rse reaches a target
    "baseline_cublas",  // "op": "baseline", library "cublas", routine "sgemm"
};

}  // namespace kernelopt
