// Checked launches against expected values given up front (feature "checked_expected",
// PROTOCOL.md "Checked launches against expected values"): the harness's side. The values are
// staged at setup like an `expected` file (read-only, hidden), compared with ko_compare_ref_<dtype>
// (or ko_compare_<dtype> for float64 values) into the checked launches' result slots while the
// stream is idle after the launch, and read back before the candidate launches again, like a
// CUDA reference's verdicts (fresh.cpp).
#include <algorithm>
#include <string>

#include "case_runner.hpp"
#include "checked_expected.hpp"
#include "errors.hpp"
#include "file_io.hpp"
#include "support.hpp"

namespace kernelopt::detail {
namespace {

bool is_output(const DeviceArg& d) { return d.spec->buffer.role != BufferRole::in; }

}  // namespace

// Before the validation launch (every allocation happens then): each entry's values uploaded
// into a staged copy, mapped read-only and then hidden until its compare; and the result slots.
// The files are read here, not kept in the input cache: each request's draws are new.
void CaseRunner::setup_expected_checks() {
  const auto c = static_cast<std::size_t>(&spec_ - req_.cases.data());  // spec_ is one of them
  const std::string field = "cases[" + std::to_string(c) + "].checked_expected";
  std::uint64_t total = 0;
  for (const auto& e : spec_.checked_expected) {
    const auto& b = spec_.args[e.arg].buffer;
    total += b.bytes / scalar_size(*b.dtype) * b.expected_item_size();
  }
  st_.checked_expected.reserve(spec_.checked_expected.size());
  for (std::size_t k = 0; k < spec_.checked_expected.size(); ++k) {
    const auto& e = spec_.checked_expected[k];
    const auto& b = spec_.args[e.arg].buffer;
    const std::uint64_t bytes = b.bytes / scalar_size(*b.dtype) * b.expected_item_size();
    DeviceBuffer& copy = st_.checked_expected.emplace_back();
    if (bytes == 0) continue;
    try {
      copy = s_.allocate_staged(bytes);  // evicts the input cache while out of memory
    } catch (const CudaError& err) {
      if (err.code() != CUDA_ERROR_OUT_OF_MEMORY) throw;
      throw BadRequest(field + "[" + std::to_string(k) +
                       "]: the device has no memory left for it: the expected values of this "
                       "case's checked launches take one copy of an output per entry (" +
                       std::to_string(spec_.checked_expected.size()) + " entries, " +
                       std::to_string(total) +
                       " bytes in all) beside the case's own buffers, and do not fit even with "
                       "the input cache emptied; list fewer checked launches, or give the values "
                       "in the buffer's dtype (expected_dtype) instead of float64");
    }
    // read only once there is room for it: a refusal costs no read of a large file
    const auto host = read_file(e.expected);
    if (host.size() != bytes) {
      throw IoError(e.expected + " changed size while the harness was running");
    }
    KO_CU(drv_.cuMemcpyHtoDAsync(copy.get(), host.data(), bytes, s_.stream()));
    sync();  // protected (and hidden) only once the upload has completed
    s_.protect_staged(copy);
    s_.hide_staged(copy);
  }
  const std::size_t outputs =
      static_cast<std::size_t>(std::count_if(st_.buffers.begin(), st_.buffers.end(), is_output));
  const std::size_t checks =
      spec_.checked_launches.size() + (spec_.confirm_launch && spec_.confirm_expected() ? 1 : 0);
  const std::size_t slots = std::max<std::size_t>(checks * outputs, 1);
  st_.check_results = s_.allocate(slots * sizeof(KoCompareResult));
  init_compare_results(drv_, s_.stream(), st_.check_results.get(), slots);
}

void CaseRunner::note_expected_check(std::optional<std::size_t> sample) {
  checks_.push_back({sample, in_draw_, last_draw_, true, {}});
}

// The candidate's outputs of the launch are still in its buffers: nothing has launched since
// (the batch ended with it). Each output is compared with its entry's values, revealed for that
// compare only, into the check's slot, reset first so nothing the candidate wrote there counts.
void CaseRunner::compare_expected(std::size_t slot) {
  ReferenceCheck& check = checks_[slot];
  const CUstream stream = s_.stream();
  const std::size_t outputs =
      static_cast<std::size_t>(std::count_if(st_.buffers.begin(), st_.buffers.end(), is_output));
  std::size_t j = 0;
  for (const auto& d : st_.buffers) {
    if (!is_output(d)) continue;
    const std::size_t out = j++;
    std::string& error = check.errors.emplace_back();
    const auto& b = d.spec->buffer;
    const auto& entries = spec_.checked_expected;
    const auto it = std::find_if(entries.begin(), entries.end(), [&](const CheckedExpected& e) {
      const bool same = e.sample ? check.sample && *check.sample == *e.sample : !check.sample;
      return same && e.arg == d.index;
    });
    if (it == entries.end()) {
      // parse_request lets no output of a checked launch go without values
      error = "no expected values were given for this launch";
      continue;
    }
    if (it->draw != check.draw) {
      // values computed for other inputs: never compared, reported as failed with the reason
      error = "the expected values are for " + draw_name(it->draw) + ", but the launch got " +
              draw_name(check.draw) + ": not compared (compute the draw as PROTOCOL.md says)";
      continue;
    }
    const DeviceBuffer& values =
        st_.checked_expected.at(static_cast<std::size_t>(it - entries.begin()));
    const std::uint64_t elements = b.bytes / scalar_size(*b.dtype);
    if (elements == 0) continue;
    const CUdeviceptr result =
        st_.check_results.get() + (slot * outputs + out) * sizeof(KoCompareResult);
    const CUfunction compare = s_.support().function(
        b.native_expected() ? compare_ref_kernel_name(*b.dtype) : compare_kernel_name(*b.dtype));
    sync();  // every launch before has finished: no kernel of the candidate's sees the values
    const Revealed shown(s_, values);
    init_compare_results(drv_, stream, result, 1);
    enqueue_compare(drv_, compare, s_.sm_count(), stream, d.data, values.get(), elements, b.compare,
                    result);
    sync();  // the compare has read them before they are hidden again
  }
}

}  // namespace kernelopt::detail
