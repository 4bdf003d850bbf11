// Fresh inputs and checked launches (PROTOCOL.md): the CUDA reference run on the inputs of a
// measured launch, right after it and outside its timed window, and compared with the
// candidate's outputs on the device; the confirm launch after timing.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "case_runner.hpp"
#include "file_io.hpp"
#include "support.hpp"
#include "timing.hpp"

namespace kernelopt::detail {
namespace {

using nlohmann::json;

json figure(double value) {
  if (std::isinf(value)) return "inf";
  return value;
}

bool is_output(const DeviceArg& d) { return d.spec->buffer.role != BufferRole::in; }

}  // namespace

// Before the validation launch (every allocation happens then): a copy of every buffer for the
// reference, the reference's parameters pointing at them, and the compare results.
void CaseRunner::setup_reference() {
  st_.ref_slots = st_.slots;
  st_.ref_params.resize(st_.ref_slots.size());
  for (std::size_t i = 0; i < st_.ref_slots.size(); ++i) st_.ref_params[i] = st_.ref_slots[i].bytes;
  std::size_t outputs = 0;
  for (auto& d : st_.buffers) {
    const auto& b = d.spec->buffer;
    // At least one allocation granule, so an empty buffer still gets a valid pointer.
    // An `in` buffer without a fresh spec holds its input for every check: copied once and
    // staged (read-only for kernels where the device allows), so a candidate's launch cannot
    // change what the reference computes from. One with a fresh spec gets each check's draw.
    const bool fixed_input = b.role == BufferRole::in && !b.fresh && b.bytes > 0;
    const std::uint64_t bytes = std::max<std::uint64_t>(b.bytes, 256);
    d.ref = fixed_input ? s_.allocate_staged(bytes) : s_.allocate(bytes);
    CUdeviceptr ptr = d.ref.get();
    if (b.role == BufferRole::in && b.bytes > 0) copy_into(d.input, ptr, b.bytes);
    if (fixed_input) {
      sync();
      s_.protect_staged(d.ref);
    }
    std::memcpy(st_.ref_slots[d.index].bytes, &ptr, sizeof ptr);
    if (is_output(d)) ++outputs;
  }
  const std::size_t checks =
      spec_.checked_launches.size() + (spec_.confirm_launch && spec_.check_launch ? 1 : 0);
  const std::size_t slots = std::max<std::size_t>(checks * outputs, 1);
  st_.check_results = s_.allocate(slots * sizeof(KoCompareResult));
  init_compare_results(drv_, s_.stream(), st_.check_results.get(), slots);
  if (spec_.check_launch->shared_bytes > 48 * 1024) {
    KO_CU(drv_.cuFuncSetAttribute(check_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  static_cast<int>(spec_.check_launch->shared_bytes)));
  }
}

// Enqueued right after the candidate's launch (its stop event): the reference gets the same
// inputs (redrawn from the same draw, or its copy of the input), fresh outputs initialised
// like the candidate's, runs, and every output is compared into this check's result slots.
// Nothing here waits: in blocking mode it is part of the batch held behind ko_spin.
void CaseRunner::enqueue_reference_check(std::optional<std::size_t> sample) {
  const CUstream stream = s_.stream();
  const std::size_t slot = checks_.size();
  checks_.push_back({sample, in_draw_, last_draw_, false, {}});
  reset_buffers(Copies::reference, [this, stream](const DeviceArg& d, CUdeviceptr dst) {
    const auto& b = d.spec->buffer;
    // The launch's inputs: an `in` buffer holds the draw made for the last redrawn launch (with
    // fresh_launches that may be an earlier one), an inout buffer this launch's draw or its input.
    const std::optional<std::uint64_t> drawn = b.role == BufferRole::in ? in_draw_ : last_draw_;
    if (drawn && b.fresh) {
      draw(d, dst, *drawn);
    } else if (b.role == BufferRole::inout) {
      KO_CU(drv_.cuMemcpyDtoDAsync(dst, d.input.device->get(), b.bytes, stream));
    }
  });
  const auto& l = *spec_.check_launch;
  KO_CU(drv_.cuLaunchKernel(check_, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1],
                            l.block[2], l.shared_bytes, stream,
                            st_.ref_params.empty() ? nullptr : st_.ref_params.data(), nullptr));
  std::size_t j = 0;
  const std::size_t outputs =
      static_cast<std::size_t>(std::count_if(st_.buffers.begin(), st_.buffers.end(), is_output));
  // The slots are reset here, after the candidate's launch, so nothing it wrote into them
  // earlier counts; settle_checks() reads them back before it launches again.
  init_compare_results(drv_, stream,
                       st_.check_results.get() + slot * outputs * sizeof(KoCompareResult), outputs);
  for (const auto& d : st_.buffers) {
    if (!is_output(d)) continue;
    const auto& b = d.spec->buffer;
    const CUfunction compare = s_.support().function(compare_ref_kernel_name(*b.dtype));
    const CUdeviceptr result =
        st_.check_results.get() + (slot * outputs + j++) * sizeof(KoCompareResult);
    enqueue_compare(drv_, compare, s_.sm_count(), stream, d.data, d.ref.get(),
                    b.bytes / scalar_size(*b.dtype), b.compare, result);
  }
  // The reference's outputs are the answers for this launch's inputs, which later launches may
  // get again (fresh_launches: the launches after a draw reuse it): wiped right after their
  // compare, in stream order, so no later candidate launch can find and copy them.
  for (const auto& d : st_.buffers) {
    if (is_output(d) && d.spec->buffer.bytes > 0) {
      KO_CU(drv_.cuMemsetD8Async(d.ref.get(), d.spec->buffer.poison_byte, d.spec->buffer.bytes,
                                 stream));
    }
  }
}

void CaseRunner::settle_checks() {
  const std::size_t outputs =
      static_cast<std::size_t>(std::count_if(st_.buffers.begin(), st_.buffers.end(), is_output));
  const std::size_t settled = check_raw_.size() / std::max<std::size_t>(outputs, 1);
  for (std::size_t slot = settled; slot < checks_.size() && outputs > 0; ++slot) {
    if (checks_[slot].expected) compare_expected(slot);  // the stream is idle: values revealed
  }
  if (checks_.size() > settled && outputs > 0) {
    check_raw_.resize(checks_.size() * outputs);
    KO_CU(drv_.cuMemcpyDtoHAsync(
        check_raw_.data() + settled * outputs,
        st_.check_results.get() + settled * outputs * sizeof(KoCompareResult),
        (checks_.size() - settled) * outputs * sizeof(KoCompareResult), s_.stream()));
  }
  for (std::size_t slot = dump_host_.size() / std::max<std::size_t>(outputs, 1);
       slot < dumps_.size(); ++slot) {
    std::size_t j = 0;
    for (const auto& d : st_.buffers) {
      if (!is_output(d)) continue;
      auto& host = dump_host_.emplace_back(d.spec->buffer.bytes);
      if (!host.empty()) {
        KO_CU(drv_.cuMemcpyDtoHAsync(host.data(), st_.dump_outputs.at(slot * outputs + j).get(),
                                     host.size(), s_.stream()));
      }
      ++j;
    }
  }
  sync();
}

// After timing: one more launch prepared exactly like a measured one (outputs re-initialised,
// inputs redrawn where they can be, L2 flushed), timed alone (confirm_launch_ms), and checked
// against the reference like a checked launch.
void CaseRunner::run_confirm(json& result) {
  const bool flush = req_.flush_l2 && s_.can_flush_l2();
  // The timed check left its timed inputs in the `in` buffers: the ones that are not redrawn
  // get their input back, which is what the measured launches saw.
  for (const auto& d : st_.buffers) {
    const auto& b = d.spec->buffer;
    if (b.role == BufferRole::in && !b.fresh && b.has_timed_input()) {
      copy_into(d.input, d.data, b.bytes);
    }
  }
  TimedWork confirm;
  confirm.prepare = [&] { prepare_timed_launch(flush, spec_.has_fresh()); };
  confirm.launch = [&] { launch(); };
  result["timing"]["confirm_launch_ms"] = time_one_launch(s_, confirm);
  if (check_ != nullptr && spec_.check_launch) {
    enqueue_reference_check(std::nullopt);
  } else if (spec_.confirm_expected()) {
    note_expected_check(std::nullopt);  // compared in settle_checks, the stream idle
  }
}

// checked_dump (workloads without a CUDA reference: Python checks the files with the NumPy
// oracle). Every allocation before the validation launch, like the rest of the case's.
void CaseRunner::setup_dumps() {
  std::uint64_t largest_input = 0;
  for (const auto& d : st_.buffers) {
    const auto& b = d.spec->buffer;
    if (b.role != BufferRole::out && b.fresh) largest_input = std::max(largest_input, b.bytes);
  }
  for (std::size_t c = 0; c < spec_.checked_launches.size(); ++c) {
    for (const auto& d : st_.buffers) {
      if (is_output(d)) {
        st_.dump_outputs.push_back(s_.allocate(std::max<std::uint64_t>(d.spec->buffer.bytes, 256)));
      }
    }
  }
  if (largest_input > 0) st_.dump_scratch = s_.allocate(largest_input);
}

// Right after a checked launch, outside its timed window: keep its outputs (device copies; the
// files are written after timing, so nothing here waits).
void CaseRunner::enqueue_dump(std::size_t sample) {
  const std::size_t outputs =
      static_cast<std::size_t>(std::count_if(st_.buffers.begin(), st_.buffers.end(), is_output));
  const std::size_t slot = dumps_.size();
  dumps_.push_back({sample, in_draw_, last_draw_, false, {}});
  std::size_t j = 0;
  for (const auto& d : st_.buffers) {
    if (!is_output(d)) continue;
    const auto bytes = d.spec->buffer.bytes;
    const CUdeviceptr saved = st_.dump_outputs.at(slot * outputs + j++).get();
    if (bytes > 0) KO_CU(drv_.cuMemcpyDtoDAsync(saved, d.data, bytes, s_.stream()));
  }
}

// After timing: per checked launch, the files "<dir>/s<sample>_out_<buffer>.bin" of its outputs
// and "<dir>/s<sample>_in_<buffer>.bin" of the inputs that were redrawn (drawn again from the
// same draw); inputs not redrawn are the request's `input` files.
void CaseRunner::write_dumps(json& result) {
  const std::size_t outputs =
      static_cast<std::size_t>(std::count_if(st_.buffers.begin(), st_.buffers.end(), is_output));
  json entries = json::array();
  const json& times = result["timing"]["times_ms"];
  std::vector<std::uint8_t> host;
  for (std::size_t slot = 0; slot < dumps_.size(); ++slot) {
    const auto& dump = dumps_[slot];
    json files = {{"inputs", json::object()}, {"outputs", json::object()}};
    auto save = [&](const DeviceArg& d, const std::vector<std::uint8_t>& bytes, bool input) {
      const std::string file = spec_.checked_dump + "/s" + std::to_string(*dump.sample) +
                               (input ? "_in_" : "_out_") + d.spec->name + ".bin";
      write_file(file, bytes.data(), bytes.size());
      files[input ? "inputs" : "outputs"][d.spec->name] = file;
    };
    for (const auto& d : st_.buffers) {
      const auto& b = d.spec->buffer;
      const auto drawn = b.role == BufferRole::in ? dump.draw : dump.launch_draw;
      if (b.role != BufferRole::out && b.fresh && drawn) {
        // drawn again from the same draw by the harness's own fill: no candidate launch between
        draw(d, st_.dump_scratch.get(), *drawn);
        host.resize(b.bytes);
        if (b.bytes > 0) {
          KO_CU(drv_.cuMemcpyDtoHAsync(host.data(), st_.dump_scratch.get(), b.bytes, s_.stream()));
          sync();
        }
        save(d, host, true);
      }
    }
    std::size_t j = 0;
    for (const auto& d : st_.buffers) {
      // read back right after the checked launch (settle_checks), never from the device now
      if (is_output(d)) save(d, dump_host_.at(slot * outputs + j++), false);
    }
    json e = json::object();
    e["sample"] = *dump.sample;
    e["draw"] = dump.draw ? json(*dump.draw) : json(nullptr);
    e["time_ms"] = *dump.sample < times.size() ? times[*dump.sample] : json(nullptr);
    e["files"] = std::move(files);
    entries.push_back(std::move(e));
  }
  result["timed_dumps"] = std::move(entries);
}

void CaseRunner::report_reference_checks(json& result) {
  json& timing = result["timing"];
  json fresh = json::array();
  for (const auto& d : st_.buffers) {
    if (d.spec->buffer.fresh) fresh.push_back(d.spec->name);
  }
  timing["fresh_buffers"] = redraws() ? fresh : json::array();
  timing["fresh_draws"] = draws_;
  if (checks_.empty()) return;

  std::vector<const DeviceArg*> outputs;
  for (const auto& d : st_.buffers) {
    if (is_output(d)) outputs.push_back(&d);
  }
  settle_checks();  // the confirm launch's check; the measured ones were read as they ran
  const std::vector<KoCompareResult>& raw = check_raw_;
  json entries = json::array();
  const json& times = timing["times_ms"];
  for (std::size_t c = 0; c < checks_.size(); ++c) {
    const auto& check = checks_[c];
    for (std::size_t j = 0; j < outputs.size(); ++j) {
      const auto& b = outputs[j]->spec->buffer;
      const CompareFigures fig =
          compare_figures(raw[c * outputs.size() + j], b.bytes / scalar_size(*b.dtype));
      const bool failed = j < check.errors.size() && !check.errors[j].empty();
      json e = json::object();
      e["launch"] = check.sample ? "measured" : "confirm";
      e["sample"] = check.sample ? json(*check.sample) : json(nullptr);
      e["draw"] = check.draw ? json(*check.draw) : json(nullptr);
      e["time_ms"] = check.sample
                         ? (*check.sample < times.size() ? times[*check.sample] : json(nullptr))
                         : timing.value("confirm_launch_ms", json(nullptr));
      e["buffer"] = outputs[j]->spec->name;
      e["elements"] = fig.elements;
      e["mismatches"] = fig.mismatches;
      e["nonfinite"] = fig.nonfinite;
      e["max_abs_error"] = figure(fig.max_abs_error);
      e["max_rel_error"] = figure(fig.max_rel_error);
      e["first_mismatch"] = fig.first_mismatch ? json(*fig.first_mismatch) : json(nullptr);
      if (failed) {
        // not compared (checked_expected values for another draw): failed, every element
        // unconfirmed, with the reason; no figures were measured
        e["mismatches"] = fig.elements;
        e["nonfinite"] = nullptr;
        e["max_abs_error"] = nullptr;
        e["max_rel_error"] = nullptr;
        e["first_mismatch"] = nullptr;
        e["error"] = check.errors[j];
      }
      entries.push_back(std::move(e));
    }
  }
  result["timed_checks"] = std::move(entries);
}

}  // namespace kernelopt::detail
