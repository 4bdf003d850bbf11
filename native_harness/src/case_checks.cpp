// What the harness checks after a launch of a case: device-side compare, outputs written,
// guards, unchanged inputs; and the two extra checked launches (determinism re-run, timed check).
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "case_runner.hpp"
#include "file_io.hpp"
#include "kept.hpp"
#include "support.hpp"
#include "timing.hpp"

namespace kernelopt::detail {
namespace {

using nlohmann::json;

const char* launch_kind_name(LaunchKind k) {
  switch (k) {
    case LaunchKind::validation: return "validation";
    case LaunchKind::repeat: return "repeat";
    case LaunchKind::timed: return "timed";
  }
  return "?";
}

// JSON has no infinity: PROTOCOL.md prints it as the string "inf".
json error_figure(double value) {
  if (std::isinf(value)) return "inf";
  return value;
}

// A value as JSON: a number, or "nan", "inf", "-inf".
json value_figure(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

}  // namespace

// Device-side comparison of every output that has expected values for this launch. The
// output file is written when the comparison finds a mismatch (unless an earlier launch of
// the case already wrote it) or, after validation, when write_output asks for it.
void CaseRunner::compare_outputs(LaunchKind kind, json& result) {
  for (auto& d : st_.buffers) {
    const auto& b = d.spec->buffer;
    const Source& expected = kind == LaunchKind::timed ? d.timed_expected : d.expected;
    const std::string& expected_path = kind == LaunchKind::timed ? b.timed_expected : b.expected;
    if (b.role == BufferRole::in || expected_path.empty() || !b.dtype) continue;
    const std::uint64_t elements = b.bytes / scalar_size(*b.dtype);
    // expected values in the buffer's dtype (a reference's outputs) widen on the device as a
    // checked launch's reference outputs do
    const CUfunction compare = s_.support().function(
        b.native_expected() ? compare_ref_kernel_name(*b.dtype) : compare_kernel_name(*b.dtype));
    // the first mismatching element, expected and actual (read while the expected values are
    // mapped): a report can show them without a host copy of the expected values
    std::optional<std::pair<double, double>> first;
    const CompareFigures fig = [&] {
      if (!expected.device) {
        return device_compare(drv_, compare, s_.sm_count(), s_.stream(), d.data, CUdeviceptr{0},
                              elements, b.compare, s_.support_scratch());
      }
      // Mapped for this compare only, once every launch before it has finished: no candidate
      // kernel ever runs while its expected values are in the address space (staging.hpp).
      sync();
      const Revealed shown(s_, *expected.device);
      const CompareFigures f = device_compare(drv_, compare, s_.sm_count(), s_.stream(), d.data,
                                              expected.device->get(), elements, b.compare,
                                              s_.support_scratch());  // synchronizes first
      if (f.first_mismatch) {
        const ScalarType e_type = b.native_expected() ? *b.dtype : ScalarType::float64;
        first = {element_at(expected.device->get(), *f.first_mismatch, e_type),
                 element_at(d.data, *f.first_mismatch, *b.dtype)};
      }
      return f;
    }();
    const bool write = !d.output_written &&
                       (fig.mismatches > 0 || (kind == LaunchKind::validation && b.write_output));
    if (write) write_output(d);

    json c = json::object();
    c["buffer"] = d.spec->name;
    c["launch"] = launch_kind_name(kind);
    c["elements"] = fig.elements;
    c["mismatches"] = fig.mismatches;
    c["nonfinite"] = fig.nonfinite;
    c["max_abs_error"] = error_figure(fig.max_abs_error);
    c["max_rel_error"] = error_figure(fig.max_rel_error);
    c["err_sq"] = error_figure(fig.err_sq);
    c["first_mismatch"] = fig.first_mismatch ? json(*fig.first_mismatch) : json(nullptr);
    if (first) {
      c["first_mismatch_expected"] = value_figure(first->first);
      c["first_mismatch_actual"] = value_figure(first->second);
    }
    c["output_written"] = write;
    c["compare_ms"] = float_to_double(static_cast<float>(fig.kernel_ms));
    result["compares"].push_back(std::move(c));
  }
}

double CaseRunner::element_at(CUdeviceptr base, std::uint64_t index, ScalarType dtype) {
  std::uint8_t bytes[8] = {};
  const std::size_t item = scalar_size(dtype);
  KO_CU(drv_.cuMemcpyDtoHAsync(bytes, base + index * item, item, s_.stream()));
  sync();
  return element_to_double(bytes, dtype);
}

void CaseRunner::write_output(DeviceArg& d) {
  const auto& b = d.spec->buffer;
  std::vector<std::uint8_t> host(b.bytes);
  if (b.bytes > 0) {
    KO_CU(drv_.cuMemcpyDtoHAsync(host.data(), d.data, b.bytes, s_.stream()));
    sync();
  }
  write_file(b.output, host.data(), host.size());
  d.output_written = true;
}

// After validation: every output without expected values (the comparison decided for the
// others); one kept as expected values (keep_expected) only with write_output.
void CaseRunner::write_outputs() {
  for (auto& d : st_.buffers) {
    const auto& b = d.spec->buffer;
    if (b.role == BufferRole::in || !b.expected.empty()) continue;
    if (!b.keep_expected.empty() && !b.write_output) continue;
    write_output(d);
  }
}

// After a launch, with one wait: each buffer's guard bytes, each `in` buffer against what it
// started with (its timed input when `timed`) and, after the repeat launch (`repeat`), each
// output against the validation launch's saved copy. The guards and the results of the diffs
// the device takes (ko_bitwise_diff, each into its own slot of the support scratch) are copied
// into pinned memory, so the copies queue behind the launch and one wait reads them all (the
// scratch has a slot for every buffer of the case: setup sized it); an input diff the device
// cannot take (no support module, a source on the host) is taken afterwards by diff_against.
void CaseRunner::check_buffers(json& result, bool timed, bool repeat) {
  const CUstream stream = s_.stream();
  const std::size_t n = st_.buffers.size();
  std::uint8_t* host = s_.readback(readback_bytes());
  auto* slots = reinterpret_cast<KoDiffResult*>(host);
  std::vector<std::optional<std::size_t>> repeat_slot(n), input_slot(n);
  std::size_t used = 0;
  const auto enqueue = [&](CUfunction diff, CUdeviceptr a, CUdeviceptr b,
                           std::uint64_t bytes) -> std::optional<std::size_t> {
    if (diff == nullptr) return std::nullopt;
    enqueue_bitwise_diff(drv_, diff, s_.sm_count(), stream, a, b, bytes,
                         s_.support_scratch() + used * sizeof(KoDiffResult));
    return used++;
  };
  const CUfunction repeat_diff = repeat ? s_.support().function(bitwise_diff_kernel_name) : nullptr;
  const CUfunction input_diff =
      req_.support_module.empty() ? nullptr : s_.support().find(bitwise_diff_kernel_name);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& d = st_.buffers[i];
    const auto& b = d.spec->buffer;
    if (repeat && b.role != BufferRole::in && d.saved.get() != 0) {
      repeat_slot[i] = enqueue(repeat_diff, d.saved.get(), d.data, b.bytes);
    }
    const Source& src = timed && b.has_timed_input() ? d.timed_input : d.input;
    if (b.role == BufferRole::in && b.bytes > 0 && src.device) {
      input_slot[i] = enqueue(input_diff, d.data, src.device->get(), b.bytes);
    }
  }
  if (used > 0) {
    KO_CU(drv_.cuMemcpyDtoHAsync(slots, s_.support_scratch(), used * sizeof(KoDiffResult), stream));
  }
  std::uint8_t* guards = host + n * sizeof(KoDiffResult);
  for (const auto& d : st_.buffers) {
    const auto& l = d.layout;
    if (l.before_bytes > 0) {
      KO_CU(drv_.cuMemcpyDtoHAsync(guards, d.allocation.get() + l.before_offset, l.before_bytes,
                                   stream));
    }
    if (l.after_bytes > 0) {
      KO_CU(drv_.cuMemcpyDtoHAsync(guards + l.before_bytes, d.allocation.get() + l.after_offset,
                                   l.after_bytes, stream));
    }
    guards += l.before_bytes + l.after_bytes;
  }
  sync();

  for (std::size_t i = 0; i < n && repeat; ++i) {
    const auto& d = st_.buffers[i];
    if (d.spec->buffer.role == BufferRole::in) continue;
    const std::optional<ByteDiff> differ =
        repeat_slot[i] ? byte_diff(slots[*repeat_slot[i]]) : std::nullopt;
    json det = json::object();
    det["buffer"] = d.spec->name;
    det["bytes_differ"] = differ ? differ->bytes_changed : 0;
    det["first_offset"] = differ ? json(differ->first_offset) : json(nullptr);
    result["determinism"].push_back(std::move(det));
  }
  guards = host + n * sizeof(KoDiffResult);
  for (const auto& d : st_.buffers) {
    const auto& l = d.layout;
    const struct {
      const char* side;
      const std::uint8_t* bytes;
      std::size_t size;
    } sides[] = {{"before", guards, l.before_bytes},
                 {"after", guards + l.before_bytes, l.after_bytes}};
    for (const auto& side : sides) {
      if (const auto diff = find_pattern_changes(side.bytes, side.size, guard_pattern)) {
        json v = json::object();
        v["buffer"] = d.spec->name;
        v["side"] = side.side;
        v["first_offset"] = diff->first_offset;
        v["bytes_changed"] = diff->bytes_changed;
        result["guard_violations"].push_back(std::move(v));
      }
    }
    guards += l.before_bytes + l.after_bytes;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const auto& d = st_.buffers[i];
    const auto& b = d.spec->buffer;
    if (b.role != BufferRole::in || b.bytes == 0) continue;
    const auto diff =
        input_slot[i]
            ? byte_diff(slots[*input_slot[i]])
            : diff_against(d.data, timed && b.has_timed_input() ? d.timed_input : d.input, b.bytes);
    if (diff) {
      json m = json::object();
      m["buffer"] = d.spec->name;
      m["first_offset"] = diff->first_offset;
      m["bytes_changed"] = diff->bytes_changed;
      result["modified_inputs"].push_back(std::move(m));
    }
  }
  set_status(result);
}

// The pinned bytes check_buffers reads back: a diff slot per buffer, then each buffer's guards.
std::size_t CaseRunner::readback_bytes() const {
  std::size_t bytes = st_.buffers.size() * sizeof(KoDiffResult);
  for (const auto& d : st_.buffers) bytes += d.layout.before_bytes + d.layout.after_bytes;
  return bytes;
}

// Differences between the `bytes` at `data` and `src`: on the host when the source is there,
// else with ko_bitwise_diff when the request has a support module, else by copying both back.
std::optional<ByteDiff> CaseRunner::diff_against(CUdeviceptr data, const Source& src,
                                                 std::uint64_t bytes) {
  if (bytes == 0) return std::nullopt;
  // Only with this request's support module: its scratch was allocated before the launch.
  if (src.device && !req_.support_module.empty()) {
    if (const CUfunction diff = s_.support().find(bitwise_diff_kernel_name)) {
      return device_bitwise_diff(drv_, diff, s_.sm_count(), s_.stream(), data, src.device->get(),
                                 bytes, s_.support_scratch());
    }
  }
  std::vector<std::uint8_t> now(bytes);
  KO_CU(drv_.cuMemcpyDtoHAsync(now.data(), data, bytes, s_.stream()));
  std::vector<std::uint8_t> reference;
  if (src.device) {
    reference.resize(bytes);
    KO_CU(drv_.cuMemcpyDtoHAsync(reference.data(), src.device->get(), bytes, s_.stream()));
  }
  sync();
  return find_differences(now.data(), src.device ? reference.data() : src.host.data(), bytes);
}

void CaseRunner::set_status(json& result) {
  if (!result["guard_violations"].empty()) {
    result["status"] = "out_of_bounds_write";
  } else if (!result["modified_inputs"].empty()) {
    result["status"] = "input_modified";
  }
}

// repeat_validation: keep the validation launch's outputs, launch again from the same
// starting state, compare again and diff the two launches bit for bit.
void CaseRunner::run_repeat(json& result) {
  const CUstream stream = s_.stream();
  bool saved = false;
  for (const auto& d : st_.buffers) {
    if (d.saved.get() != 0) {
      KO_CU(drv_.cuMemcpyDtoDAsync(d.saved.get(), d.data, d.spec->buffer.bytes, stream));
      saved = true;
    }
  }
  // The copies are what the re-run is compared with: read-only for kernels from here on, so
  // the re-run cannot make them agree with whatever it writes.
  if (saved) {
    sync();
    for (const auto& d : st_.buffers) {
      if (d.saved.get() != 0) s_.protect_staged(d.saved);
    }
  }
  steps_.mark("repeat_save");
  prepare_timed_launch(false, false);
  launch();
  sync();
  steps_.mark("repeat_launch");
  compare_outputs(LaunchKind::repeat, result);
  steps_.mark("repeat_compare");
  check_buffers(result, false, true);
}

// Timed inputs: after the measured launches, one more launch like a measured one, on inputs
// the kernel has not seen during validation, then the same checks as after validation. Its
// time is reported apart (timing.check_launch_ms), never mixed into times_ms.
void CaseRunner::run_timed_check(json& result) {
  const bool flush = req_.flush_l2 && s_.can_flush_l2();
  TimedWork check;
  // Outside the timed window, like every measured launch: outputs re-initialised, in/inout
  // buffers given their timed inputs (or their inputs, where none is given), L2 flushed.
  check.prepare = [&] {
    reset_buffers(Copies::candidate, [this](const DeviceArg& d, CUdeviceptr dst) {
      const auto& b = d.spec->buffer;
      copy_into(b.has_timed_input() ? d.timed_input : d.input, dst, b.bytes);
    });
    if (flush) s_.flush_l2();
  };
  check.launch = [&] { launch(); };
  result["timing"]["check_launch_ms"] = time_one_launch(s_, check);

  compare_outputs(LaunchKind::timed, result);
  check_buffers(result, true, false);
}

}  // namespace kernelopt::detail
