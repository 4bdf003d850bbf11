// A CPU stand-in for libcuda.so.1, loaded by the end-to-end tests through
// KERNELOPT_LIBCUDA. It implements exactly the driver entry points the harness resolves, with
// host memory as "device" memory and a handful of built-in "kernels" that misbehave on
// purpose (out-of-bounds writes, modified inputs, faults), so the harness's checking and
// error classification can be tested on machines without a GPU.
//
// A module file is valid when it starts with "FAKE-MODULE"; anything else fails to load with
// a JIT log. Every module holds every kernel, including CPU versions of the support module's
// ko_compare_<dtype>, ko_compare_ref_<dtype>, ko_fill_<dtype>, ko_bitwise_diff, ko_spin and
// ko_empty, except a module whose text contains
// "NO-SUPPORT-KERNELS" (an out-of-date support module), which lacks the ko_* ones, or
// "NO-TIMING-KERNELS" (one built from compare.cu alone), which lacks ko_spin and ko_empty.
// Environment knobs:
//   FAKE_CUDA_INIT_ERROR=<code>  cuInit returns that CUresult
//   FAKE_CUDA_NO_PARAM_INFO=1    cuFuncGetParamInfo reports CUDA_ERROR_NOT_SUPPORTED
//   FAKE_CUDA_SPIN_TIMEOUT=1     ko_spin reports that it timed out
//   FAKE_CUDA_STATS=1            at exit, print "fake libcuda stats: ..." counters on stderr
// Graph capture records kernel launches (with copies of their arguments) and cuGraphLaunch
// replays them, so graph-mode timing runs the real control flow.
// At exit the fake reports leaked allocations, events, modules and streams on stderr and
// exits with status 99, unless the context died (a fault makes frees fail, as on a GPU).
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

namespace {

CUresult g_sticky = CUDA_SUCCESS;   // once set, every call returns it, like a dead context
CUresult g_pending = CUDA_SUCCESS;  // an asynchronous fault surfacing at the next sync
double g_clock_ms = 0;              // advanced by kernels; read by event records
unsigned long g_launches = 0;
unsigned long g_fills = 0;         // ko_fill_<dtype> launches
unsigned long g_ref_compares = 0;  // ko_compare_ref_<dtype> launches

std::map<std::uintptr_t, std::size_t> g_allocs;
std::set<void*> g_events;
std::set<void*> g_modules;
std::set<void*> g_streams;
int g_ctx_refs = 0;
int g_ctx_token = 0;
std::set<void*> g_host;  // cuMemHostAlloc
unsigned long g_spin_launches = 0;
unsigned long g_graph_launches = 0;
unsigned long g_graph_kernels = 0;  // kernels run by graph replays

struct Kernel;
struct CapturedLaunch {
  Kernel* kernel;
  std::vector<std::vector<std::uint8_t>> args;
};
struct Graph {
  std::vector<CapturedLaunch> launches;
};
CUstream g_capturing = nullptr;  // the stream being captured, if any
std::unique_ptr<Graph> g_capture;
std::set<void*> g_graphs;
std::set<void*> g_execs;

struct Event {
  double t = -1;
};

struct LeakCheck {
  ~LeakCheck() {
    if (std::getenv("FAKE_CUDA_STATS") != nullptr) {
      std::fprintf(
          stderr,
          "fake libcuda stats: launches=%lu spins=%lu graph_launches=%lu graph_kernels=%lu "
          "fills=%lu ref_compares=%lu\n",
          g_launches, g_spin_launches, g_graph_launches, g_graph_kernels, g_fills, g_ref_compares);
    }
    if (g_sticky != CUDA_SUCCESS || g_pending != CUDA_SUCCESS) {
      // A dead context cannot free anything; the real driver reclaims it all at exit.
      for (const auto& a : g_allocs) std::free(reinterpret_cast<void*>(a.first));
      for (void* e : g_events) delete static_cast<Event*>(e);
      for (void* m : g_modules) delete static_cast<int*>(m);
      for (void* s : g_streams) delete static_cast<int*>(s);
      return;
    }
    if (g_allocs.empty() && g_events.empty() && g_modules.empty() && g_streams.empty() &&
        g_ctx_refs == 0 && g_host.empty() && g_graphs.empty() && g_execs.empty() &&
        g_capturing == nullptr) {
      return;
    }
    std::fprintf(stderr,
                 "fake libcuda: leaked %zu allocation(s), %zu event(s), %zu module(s), "
                 "%zu stream(s), %d context reference(s), %zu host allocation(s), %zu graph(s), "
                 "%zu graph exec(s), capture open: %d\n",
                 g_allocs.size(), g_events.size(), g_modules.size(), g_streams.size(), g_ctx_refs,
                 g_host.size(), g_graphs.size(), g_execs.size(), g_capturing != nullptr);
    std::_Exit(99);
  }
} g_leak_check;

#define FAKE_ENTER()                               \
  do {                                             \
    if (g_sticky != CUDA_SUCCESS) return g_sticky; \
  } while (0)

bool valid_range(CUdeviceptr p, std::size_t n) {
  auto it = g_allocs.upper_bound(static_cast<std::uintptr_t>(p));
  if (it == g_allocs.begin()) return false;
  --it;
  return p >= it->first && p + n <= it->first + it->second;
}

std::uint8_t* bytes_at(CUdeviceptr p) { return reinterpret_cast<std::uint8_t*>(p); }

// ---------------------------------------------------------------------------------------------
// Kernels. Parameters are read exactly as the driver would: one pointer per parameter.
// ---------------------------------------------------------------------------------------------
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

// copy(const u8* in, u8* out, u64 n)
void copy_run(void** p) {
  const auto n = arg<std::uint64_t>(p, 2);
  std::memcpy(bytes_at(arg<CUdeviceptr>(p, 1)), bytes_at(arg<CUdeviceptr>(p, 0)), n);
}
// Like copy, then one byte past the end of `out` and 3 bytes just before it.
void oob_run(void** p) {
  copy_run(p);
  const auto n = arg<std::uint64_t>(p, 2);
  auto* out = bytes_at(arg<CUdeviceptr>(p, 1));
  out[n] = 0;
  out[-1] = 0;
  out[-2] = 0;
  out[-3] = 0;
}
// Like copy, then flips bits of in[3] and in[5].
void clobber_run(void** p) {
  copy_run(p);
  auto* in = bytes_at(arg<CUdeviceptr>(p, 0));
  in[3] ^= 1;
  in[5] ^= 1;
}
// An illegal address, reported asynchronously.
void fault_run(void**) { g_pending = CUDA_ERROR_ILLEGAL_ADDRESS; }
// inc(u8* data, u64 n): data[i] += 1
void inc_run(void** p) {
  const auto n = arg<std::uint64_t>(p, 1);
  auto* d = bytes_at(arg<CUdeviceptr>(p, 0));
  for (std::uint64_t i = 0; i < n; ++i) d[i] = static_cast<std::uint8_t>(d[i] + 1);
}
// axpy(float a, const float* x, float* y, u32 n): y = a * x + y
void axpy_run(void** p) {
  const auto a = arg<float>(p, 0);
  const auto* x = reinterpret_cast<const float*>(arg<CUdeviceptr>(p, 1));
  auto* y = reinterpret_cast<float*>(arg<CUdeviceptr>(p, 2));
  const auto n = arg<std::uint32_t>(p, 3);
  for (std::uint32_t i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}
// count(u32* out, u32 n): out[i] += 1 (an accumulating kernel: needs init "zero")
void count_run(void** p) {
  auto* out = reinterpret_cast<std::uint32_t*>(arg<CUdeviceptr>(p, 0));
  const auto n = arg<std::uint32_t>(p, 1);
  for (std::uint32_t i = 0; i < n; ++i) out[i] += 1;
}

// Like copy, but from its second launch on also flips a bit of in[0]: only a check after the
// measured launches can see it.
void late_clobber_run(void** p) {
  static int calls = 0;
  copy_run(p);
  if (calls++ > 0) bytes_at(arg<CUdeviceptr>(p, 0))[0] ^= 1;
}
// stamp(u32* out, u32 n): out[i] = the launch count, so no two launches agree.
void stamp_run(void** p) {
  auto* out = reinterpret_cast<std::uint32_t*>(arg<CUdeviceptr>(p, 0));
  const auto n = arg<std::uint32_t>(p, 1);
  for (std::uint32_t i = 0; i < n; ++i) out[i] = static_cast<std::uint32_t>(g_launches + 1);
}
// replay(const u8* in, u8* out, u64 n): copies on its first launch, then replays that first
// result whatever the input (a kernel that caches its answer).
std::vector<std::uint8_t> g_replay;
void replay_run(void** p) {
  const auto n = arg<std::uint64_t>(p, 2);
  const auto* in = bytes_at(arg<CUdeviceptr>(p, 0));
  if (g_replay.empty()) g_replay.assign(in, in + n);
  std::memcpy(bytes_at(arg<CUdeviceptr>(p, 1)), g_replay.data(),
              n < g_replay.size() ? n : g_replay.size());
}

// The support module's kernels, on the CPU, with compare.cu's semantics and result layout.
double half_to_double(std::uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 31) return mant ? std::nan("") : sign * INFINITY;
  return sign * std::ldexp(mant | 0x400, exp - 25);
}
template <typename T>
double load_plain(const std::uint8_t* p, std::uint64_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof v);
  return static_cast<double>(v);
}
double load_half(const std::uint8_t* p, std::uint64_t i) {
  std::uint16_t v;
  std::memcpy(&v, p + 2 * i, 2);
  return half_to_double(v);
}
double load_bf16(const std::uint8_t* p, std::uint64_t i) {
  std::uint16_t v;
  std::memcpy(&v, p + 2 * i, 2);
  const std::uint32_t bits = std::uint32_t{v} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
template <double (*Load)(const std::uint8_t*, std::uint64_t)>
void compare_run(void** p) {
  const auto* actual = bytes_at(arg<CUdeviceptr>(p, 0));
  const auto* expected = reinterpret_cast<const double*>(arg<CUdeviceptr>(p, 1));
  const auto n = arg<std::uint64_t>(p, 2);
  const auto abs_tol = arg<double>(p, 3);
  const auto rtol = arg<double>(p, 4);
  const auto rel_floor = arg<double>(p, 5);
  auto* r = reinterpret_cast<std::uint64_t*>(arg<CUdeviceptr>(p, 6));
  double max_abs = 0, max_rel = 0, err_sq;
  std::memcpy(&max_abs, &r[3], 8);
  std::memcpy(&max_rel, &r[4], 8);
  std::memcpy(&err_sq, &r[5], 8);
  for (std::uint64_t i = 0; i < n; ++i) {
    const double e = expected[i];
    const double a = Load(actual, i);
    const double diff = std::fabs(a - e);
    if (!(diff <= abs_tol + rtol * std::fabs(e))) {
      ++r[0];
      if (i < r[2]) r[2] = i;
    }
    if (!std::isfinite(a)) ++r[1];
    if (std::isfinite(diff)) {
      max_abs = std::fmax(max_abs, diff);
      max_rel = std::fmax(max_rel, diff / std::fmax(std::fabs(e), rel_floor));
      err_sq += diff * diff;
    }
  }
  std::memcpy(&r[3], &max_abs, 8);
  std::memcpy(&r[4], &max_rel, 8);
  std::memcpy(&r[5], &err_sq, 8);
}
void bitwise_diff_run(void** p) {
  const auto* a = bytes_at(arg<CUdeviceptr>(p, 0));
  const auto* b = bytes_at(arg<CUdeviceptr>(p, 1));
  const auto n = arg<std::uint64_t>(p, 2);
  auto* r = reinterpret_cast<std::uint64_t*>(arg<CUdeviceptr>(p, 3));
  for (std::uint64_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) {
      ++r[0];
      if (i < r[1]) r[1] = i;
    }
  }
}

// ko_spin(u32* release, u32* timed_out, u64 timeout_ns): the fake runs launches when they are
// enqueued, before the host could release the flag, so it returns at once; with
// FAKE_CUDA_SPIN_TIMEOUT it reports a timeout instead.
void spin_run(void** p) {
  ++g_spin_launches;
  if (std::getenv("FAKE_CUDA_SPIN_TIMEOUT") != nullptr) {
    *reinterpret_cast<std::uint32_t*>(arg<CUdeviceptr>(p, 1)) = 1;
  }
}
void empty_run(void**) {}

// ko_fill_<dtype>(T* out, u64 n, u64 seed, u64 launch, u32 buffer, u32 kind, double a,
// double b, i64 low, u64 range): not fill.cu's Philox, only a deterministic function of
// (seed, launch, buffer, i) in the generator's range, which is what the harness relies on.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
template <typename T>
void fill_run(void** p) {
  ++g_fills;
  auto* out = reinterpret_cast<T*>(arg<CUdeviceptr>(p, 0));
  const auto n = arg<std::uint64_t>(p, 1);
  const auto seed = arg<std::uint64_t>(p, 2);
  const auto launch = arg<std::uint64_t>(p, 3);
  const auto buffer = arg<std::uint32_t>(p, 4);
  const auto kind = arg<std::uint32_t>(p, 5);
  const auto a = arg<double>(p, 6);
  const auto b = arg<double>(p, 7);
  const auto low = arg<std::int64_t>(p, 8);
  const auto range = arg<std::uint64_t>(p, 9);
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t h = mix(seed ^ mix(launch * 0x100000001B3ull + buffer) ^ mix(i));
    const double u = static_cast<double>(h >> 11) * 0x1p-53;
    double v = kind == 2   ? static_cast<double>(low + static_cast<std::int64_t>(h % range))
               : kind == 0 ? a + (b - a) * u
                           : a + b * (2 * u - 1);
    out[i] = static_cast<T>(v);
  }
}
// ko_compare_ref_<dtype>: ko_compare_<dtype> with the reference output as the expected values.
template <double (*Load)(const std::uint8_t*, std::uint64_t)>
void compare_ref_run(void** p) {
  ++g_ref_compares;
  const auto* reference = bytes_at(arg<CUdeviceptr>(p, 1));
  const auto n = arg<std::uint64_t>(p, 2);
  std::vector<double> expected(n);
  for (std::uint64_t i = 0; i < n; ++i) expected[i] = Load(reference, i);
  CUdeviceptr e = reinterpret_cast<CUdeviceptr>(expected.data());
  void* q[] = {p[0], &e, p[2], p[3], p[4], p[5], p[6]};
  compare_run<Load>(q);
}

#define FAKE_COMPARE(dtype, load) \
  {"ko_compare_" #dtype, {8, 8, 8, 8, 8, 8, 8}, 0.01, 1536, 48 * 1024, compare_run<load>}

#define FAKE_REF(dtype, load, T)                                                                   \
  {"ko_compare_ref_" #dtype, {8, 8, 8, 8, 8, 8, 8}, 0.01, 1536, 48 * 1024, compare_ref_run<load>}, \
  {                                                                                                \
    "ko_fill_" #dtype, {8, 8, 8, 8, 4, 4, 8, 8, 8, 8}, 0.02, 0, 48 * 1024, fill_run<T>             \
  }

Kernel g_kernels[] = {
    {"stamp_kernel", {8, 4}, 0.125, 0, 48 * 1024, stamp_run},
    {"late_clobber_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, late_clobber_run},
    {"replay_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, replay_run},
    FAKE_COMPARE(int8, load_plain<std::int8_t>),
    FAKE_COMPARE(int16, load_plain<std::int16_t>),
    FAKE_COMPARE(int32, load_plain<std::int32_t>),
    FAKE_COMPARE(int64, load_plain<std::int64_t>),
    FAKE_COMPARE(uint8, load_plain<std::uint8_t>),
    FAKE_COMPARE(uint16, load_plain<std::uint16_t>),
    FAKE_COMPARE(uint32, load_plain<std::uint32_t>),
    FAKE_COMPARE(uint64, load_plain<std::uint64_t>),
    FAKE_COMPARE(float16, load_half),
    FAKE_COMPARE(bfloat16, load_bf16),
    FAKE_COMPARE(float32, load_plain<float>),
    FAKE_COMPARE(float64, load_plain<double>),
    FAKE_REF(int8, load_plain<std::int8_t>, std::int8_t),
    FAKE_REF(int16, load_plain<std::int16_t>, std::int16_t),
    FAKE_REF(int32, load_plain<std::int32_t>, std::int32_t),
    FAKE_REF(int64, load_plain<std::int64_t>, std::int64_t),
    FAKE_REF(uint8, load_plain<std::uint8_t>, std::uint8_t),
    FAKE_REF(uint16, load_plain<std::uint16_t>, std::uint16_t),
    FAKE_REF(uint32, load_plain<std::uint32_t>, std::uint32_t),
    FAKE_REF(uint64, load_plain<std::uint64_t>, std::uint64_t),
    FAKE_REF(float16, load_half, std::uint16_t),
    FAKE_REF(bfloat16, load_bf16, std::uint16_t),
    FAKE_REF(float32, load_plain<float>, float),
    FAKE_REF(float64, load_plain<double>, double),
    {"ko_bitwise_diff", {8, 8, 8, 8}, 0.01, 512, 48 * 1024, bitwise_diff_run},
    {"ko_spin", {8, 8, 8}, 0.0, 0, 48 * 1024, spin_run},
    {"ko_empty", {}, 0.002, 0, 48 * 1024, empty_run},
    {"copy_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, copy_run},
    {"oob_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, oob_run},
    {"clobber_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, clobber_run},
    {"fault_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, fault_run},
    {"inc_kernel", {8, 8}, 0.25, 0, 48 * 1024, inc_run},
    {"axpy_kernel", {4, 8, 8, 4}, 0.125, 0, 48 * 1024, axpy_run},
    {"count_kernel", {8, 4}, 0.125, 1024, 48 * 1024, count_run},
};

Kernel* as_kernel(CUfunction f) {
  for (auto& k : g_kernels) {
    if (reinterpret_cast<CUfunction>(&k) == f) return &k;
  }
  return nullptr;
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
  // The module remembers which support kernels it lacks: 1 all ko_*, 2 ko_spin and ko_empty.
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
      (lacks == 2 && (std::strcmp(name, "ko_spin") == 0 || std::strcmp(name, "ko_empty") == 0))) {
    return CUDA_ERROR_NOT_FOUND;
  }
  for (auto& k : g_kernels) {
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
  std::memcpy(bytes_at(dst), src, n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  FAKE_ENTER();
  if (g_streams.count(s) == 0 || !valid_range(src, n)) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(dst, bytes_at(src), n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  FAKE_ENTER();
  if (g_streams.count(s) == 0 || !valid_range(src, n) || !valid_range(dst, n)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::memmove(bytes_at(dst), bytes_at(src), n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  FAKE_ENTER();
  if (g_streams.count(s) == 0 || !valid_range(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  std::memset(bytes_at(dst), v, n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream s) {
  FAKE_ENTER();
  if (g_streams.count(s) == 0 || dst % 4 != 0 || !valid_range(dst, n * 4)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
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
  k->run(params);
  ++g_launches;
  // Deterministic, slightly varying durations: 1.00x, 1.01x, 1.02x, 1.00x, ...
  g_clock_ms += k->ms * (1.0 + 0.01 * static_cast<double>(g_launches % 3));
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
    c.kernel->run(ptrs.data());
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
