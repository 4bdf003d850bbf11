// A CPU stand-in for libcuda.so.1, loaded by the end-to-end tests through
// KERNELOPT_LIBCUDA. It implements exactly the driver entry points the harness resolves, with
// host memory as "device" memory and a handful of built-in "kernels" that misbehave on
// purpose (out-of-bounds writes, modified inputs, faults), so the harness's checking and
// error classification can be tested on machines without a GPU.
//
// A module file is valid when it starts with "FAKE-MODULE"; anything else fails to load with
// a JIT log. Every module holds every kernel, including CPU versions of the support module's
// ko_compare_<dtype>, ko_compare_ref_<dtype>, ko_fill_<dtype>, ko_choice_<bytes>,
// ko_structure_<bytes>, ko_bitwise_diff, ko_spin and ko_empty and ko_flush_l2, except a module
// whose text contains "NO-SUPPORT-KERNELS" (an out-of-date support module), which lacks the ko_*
// ones, or "NO-TIMING-KERNELS" (one built from compare.cu alone), which lacks ko_spin, ko_empty and
// ko_flush_l2.
// Environment knobs:
//   FAKE_CUDA_INIT_ERROR=<code>  cuInit returns that CUresult
//   FAKE_CUDA_NO_PARAM_INFO=1    cuFuncGetParamInfo reports CUDA_ERROR_NOT_SUPPORTED
//   FAKE_CUDA_SPIN_TIMEOUT=1     ko_spin reports that it timed out
//   FAKE_CUDA_STATS=1            at exit, print "fake libcuda stats: ..." counters on stderr
//   FAKE_CUDA_NO_VMM=1           the device reports no virtual memory management support
//   FAKE_CUDA_NO_READONLY=1      cuMemSetAccess refuses PROT_READ (CUDA_ERROR_NOT_SUPPORTED)
// Virtual memory management (cuMemCreate, cuMemMap, cuMemSetAccess, ...) is simulated over
// host memory: kernels run under a pretend MMU (a write into a read-only or inaccessible
// mapping is undone and faults with CUDA_ERROR_ILLEGAL_ADDRESS, like the GPU's), and a copy or
// memset into such a mapping kills the context. The virtual memory entry points, and the mapped
// host memory ones (cuMemHostAlloc, ...), are in fake_libcuda_vmm.cpp.
// Graph capture records kernel launches (with copies of their arguments) and cuGraphLaunch
// replays them, so graph-mode timing runs the real control flow.
// At exit the fake reports leaked allocations, events, modules and streams on stderr and
// exits with status 99, unless the context died (a fault makes frees fail, as on a GPU).
#include "fake_libcuda.hpp"

#include <cuda.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

using namespace fake;

namespace {

struct LeakCheck {
  ~LeakCheck() {
    if (std::getenv("FAKE_CUDA_STATS") != nullptr) {
      std::fprintf(
          stderr,
          "fake libcuda stats: launches=%lu spins=%lu graph_launches=%lu graph_kernels=%lu "
          "fills=%lu ref_compares=%lu maps=%lu protects=%lu mmu_faults=%lu hushed=%lu "
          "unmaps=%lu spied=%lu fill_keys=%lu watched_fills=%lu sum_sqs=%lu flush_reads=%lu "
          "flush_bytes=%lu structures=%lu choices=%lu poisons=%lu zeroes=%lu event_syncs=%lu "
          "stream_syncs=%lu\n",
          g_launches, g_spin_launches, g_graph_launches, g_graph_kernels, g_fills, g_ref_compares,
          g_maps, g_protects, g_mmu_faults, g_hushed, g_unmaps, g_spied,
          static_cast<unsigned long>(g_fill_keys.size()), g_watched_fills, g_sum_sqs, g_flush_reads,
          g_flush_bytes, g_structures, g_choices, g_poisons, g_zeroes, g_event_syncs,
          g_stream_syncs);
    }
    if (g_sticky != CUDA_SUCCESS || g_pending != CUDA_SUCCESS) {
      // A dead context cannot free anything; the real driver reclaims it all at exit.
      for (const auto& a : g_allocs) {
        if (g_mapped.count(a.first) == 0) std::free(reinterpret_cast<void*>(a.first));
      }
      for (const auto& r : g_reserved) std::free(reinterpret_cast<void*>(r.first));
      for (void* e : g_events) delete static_cast<Event*>(e);
      for (void* m : g_modules) delete static_cast<int*>(m);
      for (void* s : g_streams) delete static_cast<int*>(s);
      return;
    }
    if (g_allocs.empty() && g_events.empty() && g_modules.empty() && g_streams.empty() &&
        g_ctx_refs == 0 && g_host.empty() && g_graphs.empty() && g_execs.empty() &&
        g_capturing == nullptr && g_handles.empty() && g_reserved.empty() && g_mapped.empty()) {
      return;
    }
    std::fprintf(stderr,
                 "fake libcuda: leaked %zu allocation(s), %zu event(s), %zu module(s), "
                 "%zu stream(s), %d context reference(s), %zu host allocation(s), %zu graph(s), "
                 "%zu graph exec(s), capture open: %d, %zu memory handle(s), %zu address "
                 "reservation(s), %zu mapping(s)\n",
                 g_allocs.size(), g_events.size(), g_modules.size(), g_streams.size(), g_ctx_refs,
                 g_host.size(), g_graphs.size(), g_execs.size(), g_capturing != nullptr,
                 g_handles.size(), g_reserved.size(), g_mapped.size());
    std::_Exit(99);
  }
} g_leak_check;

// A copy engine writing a mapping that is not writable (or reading one that is not readable)
// faults, and the fault kills the context.
CUresult mmu_fault() {
  g_sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
  return g_sticky;
}

// Runs a kernel under the pretend MMU: what it wrote into a mapping that is not read-write is
// put back, and the launch faults asynchronously.
void run_kernel(Kernel* k, void** params) {
  std::vector<std::pair<const Mapping*, std::vector<std::uint8_t>>> before;
  for (const auto& [base, m] : g_mapped) {
    if (m.access != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      const auto* b = bytes_at(base);
      before.emplace_back(&m, std::vector<std::uint8_t>(b, b + m.bytes));
    }
  }
  k->run(params);
  for (const auto& [m, bytes] : before) {
    for (const auto& [base, mapping] : g_mapped) {
      if (&mapping != m) continue;
      if (std::memcmp(bytes_at(base), bytes.data(), bytes.size()) != 0) {
        std::memcpy(bytes_at(base), bytes.data(), bytes.size());
        ++g_mmu_faults;
        g_pending = CUDA_ERROR_ILLEGAL_ADDRESS;
      }
    }
  }
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** s) {
  switch (error) {
#define FAKE_NAME(e) \
  case e: *s = #e; return CUDA_SUCCESS;
    FAKE_NAME(CUDA_SUCCESS)
    FAKE_NAME(CUDA_ERROR_INVALID_VALUE)
    FAKE_NAME(CUDA_ERROR_OUT_OF_MEMORY)
    FAKE_NAME(CUDA_ERROR_NO_DEVICE)
    FAKE_NAME(CUDA_ERROR_INVALID_DEVICE)
    FAKE_NAME(CUDA_ERROR_INVALID_IMAGE)
    FAKE_NAME(CUDA_ERROR_NOT_FOUND)
    FAKE_NAME(CUDA_ERROR_ILLEGAL_ADDRESS)
    FAKE_NAME(CUDA_ERROR_INVALID_HANDLE)
    FAKE_NAME(CUDA_ERROR_NOT_SUPPORTED)
#undef FAKE_NAME
    default: *s = nullptr; return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** s) {
  switch (error) {
    case CUDA_ERROR_INVALID_VALUE: *s = "invalid argument"; return CUDA_SUCCESS;
    case CUDA_ERROR_OUT_OF_MEMORY: *s = "out of memory"; return CUDA_SUCCESS;
    case CUDA_ERROR_ILLEGAL_ADDRESS:
      *s = "an illegal memory access was encountered";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NO_DEVICE: *s = "no CUDA-capable device is detected"; return CUDA_SUCCESS;
    default: *s = "fake error"; return CUDA_SUCCESS;
  }
}

CUresult CUDAAPI cuInit(unsigned int) {
  if (const char* e = std::getenv("FAKE_CUDA_INIT_ERROR"))
    return static_cast<CUresult>(std::atoi(e));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDriverGetVersion(int* v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetCount(int* n) {
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice) {
  std::snprintf(name, static_cast<std::size_t>(len), "Fake GPU");
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 1 << 20; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *v = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *v = 5120; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return CUDA_ERROR_NOT_SUPPORTED;  // a retired attribute
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      *v = std::getenv("FAKE_CUDA_NO_VMM") != nullptr ? 0 : 1;
      break;
    default: *v = 1; break;
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceTotalMem(size_t* bytes, CUdevice) {
  *bytes = 80ull << 30;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice) {
  for (int i = 0; i < 16; ++i) uuid->bytes[i] = static_cast<char>(i * 17);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetPCIBusId(char* id, int len, CUdevice) {
  std::snprintf(id, static_cast<std::size_t>(len), "00000000:01:00.0");
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice) {
  FAKE_ENTER();
  ++g_ctx_refs;
  *ctx = reinterpret_cast<CUcontext>(&g_ctx_token);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice) {
  if (g_ctx_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --g_ctx_refs;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxSetCurrent(CUcontext) {
  FAKE_ENTER();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream* s, unsigned int flags) {
  FAKE_ENTER();
  if (flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
  *s = reinterpret_cast<CUstream>(new int(0));
  g_streams.insert(*s);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamDestroy(CUstream s) {
  FAKE_ENTER();
  if (g_streams.erase(s) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<int*>(s);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamSynchronize(CUstream s) {
  FAKE_ENTER();
  if (g_streams.count(s) == 0) return CUDA_ERROR_INVALID_HANDLE;
  ++g_stream_syncs;
  if (g_pending != CUDA_SUCCESS) {
    g_sticky = g_pending;
    return g_sticky;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventCreate(CUevent* e, unsigned int) {
  FAKE_ENTER();
  *e = reinterpret_cast<CUevent>(new Event);
  g_events.insert(*e);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventDestroy(CUevent e) {
  FAKE_ENTER();
  if (g_events.erase(e) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<Event*>(e);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventRecord(CUevent e, CUstream s) {
  FAKE_ENTER();
  if (g_events.count(e) == 0 || g_streams.count(s) == 0) return CUDA_ERROR_INVALID_HANDLE;
  reinterpret_cast<Event*>(e)->t = g_clock_ms;
  return CUDA_SUCCESS;
}
// Work runs when it is enqueued, so a recorded event has always completed.
CUresult CUDAAPI cuEventSynchronize(CUevent e) {
  FAKE_ENTER();
  if (g_events.count(e) == 0) return CUDA_ERROR_INVALID_HANDLE;
  ++g_event_syncs;
  if (g_pending != CUDA_SUCCESS) {  // an asynchronous fault surfaces here too
    g_sticky = g_pending;
    return g_sticky;
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventElapsedTime(float* ms, CUevent start, CUevent stop) {
  FAKE_ENTER();
  if (g_events.count(start) == 0 || g_events.count(stop) == 0) return CUDA_ERROR_INVALID_HANDLE;
  const auto* a = reinterpret_cast<Event*>(start);
  const auto* b = reinterpret_cast<Event*>(stop);
  if (a->t < 0 || b->t < 0) return CUDA_ERROR_INVALID_HANDLE;
  *ms = static_cast<float>(b->t - a->t);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* m, const void* image, unsigned int n,
                                    CUjit_option* options, void** values) {
  FAKE_ENTER();
  if (std::strncmp(static_cast<const char*>(image), "FAKE-MODULE", 11) != 0) {
    for (unsigned i = 0; i < n; ++i) {
      if (options[i] == CU_JIT_ERROR_LOG_BUFFER) {
        std::size_t size = 0;
        for (unsigned j = 0; j < n; ++j) {
          if (options[j] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
            size = reinterpret_cast<std::uintptr_t>(values[j]);
          }
        }
        std::snprintf(static_cast<char*>(values[i]), size, "fake ptxas: not a fake module");
      }
    }
    return CUDA_ERROR_INVALID_IMAGE;
  }
  // The module remembers which support kernels it lacks: 1 all ko_*, 2 the timing ones.
  const char* text = static_cast<const char*>(image);
  *m = reinterpret_cast<CUmodule>(new int(std::strstr(text, "NO-SUPPORT-KERNELS") != nullptr  ? 1
                                          : std::strstr(text, "NO-TIMING-KERNELS") != nullptr ? 2
                                                                                              : 0));
  g_modules.insert(*m);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleUnload(CUmodule m) {
  FAKE_ENTER();
  if (g_modules.erase(m) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<int*>(m);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  FAKE_ENTER();
  if (g_modules.count(m) == 0) return CUDA_ERROR_INVALID_HANDLE;
  const int lacks = *reinterpret_cast<int*>(m);
  if ((lacks == 1 && std::strncmp(name, "ko_", 3) == 0) ||
      (lacks == 2 && (std::strcmp(name, "ko_spin") == 0 || std::strcmp(name, "ko_empty") == 0 ||
                      std::strcmp(name, "ko_flush_l2") == 0))) {
    return CUDA_ERROR_NOT_FOUND;
  }
  for (auto& k : kernels()) {
    if (std::strcmp(k.name, name) == 0) {
      *f = reinterpret_cast<CUfunction>(&k);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}
CUresult CUDAAPI cuFuncGetAttribute(int* v, CUfunction_attribute a, CUfunction f) {
  FAKE_ENTER();
  Kernel* k = as_kernel(f);
  if (k == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  switch (a) {
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = 32; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *v = k->static_shared; break;
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *v = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *v = k->max_dynamic_shared; break;
    default: *v = 0; break;
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
  FAKE_ENTER();
  Kernel* k = as_kernel(f);
  if (k == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    if (v < 0 || v > 227 * 1024) return CUDA_ERROR_INVALID_VALUE;
    k->max_dynamic_shared = v;
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction f,
                                                             int block_size, size_t shared) {
  FAKE_ENTER();
  if (as_kernel(f) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (block_size <= 0 || block_size > 1024 || shared > 227 * 1024) return CUDA_ERROR_INVALID_VALUE;
  *blocks = 2048 / block_size > 32 ? 32 : 2048 / block_size;
  return CUDA_SUCCESS;
}
#if CUDA_VERSION >= 12040
CUresult CUDAAPI cuFuncGetParamInfo(CUfunction f, size_t index, size_t* offset, size_t* size) {
  FAKE_ENTER();
  if (std::getenv("FAKE_CUDA_NO_PARAM_INFO") != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  Kernel* k = as_kernel(f);
  if (k == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (index >= k->params.size()) return CUDA_ERROR_INVALID_VALUE;
  std::size_t off = 0;
  for (std::size_t i = 0; i < index; ++i) off += k->params[i];
  *offset = off;
  if (size != nullptr) *size = k->params[index];
  return CUDA_SUCCESS;
}
#endif

CUresult CUDAAPI cuMemAlloc(CUdeviceptr* p, size_t bytes) {
  FAKE_ENTER();
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (bytes > (1ull << 36)) return CUDA_ERROR_OUT_OF_MEMORY;
  // Fresh device memory holds garbage, not zeros.
  void* mem = std::malloc(bytes);
  if (mem == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  std::memset(mem, 0x5A, bytes);
  *p = reinterpret_cast<CUdeviceptr>(mem);
  g_allocs[reinterpret_cast<std::uintptr_t>(mem)] = bytes;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFree(CUdeviceptr p) {
  FAKE_ENTER();
  auto it = g_allocs.find(static_cast<std::uintptr_t>(p));
  if (it == g_allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  std::free(reinterpret_cast<void*>(p));
  g_allocs.erase(it);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  FAKE_ENTER();
  if (g_streams.count(s) == 0 || !valid_range(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  if (!writable(dst, n)) return mmu_fault();
  std::memcpy(bytes_at(dst), src, n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  FAKE_ENTER();
  if (g_streams.count(s) == 0 || !valid_range(src, n)) return CUDA_ERROR_INVALID_VALUE;
  if (!readable(src, n)) return mmu_fault();
  std::memcpy(dst, bytes_at(src), n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  FAKE_ENTER();
  if (g_streams.count(s) == 0 || !valid_range(src, n) || !valid_range(dst, n)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!readable(src, n) || !writable(dst, n)) return mmu_fault();
  std::memmove(bytes_at(dst), bytes_at(src), n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  FAKE_ENTER();
  if (g_streams.count(s) == 0 || !valid_range(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  if (!writable(dst, n)) return mmu_fault();
  std::memset(bytes_at(dst), v, n);
  if (v == 0xFF) ++g_poisons;
  if (v == 0) ++g_zeroes;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream s) {
  FAKE_ENTER();
  if (g_streams.count(s) == 0 || dst % 4 != 0 || !valid_range(dst, n * 4)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!writable(dst, n * 4)) return mmu_fault();
  auto* d = reinterpret_cast<std::uint32_t*>(dst);
  for (std::size_t i = 0; i < n; ++i) d[i] = v;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz,
                                unsigned int shared, CUstream s, void** params, void** extra) {
  FAKE_ENTER();
  Kernel* k = as_kernel(f);
  if (k == nullptr || g_streams.count(s) == 0 || extra != nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy == 0 || gz == 0 || gy > 65535 || gz > 65535) return CUDA_ERROR_INVALID_VALUE;
  if (std::uint64_t{bx} * by * bz > 1024 || bz > 64) return CUDA_ERROR_INVALID_VALUE;
  if (shared > static_cast<unsigned>(k->max_dynamic_shared)) return CUDA_ERROR_INVALID_VALUE;
  if (!k->params.empty() && params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (s == g_capturing) {
    CapturedLaunch c{k, {}};
    for (std::size_t i = 0; i < k->params.size(); ++i) {
      const auto* b = static_cast<const std::uint8_t*>(params[i]);
      c.args.emplace_back(b, b + k->params[i]);
    }
    g_capture->launches.push_back(std::move(c));
    return CUDA_SUCCESS;
  }
  run_kernel(k, params);
  ++g_launches;
  // Deterministic, slightly varying durations: 1.00x, 1.01x, 1.02x, 1.00x, ... over the kernels
  // that take time (a timeless one, such as ko_flush_l2 before each sample, leaves the cycle be).
  if (k->ms > 0) ++g_timed_launches;
  g_clock_ms += k->ms * (1.0 + 0.01 * static_cast<double>(g_timed_launches % 3));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream s, CUstreamCaptureMode) {
  FAKE_ENTER();
  if (g_streams.count(s) == 0 || g_capturing != nullptr) return CUDA_ERROR_INVALID_VALUE;
  g_capturing = s;
  g_capture = std::make_unique<Graph>();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamEndCapture(CUstream s, CUgraph* graph) {
  FAKE_ENTER();
  if (s != g_capturing) return CUDA_ERROR_INVALID_VALUE;
  g_capturing = nullptr;
  Graph* g = g_capture.release();
  g_graphs.insert(g);
  *graph = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec* exec, CUgraph graph, unsigned long long) {
  FAKE_ENTER();
  if (g_graphs.count(graph) == 0) return CUDA_ERROR_INVALID_HANDLE;
  auto* copy = new Graph(*reinterpret_cast<Graph*>(graph));
  g_execs.insert(copy);
  *exec = reinterpret_cast<CUgraphExec>(copy);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphLaunch(CUgraphExec exec, CUstream s) {
  FAKE_ENTER();
  if (g_execs.count(exec) == 0 || g_streams.count(s) == 0) return CUDA_ERROR_INVALID_HANDLE;
  ++g_graph_launches;
  for (auto& c : reinterpret_cast<Graph*>(exec)->launches) {
    std::vector<void*> ptrs;
    for (auto& a : c.args) ptrs.push_back(a.data());
    run_kernel(c.kernel, ptrs.data());
    ++g_launches;
    ++g_graph_kernels;
    g_clock_ms += c.kernel->ms * (1.0 + 0.01 * static_cast<double>(g_launches % 3));
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphDestroy(CUgraph graph) {
  FAKE_ENTER();
  if (g_graphs.erase(graph) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<Graph*>(graph);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec exec) {
  FAKE_ENTER();
  if (g_execs.erase(exec) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<Graph*>(exec);
  return CUDA_SUCCESS;
}

}  // extern "C"
