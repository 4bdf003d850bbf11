// The fake driver's state, shared by fake_libcuda.cpp and fake_libcuda_vmm.cpp (the driver entry
// points) and fake_kernels.cpp (the built-in kernels). See fake_libcuda.cpp.
#pragma once

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

namespace fake {

inline CUresult g_sticky = CUDA_SUCCESS;   // once set, every call returns it, like a dead context
inline CUresult g_pending = CUDA_SUCCESS;  // an asynchronous fault surfacing at the next sync
inline double g_clock_ms = 0;              // advanced by kernels; read by event records
inline unsigned long g_launches = 0;
inline unsigned long g_timed_launches = 0;   // those of kernels that take time (ms > 0)
inline unsigned long g_fills = 0;            // ko_fill_<dtype> launches
inline unsigned long g_structures = 0;       // ko_structure_<bytes> launches
inline unsigned long g_choices = 0;          // ko_choice_<bytes> launches
inline std::set<std::uint64_t> g_fill_keys;  // the distinct keys the fills were given
inline unsigned long g_watched_fills = 0;    // fills given the key in FAKE_CUDA_WATCH_SEED
inline unsigned long g_ref_compares = 0;     // ko_compare_ref_<dtype> launches
inline unsigned long g_sum_sqs = 0;          // ko_sum_sq_<dtype> launches
inline unsigned long g_poisons = 0;          // byte memsets of 0xFF (the default poison byte)
inline unsigned long g_zeroes = 0;           // byte memsets of 0
inline unsigned long g_event_syncs = 0;      // cuEventSynchronize calls
inline unsigned long g_stream_syncs = 0;     // cuStreamSynchronize calls

inline std::map<std::uintptr_t, std::size_t> g_allocs;
inline std::set<void*> g_events;
inline std::set<void*> g_modules;
inline std::set<void*> g_streams;
inline int g_ctx_refs = 0;
inline int g_ctx_token = 0;
inline std::set<void*> g_host;  // cuMemHostAlloc
inline unsigned long g_spin_launches = 0;
inline unsigned long g_flush_reads = 0;  // ko_flush_l2 launches
inline unsigned long g_flush_bytes = 0;  // bytes they read
inline unsigned long g_graph_launches = 0;
inline unsigned long g_graph_kernels = 0;  // kernels run by graph replays

struct Kernel;
struct CapturedLaunch {
  Kernel* kernel;
  std::vector<std::vector<std::uint8_t>> args;
};
struct Graph {
  std::vector<CapturedLaunch> launches;
};
inline CUstream g_capturing = nullptr;  // the stream being captured, if any
inline std::unique_ptr<Graph> g_capture;
inline std::set<void*> g_graphs;
inline std::set<void*> g_execs;

// Virtual memory management: handles (cuMemCreate) and their sizes, reservations
// (cuMemAddressReserve, host memory), mappings (cuMemMap; also in g_allocs) with their access
// flags (0 until cuMemSetAccess). Kernels run under a simulated MMU (run_kernel): a write into
// a mapping that is not read-write is undone and faults with CUDA_ERROR_ILLEGAL_ADDRESS.
inline constexpr std::size_t g_granularity = 64 * 1024;
inline unsigned long long g_next_handle = 1;
inline std::map<unsigned long long, std::size_t> g_handles;
inline std::map<std::uintptr_t, std::size_t> g_reserved;
struct Mapping {
  std::size_t bytes;
  unsigned long long handle;
  unsigned access;  // CUmemAccess_flags
};
inline std::map<std::uintptr_t, Mapping> g_mapped;
inline std::set<unsigned long long> g_filled;  // handles mapped once (their memory initialized)
inline unsigned long g_maps = 0;               // cuMemMap calls
inline unsigned long g_unmaps = 0;             // cuMemUnmap calls (hidden expected values, frees)
inline unsigned long g_protects = 0;           // cuMemSetAccess(PROT_READ) calls
inline unsigned long g_mmu_faults = 0;         // kernel writes stopped by a read-only mapping
inline unsigned long g_spied = 0;   // spy_kernel launches that saw the timed check's input
inline unsigned long g_hushed = 0;  // allocations hush_kernel / cover_kernel rewrote

struct Event {
  double t = -1;
};

inline bool valid_range(CUdeviceptr p, std::size_t n) {
  auto it = g_allocs.upper_bound(static_cast<std::uintptr_t>(p));
  if (it == g_allocs.begin()) return false;
  --it;
  return p >= it->first && p + n <= it->first + it->second;
}

inline std::uint8_t* bytes_at(CUdeviceptr p) { return reinterpret_cast<std::uint8_t*>(p); }

// The access flags of the mapping that holds [p, p + n); read-write for cuMemAlloc memory.
inline unsigned access_of(CUdeviceptr p, std::size_t n) {
  auto it = g_mapped.upper_bound(static_cast<std::uintptr_t>(p));
  if (it == g_mapped.begin()) return CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  --it;
  if (p >= it->first && p + n <= it->first + it->second.bytes) return it->second.access;
  return CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}
inline bool writable(CUdeviceptr p, std::size_t n) {
  return access_of(p, n) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}
inline bool readable(CUdeviceptr p, std::size_t n) { return access_of(p, n) != 0; }

struct Kernel {
  const char* name;
  std::vector<std::size_t> params;
  double ms;
  int static_shared;
  int max_dynamic_shared = 48 * 1024;
  void (*run)(void** p);
};

template <typename T>
T arg(void** p, int i) {
  T v;
  std::memcpy(&v, p[i], sizeof v);
  return v;
}

// The built-in kernels, iterable: for (Kernel& k : kernels()).
struct KernelTable {
  Kernel* first;
  Kernel* last;
  Kernel* begin() const { return first; }
  Kernel* end() const { return last; }
};
KernelTable kernels();
// The kernel a CUfunction handle points at, or nullptr.
Kernel* as_kernel(CUfunction f);
// tma_copy_kernel (fake_libcuda_tma.cpp): copies through two tensor maps.
void tma_copy_run(void** p);

}  // namespace fake

// The first line of every entry point: once the context is dead, every call returns the sticky
// error.
#define FAKE_ENTER()                                           \
  do {                                                         \
    if (fake::g_sticky != CUDA_SUCCESS) return fake::g_sticky; \
  } while (0)
