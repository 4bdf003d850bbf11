// One case of a request (PROTOCOL.md, "Per case, in order"), shared by runner.cpp (which runs
// the cases), case_runner.cpp (setup, launches, timing) and case_checks.cpp (device compare,
// guard and input checks, the determinism re-run and the timed check). Internal to the harness.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "check.hpp"
#include "cuda_raii.hpp"
#include "guard.hpp"
#include "kept.hpp"
#include "request.hpp"
#include "session.hpp"
#include "step_clock.hpp"
#include "support.hpp"

namespace kernelopt::detail {

// Where a buffer's starting contents come from: the file's bytes on the host, or a device
// copy (the input cache's entry, or an upload made once because the device needs it: inout
// restores, expected values). Empty files have neither. Device copies are staged
// (Session::allocate_staged): mapped read-only for kernels once uploaded, where the device
// allows, so the harness only ever reads them.
struct Source {
  std::vector<std::uint8_t> host;
  std::shared_ptr<const DeviceBuffer> device;
};

struct DeviceArg {
  const KernelArg* spec = nullptr;
  BufferLayout layout;
  DeviceBuffer allocation;
  CUdeviceptr data = 0;
  Source input;           // in, inout: the input; inout restores from input.device
  Source timed_input;     // in, inout with timed_input
  Source expected;        // out, inout with expected (device, float64)
  Source timed_expected;  // out, inout with timed_expected (device, float64)
  DeviceBuffer saved;     // repeat_validation: the validation launch's output
  // keep_expected: the copy of the validation launch's output that the input cache keeps,
  // allocated (staged) with the case's other buffers, written after a clean validation launch.
  std::shared_ptr<DeviceBuffer> kept;
  // Checked launches: the CUDA reference's copy of this buffer (in: its inputs, out/inout:
  // its outputs), so it never reads what the candidate may have changed.
  DeviceBuffer ref;
  unsigned index = 0;  // the argument's position: the Philox stream of its fresh draws
  bool output_written = false;
};

// Kernel parameter storage: every slot is 16-byte aligned and wide enough for a pointer or
// any supported scalar, and the vector never reallocates after the pointers are taken.
struct alignas(16) ParamSlot {
  unsigned char bytes[16];
};

struct CaseState {
  std::vector<DeviceArg> buffers;
  std::vector<ParamSlot> slots;  // one per arg
#if CUDA_VERSION >= 12000
  // One per tensor map, encoded once the buffers exist (setup_tensor_maps). CUtensorMap is
  // over-aligned (64 or 128 bytes), which C++17's allocator honours; sized once, so the
  // pointers in `params` stay valid.
  std::vector<CUtensorMap> tensor_maps;
#endif
  // The candidate's kernelParams: the slots, then the tensor maps. Every launch of the
  // candidate (CaseRunner::launch) passes these.
  std::vector<void*> params;
  // Checked launches: the reference's parameters (its own buffers) and one KoCompareResult
  // per (check, output buffer).
  std::vector<ParamSlot> ref_slots;
  std::vector<void*> ref_params;
  DeviceBuffer check_results;
  // checked_dump: the candidate's outputs of each checked launch (slot * outputs + j), and a
  // scratch buffer the size of the largest input to redraw a launch's inputs into.
  std::vector<DeviceBuffer> dump_outputs;
  DeviceBuffer dump_scratch;
  // checked_expected: one staged, hidden copy of each entry's values (spec order); empty for an
  // empty buffer.
  std::vector<DeviceBuffer> checked_expected;
};

// One launch whose outputs the reference checks: a measured sample or the confirm launch.
struct ReferenceCheck {
  std::optional<std::size_t> sample;  // measured sample index; none: the confirm launch
  std::optional<std::uint64_t> draw;  // the draw its fresh `in` inputs came from; none: input
  std::optional<std::uint64_t> launch_draw;  // the draw made for it (inout buffers); none: restored
  bool expected =
      false;  // against checked_expected values (compared in settle_checks), not a reference
  // checked_expected: per output buffer (in argument order), why it was not compared (the
  // launch got another draw than its values are for); empty: compared.
  std::vector<std::string> errors;
};

// Hidden staged data (expected values) mapped for as long as this lives, hidden again after
// (also when the compare throws: a cached copy must not stay readable for the next candidate).
// Data that was not hidden (an input of the case too, see hide_secrets) is left as it is.
class Revealed {
 public:
  Revealed(Session& s, const DeviceBuffer& buffer)
      : s_(s), buffer_(buffer), hidden_(buffer.unmapped()) {
    s_.reveal_staged(buffer_);
  }
  ~Revealed() {
    if (!hidden_) return;
    try {
      s_.hide_staged(buffer_);
    } catch (...) {  // a dead context: it goes with everything in it
    }
  }
  Revealed(const Revealed&) = delete;
  Revealed& operator=(const Revealed&) = delete;

 private:
  Session& s_;
  const DeviceBuffer& buffer_;
  bool hidden_;
};

enum class LaunchKind { validation, repeat, timed };

class CaseRunner {
 public:
  // `check` is the CUDA reference's kernel (request "check_module"), or nullptr. `kept`: the
  // kept copies the request names as expected values (find_kept_copies), held by the caller.
  CaseRunner(Session& s, CUfunction f, const Request& req, const CaseSpec& spec,
             CUfunction check = nullptr, const KeptCopies* kept = nullptr)
      : s_(s), drv_(s.drv()), f_(f), check_(check), req_(req), spec_(spec), kept_(kept) {}

  // Appends the case's result to `cases`. Returns true when the error was fatal.
  bool run(nlohmann::json& cases);

 private:
  enum class Phase { setup, launched };

  void setup();
  // The case's tensor maps, encoded over the guarded buffers and appended to st_.params.
  void setup_tensor_maps();
  void hide_secrets();
  Source stage(const std::string& path, std::uint64_t bytes, bool need_device);
  // A buffer's input drawn on the device (input_draw / timed_input_draw): a staged device copy.
  Source drawn(const DeviceArg& d, const InputDraw& draw);
  // expected / timed_expected: a file staged, or the kept copy a "kept:KEY" value names.
  Source expected_source(const std::string& value, std::uint64_t bytes);
  // kept.cpp: after a clean validation launch, keep_expected outputs kept in the input cache.
  void keep_outputs(nlohmann::json& result);
  void copy_into(const Source& src, CUdeviceptr dst, std::uint64_t bytes);
  void launch();
  void sync() { KO_CU(drv_.cuStreamSynchronize(s_.stream())); }
  void compare_outputs(LaunchKind kind, nlohmann::json& result);
  // One element of `dtype` at `index` of the device array at `base`, widened to double.
  double element_at(CUdeviceptr base, std::uint64_t index, ScalarType dtype);
  void write_output(DeviceArg& d);
  void write_outputs();
  // After a launch, one wait: guards, unchanged inputs (their timed inputs when `timed`), and
  // after the repeat launch the outputs against the validation launch's; then set_status.
  void check_buffers(nlohmann::json& result, bool timed, bool repeat);
  std::size_t readback_bytes() const;
  std::optional<ByteDiff> diff_against(CUdeviceptr data, const Source& src, std::uint64_t bytes);
  static void set_status(nlohmann::json& result);
  void run_repeat(nlohmann::json& result);
  void run_timed_check(nlohmann::json& result);
  // A buffer as a launch must find it, set up before the launch and outside any timed window:
  // an output initialised as its request asks (poisoned, so an element the kernel never writes
  // is caught, or zeroed), any other buffer given its contents by `restore` with the address to
  // fill (its input, a fresh draw, or nothing where it still holds them). Empty buffers are
  // left alone. reset_buffers does it for every buffer of the candidate's or of the CUDA
  // reference's copies (DeviceArg::ref).
  using Restore = std::function<void(const DeviceArg& d, CUdeviceptr dst)>;
  enum class Copies { candidate, reference };
  void reset_buffer(const DeviceArg& d, CUdeviceptr dst, const Restore& restore,
                    bool poison = true);
  void reset_buffers(Copies copies, const Restore& restore, bool poison = true);
  // Outside the timed window: outputs re-initialised (`init` "zero" always; "poison" unless
  // `poison` is false), inout buffers restored (or redrawn), with `redraw` every buffer with a
  // fresh spec drawn anew, then L2 flushed.
  void prepare_timed_launch(bool flush, bool redraw, bool poison = true);
  void draw(const DeviceArg& d, CUdeviceptr dst, std::uint64_t draw_index);
  // fresh.cpp: checked launches against the CUDA reference, the confirm launch.
  void setup_reference();
  void enqueue_reference_check(std::optional<std::size_t> sample);
  // With the stream idle: the verdicts of the checks and the outputs of the dumps enqueued
  // since the last call, copied to host memory before the candidate can launch again.
  void settle_checks();
  void report_reference_checks(nlohmann::json& result);
  void run_confirm(nlohmann::json& result);
  // case_expected.cpp: checked launches against expected values given up front.
  void setup_expected_checks();
  // Right after a checked launch: records it; its compare waits for settle_checks (the stream
  // idle), since its expected values are revealed only then.
  void note_expected_check(std::optional<std::size_t> sample);
  // With the stream idle: the launch of checks_[slot] compared with its expected values.
  void compare_expected(std::size_t slot);
  void setup_dumps();
  void enqueue_dump(std::size_t sample);
  void write_dumps(nlohmann::json& result);
  bool redraws() const noexcept { return spec_.fresh_timed && spec_.has_fresh(); }
  // What the next warm-up or measured launch gets before it (fresh_launches): a redraw, and
  // outputs poisoned. With poison_subset, only the first warm-up launch, the redrawn samples and
  // the checked ones (`checked`: measured-sample indices) find poisoned outputs; the others find
  // what the launch before wrote. A kernel that does less when its outputs already hold a result
  // is then fast on the reused launches alone, which the same split of times names.
  struct TimedPrep {
    bool redraw = false;
    bool poison = true;
  };
  TimedPrep next_timed_prep(const std::set<std::size_t>& checked);
  nlohmann::json occupancy();
  void drain() noexcept { drv_.cuStreamSynchronize(s_.stream()); }

  Session& s_;
  const detail::DriverApi& drv_;
  CUfunction f_;
  CUfunction check_;
  const Request& req_;
  const CaseSpec& spec_;
  const KeptCopies* kept_;
  CaseState st_;
  StepClock steps_;                         // the case's "steps_ms", from construction
  std::uint64_t draws_ = 0;                 // fresh draws made so far (the next draw's index)
  std::optional<std::uint64_t> last_draw_;  // the draw made for the last prepared launch
  std::optional<std::uint64_t> in_draw_;    // the draw the fresh `in` buffers hold
  std::size_t timed_prepares_ = 0;          // warm-up and measured launches prepared so far
  std::vector<ReferenceCheck> checks_;      // in the order of their check_results slots
  std::vector<ReferenceCheck> dumps_;       // in the order of their dump_outputs slots
  std::vector<KoCompareResult> check_raw_;  // the settled checks' verdicts, read back in order
  std::vector<std::vector<std::uint8_t>> dump_host_;  // the settled dumps' outputs, in order
};

}  // namespace kernelopt::detail
