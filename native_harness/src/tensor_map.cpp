// Tensor maps: parsing cases[i].tensor_maps and the rules of PROTOCOL.md "Tensor maps" that
// need no driver, reach included. Pure functions: the unit tests run them without a GPU.
#include "tensor_map.hpp"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "guard.hpp"
#include "request_fields.hpp"

namespace kernelopt::detail {

// Every buffer starts on buffer_alignment in its own allocation, its bytes padded up to the next
// multiple and then guarded (make_layout): a row ending in bounds ends its 16-byte chunk there too.
static_assert(buffer_alignment % store_chunk == 0,
              "a TMA store's last 16-byte chunk must stay in the buffer's padding");

namespace {

std::string list(const std::vector<std::uint64_t>& values) {
  std::string s = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(values[i]);
  }
  return s + "]";
}

bool is_float(ScalarType t) noexcept {
  return t == ScalarType::float16 || t == ScalarType::bfloat16 || t == ScalarType::float32 ||
         t == ScalarType::float64;
}

// The swizzle's span in bytes; 0 for none.
std::uint64_t swizzle_span(TensorSwizzle s) noexcept {
  switch (s) {
    case TensorSwizzle::none: return 0;
    case TensorSwizzle::b32: return 32;
    case TensorSwizzle::b64: return 64;
    case TensorSwizzle::b128: return 128;
  }
  return 0;
}

const char* swizzle_name(TensorSwizzle s) noexcept {
  switch (s) {
    case TensorSwizzle::none: return "none";
    case TensorSwizzle::b32: return "32B";
    case TensorSwizzle::b64: return "64B";
    case TensorSwizzle::b128: return "128B";
  }
  return "?";
}

// One of `names` (the enum's values in order); fails listing them.
template <typename Enum, std::size_t N>
Enum parse_choice(const json& v, const std::string& path, const char* const (&names)[N]) {
  const auto s = as_string(v, path);
  std::string known;
  for (std::size_t i = 0; i < N; ++i) {
    if (s == names[i]) return static_cast<Enum>(i);
    known += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + "\"" + names[i] + "\"";
  }
  fail(path, "must be " + known + ", got \"" + s + "\"");
}

// An array of non-negative integers, each at most `max` (the range rules are validate's).
std::vector<std::uint64_t> uint_array(const json& v, const std::string& path, std::uint64_t max) {
  if (!v.is_array()) fail(path, std::string("must be an array of integers, got ") + type_name(v));
  std::vector<std::uint64_t> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out.push_back(as_uint(v[i], index_path(path, i), max));
  return out;
}

std::vector<std::uint32_t> uint32_array(const json& v, const std::string& path) {
  std::vector<std::uint32_t> out;
  out.reserve(v.size());
  for (const auto x : uint_array(v, path, std::numeric_limits<std::uint32_t>::max())) {
    out.push_back(static_cast<std::uint32_t>(x));
  }
  return out;
}

TensorMapSpec parse_tensor_map(const json& t, const std::string& path, const CaseSpec& spec) {
  expect_object(t, path);
  TensorMapSpec m;
  const auto buffer_path = member_path(path, "buffer");
  m.buffer = as_string(require(t, path, "buffer"), buffer_path);
  bool found = false;
  for (std::size_t a = 0; a < spec.args.size() && !found; ++a) {
    if (spec.args[a].name != m.buffer) continue;
    if (spec.args[a].kind != ArgKind::buffer) {
      fail(buffer_path, "names the scalar \"" + m.buffer + "\" (args[" + std::to_string(a) +
                            "]); a tensor map is built over a buffer arg");
    }
    m.arg = a;
    found = true;
  }
  if (!found) fail(buffer_path, "no arg of this case is named \"" + m.buffer + "\"");

  const auto dtype_path = member_path(path, "dtype");
  const auto dtype_name = as_string(require(t, path, "dtype"), dtype_path);
  const auto dtype = scalar_type_from_name(dtype_name);
  if (!dtype) {
    fail(dtype_path, "unknown dtype \"" + dtype_name +
                         "\" (TMA element types: uint8, uint16, uint32, int32, uint64, int64, "
                         "float16, bfloat16, float32, float64)");
  }
  m.dtype = *dtype;
  m.dims = uint_array(require(t, path, "dims"), member_path(path, "dims"), UINT64_MAX);
  if (const json* v = find(t, "strides")) {
    m.strides = uint_array(*v, member_path(path, "strides"), UINT64_MAX);
  } else {
    m.packed = true;
    m.strides = packed_tensor_strides(m.dims, scalar_size(m.dtype));
  }
  m.box = uint32_array(require(t, path, "box"), member_path(path, "box"));
  if (const json* v = find(t, "element_strides")) {
    m.element_strides = uint32_array(*v, member_path(path, "element_strides"));
  } else {
    m.element_strides.assign(m.dims.size(), 1);
  }
  if (const json* v = find(t, "swizzle")) {
    static const char* const names[] = {"none", "32B", "64B", "128B"};
    m.swizzle = parse_choice<TensorSwizzle>(*v, member_path(path, "swizzle"), names);
  }
  if (const json* v = find(t, "l2_promotion")) {
    static const char* const names[] = {"none", "64B", "128B", "256B"};
    m.l2_promotion = parse_choice<TensorL2Promotion>(*v, member_path(path, "l2_promotion"), names);
  }
  if (const json* v = find(t, "oob_fill")) {
    static const char* const names[] = {"zero", "nan"};
    m.oob_fill = parse_choice<TensorOobFill>(*v, member_path(path, "oob_fill"), names);
  }
  validate_tensor_map(m, spec.args[m.arg].buffer.bytes, path);
  return m;
}

// The rules on each dimension's entries: rank, extents, strides, box, element strides.
void validate_shape(const TensorMapSpec& m, const std::string& path) {
  const std::size_t rank = m.dims.size();
  const std::size_t size = scalar_size(m.dtype);
  if (rank < 1 || rank > max_tensor_rank) {
    fail(member_path(path, "dims"), "must hold 1 to " + std::to_string(max_tensor_rank) +
                                        " extents (the tensor's rank), got " +
                                        std::to_string(rank));
  }
  for (std::size_t i = 0; i < rank; ++i) {
    if (m.dims[i] < 1 || m.dims[i] > max_tensor_dim) {
      fail(index_path(member_path(path, "dims"), i),
           "must be 1..4294967296 (2^32), got " + std::to_string(m.dims[i]));
    }
  }
  const auto strides_path = member_path(path, "strides");
  if (m.strides.size() != rank - 1) {
    fail(strides_path, "must hold rank - 1 = " + std::to_string(rank - 1) +
                           " byte strides (of dimensions 1.." + std::to_string(rank - 1) +
                           "), got " + std::to_string(m.strides.size()));
  }
  for (std::size_t i = 0; i < m.strides.size(); ++i) {
    const std::uint64_t s = m.strides[i];
    if (s % tensor_stride_align == 0 && s < tensor_stride_limit) continue;
    const std::string problem = s % tensor_stride_align != 0
                                    ? "must be a multiple of 16 bytes"
                                    : "must be below 2^40 (1099511627776) bytes";
    if (m.packed) {
      fail(strides_path,
           "omitted, so dimension " + std::to_string(i + 1) + "'s stride is the packed " +
               (s == UINT64_MAX ? std::string("(overflowing)") : std::to_string(s)) +
               " bytes (dims " + list(m.dims) + " of " + std::to_string(size) +
               "-byte elements), which " + problem + "; give \"strides\" (padded rows)");
    }
    fail(index_path(strides_path, i), problem + ", got " + std::to_string(s));
  }
  const struct {
    const char* key;
    const std::vector<std::uint32_t>& values;
    std::uint32_t max;
  } per_dim[] = {{"box", m.box, max_tensor_box},
                 {"element_strides", m.element_strides, max_tensor_element_stride}};
  for (const auto& f : per_dim) {
    const auto p = member_path(path, f.key);
    if (f.values.size() != rank) {
      fail(p, "must hold one entry per dimension (" + std::to_string(rank) + "), got " +
                  std::to_string(f.values.size()));
    }
    for (std::size_t i = 0; i < rank; ++i) {
      if (f.values[i] < 1 || f.values[i] > f.max) {
        fail(index_path(p, i),
             "must be 1.." + std::to_string(f.max) + ", got " + std::to_string(f.values[i]));
      }
    }
  }
}

}  // namespace

void parse_tensor_maps(const json& maps, const std::string& path, CaseSpec& spec) {
  if (!maps.is_array()) fail(path, std::string("must be an array, got ") + type_name(maps));
  for (std::size_t j = 0; j < maps.size(); ++j) {
    spec.tensor_maps.push_back(parse_tensor_map(maps[j], index_path(path, j), spec));
  }
}

std::vector<std::uint64_t> packed_tensor_strides(const std::vector<std::uint64_t>& dims,
                                                 std::size_t element_size) {
  std::vector<std::uint64_t> strides;
  std::uint64_t stride = element_size;
  for (std::size_t i = 0; i + 1 < dims.size(); ++i) {
    if (stride == UINT64_MAX || __builtin_mul_overflow(stride, dims[i], &stride)) {
      stride = UINT64_MAX;
    }
    strides.push_back(stride);
  }
  return strides;
}

std::optional<std::uint64_t> tensor_map_reach(const TensorMapSpec& m) {
  if (m.dims.empty() || m.strides.size() + 1 != m.dims.size()) return std::nullopt;
  const std::uint64_t size = scalar_size(m.dtype);
  std::uint64_t reach = size;
  for (std::size_t i = 0; i < m.dims.size(); ++i) {
    const std::uint64_t stride = i == 0 ? size : m.strides[i - 1];
    const std::uint64_t last = m.dims[i] == 0 ? 0 : m.dims[i] - 1;
    std::uint64_t step = 0;
    if (__builtin_mul_overflow(last, stride, &step) ||
        __builtin_add_overflow(reach, step, &reach)) {
      return std::nullopt;
    }
  }
  return reach;
}

void validate_tensor_map(const TensorMapSpec& m, std::uint64_t buffer_bytes,
                         const std::string& path) {
  const std::size_t size = scalar_size(m.dtype);
  if (m.dtype == ScalarType::int8 || m.dtype == ScalarType::int16) {
    fail(member_path(path, "dtype"),
         std::string("\"") + scalar_type_name(m.dtype) +
             "\" is not a TMA element type (no CUtensorMapDataType); use the unsigned type of "
             "the same size (" +
             (m.dtype == ScalarType::int8 ? "uint8" : "uint16") + ")");
  }
  validate_shape(m, path);
  const std::uint64_t inner = std::uint64_t{m.box[0]} * size;
  if (inner % 16 != 0) {
    fail(index_path(member_path(path, "box"), 0),
         "box[0] * element size must be a multiple of 16 bytes, got " + std::to_string(m.box[0]) +
             " * " + std::to_string(size) + " = " + std::to_string(inner));
  }
  if (const std::uint64_t span = swizzle_span(m.swizzle); span != 0 && inner > span) {
    fail(member_path(path, "swizzle"),
         std::string("\"") + swizzle_name(m.swizzle) + "\" needs box[0] * element size <= " +
             std::to_string(span) + " bytes (the swizzle's span), got " + std::to_string(inner));
  }
  if (m.oob_fill == TensorOobFill::nan && !is_float(m.dtype)) {
    fail(member_path(path, "oob_fill"),
         std::string("\"nan\" needs a float dtype (float16, bfloat16, float32, float64), got \"") +
             scalar_type_name(m.dtype) + "\"");
  }
  // Reach: TMA reads no element outside dims, so the buffer bounds everything the map gives the
  // kernel when its last addressable byte lies within it. A store may also write the rest of a
  // row's last 16-byte chunk; that lands in the buffer's own padding and guard (static_assert
  // above), where the guard check reports an out_of_bounds_write.
  const auto reach = tensor_map_reach(m);
  if (!reach || *reach > buffer_bytes) {
    std::vector<std::uint64_t> strides{size};
    strides.insert(strides.end(), m.strides.begin(), m.strides.end());
    fail(path, "reaches past buffer \"" + m.buffer + "\" (" + std::to_string(buffer_bytes) +
                   " bytes): its last element ends at byte " +
                   (reach ? std::to_string(*reach) : std::string("2^64 or more")) +
                   " = sum((dims[i] - 1) * stride[i]) + " + std::to_string(size) + " with dims " +
                   list(m.dims) + " and byte strides " + list(strides) +
                   " (stride[0]: the element size)");
  }
}

}  // namespace kernelopt::detail
