// Tensor maps of a case (feature "tensor_maps", PROTOCOL.md "Tensor maps"): CUtensorMaps the
// harness encodes over the case's own buffers and passes after its args. Parsing and every
// rule that needs no driver, reach included, are in tensor_map.cpp (called by parse_request,
// so a bad map is refused before the driver is touched); the encoding, which checks the rules
// again first, in tensor_map_encode.cpp.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "driver.hpp"
#include "request.hpp"

namespace kernelopt::detail {

// The limits of cuTensorMapEncodeTiled (CUDA driver API documentation).
inline constexpr std::size_t max_tensor_rank = 5;
inline constexpr std::uint64_t max_tensor_dim = 1ull << 32;       // inclusive
inline constexpr std::uint64_t tensor_stride_limit = 1ull << 40;  // exclusive
inline constexpr std::uint64_t tensor_stride_align = 16;
// A TMA store writes global memory in whole aligned 16-byte chunks: where a row of the map does
// not end on one, storing its last tile writes the rest of that chunk too, past dims (measured on
// the H200; triton-lang/triton#11583 saw the same on the H100). Reach stays the element rule:
// that chunk never leaves the buffer's own allocation (tensor_map.cpp), where the guard check
// reports it.
inline constexpr std::uint64_t store_chunk = 16;
inline constexpr std::uint32_t max_tensor_box = 256;
inline constexpr std::uint32_t max_tensor_element_stride = 8;
// A CUtensorMap kernel parameter: 128 bytes, passed by value.
inline constexpr std::size_t tensor_map_param_bytes = 128;

// Parses cases[i].tensor_maps (`maps`, at `path`) into spec.tensor_maps against the case's
// args, which must be parsed already; every map is validated (validate_tensor_map).
void parse_tensor_maps(const nlohmann::json& maps, const std::string& path, CaseSpec& spec);

// The packed byte strides of dimensions 1..rank-1 (dims[0] * size, then each times the next
// extent); an entry that does not fit 64 bits is UINT64_MAX (refused as too large).
std::vector<std::uint64_t> packed_tensor_strides(const std::vector<std::uint64_t>& dims,
                                                 std::size_t element_size);

// How many bytes from the buffer's start the map can address: the last byte it reaches plus
// one, sum((dims[i] - 1) * stride[i]) + size, with stride[0] the element size. nullopt when
// that does not fit 64 bits or the strides do not match the rank.
std::optional<std::uint64_t> tensor_map_reach(const TensorMapSpec& m);

// Every rule of PROTOCOL.md "Tensor maps" on `m` over a buffer of `buffer_bytes` bytes, reach
// included (the map must not address a byte past the buffer); throws BadRequest naming `path`
// (cases[i].tensor_maps[j]) and the field.
void validate_tensor_map(const TensorMapSpec& m, std::uint64_t buffer_bytes,
                         const std::string& path);

// Refuses (BadRequest) a request with tensor maps when the driver cannot encode them
// (cuTensorMapEncodeTiled missing: a driver older than CUDA 12.0). Before any case runs.
void require_tensor_map_support(const DriverApi& drv, const Request& req);

#if CUDA_VERSION >= 12000
// Validates `m` over the buffer of `buffer_bytes` bytes at `address` (the pointer the kernel
// is given), then encodes it into `out` with cuTensorMapEncodeTiled. A refusal by the driver is
// a BadRequest naming `path` and the CUDA error; a context-fatal one a CudaError.
void encode_tensor_map(const DriverApi& drv, const TensorMapSpec& m, CUdeviceptr address,
                       std::uint64_t buffer_bytes, const std::string& path, CUtensorMap& out);
#endif

}  // namespace kernelopt::detail
