// The fake libcuda.so.1's virtual memory management and mapped host memory entry points
// (cuMemCreate, cuMemAddressReserve, cuMemMap, cuMemSetAccess, ..., cuMemHostAlloc): the rest of
// the fake driver, and what it simulates, is described in fake_libcuda.cpp. Both files build the
// one shared library (tests/CMakeLists.txt) and share the driver's state (fake_libcuda.hpp).
#include "fake_libcuda.hpp"

#include <cuda.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

using namespace fake;

extern "C" {

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* g, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags) {
  FAKE_ENTER();
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *g = g_granularity;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* h, size_t bytes,
                             const CUmemAllocationProp* prop, unsigned long long flags) {
  FAKE_ENTER();
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id != 0 || flags != 0 ||
      bytes == 0 || bytes % g_granularity != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (bytes > (1ull << 36)) return CUDA_ERROR_OUT_OF_MEMORY;
  // FAKE_CUDA_VMM_HANDLES=N: a device whose memory holds N staged copies at a time
  if (const char* n = std::getenv("FAKE_CUDA_VMM_HANDLES");
      n != nullptr && g_handles.size() >= std::strtoull(n, nullptr, 10)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *h = g_next_handle++;
  g_handles[*h] = bytes;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle h) {
  FAKE_ENTER();
  if (g_handles.erase(h) == 0) return CUDA_ERROR_INVALID_VALUE;
  g_filled.erase(h);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* p, size_t bytes, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags) {
  FAKE_ENTER();
  if (bytes == 0 || bytes % g_granularity != 0 || alignment != 0 || addr != 0 || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  void* mem = std::aligned_alloc(g_granularity, bytes);
  if (mem == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = reinterpret_cast<CUdeviceptr>(mem);
  g_reserved[reinterpret_cast<std::uintptr_t>(mem)] = bytes;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemAddressFree(CUdeviceptr p, size_t bytes) {
  FAKE_ENTER();
  auto it = g_reserved.find(static_cast<std::uintptr_t>(p));
  if (it == g_reserved.end() || it->second != bytes || g_mapped.count(p) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::free(reinterpret_cast<void*>(p));
  g_reserved.erase(it);
  return CUDA_SUCCESS;
}
// Only whole reservations map whole handles: all the harness needs.
CUresult CUDAAPI cuMemMap(CUdeviceptr p, size_t bytes, size_t offset,
                          CUmemGenericAllocationHandle h, unsigned long long flags) {
  FAKE_ENTER();
  const auto r = g_reserved.find(static_cast<std::uintptr_t>(p));
  const auto hd = g_handles.find(h);
  if (r == g_reserved.end() || hd == g_handles.end() || r->second != bytes || hd->second != bytes ||
      offset != 0 || flags != 0 || g_mapped.count(p) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // New physical memory starts as garbage; a handle mapped again (after cuMemUnmap) keeps
  // what it held, as the GPU's does.
  if (g_filled.insert(h).second) std::memset(bytes_at(p), 0x5A, bytes);
  g_mapped[p] = Mapping{bytes, h, 0};
  g_allocs[p] = bytes;
  ++g_maps;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemUnmap(CUdeviceptr p, size_t bytes) {
  FAKE_ENTER();
  const auto it = g_mapped.find(static_cast<std::uintptr_t>(p));
  if (it == g_mapped.end() || it->second.bytes != bytes) return CUDA_ERROR_INVALID_VALUE;
  g_mapped.erase(it);
  g_allocs.erase(p);
  ++g_unmaps;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemSetAccess(CUdeviceptr p, size_t bytes, const CUmemAccessDesc* desc,
                                size_t count) {
  FAKE_ENTER();
  const auto it = g_mapped.find(static_cast<std::uintptr_t>(p));
  if (it == g_mapped.end() || it->second.bytes != bytes || count != 1 || desc == nullptr ||
      desc->location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc->location.id != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READ) {
    if (std::getenv("FAKE_CUDA_NO_READONLY") != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
    ++g_protects;
  } else if (desc->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  it->second.access = desc->flags;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostAlloc(void** p, size_t bytes, unsigned int flags) {
  FAKE_ENTER();
  if (bytes == 0 || (flags & CU_MEMHOSTALLOC_DEVICEMAP) == 0) return CUDA_ERROR_INVALID_VALUE;
  *p = std::calloc(1, bytes);
  g_host.insert(*p);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFreeHost(void* p) {
  FAKE_ENTER();
  if (g_host.erase(p) == 0) return CUDA_ERROR_INVALID_VALUE;
  std::free(p);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr* d, void* p, unsigned int flags) {
  FAKE_ENTER();
  if (flags != 0 || g_host.count(p) == 0) return CUDA_ERROR_INVALID_VALUE;
  *d = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

}  // extern "C"
