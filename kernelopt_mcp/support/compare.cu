// Device-side comparison for the harness (native_harness/PROTOCOL.md, "Device-side
// comparison" and "Determinism re-run"). Compiled by kernelopt_mcp/evaluation/support_module.py
// together with the other support/*.cu files; no headers, so it builds with bare NVRTC.
//
// ko_compare_<dtype>(const T* actual, const double* expected, u64 n, double abs_tol,
//                    double rtol, double rel_floor, KoCompareResult* result)
// mirrors kernelopt_mcp/evaluation/compare.py element for element, in float64:
//   a = (double)actual[i], e = expected[i], diff = |a - e|
//   mismatch   when NOT (diff <= abs_tol + rtol * |e|)   (NaN/Inf on either side mismatch)
//   nonfinite  counts non-finite a
//   max_abs, err_sq over finite diffs; max_rel = max(diff / max(|e|, rel_floor)) likewise
//   first_mismatch = the smallest mismatching flat index
// Arithmetic uses the _rn intrinsics so the compiler cannot contract it into FMAs: the
// mismatch rule and the maxima then round exactly as NumPy's do.
//
// ko_compare_ref_<dtype>(const T* actual, const T* reference, ...): the same rule with e =
// (double)reference[i] (an output of the validated CUDA reference on the same inputs; used for
// the checked timed launches, native_harness/PROTOCOL.md "Fresh inputs and checked launches").
//
// ko_bitwise_diff(const u8* a, const u8* b, u64 n, KoDiffResult* result): how many of the n
// bytes differ and the first differing offset.
//
// Both kernels accumulate into *result (one set of atomics per block), which the harness
// initialises: every field 0 except first_mismatch / first_offset = ~0 (none). Any grid and
// any block size up to 1024 threads (a multiple of 32) work; the loops are grid-stride.
//
// ko_sum_sq_<dtype>(const T* data, u64 n, KoSumSq* partials): the figures of an output kept on
// the device as expected values (native_harness/src/kept.cpp): block b writes partials[b] = the
// sum of x * x over the finite x = (double)data[i] of its grid-stride elements, and their count.
// No atomics: each thread adds its elements in index order, then a fixed tree adds the threads,
// so a given grid and block size give the same bits every run; the harness adds the partials
// in block order.

typedef unsigned long long ko_u64;

// The layouts the harness reads back (native_harness/src/support.hpp): 8-byte fields only.
struct KoCompareResult {
  ko_u64 mismatches;
  ko_u64 nonfinite;
  ko_u64 first_mismatch;  // ~0: none
  ko_u64 max_abs_bits;    // a non-negative double's bits: integer order is the double order
  ko_u64 max_rel_bits;
  double err_sq;
};

struct KoDiffResult {
  ko_u64 bytes_differ;
  ko_u64 first_offset;  // ~0: none
};

struct KoSumSq {
  double sum_sq;
  ko_u64 finite;
};

namespace ko_compare_detail {

__device__ __forceinline__ bool finite(double x) {
  return (static_cast<ko_u64>(__double_as_longlong(x)) & 0x7ff0000000000000ull) !=
         0x7ff0000000000000ull;
}

__device__ __forceinline__ double dmax(double a, double b) { return a > b ? a : b; }
__device__ __forceinline__ double dabs(double x) {
  return __longlong_as_double(__double_as_longlong(x) & 0x7fffffffffffffffll);
}

// Element loaders: each converts one stored element to double exactly as NumPy's
// astype(float64) does (exact for every type but 64-bit integers, which round to nearest).
template <typename T>
struct Plain {
  typedef T Stored;
  static __device__ __forceinline__ double load(const T* p, ko_u64 i) {
    return static_cast<double>(p[i]);
  }
};

struct Half {
  typedef unsigned short Stored;
  static __device__ __forceinline__ double load(const unsigned short* p, ko_u64 i) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(p[i]));  // exact: f32 holds every f16
    return static_cast<double>(f);
  }
};

struct BFloat16 {
  typedef unsigned short Stored;
  static __device__ __forceinline__ double load(const unsigned short* p, ko_u64 i) {
    // bfloat16 is the top half of a float32.
    return static_cast<double>(__int_as_float(static_cast<int>(static_cast<unsigned>(p[i]) << 16)));
  }
};

struct Partial {
  ko_u64 mismatches, nonfinite, first;
  double max_abs, max_rel, err_sq;
};

__device__ __forceinline__ void combine(Partial& x, const Partial& y) {
  x.mismatches += y.mismatches;
  x.nonfinite += y.nonfinite;
  x.first = y.first < x.first ? y.first : x.first;
  x.max_abs = dmax(x.max_abs, y.max_abs);
  x.max_rel = dmax(x.max_rel, y.max_rel);
  x.err_sq = __dadd_rn(x.err_sq, y.err_sq);
}

__device__ __forceinline__ Partial shfl_down(const Partial& p, int offset) {
  Partial q;
  q.mismatches = __shfl_down_sync(0xffffffffu, p.mismatches, offset);
  q.nonfinite = __shfl_down_sync(0xffffffffu, p.nonfinite, offset);
  q.first = __shfl_down_sync(0xffffffffu, p.first, offset);
  q.max_abs = __shfl_down_sync(0xffffffffu, p.max_abs, offset);
  q.max_rel = __shfl_down_sync(0xffffffffu, p.max_rel, offset);
  q.err_sq = __shfl_down_sync(0xffffffffu, p.err_sq, offset);
  return q;
}

// ko_sum_sq's partial: the finite values' sum of squares and their count.
struct SumSq {
  double sq;
  ko_u64 count;
};

__device__ __forceinline__ void combine(SumSq& x, const SumSq& y) {
  x.sq = __dadd_rn(x.sq, y.sq);
  x.count += y.count;
}

__device__ __forceinline__ SumSq shfl_down(const SumSq& p, int offset) {
  return SumSq{__shfl_down_sync(0xffffffffu, p.sq, offset),
               __shfl_down_sync(0xffffffffu, p.count, offset)};
}

// ko_bitwise_diff's partial: differing bytes and the first differing offset.
struct Diff {
  ko_u64 differ, first;
};

__device__ __forceinline__ void combine(Diff& x, const Diff& y) {
  x.differ += y.differ;
  x.first = y.first < x.first ? y.first : x.first;
}

__device__ __forceinline__ Diff shfl_down(const Diff& p, int offset) {
  return Diff{__shfl_down_sync(0xffffffffu, p.differ, offset),
              __shfl_down_sync(0xffffffffu, p.first, offset)};
}

// The block's combined partial in thread 0 (other threads: unspecified), `none` standing for
// the warps a block of fewer than 32 warps lacks. A fixed tree (shuffles within each warp, then
// warp 0 over the warps), so a given block size combines in the same order every run.
template <typename P>
__device__ P block_reduce(P p, const P none) {
  __shared__ P warps[32];
  for (int offset = 16; offset > 0; offset >>= 1) combine(p, shfl_down(p, offset));
  const unsigned lane = threadIdx.x & 31u;
  const unsigned warp = threadIdx.x >> 5;
  if (lane == 0) warps[warp] = p;
  __syncthreads();
  if (warp == 0) {
    const unsigned nwarps = (blockDim.x + 31u) >> 5;
    P q = lane < nwarps ? warps[lane] : none;
    for (int offset = 16; offset > 0; offset >>= 1) combine(q, shfl_down(q, offset));
    p = q;
  }
  return p;
}

// E loads the expected values: Plain<double> for the float64 expected files, or the output's
// own loader when the expected values are another launch's output (the CUDA reference's, for
// the checked timed launches).
template <typename L, typename E>
__device__ void compare(const typename L::Stored* actual, const typename E::Stored* expected,
                        ko_u64 n, double abs_tol, double rtol, double rel_floor,
                        KoCompareResult* result) {
  Partial p{0, 0, ~0ull, 0.0, 0.0, 0.0};
  const ko_u64 stride = static_cast<ko_u64>(gridDim.x) * blockDim.x;
#pragma unroll 4
  for (ko_u64 i = static_cast<ko_u64>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double e = E::load(expected, i);
    const double a = L::load(actual, i);
    const double abs_e = dabs(e);
    const double diff = dabs(__dsub_rn(a, e));
    // Written so that NaN compares false, i.e. mismatches, as in NumPy.
    if (!(diff <= __dadd_rn(abs_tol, __dmul_rn(rtol, abs_e)))) {
      ++p.mismatches;
      if (i < p.first) p.first = i;
    }
    if (!finite(a)) ++p.nonfinite;
    if (finite(diff)) {
      p.max_abs = dmax(p.max_abs, diff);
      p.max_rel = dmax(p.max_rel, __ddiv_rn(diff, dmax(abs_e, rel_floor)));
      p.err_sq = __dadd_rn(p.err_sq, __dmul_rn(diff, diff));
    }
  }
  p = block_reduce(p, Partial{0, 0, ~0ull, 0.0, 0.0, 0.0});
  if (threadIdx.x == 0) {
    if (p.mismatches != 0) {
      atomicAdd(&result->mismatches, p.mismatches);
      atomicMin(&result->first_mismatch, p.first);
    }
    if (p.nonfinite != 0) atomicAdd(&result->nonfinite, p.nonfinite);
    if (p.max_abs > 0.0) {
      atomicMax(&result->max_abs_bits, static_cast<ko_u64>(__double_as_longlong(p.max_abs)));
    }
    if (p.max_rel > 0.0) {
      atomicMax(&result->max_rel_bits, static_cast<ko_u64>(__double_as_longlong(p.max_rel)));
    }
    if (p.err_sq > 0.0) atomicAdd(&result->err_sq, p.err_sq);
  }
}

// Bytes of x that are non-zero, as a count.
__device__ __forceinline__ ko_u64 nonzero_bytes(ko_u64 x) {
  x |= x >> 4;
  x |= x >> 2;
  x |= x >> 1;
  return static_cast<ko_u64>(__popcll(x & 0x0101010101010101ull));
}

// One block's part of ko_sum_sq_<dtype>, written to partials[blockIdx.x].
template <typename L>
__device__ void sum_sq(const typename L::Stored* data, ko_u64 n, KoSumSq* partials) {
  SumSq p{0.0, 0};
  const ko_u64 stride = static_cast<ko_u64>(gridDim.x) * blockDim.x;
  for (ko_u64 i = static_cast<ko_u64>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double x = L::load(data, i);
    if (finite(x)) combine(p, SumSq{__dmul_rn(x, x), 1});
  }
  p = block_reduce(p, SumSq{0.0, 0});
  if (threadIdx.x == 0) {
    partials[blockIdx.x].sum_sq = p.sq;
    partials[blockIdx.x].finite = p.count;
  }
}

}  // namespace ko_compare_detail

#define KO_COMPARE_KERNEL(name, loader)                                                            \
  extern "C" __global__ void ko_compare_##name(                                                    \
      const loader::Stored* actual, const double* expected, ko_u64 n, double abs_tol, double rtol, \
      double rel_floor, KoCompareResult* result) {                                                 \
    ko_compare_detail::compare<loader, ko_compare_detail::Plain<double> >(                         \
        actual, expected, n, abs_tol, rtol, rel_floor, result);                                    \
  }                                                                                                \
  extern "C" __global__ void ko_compare_ref_##name(                                                \
      const loader::Stored* actual, const loader::Stored* reference, ko_u64 n, double abs_tol,     \
      double rtol, double rel_floor, KoCompareResult* result) {                                    \
    ko_compare_detail::compare<loader, loader>(actual, reference, n, abs_tol, rtol, rel_floor,     \
                                               result);                                            \
  }                                                                                                \
  extern "C" __global__ void ko_sum_sq_##name(const loader::Stored* data, ko_u64 n,                \
                                              KoSumSq* partials) {                                 \
    ko_compare_detail::sum_sq<loader>(data, n, partials);                                          \
  }

KO_COMPARE_KERNEL(int8, ko_compare_detail::Plain<signed char>)
KO_COMPARE_KERNEL(int16, ko_compare_detail::Plain<short>)
KO_COMPARE_KERNEL(int32, ko_compare_detail::Plain<int>)
KO_COMPARE_KERNEL(int64, ko_compare_detail::Plain<long long>)
KO_COMPARE_KERNEL(uint8, ko_compare_detail::Plain<unsigned char>)
KO_COMPARE_KERNEL(uint16, ko_compare_detail::Plain<unsigned short>)
KO_COMPARE_KERNEL(uint32, ko_compare_detail::Plain<unsigned int>)
KO_COMPARE_KERNEL(uint64, ko_compare_detail::Plain<unsigned long long>)
KO_COMPARE_KERNEL(float16, ko_compare_detail::Half)
KO_COMPARE_KERNEL(bfloat16, ko_compare_detail::BFloat16)
KO_COMPARE_KERNEL(float32, ko_compare_detail::Plain<float>)
KO_COMPARE_KERNEL(float64, ko_compare_detail::Plain<double>)

#undef KO_COMPARE_KERNEL

extern "C" __global__ void ko_bitwise_diff(const unsigned char* a, const unsigned char* b, ko_u64 n,
                                           KoDiffResult* result) {
  using ko_compare_detail::nonzero_bytes;
  ko_u64 differ = 0;
  ko_u64 first = ~0ull;
  const ko_u64 tid = static_cast<ko_u64>(blockIdx.x) * blockDim.x + threadIdx.x;
  const ko_u64 stride = static_cast<ko_u64>(gridDim.x) * blockDim.x;
  // Whole 8-byte words where both pointers allow it (the harness's buffers are 256-aligned);
  // otherwise every byte goes through the tail loop.
  const bool aligned = ((reinterpret_cast<ko_u64>(a) | reinterpret_cast<ko_u64>(b)) & 7u) == 0;
  const ko_u64 words = aligned ? n / 8 : 0;
  const ko_u64* a64 = reinterpret_cast<const ko_u64*>(a);
  const ko_u64* b64 = reinterpret_cast<const ko_u64*>(b);
#pragma unroll 4
  for (ko_u64 w = tid; w < words; w += stride) {
    const ko_u64 x = a64[w] ^ b64[w];
    if (x != 0) {
      differ += nonzero_bytes(x);
      // Little-endian: the lowest set bit is in the lowest-addressed differing byte.
      const ko_u64 offset = w * 8 + static_cast<ko_u64>(__ffsll(static_cast<long long>(x)) - 1) / 8;
      if (offset < first) first = offset;
    }
  }
  for (ko_u64 i = words * 8 + tid; i < n; i += stride) {
    if (a[i] != b[i]) {
      ++differ;
      if (i < first) first = i;
    }
  }
  // Block reduction of (count, min offset), then one pair of atomics per block.
  using ko_compare_detail::Diff;
  const Diff d = ko_compare_detail::block_reduce(Diff{differ, first}, Diff{0, ~0ull});
  if (threadIdx.x == 0 && d.differ != 0) {
    atomicAdd(&result->bytes_differ, d.differ);
    atomicMin(&result->first_offset, d.first);
  }
}
