// The fake driver's built-in kernels, run on the CPU when launched (see fake_libcuda.cpp).
#include "fake_libcuda.hpp"

#include "fake_fill.hpp"

#include <iterator>

namespace fake {
namespace {

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
// wide(const u8* in, u8* out, u64 n, u8* extra0, ..., u32* extra19): copies, and stamps the last
// extra buffer's first word with the launch count (a case with more buffers than 16; only that
// buffer differs between two launches).
constexpr int wide_extras = 20;
void wide_run(void** p) {
  copy_run(p);
  *reinterpret_cast<std::uint32_t*>(arg<CUdeviceptr>(p, 2 + wide_extras)) =
      static_cast<std::uint32_t>(g_launches + 1);
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

// Whether the allocation at `base` holds the kernel's own buffer at `p` (a forger spares it).
bool holds(const std::pair<const std::uintptr_t, std::size_t>& a, CUdeviceptr p) {
  return p >= a.first && p < a.first + a.second;
}
// cover(const u8* in, u8* out, u64 n): replay's cached answer, then every other allocation that
// holds that answer is rewritten with the input of the kernel's previous launch: what a copy of
// the previous launch's output (a checked launch's dump) would hold had the kernel copied. The
// harness reads dumps back before the next launch, so the files keep the wrong answer.
std::vector<std::uint8_t> g_previous_in;
void cover_run(void** p) {
  const auto* in = bytes_at(arg<CUdeviceptr>(p, 0));
  const auto n = arg<std::uint64_t>(p, 2);
  replay_run(p);
  if (g_previous_in.size() == n && n > 0) {
    for (const auto& a : g_allocs) {
      if (a.second < n || holds(a, arg<CUdeviceptr>(p, 0)) || holds(a, arg<CUdeviceptr>(p, 1)) ||
          !writable(a.first, n) || std::memcmp(bytes_at(a.first), g_replay.data(), n) != 0) {
        continue;
      }
      std::memcpy(bytes_at(a.first), g_previous_in.data(), n);
      ++g_hushed;
    }
  }
  g_previous_in.assign(in, in + n);
}
// blank(const u8* in, u8* out, u64 n): copies on its first two launches (validation and its
// repeat); after that writes zeros and zeroes every other allocation that starts with in's
// bytes, so a reference reading a private copy of a fixed input would compute zeros too. The
// reference's copy is staged read-only: the write faults.
void blank_run(void** p) {
  static int calls = 0;
  if (calls++ < 2) {
    copy_run(p);
    return;
  }
  const auto* in = bytes_at(arg<CUdeviceptr>(p, 0));
  const auto n = arg<std::uint64_t>(p, 2);
  std::memset(bytes_at(arg<CUdeviceptr>(p, 1)), 0, n);
  for (const auto& a : g_allocs) {
    if (n == 0 || a.second < n || holds(a, arg<CUdeviceptr>(p, 0)) ||
        holds(a, arg<CUdeviceptr>(p, 1)) || std::memcmp(bytes_at(a.first), in, n) != 0) {
      continue;
    }
    std::memset(bytes_at(a.first), 0, n);
  }
}
// mend(u32* out, u32 n): stamp's launch count (no two launches agree), then every other
// allocation holding its previous output is rewritten with this one, so a saved copy of the
// validation launch's output (the determinism re-run's) would agree. That copy is read-only.
std::vector<std::uint32_t> g_previous_out;
void mend_run(void** p) {
  auto* out = reinterpret_cast<std::uint32_t*>(arg<CUdeviceptr>(p, 0));
  const auto n = arg<std::uint32_t>(p, 1);
  stamp_run(p);
  const std::size_t bytes = n * sizeof(std::uint32_t);
  if (g_previous_out.size() == n && n > 0) {
    for (const auto& a : g_allocs) {
      if (a.second < bytes || holds(a, arg<CUdeviceptr>(p, 0)) ||
          std::memcmp(bytes_at(a.first), g_previous_out.data(), bytes) != 0) {
        continue;
      }
      std::memcpy(bytes_at(a.first), out, bytes);
    }
  }
  g_previous_out.assign(out, out + n);
}
// hush(const u8* in, u8* out, u64 n): replay's cached answer, then, like a kernel that finds
// the harness's compare results in device memory, resets every allocation outside its own
// buffers that holds only KoCompareResult-shaped records (48 bytes: counts, first mismatch
// or ~0, error bits) to "no mismatch". A verdict left on the device while later launches run
// would then read as a pass; the harness reads each check before the next launch.
void hush_run(void** p) {
  replay_run(p);
  constexpr std::size_t record = 48;
  for (const auto& a : g_allocs) {
    if (a.second == 0 || a.second % record != 0 || a.second > 256 * record ||
        holds(a, arg<CUdeviceptr>(p, 0)) || holds(a, arg<CUdeviceptr>(p, 1)) ||
        !writable(a.first, a.second)) {
      continue;
    }
    auto* r = reinterpret_cast<std::uint64_t*>(a.first);
    bool shaped = true;
    for (std::size_t k = 0; k < a.second / record && shaped; ++k) {
      const std::uint64_t* q = r + 6 * k;
      shaped = q[0] < (1ull << 40) && q[1] <= q[0] && (q[2] == ~0ull || q[2] < (1ull << 40));
    }
    if (!shaped) continue;
    ++g_hushed;
    for (std::size_t k = 0; k < a.second / record; ++k) {
      std::uint64_t* q = r + 6 * k;
      q[0] = q[1] = q[3] = q[4] = q[5] = 0;
      q[2] = ~0ull;
    }
  }
}
// forge(const float* in, float* out, u64 bytes): out = in + 1 (wrong for copy_kernel's
// expected values), then, like a kernel scanning device memory for its expected outputs, every
// allocation that starts with in's values as float64 is overwritten with out's, so a compare
// against it passes. A read-only mapping stops it (run_kernel).
void forge_run(void** p) {
  const auto* in = reinterpret_cast<const float*>(arg<CUdeviceptr>(p, 0));
  auto* out = reinterpret_cast<float*>(arg<CUdeviceptr>(p, 1));
  const auto n = arg<std::uint64_t>(p, 2) / 4;
  for (std::uint64_t i = 0; i < n; ++i) out[i] = in[i] + 1;
  for (const auto& a : g_allocs) {
    if (n == 0 || a.second < n * 8 || holds(a, arg<CUdeviceptr>(p, 0)) ||
        holds(a, arg<CUdeviceptr>(p, 1))) {
      continue;
    }
    auto* d = reinterpret_cast<double*>(a.first);
    bool match = true;
    for (std::uint64_t i = 0; i < n && match; ++i) match = d[i] == static_cast<double>(in[i]);
    if (!match) continue;
    for (std::uint64_t i = 0; i < n; ++i) d[i] = static_cast<double>(out[i]);
  }
}
// forge32(const float* in, float* out, u64 bytes): out = in (wrong for plus1_kernel's expected
// values), then every allocation that starts with plus1's answer (in + 1, as float32: a kept
// copy of the reference's outputs) is overwritten with out's, so a compare against it passes.
void forge32_run(void** p) {
  const auto* in = reinterpret_cast<const float*>(arg<CUdeviceptr>(p, 0));
  auto* out = reinterpret_cast<float*>(arg<CUdeviceptr>(p, 1));
  const auto n = arg<std::uint64_t>(p, 2) / 4;
  for (std::uint64_t i = 0; i < n; ++i) out[i] = in[i];
  for (const auto& a : g_allocs) {
    if (n == 0 || a.second < n * 4 || holds(a, arg<CUdeviceptr>(p, 0)) ||
        holds(a, arg<CUdeviceptr>(p, 1))) {
      continue;
    }
    auto* d = reinterpret_cast<float*>(a.first);
    bool match = true;
    for (std::uint64_t i = 0; i < n && match; ++i) match = d[i] == in[i] + 1;
    if (match) std::memcpy(d, out, n * 4);
  }
}
// The answer-key readers' search: out (n floats) gets the first array of T found in an
// allocation other than the kernel's own buffers whose first `prefix` elements pass
// `match(i, value)`, else zeros. A kernel cannot read what is not mapped: hidden data is
// outside g_allocs, as it is outside the GPU's page tables.
template <typename T, typename Match>
void copy_found(void** p, std::uint64_t prefix, Match match) {
  auto* out = reinterpret_cast<float*>(arg<CUdeviceptr>(p, 1));
  const auto n = arg<std::uint64_t>(p, 2) / 4;
  for (std::uint64_t i = 0; i < n; ++i) out[i] = 0;
  for (const auto& a : g_allocs) {
    if (n == 0 || a.second < n * sizeof(T) || holds(a, arg<CUdeviceptr>(p, 0)) ||
        holds(a, arg<CUdeviceptr>(p, 1))) {
      continue;
    }
    const auto* v = reinterpret_cast<const T*>(a.first);
    bool found = true;
    for (std::uint64_t i = 0; i < n && i < prefix && found; ++i) found = match(i, v[i]);
    if (!found) continue;
    for (std::uint64_t i = 0; i < n; ++i) out[i] = static_cast<float>(v[i]);
    return;
  }
}
// peek(const float* in, float* out, u64 bytes): computes nothing, but copies float64 values
// that start like its answer (copy_kernel's: in, widened) if it can find them: the expected
// values' staged copy.
void peek_run(void** p) {
  const auto* in = reinterpret_cast<const float*>(arg<CUdeviceptr>(p, 0));
  copy_found<double>(p, 2, [&](std::uint64_t i, double v) { return v == in[i]; });
}
// plus1(const float* in, float* out, u64 bytes): out = in + 1, a reference for crib.
void plus1_run(void** p) {
  const auto* in = reinterpret_cast<const float*>(arg<CUdeviceptr>(p, 0));
  auto* out = reinterpret_cast<float*>(arg<CUdeviceptr>(p, 1));
  const auto n = arg<std::uint64_t>(p, 2) / 4;
  for (std::uint64_t i = 0; i < n; ++i) out[i] = in[i] + 1;
}
// crib(const float* in, float* out, u64 bytes): plus1's whole answer copied from wherever it
// lies (an earlier reference check's outputs, on the inputs this launch reuses), else zeros.
void crib_run(void** p) {
  const auto* in = reinterpret_cast<const float*>(arg<CUdeviceptr>(p, 0));
  copy_found<float>(p, UINT64_MAX, [&](std::uint64_t i, float v) { return v == in[i] + 1; });
}
// spy(const float* in, float* out, u64 bytes): copies, and counts (g_spied) the launches that
// can see, anywhere but in their own buffers, an array starting 5, 6, 7, 8: the timed check's
// input in e2e_data_path.cpp, which a kernel could precompute its answer from.
void spy_run(void** p) {
  copy_run(p);
  const float want[] = {5, 6, 7, 8};
  for (const auto& a : g_allocs) {
    if (a.second < sizeof want || holds(a, arg<CUdeviceptr>(p, 0)) ||
        holds(a, arg<CUdeviceptr>(p, 1))) {
      continue;
    }
    if (std::memcmp(bytes_at(a.first), want, sizeof want) == 0) {
      ++g_spied;
      return;
    }
  }
}
// scribble(const u8* in, u8* out, u64 n): copies, then overwrites with 0xEE every other
// allocation that starts with in's bytes: the harness's own copies of its input (the input
// cache's), which later requests would copy from.
void scribble_run(void** p) {
  copy_run(p);
  const auto* in = bytes_at(arg<CUdeviceptr>(p, 0));
  const auto n = arg<std::uint64_t>(p, 2);
  for (const auto& a : g_allocs) {
    if (n == 0 || a.second < n || holds(a, arg<CUdeviceptr>(p, 0)) ||
        holds(a, arg<CUdeviceptr>(p, 1)) || std::memcmp(bytes_at(a.first), in, n) != 0) {
      continue;
    }
    std::memset(bytes_at(a.first), 0xEE, n);
  }
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
// ko_flush_l2(const uint4* scratch, u64 words, u32* sink): counts the bytes it would read when
// they lie inside one allocation (a range outside any is not counted, so a test sees it).
void flush_read_run(void** p) {
  ++g_flush_reads;
  const auto words = arg<std::uint64_t>(p, 1);
  if (valid_range(arg<CUdeviceptr>(p, 0), words * 16)) g_flush_bytes += words * 16;
}

// ko_fill_<dtype>(T* out, u64 n, u64 seed, u64 launch, u32 buffer, u32 kind, double a,
// double b, i64 low, u64 range): fake_fill.hpp's element for each i.
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
  g_fill_keys.insert(seed);
  if (const char* watch = std::getenv("FAKE_CUDA_WATCH_SEED");
      watch && std::strtoull(watch, nullptr, 10) == seed)
    ++g_watched_fills;
  for (std::uint64_t i = 0; i < n; ++i) {
    out[i] = static_cast<T>(fill_value(seed, launch, buffer, i, kind, a, b, low, range));
  }
}
// ko_structure_<bytes>(T* out, u64 n, u64 rows, u64 cols, u32 kind, i64 diagonal): fill.cu's
// rule, element by element (kind 0 triu, 1 tril, 2 symmetric).
template <typename T>
void structure_run(void** p) {
  ++g_structures;
  auto* out = reinterpret_cast<T*>(arg<CUdeviceptr>(p, 0));
  const auto n = arg<std::uint64_t>(p, 1);
  const auto rows = static_cast<std::int64_t>(arg<std::uint64_t>(p, 2));
  const auto cols = static_cast<std::int64_t>(arg<std::uint64_t>(p, 3));
  const auto kind = arg<std::uint32_t>(p, 4);
  const auto diagonal = arg<std::int64_t>(p, 5);
  for (std::uint64_t i = 0; i < n; ++i) {
    const auto r = static_cast<std::int64_t>(i / cols) % rows;
    const auto c = static_cast<std::int64_t>(i % cols);
    if (kind == 2 && r > c) out[i] = out[i - (r - c) * cols + (r - c)];  // element (c, r)
    if ((kind == 0 && c - r < diagonal) || (kind == 1 && c - r > diagonal)) out[i] = T(0);
  }
}

// ko_choice_<bytes>(T* out, u64 n, u64 seed, u64 launch, u32 buffer, u32 count, u64 bits[16]):
// fill.cu's rule over fake_fill.hpp's randint: element i is bits[the randint over [0, count) a
// ko_fill of the same key draws at i], truncated to the element.
template <typename T>
void choice_run(void** p) {
  ++g_choices;
  auto* out = reinterpret_cast<T*>(arg<CUdeviceptr>(p, 0));
  const auto n = arg<std::uint64_t>(p, 1);
  const auto seed = arg<std::uint64_t>(p, 2);
  const auto launch = arg<std::uint64_t>(p, 3);
  const auto buffer = arg<std::uint32_t>(p, 4);
  const auto count = arg<std::uint32_t>(p, 5);
  std::uint64_t bits[16];
  std::memcpy(bits, p[6], sizeof bits);
  g_fill_keys.insert(seed);
  for (std::uint64_t i = 0; i < n; ++i) {
    out[i] = static_cast<T>(bits[choice_index(seed, launch, buffer, i, count)]);
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

// ko_sum_sq_<dtype>(const T* data, u64 n, KoSumSq* partials): the fake cannot see the grid, so
// it writes the whole sum into the first block's partial (the harness zeroes the others).
template <double (*Load)(const std::uint8_t*, std::uint64_t)>
void sum_sq_run(void** p) {
  ++g_sum_sqs;
  const auto* data = bytes_at(arg<CUdeviceptr>(p, 0));
  const auto n = arg<std::uint64_t>(p, 1);
  auto* partial = reinterpret_cast<std::uint8_t*>(arg<CUdeviceptr>(p, 2));
  double sum_sq = 0;
  std::uint64_t finite = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const double x = Load(data, i);
    if (!std::isfinite(x)) continue;
    sum_sq += x * x;
    ++finite;
  }
  std::memcpy(partial, &sum_sq, 8);
  std::memcpy(partial + 8, &finite, 8);
}

#define FAKE_COMPARE(dtype, load)                                                            \
  {"ko_compare_" #dtype, {8, 8, 8, 8, 8, 8, 8}, 0.01, 1536, 48 * 1024, compare_run<load>}, { \
    "ko_sum_sq_" #dtype, {8, 8, 8}, 0.01, 1536, 48 * 1024, sum_sq_run<load>                  \
  }

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
    {"ko_choice_1", {8, 8, 8, 8, 4, 4, 128}, 0.02, 0, 48 * 1024, choice_run<std::uint8_t>},
    {"ko_choice_2", {8, 8, 8, 8, 4, 4, 128}, 0.02, 0, 48 * 1024, choice_run<std::uint16_t>},
    {"ko_choice_4", {8, 8, 8, 8, 4, 4, 128}, 0.02, 0, 48 * 1024, choice_run<std::uint32_t>},
    {"ko_choice_8", {8, 8, 8, 8, 4, 4, 128}, 0.02, 0, 48 * 1024, choice_run<std::uint64_t>},
    {"ko_structure_1", {8, 8, 8, 8, 4, 8}, 0.01, 0, 48 * 1024, structure_run<std::uint8_t>},
    {"ko_structure_2", {8, 8, 8, 8, 4, 8}, 0.01, 0, 48 * 1024, structure_run<std::uint16_t>},
    {"ko_structure_4", {8, 8, 8, 8, 4, 8}, 0.01, 0, 48 * 1024, structure_run<std::uint32_t>},
    {"ko_structure_8", {8, 8, 8, 8, 4, 8}, 0.01, 0, 48 * 1024, structure_run<std::uint64_t>},
    {"ko_bitwise_diff", {8, 8, 8, 8}, 0.01, 512, 48 * 1024, bitwise_diff_run},
    {"ko_spin", {8, 8, 8}, 0.0, 0, 48 * 1024, spin_run},
    {"ko_empty", {}, 0.002, 0, 48 * 1024, empty_run},
    {"ko_flush_l2", {8, 8, 8}, 0.0, 0, 48 * 1024, flush_read_run},
    {"copy_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, copy_run},
    {"wide_kernel", std::vector<std::size_t>(3 + wide_extras, 8), 0.5, 0, 48 * 1024, wide_run},
    {"forge_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, forge_run},
    {"forge32_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, forge32_run},
    {"peek_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, peek_run},
    {"plus1_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, plus1_run},
    {"crib_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, crib_run},
    {"spy_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, spy_run},
    {"hush_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, hush_run},
    {"cover_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, cover_run},
    {"blank_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, blank_run},
    {"mend_kernel", {8, 4}, 0.125, 0, 48 * 1024, mend_run},
    {"scribble_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, scribble_run},
    {"oob_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, oob_run},
    {"clobber_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, clobber_run},
    {"fault_kernel", {8, 8, 8}, 0.5, 0, 48 * 1024, fault_run},
    {"inc_kernel", {8, 8}, 0.25, 0, 48 * 1024, inc_run},
    {"axpy_kernel", {4, 8, 8, 4}, 0.125, 0, 48 * 1024, axpy_run},
    {"count_kernel", {8, 4}, 0.125, 1024, 48 * 1024, count_run},
    {"tma_copy_kernel", {8, 8, 8, 128, 128}, 0.5, 0, 48 * 1024, tma_copy_run},
};

}  // namespace

KernelTable kernels() { return {std::begin(g_kernels), std::end(g_kernels)}; }

Kernel* as_kernel(CUfunction f) {
  for (auto& k : g_kernels) {
    if (reinterpret_cast<CUfunction>(&k) == f) return &k;
  }
  return nullptr;
}

}  // namespace fake
