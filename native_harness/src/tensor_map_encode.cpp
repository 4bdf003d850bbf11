// Tensor maps: encoding with the driver's cuTensorMapEncodeTiled over a case's buffer, after the
// rules of tensor_map.cpp (reach included) are checked once more on the map as it is encoded.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "check.hpp"
#include "errors.hpp"
#include "tensor_map.hpp"

namespace kernelopt::detail {
namespace {

const char* const no_encoder =
    ": this CUDA driver cannot encode tensor maps (libcuda lacks cuTensorMapEncodeTiled, added in "
    "CUDA 12.0); update the driver or drop \"tensor_maps\"";

#if CUDA_VERSION >= 12000
CUtensorMapDataType data_type(ScalarType t) {
  switch (t) {
    case ScalarType::uint8: return CU_TENSOR_MAP_DATA_TYPE_UINT8;
    case ScalarType::uint16: return CU_TENSOR_MAP_DATA_TYPE_UINT16;
    case ScalarType::uint32: return CU_TENSOR_MAP_DATA_TYPE_UINT32;
    case ScalarType::int32: return CU_TENSOR_MAP_DATA_TYPE_INT32;
    case ScalarType::uint64: return CU_TENSOR_MAP_DATA_TYPE_UINT64;
    case ScalarType::int64: return CU_TENSOR_MAP_DATA_TYPE_INT64;
    case ScalarType::float16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case ScalarType::float32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case ScalarType::float64: return CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
    case ScalarType::bfloat16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case ScalarType::int8:
    case ScalarType::int16: break;  // refused by validate_tensor_map
  }
  throw BadRequest(std::string("tensor map dtype \"") + scalar_type_name(t) +
                   "\" is not a TMA element type");
}

CUtensorMapSwizzle swizzle(TensorSwizzle s) noexcept {
  switch (s) {
    case TensorSwizzle::none: return CU_TENSOR_MAP_SWIZZLE_NONE;
    case TensorSwizzle::b32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case TensorSwizzle::b64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case TensorSwizzle::b128: return CU_TENSOR_MAP_SWIZZLE_128B;
  }
  return CU_TENSOR_MAP_SWIZZLE_NONE;
}

CUtensorMapL2promotion l2_promotion(TensorL2Promotion p) noexcept {
  switch (p) {
    case TensorL2Promotion::none: return CU_TENSOR_MAP_L2_PROMOTION_NONE;
    case TensorL2Promotion::b64: return CU_TENSOR_MAP_L2_PROMOTION_L2_64B;
    case TensorL2Promotion::b128: return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
    case TensorL2Promotion::b256: return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  }
  return CU_TENSOR_MAP_L2_PROMOTION_NONE;
}
#endif

}  // namespace

void require_tensor_map_support(const DriverApi& drv, const Request& req) {
  for (std::size_t c = 0; c < req.cases.size(); ++c) {
    if (req.cases[c].tensor_maps.empty()) continue;
#if CUDA_VERSION >= 12000
    if (drv.cuTensorMapEncodeTiled != nullptr) return;
#else
    (void)drv;
#endif
    throw BadRequest("cases[" + std::to_string(c) + "].tensor_maps" + no_encoder);
  }
}

#if CUDA_VERSION >= 12000
static_assert(sizeof(CUtensorMap) == tensor_map_param_bytes, "a CUtensorMap is 128 bytes");
static_assert(alignof(CUtensorMap) >= 64, "cuTensorMapEncodeTiled needs 64-byte alignment");

void encode_tensor_map(const DriverApi& drv, const TensorMapSpec& m, CUdeviceptr address,
                       std::uint64_t buffer_bytes, const std::string& path, CUtensorMap& out) {
  // The request was validated when parsed; the map encoded is checked again here, so nothing
  // reaching past its buffer is ever handed to the driver.
  validate_tensor_map(m, buffer_bytes, path);
  if (address % 16 != 0) {
    throw std::logic_error(path + ": buffer \"" + m.buffer + "\" is not 16-byte aligned");
  }
  if (reinterpret_cast<std::uintptr_t>(&out) % 64 != 0) {
    throw std::logic_error(path + ": the CUtensorMap's host storage is not 64-byte aligned");
  }
  if (drv.cuTensorMapEncodeTiled == nullptr) throw BadRequest(path + no_encoder);
  const auto rank = static_cast<cuuint32_t>(m.dims.size());
  cuuint64_t dims[max_tensor_rank] = {};
  cuuint64_t strides[max_tensor_rank] = {};  // rank - 1 used; never an empty array
  cuuint32_t box[max_tensor_rank] = {};
  cuuint32_t element_strides[max_tensor_rank] = {};
  for (std::size_t i = 0; i < rank; ++i) {
    dims[i] = m.dims[i];
    box[i] = m.box[i];
    element_strides[i] = m.element_strides[i];
    if (i + 1 < rank) strides[i] = m.strides[i];
  }
  const CUresult r = drv.cuTensorMapEncodeTiled(
      &out, data_type(m.dtype), rank, reinterpret_cast<void*>(static_cast<std::uintptr_t>(address)),
      dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle(m.swizzle),
      l2_promotion(m.l2_promotion),
      m.oob_fill == TensorOobFill::nan ? CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
                                       : CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r == CUDA_SUCCESS) return;
  if (is_context_fatal(r)) throw_cuda_error(r, "cuTensorMapEncodeTiled(...)", __FILE__, __LINE__);
  throw BadRequest(path + ": cuTensorMapEncodeTiled refused the map over buffer \"" + m.buffer +
                   "\": " + error_name(r) + " (" + error_string(r) + ")");
}
#endif

}  // namespace kernelopt::detail
