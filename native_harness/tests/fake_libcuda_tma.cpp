// The fake libcuda.so.1's tensor maps: cuTensorMapEncodeTiled, checking the rules of the CUDA
// driver API documentation and writing the map's fields into the opaque words, and
// tma_copy_kernel, which copies through two such maps the way TMA would (elements within dims
// only). Built twice (tests/CMakeLists.txt): into the fake driver, and with
// FAKE_NO_TENSOR_MAP_ENCODE into an "old" fake that lacks cuTensorMapEncodeTiled.
// Environment knob: FAKE_CUDA_TENSOR_MAP_ERROR=1  cuTensorMapEncodeTiled refuses every map
// (CUDA_ERROR_INVALID_VALUE), like a driver with rules of its own.
#include <cuda.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "fake_libcuda.hpp"

namespace fake {
namespace {

// opaque[0]: magic; [1] address; [2] rank; [3] element size; [4..8] dims; [9..12] strides.
constexpr std::uint64_t tensor_map_magic = 0x4b4f2d544d4150;  // "KO-TMAP"

std::size_t element_size(CUtensorMapDataType t) {
  switch (t) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8: return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: return 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32: return 4;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64: return 8;
    default: return 0;
  }
}

struct View {
  std::uint64_t address = 0, rank = 0, size = 0, dims[5] = {}, strides[5] = {};
  std::uint64_t elements = 1, reach = 0;
};

// The map's fields, or false when it was not encoded by the fake.
bool view_of(const CUtensorMap& m, View& v) {
  if (m.opaque[0] != tensor_map_magic) return false;
  v.address = m.opaque[1];
  v.rank = m.opaque[2];
  v.size = m.opaque[3];
  for (std::uint64_t i = 0; i < v.rank; ++i) {
    v.dims[i] = m.opaque[4 + i];
    v.strides[i] = i == 0 ? v.size : m.opaque[9 + i - 1];
    v.elements *= v.dims[i];
    if (i > 0) v.reach += (v.dims[i] - 1) * v.strides[i];
  }
  // with a row's last 16-byte chunk whole (a store writes it; see tma_copy_run)
  v.reach += (v.dims[0] * v.size + 15) / 16 * 16;
  return true;
}

std::uint8_t* element(const View& v, std::uint64_t index) {
  std::uint64_t offset = 0;
  for (std::uint64_t i = 0; i < v.rank; ++i) {
    offset += index % v.dims[i] * v.strides[i];
    index /= v.dims[i];
  }
  return bytes_at(v.address + offset);
}

}  // namespace

// tma_copy(u8*, u8*, u64, CUtensorMap src, CUtensorMap dst): every element of src's dims into
// the same element of dst's. A map the fake did not encode, maps of other shapes, or one whose
// tensor lies outside the allocations fault like a bad descriptor.
void tma_copy_run(void** p) {
  CUtensorMap src_map, dst_map;
  std::memcpy(&src_map, p[3], sizeof src_map);
  std::memcpy(&dst_map, p[4], sizeof dst_map);
  View src, dst;
  if (!view_of(src_map, src) || !view_of(dst_map, dst) || src.elements != dst.elements ||
      src.size != dst.size || !valid_range(src.address, src.reach) ||
      !valid_range(dst.address, dst.reach)) {
    g_pending = CUDA_ERROR_ILLEGAL_ADDRESS;
    return;
  }
  for (std::uint64_t i = 0; i < src.elements; ++i) {
    std::memmove(element(dst, i), element(src, i), src.size);
  }
  // Like the hardware, a store writes whole 16-byte chunks: where a row does not end on one, the
  // rest of its last chunk is written too (here with zeros), past dims.
  const std::uint64_t row = dst.dims[0] * dst.size;
  if (row % 16 == 0) return;
  for (std::uint64_t r = 0; r < dst.elements / dst.dims[0]; ++r) {
    std::uint8_t* end = element(dst, r * dst.dims[0] + dst.dims[0] - 1) + dst.size;
    std::memset(end, 0, 16 - row % 16);
  }
}

}  // namespace fake

#ifndef FAKE_NO_TENSOR_MAP_ENCODE
extern "C" CUresult CUDAAPI cuTensorMapEncodeTiled(
    CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address,
    const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
    const cuuint32_t* element_strides, CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
    CUtensorMapL2promotion, CUtensorMapFloatOOBfill oob) {
  FAKE_ENTER();
  using fake::element_size;
  if (std::getenv("FAKE_CUDA_TENSOR_MAP_ERROR") != nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto addr = reinterpret_cast<std::uintptr_t>(address);
  const std::size_t size = element_size(type);
  if (map == nullptr || reinterpret_cast<std::uintptr_t>(map) % 64 != 0 || size == 0 || rank < 1 ||
      rank > 5 || addr % 16 != 0 || interleave != CU_TENSOR_MAP_INTERLEAVE_NONE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (cuuint32_t i = 0; i < rank; ++i) {
    if (dims[i] < 1 || dims[i] > (1ull << 32) || box[i] < 1 || box[i] > 256 ||
        element_strides[i] < 1 || element_strides[i] > 8) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (i + 1 < rank && (strides[i] % 16 != 0 || strides[i] >= (1ull << 40))) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  const std::uint64_t inner = box[0] * size;
  const std::uint64_t span = swizzle == CU_TENSOR_MAP_SWIZZLE_32B   ? 32
                             : swizzle == CU_TENSOR_MAP_SWIZZLE_64B ? 64
                                                                    : 128;
  if (inner % 16 != 0 || (swizzle != CU_TENSOR_MAP_SWIZZLE_NONE && inner > span)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (oob == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA &&
      (type != CU_TENSOR_MAP_DATA_TYPE_FLOAT16 && type != CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 &&
       type != CU_TENSOR_MAP_DATA_TYPE_FLOAT32 && type != CU_TENSOR_MAP_DATA_TYPE_FLOAT64)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::memset(map, 0, sizeof *map);
  map->opaque[0] = fake::tensor_map_magic;
  map->opaque[1] = addr;
  map->opaque[2] = rank;
  map->opaque[3] = size;
  for (cuuint32_t i = 0; i < rank; ++i) {
    map->opaque[4 + i] = dims[i];
    if (i + 1 < rank) map->opaque[9 + i] = strides[i];
  }
  return CUDA_SUCCESS;
}
#endif
