#include "case_runner.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>

#include "draw_key.hpp"
#include "errors.hpp"
#include "file_io.hpp"
#include "response.hpp"
#include "support.hpp"
#include "tensor_map.hpp"
#include "timing.hpp"

namespace kernelopt::detail {
namespace {

using nlohmann::json;

// Above this a kernel must opt in to dynamic shared memory (CUDA's static 48 KiB limit).
constexpr unsigned default_dynamic_shared_limit = 48 * 1024;

// For tests on a GPU only (KERNELOPT_HARNESS_REPORT_STAGED=1, never set by kernelopt): the
// device addresses of the case's staged copies and of its checked launches' compare results,
// so a test kernel can aim at one exactly.
json staged_addresses(const CaseState& st) {
  const char* env = std::getenv("KERNELOPT_HARNESS_REPORT_STAGED");
  if (env == nullptr || std::strcmp(env, "1") != 0) return nullptr;
  json staged = json::array();
  if (st.check_results.get() != 0) {
    staged.push_back({{"buffer", nullptr},
                      {"source", "check_results"},
                      {"address", static_cast<std::uint64_t>(st.check_results.get())},
                      {"bytes", st.check_results.size()}});
  }
  for (const auto& copy : st.checked_expected) {
    if (copy.get() == 0) continue;
    staged.push_back({{"buffer", nullptr},
                      {"source", "checked_expected"},
                      {"address", static_cast<std::uint64_t>(copy.get())},
                      {"bytes", copy.size()}});
  }
  for (const auto& d : st.buffers) {
    const std::pair<const char*, const Source*> sources[] = {{"input", &d.input},
                                                             {"timed_input", &d.timed_input},
                                                             {"expected", &d.expected},
                                                             {"timed_expected", &d.timed_expected}};
    for (const auto& [what, src] : sources) {
      if (!src->device) continue;
      staged.push_back({{"buffer", d.spec->name},
                        {"source", what},
                        {"address", static_cast<std::uint64_t>(src->device->get())},
                        {"bytes", src->device->size()}});
    }
    if (d.kept) {
      staged.push_back({{"buffer", d.spec->name},
                        {"source", "kept"},
                        {"address", static_cast<std::uint64_t>(d.kept->get())},
                        {"bytes", d.kept->size()}});
    }
    // the reference's staged copy of an input that is never redrawn (setup_reference)
    if (d.ref.get() != 0 && d.spec->buffer.role == BufferRole::in && !d.spec->buffer.fresh) {
      staged.push_back({{"buffer", d.spec->name},
                        {"source", "reference_input"},
                        {"address", static_cast<std::uint64_t>(d.ref.get())},
                        {"bytes", d.spec->buffer.bytes}});
    }
  }
  return staged;
}

}  // namespace

bool CaseRunner::run(json& cases) {
  json result = json::object();
  result["name"] = spec_.name;
  result["status"] = "ok";
  result["error"] = nullptr;
  result["guard_violations"] = json::array();
  result["modified_inputs"] = json::array();
  result["occupancy_blocks_per_sm"] = nullptr;
  result["timing"] = nullptr;
  if (spec_.has_compare()) result["compares"] = json::array();
  if (spec_.repeat_validation) result["determinism"] = json::array();
  if (spec_.has_keep_expected()) result["kept"] = json::array();

  Phase phase = Phase::setup;
  try {
    setup();
    if (json staged = staged_addresses(st_); !staged.is_null()) result["staged"] = staged;
    result["occupancy_blocks_per_sm"] = occupancy();
    steps_.mark("setup");
    launch();
    phase = Phase::launched;
    sync();
    steps_.mark("validation_launch");

    compare_outputs(LaunchKind::validation, result);
    steps_.mark("validation_compare");
    write_outputs();
    steps_.mark("write_outputs");
    check_buffers(result, false, false);
    steps_.mark("validation_checks");
    if (result["status"] == "ok" && spec_.has_keep_expected()) {
      keep_outputs(result);
      steps_.mark("keep");
    }
    if (result["status"] == "ok" && spec_.repeat_validation) {
      run_repeat(result);
      steps_.mark("repeat");
    }
    if (result["status"] == "ok" && spec_.timing) {
      const bool flush = req_.flush_l2 && s_.can_flush_l2();
      const std::set<std::size_t> checked(spec_.checked_launches.begin(),
                                          spec_.checked_launches.end());
      TimedWork work;
      work.prepare = [&] {
        const TimedPrep next = next_timed_prep(checked);
        prepare_timed_launch(flush, next.redraw, next.poison);
      };
      work.launch = [&] { launch(); };
      const bool reference = check_ != nullptr && spec_.check_launch.has_value();
      if (!checked.empty()) {
        work.after = [&](std::size_t sample) {
          if (checked.count(sample) == 0) return false;
          if (reference) enqueue_reference_check(sample);
          if (spec_.has_expected_checks()) note_expected_check(sample);
          if (!spec_.checked_dump.empty()) enqueue_dump(sample);
          return true;  // read back before the candidate launches again
        };
        work.settle = [&] { settle_checks(); };
      }
      result["timing"] = time_work(s_, *spec_.timing, work, flush);
      steps_.mark("timing");
      if (spec_.has_timed_check()) {
        run_timed_check(result);
        steps_.mark("timed_check");
      }
      if (spec_.confirm_launch) {
        run_confirm(result);
        steps_.mark("confirm");
      }
      if (spec_.has_fresh() || spec_.has_reference_checks() || spec_.has_expected_checks()) {
        report_reference_checks(result);
      }
      if (!spec_.checked_dump.empty()) write_dumps(result);
      steps_.mark("reference_checks");
    }
  } catch (const CudaError& e) {
    result["error"] = case_error(e.info());
    // Once the kernel has run, any failure means the context may be poisoned: the launch
    // itself was accepted, so what fails now is the kernel's doing.
    const bool fatal = phase == Phase::launched || detail::is_context_fatal(e.code());
    result["status"] = fatal ? "runtime_error" : "invalid_launch";
    if (fatal) {
      s_.mark_broken();
    } else {
      drain();  // cuMemFree must not race copies still queued on the stream
    }
    steps_.mark("failed");
    result["steps_ms"] = steps_.json();
    cases.push_back(std::move(result));
    return fatal;
  } catch (...) {
    // IoError, bad_alloc: the request fails, but queued work must finish before the case's
    // buffers are freed on the way out.
    if (!s_.broken()) drain();
    throw;
  }
  result["steps_ms"] = steps_.json();
  cases.push_back(std::move(result));
  return false;
}

// Expected values are hidden from kernels until their compare (staging.hpp): uploaded and
// protected by stage(), unmapped here; cached ones stay hidden between requests. So are the
// timed check's inputs until that launch: "inputs the kernel has not seen" must not be readable
// by the launches before it. A copy that is also one of the case's inputs (the same file, one
// cache entry) stays mapped: the candidate is given those bytes anyway, and the timed launches
// copy from it.
void CaseRunner::hide_secrets() {
  std::set<const DeviceBuffer*> inputs;
  for (const auto& d : st_.buffers) {
    if (d.input.device) inputs.insert(d.input.device.get());
  }
  for (const auto& d : st_.buffers) {
    for (const Source* src : {&d.expected, &d.timed_expected, &d.timed_input}) {
      if (src->device && inputs.count(src->device.get()) == 0) s_.hide_staged(*src->device);
    }
  }
}

Source CaseRunner::stage(const std::string& path, std::uint64_t bytes, bool need_device) {
  Source src;
  if (req_.input_cache) {
    src.device = s_.input_cache().get(path, bytes, s_.stream());
    return src;
  }
  src.host = read_file(path);
  if (src.host.size() != bytes) {
    throw IoError(path + " changed size while the harness was running");
  }
  if (need_device && bytes > 0) {
    auto device = std::make_shared<DeviceBuffer>(s_.allocate_staged(bytes));
    KO_CU(drv_.cuMemcpyHtoDAsync(device->get(), src.host.data(), bytes, s_.stream()));
    src.device = std::move(device);
    // Read-only for kernels from here on (staging.hpp): the upload must have finished first.
    sync();
    s_.protect_staged(*src.device);
    // The host copy is dropped once setup() has synchronized.
  }
  return src;
}

Source CaseRunner::expected_source(const std::string& value, std::uint64_t bytes) {
  if (!is_kept_ref(value)) return stage(value, bytes, true);
  Source src;
  // looked up before the request ran (find_kept_copies), its size checked there
  if (kept_ != nullptr) {
    if (const auto it = kept_->find(value.substr(kept_prefix.size())); it != kept_->end()) {
      src.device = it->second.buffer;
      return src;
    }
  }
  throw std::logic_error("kept copy " + value + " was not looked up before the request");
}

Source CaseRunner::drawn(const DeviceArg& d, const InputDraw& draw) {
  const auto& b = d.spec->buffer;
  Source src;
  if (b.bytes == 0) return src;
  const auto enqueue = [&](CUdeviceptr dst) {
    // draw index 0 under the draw's own key, like a fresh draw (draw_key.hpp): the values are
    // a function of (seed, argument, element, spec) only, the same in every request
    enqueue_draw(drv_, s_.support(), *b.dtype, s_.sm_count(), s_.stream(), dst,
                 b.bytes / scalar_size(*b.dtype), draw_key(draw.seed, 0, d.index), 0, d.index,
                 draw.spec);
  };
  if (req_.input_cache) {
    const auto bits = [](double x) {
      std::uint64_t u = 0;
      std::memcpy(&u, &x, sizeof u);
      return std::to_string(u);
    };
    const auto& f = draw.spec;
    const std::string key = "draw:" + std::to_string(draw.seed) + ":" + std::to_string(d.index) +
                            ":" + scalar_type_name(*b.dtype) + ":" +
                            std::to_string(static_cast<int>(f.kind)) + ":" + bits(f.a) + ":" +
                            bits(f.b) + ":" + std::to_string(f.low) + ":" +
                            std::to_string(f.range) + choice_key(f) + structure_key(f);
    src.device = s_.input_cache().get_drawn(key, b.bytes, s_.stream(), enqueue);
    return src;
  }
  auto device = std::make_shared<DeviceBuffer>(s_.allocate_staged(b.bytes));
  enqueue(device->get());
  sync();  // read-only for kernels from here on (staging.hpp): the fill must have finished
  s_.protect_staged(*device);
  src.device = std::move(device);
  return src;
}

void CaseRunner::copy_into(const Source& src, CUdeviceptr dst, std::uint64_t bytes) {
  if (bytes == 0) return;
  if (src.device) {
    // A hidden input (the timed check's, or a file an earlier request hid as expected values):
    // the launch it is copied for is given these bytes anyway, so it is mapped for the copy,
    // once every launch before has finished.
    if (src.device->unmapped()) {
      sync();
      s_.reveal_staged(*src.device);
    }
    KO_CU(drv_.cuMemcpyDtoDAsync(dst, src.device->get(), bytes, s_.stream()));
  } else {
    KO_CU(drv_.cuMemcpyHtoDAsync(dst, src.host.data(), bytes, s_.stream()));
  }
}

void CaseRunner::setup() {
  const CUstream stream = s_.stream();
  const bool timed_check = spec_.timing.has_value() && spec_.has_timed_check();
  st_.slots.resize(spec_.args.size());
  st_.params.resize(spec_.args.size());
  st_.buffers.reserve(spec_.args.size());
  for (std::size_t i = 0; i < spec_.args.size(); ++i) {
    const auto& arg = spec_.args[i];
    ParamSlot& slot = st_.slots[i];
    std::memset(slot.bytes, 0, sizeof slot.bytes);
    st_.params[i] = slot.bytes;

    if (arg.kind == ArgKind::scalar) {
      std::memcpy(slot.bytes, arg.scalar.raw.data(), arg.scalar.raw.size());
      continue;
    }

    const auto& b = arg.buffer;
    // Owned by the case state before anything is queued on it, so an exception below frees
    // it only after run() has drained the stream.
    DeviceArg& d = st_.buffers.emplace_back();
    d.spec = &arg;
    d.index = static_cast<unsigned>(i);
    // Files first (reads, cache look-ups): only then the guarded buffer and its uploads.
    if (b.role != BufferRole::out) {
      d.input = b.input_draw ? drawn(d, *b.input_draw)
                             : stage(b.input, b.bytes, b.role == BufferRole::inout);
      if (timed_check && b.timed_input_draw) {
        d.timed_input = drawn(d, *b.timed_input_draw);
      } else if (timed_check && !b.timed_input.empty()) {
        d.timed_input = stage(b.timed_input, b.bytes, false);
      }
    }
    const std::uint64_t expected_bytes =
        b.dtype ? b.bytes / scalar_size(*b.dtype) * b.expected_item_size() : 0;
    if (!b.expected.empty()) d.expected = expected_source(b.expected, expected_bytes);
    if (timed_check && !b.timed_expected.empty()) {
      d.timed_expected = expected_source(b.timed_expected, expected_bytes);
    }

    d.layout = make_layout(b.bytes, req_.guard_bytes);
    d.allocation = s_.allocate(d.layout.total_bytes);
    d.data = d.allocation.get() + d.layout.data_offset;
    if (spec_.repeat_validation && b.role != BufferRole::in && b.bytes > 0) {
      d.saved = s_.allocate_staged(b.bytes);  // read-only once it holds the output (run_repeat)
    }
    if (!b.keep_expected.empty() && b.bytes > 0) {
      // protected and hidden once it holds the output (keep_outputs)
      d.kept = std::make_shared<DeviceBuffer>(s_.allocate_staged(b.bytes));
    }
    // Guards, the alignment slack and (until overwritten below) the data all start as the
    // pattern; only the guard and slack bytes are checked for it.
    KO_CU(drv_.cuMemsetD8Async(d.allocation.get(), guard_pattern, d.layout.total_bytes, stream));
    reset_buffer(d, d.data, [this](const DeviceArg& a, CUdeviceptr dst) {
      copy_into(a.input, dst, a.spec->buffer.bytes);
    });
    std::memcpy(slot.bytes, &d.data, sizeof d.data);
  }

  setup_tensor_maps();
  hide_secrets();

  // Every allocation happens before the validation launch: running out of memory is then a
  // refused case (invalid_launch), never mistaken for a kernel fault.
  if (spec_.timing && check_ != nullptr && spec_.has_reference_checks()) setup_reference();
  if (spec_.timing && spec_.has_expected_checks()) setup_expected_checks();
  if (spec_.timing && !spec_.checked_dump.empty()) setup_dumps();
  if (spec_.timing && req_.flush_l2) s_.prepare_flush_l2();
  // the support kernels' results: check_buffers' diffs take a slot per buffer
  if (!req_.support_module.empty()) s_.support_scratch(st_.buffers.size() * sizeof(KoDiffResult));
  s_.readback(readback_bytes());  // check_buffers' pinned memory

  if (spec_.launch.shared_bytes > default_dynamic_shared_limit) {
    KO_CU(drv_.cuFuncSetAttribute(f_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  static_cast<int>(spec_.launch.shared_bytes)));
  }
  sync();
  // Host copies that only fed an upload are no longer needed; `in` inputs keep theirs for
  // the unchanged-input check.
  for (auto& d : st_.buffers) {
    for (Source* src : {&d.input, &d.timed_input, &d.expected, &d.timed_expected}) {
      if (src->device) src->host = {};
    }
  }
}

void CaseRunner::setup_tensor_maps() {
  if (spec_.tensor_maps.empty()) return;
#if CUDA_VERSION >= 12000
  st_.tensor_maps.resize(spec_.tensor_maps.size());
  for (std::size_t j = 0; j < spec_.tensor_maps.size(); ++j) {
    const auto& m = spec_.tensor_maps[j];
    const auto d = std::find_if(st_.buffers.begin(), st_.buffers.end(),
                                [&](const DeviceArg& b) { return b.index == m.arg; });
    if (d == st_.buffers.end()) throw std::logic_error("tensor map over an arg that is no buffer");
    // The address the kernel is given for this buffer, the same for every launch of the case;
    // reach is checked against the buffer's bytes again before the driver encodes it.
    const auto c = static_cast<std::size_t>(&spec_ - req_.cases.data());  // spec_ is one of them
    encode_tensor_map(drv_, m, d->data, d->spec->buffer.bytes,
                      "cases[" + std::to_string(c) + "].tensor_maps[" + std::to_string(j) + "]",
                      st_.tensor_maps[j]);
    st_.params.push_back(&st_.tensor_maps[j]);
  }
#else
  throw BadRequest("tensor_maps: this harness was built against CUDA headers older than 12.0");
#endif
}

json CaseRunner::occupancy() {
  const auto& b = spec_.launch.block;
  const std::uint64_t threads = std::uint64_t{b[0]} * b[1] * b[2];
  if (threads > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) return nullptr;
  int blocks = 0;
  const CUresult r = drv_.cuOccupancyMaxActiveBlocksPerMultiprocessor(
      &blocks, f_, static_cast<int>(threads), spec_.launch.shared_bytes);
  if (r == CUDA_SUCCESS) return blocks;
  if (detail::is_context_fatal(r)) {
    detail::throw_cuda_error(r, "cuOccupancyMaxActiveBlocksPerMultiprocessor(...)", __FILE__,
                             __LINE__);
  }
  return nullptr;  // e.g. a block too large for the kernel: the launch will say so
}

void CaseRunner::launch() {
  const auto& l = spec_.launch;
  KO_CU(drv_.cuLaunchKernel(f_, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2],
                            l.shared_bytes, s_.stream(),
                            st_.params.empty() ? nullptr : st_.params.data(), nullptr));
}

CaseRunner::TimedPrep CaseRunner::next_timed_prep(const std::set<std::size_t>& checked) {
  const std::size_t n = timed_prepares_++;
  if (!redraws()) return {};
  if (!spec_.fresh_launches || n == 0) return {true, true};
  const std::size_t warmup = spec_.timing->warmup;
  if (n < warmup) return {false, !spec_.poison_subset};
  const std::size_t sample = n - warmup;
  const auto& samples = *spec_.fresh_launches;
  const bool redraw = std::binary_search(samples.begin(), samples.end(), sample);
  return {redraw, !spec_.poison_subset || redraw || checked.count(sample) != 0};
}

void CaseRunner::prepare_timed_launch(bool flush, bool redraw, bool poison) {
  const CUstream stream = s_.stream();
  last_draw_.reset();
  if (redraw) {
    last_draw_ = draws_++;
    in_draw_ = last_draw_;
  }
  const Restore restore = [this, redraw, stream](const DeviceArg& d, CUdeviceptr dst) {
    const auto& b = d.spec->buffer;
    if (redraw && b.fresh) {
      draw(d, dst, *last_draw_);  // an inout buffer's redraw replaces its restore
    } else if (b.role == BufferRole::inout) {
      KO_CU(drv_.cuMemcpyDtoDAsync(dst, d.input.device->get(), b.bytes, stream));
    }
  };
  reset_buffers(Copies::candidate, restore, poison);
  if (flush) s_.flush_l2();
}

void CaseRunner::reset_buffer(const DeviceArg& d, CUdeviceptr dst, const Restore& restore,
                              bool poison) {
  const auto& b = d.spec->buffer;
  if (b.bytes == 0) return;
  if (b.role == BufferRole::out) {
    // zeroed outputs are part of what the kernel is given (it may accumulate into them)
    if (b.init == BufferInit::zero) {
      KO_CU(drv_.cuMemsetD8Async(dst, 0, b.bytes, s_.stream()));
    } else if (poison) {
      KO_CU(drv_.cuMemsetD8Async(dst, b.poison_byte, b.bytes, s_.stream()));
    }
  } else {
    restore(d, dst);
  }
}

void CaseRunner::reset_buffers(Copies copies, const Restore& restore, bool poison) {
  for (const auto& d : st_.buffers) {
    reset_buffer(d, copies == Copies::candidate ? d.data : d.ref.get(), restore, poison);
  }
}

void CaseRunner::draw(const DeviceArg& d, CUdeviceptr dst, std::uint64_t draw_index) {
  const auto& b = d.spec->buffer;
  // each draw's own key, never the request's seed (draw_key.hpp says why)
  enqueue_draw(drv_, s_.support(), *b.dtype, s_.sm_count(), s_.stream(), dst,
               b.bytes / scalar_size(*b.dtype), draw_key(*spec_.fresh_seed, draw_index, d.index),
               draw_index, d.index, *b.fresh);
}

}  // namespace kernelopt::detail
