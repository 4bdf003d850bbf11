// Fresh inputs drawn on the device (native_harness/PROTOCOL.md, "Fresh inputs and checked
// launches"): before every timed launch, outside the timed window, the harness redraws each
// input buffer that has a `fresh` spec, so no two timed launches see the same input bytes and
// a kernel cannot recognise inputs it has seen. No headers (no curand): bare NVRTC builds it.
//
// ko_fill_<dtype>(T* out, u64 n, u64 seed, u64 launch, u32 buffer, u32 kind, double a,
//                 double b, long long low, u64 range)
// Philox4x32-10 block g (counter (g lo, g hi, launch, buffer), key = the two halves of the hidden
// seed) gives four 32-bit words, which feed 1, 2 or 4 consecutive elements (per_block_*), so the
// values are a pure function of (seed, launch, buffer, i) (the harness redraws a launch's inputs
// to run the CUDA reference on them) and independent of the grid. The generators follow
// kernelopt_mcp/evaluation/inputs.py `generate` (same distribution and range, not the same bits as
// NumPy):
//   kind 0 uniform [a, b): float16/bfloat16/float32 drawn in float32 (24 random bits), then
//          rounded to the type; float64 and integer types drawn in float64 (53 bits); integers
//          are then rounded half to even (np.round) and clamped to the type's range.
//   kind 1 normal(mean a, std b): Box-Muller, in float32 for the narrow floats (both values of
//          each pair: four per Philox block), else float64; integers rounded and clamped like
//          uniform.
//   kind 2 randint [low, low + range): low + floor(x * range / 2^64) for a 64-bit x (Lemire's
//          multiply, bias <= range / 2^64), cast to the type (integers clamped).
// ko_choice_<bytes> (below) draws a choice of a few values from randint's words (kind 2).
// Any grid and block size; the loop is grid-stride. The narrow floats store a block's elements
// with one vector store where the buffer's alignment allows (the draw costs little more than
// writing the bytes: it runs before every timed launch, so its time is the checks' overhead).

typedef unsigned long long ko_fill_u64;

namespace ko_fill_detail {

struct U4 {
  unsigned x, y, z, w;
};

__device__ __forceinline__ U4 philox(ko_fill_u64 i, ko_fill_u64 launch, unsigned buffer,
                                     ko_fill_u64 seed) {
  unsigned c0 = static_cast<unsigned>(i), c1 = static_cast<unsigned>(i >> 32);
  unsigned c2 = static_cast<unsigned>(launch),
           c3 = buffer ^ (static_cast<unsigned>(launch >> 32) << 16);
  unsigned k0 = static_cast<unsigned>(seed), k1 = static_cast<unsigned>(seed >> 32);
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const unsigned hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const unsigned hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  U4 r = {c0, c1, c2, c3};
  return r;
}

__device__ __forceinline__ ko_fill_u64 u64_of(unsigned hi, unsigned lo) {
  return (static_cast<ko_fill_u64>(hi) << 32) | lo;
}

// [0, 1) with 24 random bits; (0, 1] for the logarithm.
__device__ __forceinline__ float unit_f(unsigned x) {
  return static_cast<float>(x >> 8) * 5.9604644775390625e-08f;
}
__device__ __forceinline__ float unit_f_open(unsigned x) {
  return static_cast<float>((x >> 8) + 1u) * 5.9604644775390625e-08f;
}
// [0, 1) with 53 random bits; (0, 1] for the logarithm.
__device__ __forceinline__ double unit_d(ko_fill_u64 x) {
  return static_cast<double>(x >> 11) * 1.1102230246251565e-16;
}
__device__ __forceinline__ double unit_d_open(ko_fill_u64 x) {
  return static_cast<double>((x >> 11) + 1ull) * 1.1102230246251565e-16;
}

// How many elements one Philox block (four 32-bit words) feeds: narrow floats take one word
// per uniform or normal value (Box-Muller turns two words into two values) and two per randint
// value; float64 and integers two words per uniform or randint value and all four per normal
// value.
__device__ __forceinline__ unsigned per_block_narrow(unsigned kind) { return kind == 2u ? 2u : 4u; }
__device__ __forceinline__ unsigned per_block_wide(unsigned kind) { return kind == 1u ? 1u : 2u; }

// The per_block_narrow(kind) elements of one block, drawn in float32 (narrow float types):
// uniform a + (b - a) u; normal a + b z with (z0, z1) = r (cos, sin)(2 pi u1 - pi), r = sqrt(-2 ln
// u0) for the word pairs (0, 1) and (2, 3); randint from the 64-bit words (0, 1) and (2, 3).
__device__ __forceinline__ void draw_narrow(const U4& r, unsigned kind, float a, float scale,
                                            long long low, ko_fill_u64 range, float v[4]) {
  if (kind == 0u) {
    v[0] = __fadd_rn(__fmul_rn(unit_f(r.x), scale), a);
    v[1] = __fadd_rn(__fmul_rn(unit_f(r.y), scale), a);
    v[2] = __fadd_rn(__fmul_rn(unit_f(r.z), scale), a);
    v[3] = __fadd_rn(__fmul_rn(unit_f(r.w), scale), a);
  } else if (kind == 1u) {
    // The hardware approximations (__logf, __sincosf on [-pi, pi)) keep the draw at memory
    // speed; their few-ulp errors do not change the distribution a checker relies on.
    float s0, c0, s1, c1;
    const float r0 = sqrtf(-2.0f * __logf(unit_f_open(r.x)));
    const float r1 = sqrtf(-2.0f * __logf(unit_f_open(r.z)));
    __sincosf(6.28318530717958648f * unit_f(r.y) - 3.14159265358979324f, &s0, &c0);
    __sincosf(6.28318530717958648f * unit_f(r.w) - 3.14159265358979324f, &s1, &c1);
    v[0] = __fadd_rn(__fmul_rn(r0 * c0, scale), a);
    v[1] = __fadd_rn(__fmul_rn(r0 * s0, scale), a);
    v[2] = __fadd_rn(__fmul_rn(r1 * c1, scale), a);
    v[3] = __fadd_rn(__fmul_rn(r1 * s1, scale), a);
  } else {
    v[0] = static_cast<float>(low + static_cast<long long>(__umul64hi(u64_of(r.x, r.y), range)));
    v[1] = static_cast<float>(low + static_cast<long long>(__umul64hi(u64_of(r.z, r.w), range)));
  }
}

// Element j of its block, drawn in float64 (float64 and the integer types; not randint).
__device__ __forceinline__ double draw_d(const unsigned* w, unsigned j, unsigned kind, double a,
                                         double b) {
  if (kind == 0u) return __dadd_rn(__dmul_rn(unit_d(u64_of(w[2 * j], w[2 * j + 1])), b - a), a);
  const double z =
      sqrt(-2.0 * log(unit_d_open(u64_of(w[0], w[1])))) * cospi(2.0 * unit_d(u64_of(w[2], w[3])));
  return __dadd_rn(__dmul_rn(z, b), a);
}

__device__ __forceinline__ long long draw_int(const unsigned* w, unsigned j, long long low,
                                              ko_fill_u64 range) {
  return low + static_cast<long long>(__umul64hi(u64_of(w[2 * j], w[2 * j + 1]), range));
}

__device__ __forceinline__ unsigned short to_half(float v) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}

__device__ __forceinline__ unsigned short to_bfloat16(float v) {
  const unsigned bits = __float_as_uint(v);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;  // NaN stays NaN
  return static_cast<unsigned short>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);  // nearest even
}

// Integer types: round half to even (np.round), then clamp to the type's range (NumPy's host
// generator refuses values outside it; a device draw cannot, so it saturates).
template <typename T>
__device__ __forceinline__ T to_int(double v, long long lo, long long hi) {
  v = rint(v);
  if (!(v >= static_cast<double>(lo))) return static_cast<T>(lo);  // NaN too
  if (v >= static_cast<double>(hi)) return static_cast<T>(hi);
  return static_cast<T>(static_cast<long long>(v));
}

template <typename T>
__device__ __forceinline__ T clamp_int(long long v, long long lo, long long hi) {
  return static_cast<T>(v < lo ? lo : v > hi ? hi : v);
}

}  // namespace ko_fill_detail

// Grid-stride over Philox blocks; element i = g * per + j. BODY sets out[i] from w and j.
#define KO_FILL_LOOP(PER, BODY)                                                         \
  const unsigned per = (PER);                                                           \
  const ko_fill_u64 blocks = (n + per - 1) / per;                                       \
  const ko_fill_u64 stride = static_cast<ko_fill_u64>(gridDim.x) * blockDim.x;          \
  for (ko_fill_u64 g = static_cast<ko_fill_u64>(blockIdx.x) * blockDim.x + threadIdx.x; \
       g < blocks; g += stride) {                                                       \
    const ko_fill_detail::U4 r = ko_fill_detail::philox(g, launch, buffer, seed);       \
    const unsigned w[4] = {r.x, r.y, r.z, r.w};                                         \
    _Pragma("unroll") for (unsigned j = 0; j < 4u; ++j) {                               \
      const ko_fill_u64 i = g * per + j;                                                \
      if (j >= per || i >= n) break;                                                    \
      BODY                                                                              \
    }                                                                                   \
  }

#define KO_FILL_PARAMS(T)                                                                      \
  T *out, ko_fill_u64 n, ko_fill_u64 seed, ko_fill_u64 launch, unsigned buffer, unsigned kind, \
      double a, double b, long long low, ko_fill_u64 range

#define KO_FILL_WIDE ko_fill_detail::per_block_wide(kind)

namespace ko_fill_detail {

struct AsFloat {
  typedef float T;
  typedef float4 V4;
  typedef float2 V2;
  __device__ __forceinline__ float operator()(float v) const { return v; }
};
struct AsHalf {
  typedef unsigned short T;
  typedef ushort4 V4;
  typedef ushort2 V2;
  __device__ __forceinline__ unsigned short operator()(float v) const { return to_half(v); }
};
struct AsBfloat16 {
  typedef unsigned short T;
  typedef ushort4 V4;
  typedef ushort2 V2;
  __device__ __forceinline__ unsigned short operator()(float v) const { return to_bfloat16(v); }
};

// Narrow floats: thread g draws Philox block g, converts its elements and writes them with one
// vector store (4 or 2 elements) when the block is whole and the buffer aligned for it.
template <typename C>
__device__ __forceinline__ void fill_narrow(typename C::T* out, ko_fill_u64 n, ko_fill_u64 seed,
                                            ko_fill_u64 launch, unsigned buffer, unsigned kind,
                                            double a, double b, long long low, ko_fill_u64 range) {
  typedef typename C::T T;
  const C conv;
  const unsigned per = per_block_narrow(kind);
  const float fa = static_cast<float>(a);
  const float scale = kind == 0u ? static_cast<float>(b - a) : static_cast<float>(b);
  const bool vec = (reinterpret_cast<ko_fill_u64>(out) % (per * sizeof(T))) == 0;
  const ko_fill_u64 blocks = (n + per - 1) / per;
  const ko_fill_u64 stride = static_cast<ko_fill_u64>(gridDim.x) * blockDim.x;
  for (ko_fill_u64 g = static_cast<ko_fill_u64>(blockIdx.x) * blockDim.x + threadIdx.x; g < blocks;
       g += stride) {
    float v[4];
    draw_narrow(philox(g, launch, buffer, seed), kind, fa, scale, low, range, v);
    const ko_fill_u64 i = g * per;
    if (vec && i + per <= n) {
      if (per == 4u) {
        typename C::V4 q;
        q.x = conv(v[0]);
        q.y = conv(v[1]);
        q.z = conv(v[2]);
        q.w = conv(v[3]);
        *reinterpret_cast<typename C::V4*>(out + i) = q;
      } else {
        typename C::V2 q;
        q.x = conv(v[0]);
        q.y = conv(v[1]);
        *reinterpret_cast<typename C::V2*>(out + i) = q;
      }
    } else {
      for (unsigned j = 0; j < per && i + j < n; ++j) out[i + j] = conv(v[j]);
    }
  }
}

}  // namespace ko_fill_detail

extern "C" __global__ void ko_fill_float32(KO_FILL_PARAMS(float)) {
  ko_fill_detail::fill_narrow<ko_fill_detail::AsFloat>(out, n, seed, launch, buffer, kind, a, b,
                                                       low, range);
}

extern "C" __global__ void ko_fill_float16(KO_FILL_PARAMS(unsigned short)) {
  ko_fill_detail::fill_narrow<ko_fill_detail::AsHalf>(out, n, seed, launch, buffer, kind, a, b, low,
                                                      range);
}

extern "C" __global__ void ko_fill_bfloat16(KO_FILL_PARAMS(unsigned short)) {
  ko_fill_detail::fill_narrow<ko_fill_detail::AsBfloat16>(out, n, seed, launch, buffer, kind, a, b,
                                                          low, range);
}

extern "C" __global__ void ko_fill_float64(KO_FILL_PARAMS(double)) {
  KO_FILL_LOOP(KO_FILL_WIDE,
               out[i] = kind == 2u ? static_cast<double>(ko_fill_detail::draw_int(w, j, low, range))
                                   : ko_fill_detail::draw_d(w, j, kind, a, b);)
}

// Integer types: uint64 above 2^63 - 1 saturates at 2^63 - 1, which the host generator cannot
// exceed either (it draws int64).
#define KO_FILL_INT(name, T, LO, HI)                                                            \
  extern "C" __global__ void ko_fill_##name(KO_FILL_PARAMS(T)) {                                \
    KO_FILL_LOOP(                                                                               \
        KO_FILL_WIDE,                                                                           \
        if (kind == 2u) {                                                                       \
          out[i] =                                                                              \
              ko_fill_detail::clamp_int<T>(ko_fill_detail::draw_int(w, j, low, range), LO, HI); \
        } else {                                                                                \
          out[i] = ko_fill_detail::to_int<T>(ko_fill_detail::draw_d(w, j, kind, a, b), LO, HI); \
        })                                                                                      \
  }

KO_FILL_INT(int8, signed char, -128ll, 127ll)
KO_FILL_INT(int16, short, -32768ll, 32767ll)
KO_FILL_INT(int32, int, -2147483648ll, 2147483647ll)
KO_FILL_INT(int64, long long, (-9223372036854775807ll - 1), 9223372036854775807ll)
KO_FILL_INT(uint8, unsigned char, 0ll, 255ll)
KO_FILL_INT(uint16, unsigned short, 0ll, 65535ll)
KO_FILL_INT(uint32, unsigned int, 0ll, 4294967295ll)
KO_FILL_INT(uint64, unsigned long long, 0ll, 9223372036854775807ll)

// Choice draws (kernelopt_mcp/input_choice.py defines the rule): every element one of `count`
// values (1..16), each equally likely. Element i takes table.bits[j], j the randint over
// [0, count) that ko_fill draws at element i (kind 2, low 0, range count: two elements per
// Philox block, the 64-bit words (0, 1) for the first and (2, 3) for the second, j =
// floor(x * count / 2^64)). So a choice is the randint(0, count) draw of the same key looked up
// in the table, bit for bit. The table holds the values' bits in the buffer's element type
// (zero-extended to 64 bits; the harness makes them from numbers exactly of that type), so one
// kernel per element size serves every dtype.
//
// ko_choice_<bytes>(T* out, u64 n, u64 seed, u64 launch, u32 buffer, u32 count,
//                   KoChoiceTable table)
struct KoChoiceTable {
  ko_fill_u64 bits[16];
};

// The table goes to shared memory first (read with constant indices: a kernel parameter indexed
// at run time would be copied to every thread's local memory).
#define KO_CHOICE(bytes, T)                                                                       \
  extern "C" __global__ void ko_choice_##bytes(T* out, ko_fill_u64 n, ko_fill_u64 seed,           \
                                               ko_fill_u64 launch, unsigned buffer,               \
                                               unsigned count, KoChoiceTable table) {             \
    __shared__ ko_fill_u64 values[16];                                                            \
    if (threadIdx.x == 0) {                                                                       \
      _Pragma("unroll") for (int k = 0; k < 16; ++k) values[k] = table.bits[k];                   \
    }                                                                                             \
    __syncthreads();                                                                              \
    const ko_fill_u64 range = count;                                                              \
    KO_FILL_LOOP(2u,                                                                              \
                 out[i] = static_cast<T>(                                                         \
                     values[__umul64hi(ko_fill_detail::u64_of(w[2 * j], w[2 * j + 1]), range)]);) \
  }

KO_CHOICE(1, unsigned char)
KO_CHOICE(2, unsigned short)
KO_CHOICE(4, unsigned int)
KO_CHOICE(8, unsigned long long)

#undef KO_CHOICE
#undef KO_FILL_WIDE
#undef KO_FILL_INT
#undef KO_FILL_LOOP
#undef KO_FILL_PARAMS

// Structured draws (kernelopt_mcp/input_structure.py defines the rule): right after a fill, the
// buffer's rows x cols matrices (n / (rows * cols) of them, one after another) are made
// triangular or symmetric. The element at row r, column c of a matrix is
//   kind 0 triu:      zeroed where c - r < diagonal;
//   kind 1 tril:      zeroed where c - r > diagonal;
//   kind 2 symmetric: where r > c, given the bits of element (c, r) (square matrices).
// Only zeros are written and bits copied, so one kernel per element size serves every dtype and
// the host's NumPy gives the same bytes. Block b takes matrix rows b, b + gridDim.x, ...; its
// threads stride over the row's columns. The mirror reads only elements above the diagonal,
// which no thread writes, so the grid needs no ordering.
//
// ko_structure_<bytes>(T* out, u64 n, u64 rows, u64 cols, u32 kind, long long diagonal)
namespace ko_fill_detail {

template <typename T>
__device__ __forceinline__ void structure(T* out, ko_fill_u64 n, ko_fill_u64 rows, ko_fill_u64 cols,
                                          unsigned kind, long long diagonal) {
  const ko_fill_u64 lines = n / cols;
  for (ko_fill_u64 line = blockIdx.x; line < lines; line += gridDim.x) {
    const long long r = static_cast<long long>(line % rows);
    const long long width = static_cast<long long>(cols);
    // the columns [lo, hi) of this row that the structure writes
    long long lo = 0, hi = r;  // symmetric: below the diagonal
    if (kind == 0u) hi = r + diagonal;
    if (kind == 1u) {
      lo = r + diagonal + 1;
      hi = width;
    }
    lo = lo < 0 ? 0 : lo;
    hi = hi > width ? width : hi;
    T* row = out + line * cols;
    if (kind == 2u) {
      const T* matrix = row - r * width;
      for (long long c = lo + threadIdx.x; c < hi; c += blockDim.x) row[c] = matrix[c * width + r];
    } else {
      for (long long c = lo + threadIdx.x; c < hi; c += blockDim.x) row[c] = T(0);
    }
  }
}

}  // namespace ko_fill_detail

#define KO_STRUCTURE(bytes, T)                                                             \
  extern "C" __global__ void ko_structure_##bytes(T* out, ko_fill_u64 n, ko_fill_u64 rows, \
                                                  ko_fill_u64 cols, unsigned kind,         \
                                                  long long diagonal) {                    \
    ko_fill_detail::structure(out, n, rows, cols, kind, diagonal);                         \
  }

KO_STRUCTURE(1, unsigned char)
KO_STRUCTURE(2, unsigned short)
KO_STRUCTURE(4, unsigned int)
KO_STRUCTURE(8, unsigned long long)

#undef KO_STRUCTURE
