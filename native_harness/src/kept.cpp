// Expected values kept on the device (kept.hpp): the look-up of a request's kept copies, the
// figures of a kept copy, and the copy itself after a clean validation launch (CaseRunner).
#include "kept.hpp"

#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "case_runner.hpp"
#include "errors.hpp"
#include "support.hpp"

namespace kernelopt::detail {
namespace {

using nlohmann::json;

// Every "kept:KEY" value of `req`: fn(field path, buffer name, buffer, KEY).
template <typename Fn>
void for_each_kept_ref(const Request& req, Fn fn) {
  for (std::size_t c = 0; c < req.cases.size(); ++c) {
    const auto& args = req.cases[c].args;
    for (std::size_t a = 0; a < args.size(); ++a) {
      if (args[a].kind != ArgKind::buffer) continue;
      const auto& b = args[a].buffer;
      const auto arg = "cases[" + std::to_string(c) + "].args[" + std::to_string(a) + "].";
      for (const auto& [field, value] :
           {std::pair<const char*, const std::string&>{"expected", b.expected},
            {"timed_expected", b.timed_expected}}) {
        if (is_kept_ref(value)) fn(arg + field, args[a].name, b, value.substr(kept_prefix.size()));
      }
    }
  }
}

template <typename T>
double load_plain(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return static_cast<double>(v);
}
double load_half(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return half_bits_to_double(v);
}
double load_bfloat16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return bfloat16_bits_to_double(v);
}

// In element order, in double: deterministic.
template <double (*Load)(const std::uint8_t*)>
KeptFigures accumulate(const std::uint8_t* data, std::uint64_t elements, std::size_t item) {
  KeptFigures f;
  f.elements = elements;
  for (std::uint64_t i = 0; i < elements; ++i) {
    const double x = Load(data + i * item);
    if (!std::isfinite(x)) continue;
    ++f.finite;
    f.sum_sq += x * x;
  }
  return f;
}

}  // namespace

double half_bits_to_double(std::uint16_t bits) noexcept {
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  const double sign = (bits & 0x8000) != 0 ? -1.0 : 1.0;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);  // zero, subnormal
  if (exponent == 31) return mantissa != 0 ? std::nan("") : sign * HUGE_VAL;
  return sign * std::ldexp(mantissa | 0x400, exponent - 25);
}

double bfloat16_bits_to_double(std::uint16_t bits) noexcept {
  const std::uint32_t wide = std::uint32_t{bits} << 16;  // the top half of a float32
  float f = 0;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}

double element_to_double(const std::uint8_t* p, ScalarType dtype) noexcept {
  switch (dtype) {
    case ScalarType::int8: return load_plain<std::int8_t>(p);
    case ScalarType::int16: return load_plain<std::int16_t>(p);
    case ScalarType::int32: return load_plain<std::int32_t>(p);
    case ScalarType::int64: return load_plain<std::int64_t>(p);
    case ScalarType::uint8: return load_plain<std::uint8_t>(p);
    case ScalarType::uint16: return load_plain<std::uint16_t>(p);
    case ScalarType::uint32: return load_plain<std::uint32_t>(p);
    case ScalarType::uint64: return load_plain<std::uint64_t>(p);
    case ScalarType::float16: return load_half(p);
    case ScalarType::bfloat16: return load_bfloat16(p);
    case ScalarType::float32: return load_plain<float>(p);
    case ScalarType::float64: return load_plain<double>(p);
  }
  return 0;
}

KeptFigures kept_figures(const std::uint8_t* data, std::uint64_t bytes, ScalarType dtype) {
  const std::size_t item = scalar_size(dtype);
  const std::uint64_t n = bytes / item;
  switch (dtype) {
    case ScalarType::int8: return accumulate<load_plain<std::int8_t>>(data, n, item);
    case ScalarType::int16: return accumulate<load_plain<std::int16_t>>(data, n, item);
    case ScalarType::int32: return accumulate<load_plain<std::int32_t>>(data, n, item);
    case ScalarType::int64: return accumulate<load_plain<std::int64_t>>(data, n, item);
    case ScalarType::uint8: return accumulate<load_plain<std::uint8_t>>(data, n, item);
    case ScalarType::uint16: return accumulate<load_plain<std::uint16_t>>(data, n, item);
    case ScalarType::uint32: return accumulate<load_plain<std::uint32_t>>(data, n, item);
    case ScalarType::uint64: return accumulate<load_plain<std::uint64_t>>(data, n, item);
    case ScalarType::float16: return accumulate<load_half>(data, n, item);
    case ScalarType::bfloat16: return accumulate<load_bfloat16>(data, n, item);
    case ScalarType::float32: return accumulate<load_plain<float>>(data, n, item);
    case ScalarType::float64: return accumulate<load_plain<double>>(data, n, item);
  }
  return {};
}

KeptFigures device_kept_figures(Session& session, CUfunction sum_sq, CUdeviceptr data,
                                std::uint64_t elements) {
  KeptFigures f;
  f.elements = elements;
  if (elements == 0) return f;
  const auto& drv = session.drv();
  const CUstream stream = session.stream();
  DeviceBuffer partials(sum_sq_blocks * sizeof(KoSumSq));
  // every block writes its partial; zeroed first all the same, so none is ever left unset
  KO_CU(drv.cuMemsetD8Async(partials.get(), 0, partials.size(), stream));
  CUdeviceptr out = partials.get();
  void* params[] = {&data, &elements, &out};
  KO_CU(drv.cuLaunchKernel(sum_sq, sum_sq_blocks, 1, 1, support_block, 1, 1, 0, stream, params,
                           nullptr));
  std::vector<KoSumSq> host(sum_sq_blocks);
  KO_CU(drv.cuMemcpyDtoHAsync(host.data(), out, partials.size(), stream));
  KO_CU(drv.cuStreamSynchronize(stream));
  for (const auto& p : host) {  // in block order: the same bits every run
    f.sum_sq += p.sum_sq;
    f.finite += p.finite;
  }
  return f;
}

KeptCopies find_kept_copies(Session& session, const Request& req) {
  KeptCopies found;
  std::vector<std::string> missing;
  std::set<std::string> looked_up;
  for_each_kept_ref(
      req, [&](const std::string&, const std::string&, const BufferArg&, const std::string& key) {
        if (!looked_up.insert(key).second) return;
        if (auto kept = session.input_cache().find_kept(key)) {
          found.emplace(key, std::move(*kept));
        } else {
          missing.push_back(key);
        }
      });
  if (!missing.empty()) {
    std::string names;
    for (const auto& key : missing) names += (names.empty() ? "\"" : ", \"") + key + "\"";
    throw ExpectedMissing(
        "no expected values are kept on the device under the key(s) " + names +
            " (a new harness process, or evicted from the input cache): run the reference again "
            "with keep_expected",
        std::move(missing));
  }
  for_each_kept_ref(req, [&](const std::string& field, const std::string& name, const BufferArg& b,
                             const std::string& key) {
    const auto& kept = found.at(key);
    if (kept.bytes != b.bytes) {
      throw BadRequest(field + ": buffer \"" + name + "\" is " + std::to_string(b.bytes) +
                       " bytes but the copy kept as \"kept:" + key + "\" has " +
                       std::to_string(kept.bytes) + " bytes");
    }
  });
  return found;
}

// After a clean validation launch (run() calls it only then): each output with keep_expected is
// copied device to device into a copy staged like expected values (read-only, then hidden until a
// compare reveals it), its figures read from that copy, and the copy kept in the input cache.
// The figures are computed on the device (ko_sum_sq_<dtype>) when the support module has the
// kernel; otherwise the copy is read back and added up on the host.
void CaseRunner::keep_outputs(json& result) {
  const CUstream stream = s_.stream();
  for (auto& d : st_.buffers) {
    const auto& b = d.spec->buffer;
    if (b.keep_expected.empty()) continue;
    KeptFigures fig;
    fig.elements = b.bytes / scalar_size(*b.dtype);
    if (d.kept) {
      KO_CU(drv_.cuMemcpyDtoDAsync(d.kept->get(), d.data, b.bytes, stream));
      sync();
      s_.protect_staged(*d.kept);
      const CUfunction sum_sq =
          s_.support().loaded() ? s_.support().find(sum_sq_kernel_name(*b.dtype)) : nullptr;
      if (sum_sq != nullptr) {
        fig = device_kept_figures(s_, sum_sq, d.kept->get(), fig.elements);
      } else {
        std::vector<std::uint8_t> host(b.bytes);
        KO_CU(drv_.cuMemcpyDtoHAsync(host.data(), d.kept->get(), b.bytes, stream));
        sync();
        fig = kept_figures(host.data(), b.bytes, *b.dtype);
      }
      s_.hide_staged(*d.kept);
    }
    s_.input_cache().keep(b.keep_expected, std::move(d.kept), b.bytes);
    json k = json::object();
    k["buffer"] = d.spec->name;
    k["key"] = b.keep_expected;
    k["elements"] = fig.elements;
    k["finite"] = fig.finite;
    k["sum_sq"] = std::isinf(fig.sum_sq) ? json("inf") : json(fig.sum_sq);
    k["bytes"] = b.bytes;
    result["kept"].push_back(std::move(k));
  }
}

}  // namespace kernelopt::detail
