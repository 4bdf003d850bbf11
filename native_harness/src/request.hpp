// The request of PROTOCOL.md, parsed and fully validated before the driver is touched, so a
// malformed request is answered with exit code 2 on any machine.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kernelopt {

enum class ArgKind { buffer, scalar };
enum class BufferRole { in, out, inout };
enum class BufferInit { poison, zero };

enum class ScalarType {
  int8,
  int16,
  int32,
  int64,
  uint8,
  uint16,
  uint32,
  uint64,
  float16,
  bfloat16,
  float32,
  float64,
};

// Tolerances of a device-side comparison, computed by Python exactly as compare.py does.
struct CompareTolerance {
  double abs_tol = 0;  // atol * rms(expected)
  double rtol = 0;
  double rel_floor = 1;  // rms(expected), or 1.0 when that is 0; > 0
};

// How a buffer is redrawn on the device before every timed launch (protocol 2 "fresh"):
// ko_fill_<dtype> of kernelopt_mcp/support/fill.cu with these parameters; a choice (feature
// "choice_draw") is its ko_choice_<element bytes> instead.
enum class FreshKind { uniform = 0, normal = 1, randint = 2, choice = 3 };

// The most values a choice draws from: the size of ko_choice's table (KoChoiceTable in fill.cu).
inline constexpr std::size_t max_choice_values = 16;

// A draw's rows x cols matrices made triangular or symmetric right after the fill (feature
// "structured_draw": "structure" of "fresh" and "input_draw"): ko_structure_<element bytes> of
// kernelopt_mcp/support/fill.cu, with the kind as its `kind` argument.
enum class StructureKind { triu = 0, tril = 1, symmetric = 2 };

struct DrawStructure {
  StructureKind kind = StructureKind::triu;
  std::int64_t diagonal = 0;  // triu / tril; 0 for symmetric
  std::uint64_t rows = 1;     // >= 1; rows * cols divides the buffer's element count
  std::uint64_t cols = 1;     // >= 1; == rows for symmetric
};

struct FreshSpec {
  FreshKind kind = FreshKind::uniform;
  double a = 0;             // uniform: low; normal: mean
  double b = 0;             // uniform: high; normal: std
  std::int64_t low = 0;     // randint: low (inclusive)
  std::uint64_t range = 0;  // randint: high - low (> 0)
  // choice: the values as given (1..max_choice_values), then (once the buffer's dtype is known)
  // each one's bits in that dtype, zero-extended: ko_choice's table
  std::vector<double> values;
  std::array<std::uint64_t, max_choice_values> choice_bits{};
  std::optional<DrawStructure> structure;
};

// A buffer's starting bytes drawn on the device instead of read from a file (protocol 2
// "input_draw" / "timed_input_draw"): ko_fill_<dtype> with draw index 0 and key
// draw_key(seed, 0, argument index), so the same (seed, argument, spec) gives the same bytes in
// every request and every process.
struct InputDraw {
  std::uint64_t seed = 0;
  FreshSpec spec;
};

struct BufferArg {
  BufferRole role = BufferRole::in;
  std::uint64_t bytes = 0;
  std::string input;                     // in, inout
  std::string output;                    // out, inout
  BufferInit init = BufferInit::poison;  // out only
  std::uint8_t poison_byte = 0xFF;
  // Protocol 2 (all optional):
  std::optional<ScalarType> dtype;  // element type; required with expected / timed_expected
  std::string expected;             // out, inout: float64 file, one value per element
  std::string timed_expected;       // out, inout: the same for the timed inputs
  std::string timed_input;          // in, inout: replaces input for the timed check launch
  // The element type of the expected / timed_expected files: float64 (none) or the buffer's own
  // dtype (a CUDA reference's outputs as it wrote them: compared by ko_compare_ref_<dtype>).
  std::optional<ScalarType> expected_dtype;
  CompareTolerance compare;                   // with expected / timed_expected
  bool write_output = false;                  // with expected: write output even when it matches
  bool has_compare = false;                   // "compare" was given
  std::optional<FreshSpec> fresh;             // in, inout: redrawn before every timed launch
  std::optional<InputDraw> input_draw;        // in, inout: replaces `input` (no file)
  std::optional<InputDraw> timed_input_draw;  // in, inout: replaces `timed_input`
  // out, inout (feature "device_expected"): after a clean validation launch the output stays on
  // the device as expected values, in the input cache under "kept:" + this key.
  std::string keep_expected;
  bool has_timed_input() const noexcept { return !timed_input.empty() || timed_input_draw; }
  // Bytes of one expected value: 8 (float64), or the buffer's element size.
  std::uint64_t expected_item_size() const noexcept;
  // Whether expected values are in the buffer's own dtype (not float64).
  bool native_expected() const noexcept {
    return expected_dtype && *expected_dtype != ScalarType::float64;
  }
  // Whether expected / timed_expected names a kept device copy ("kept:KEY") instead of a file.
  bool expected_kept() const noexcept;
  bool timed_expected_kept() const noexcept;
};

struct ScalarArg {
  ScalarType dtype = ScalarType::int32;
  std::vector<std::uint8_t> raw;  // little-endian, exactly scalar_size(dtype) bytes
};

struct KernelArg {
  ArgKind kind = ArgKind::buffer;
  std::string name;
  BufferArg buffer;  // kind == buffer
  ScalarArg scalar;  // kind == scalar
};

struct LaunchConfig {
  std::array<unsigned, 3> grid{1, 1, 1};
  std::array<unsigned, 3> block{1, 1, 1};
  unsigned shared_bytes = 0;
};

enum class TimingMode { events, graph };

struct AdaptiveConfig {
  double target_rse = 0.01;
  double max_ms = 2000;
  unsigned max_iterations = 10000;
};

struct TimingConfig {
  unsigned warmup = 0;
  unsigned iterations = 0;
  TimingMode mode = TimingMode::events;
  bool blocking = false;     // hold the stream with ko_spin while a batch is enqueued
  unsigned graph_batch = 0;  // graph mode: launches per graph; 0 = chosen from the warm-up
  std::optional<AdaptiveConfig> adaptive;
};

enum class RequestOp { run, baseline };

// "op": "baseline": a library routine timed by the harness (cuBLAS SGEMM).
struct BaselineSpec {
  std::string library;       // "cublas"
  std::string library_path;  // dlopen'ed
  std::string routine;       // "sgemm"
  std::uint64_t m = 0, n = 0, k = 0;
  TimingConfig timing;
};

// A CUtensorMap the harness encodes over one of the case's buffers (feature "tensor_maps",
// PROTOCOL.md "Tensor maps"), passed after the args. Validated by parse_request
// (tensor_map.hpp), reach included, and again before it is encoded.
enum class TensorSwizzle { none, b32, b64, b128 };
enum class TensorL2Promotion { none, b64, b128, b256 };
enum class TensorOobFill { zero, nan };

struct TensorMapSpec {
  std::string buffer;   // the name of a buffer arg of the case
  std::size_t arg = 0;  // its index in the case's args
  ScalarType dtype = ScalarType::uint8;
  std::vector<std::uint64_t> dims;             // innermost first, rank 1..5
  std::vector<std::uint64_t> strides;          // byte strides of dims 1..rank-1 (packed if omitted)
  bool packed = false;                         // "strides" was omitted
  std::vector<std::uint32_t> box;              // per dimension
  std::vector<std::uint32_t> element_strides;  // per dimension (default all 1)
  TensorSwizzle swizzle = TensorSwizzle::none;
  TensorL2Promotion l2_promotion = TensorL2Promotion::none;
  TensorOobFill oob_fill = TensorOobFill::zero;
};

// The expected outputs of one checked launch, given up front (feature "checked_expected",
// PROTOCOL.md): compared on the device like a CUDA reference's outputs, without one.
struct CheckedExpected {
  std::optional<unsigned>
      sample;  // a measured sample of checked_launches; none: the confirm launch
  // The draw the caller computed the values for (planned_draw, checked_expected.hpp); none: the
  // launch's inputs are not drawn (its `in` buffers hold their input).
  std::optional<std::uint64_t> draw;
  std::string buffer;    // an out / inout buffer of the case
  std::size_t arg = 0;   // its index in the case's args
  std::string expected;  // file: one value per element in the buffer's expected_dtype
};

struct CaseSpec {
  std::string name;
  std::vector<KernelArg> args;
  // Kernel parameters after the args, in order: one 128-byte CUtensorMap each.
  std::vector<TensorMapSpec> tensor_maps;
  LaunchConfig launch;
  std::optional<TimingConfig> timing;  // absent or iterations == 0: validate only
  bool repeat_validation = false;      // protocol 2: second validation launch, bitwise diff
  // Protocol 2, fresh inputs and checked launches (PROTOCOL.md):
  std::optional<std::uint64_t> fresh_seed;  // Philox key of the device draws; hidden
  bool fresh_timed = true;                  // redraw before every warm-up and measured launch
  // With fresh_timed: redraw only before the first warm-up launch and these measured samples
  // (sorted); none: before every launch.
  std::optional<std::vector<unsigned>> fresh_launches;
  // With fresh_launches: "poison" outputs written only before the first warm-up launch and the
  // redrawn and the checked samples; the other launches find what the launch before wrote.
  bool poison_subset = false;
  std::vector<unsigned> checked_launches;    // measured samples whose outputs the reference checks
  std::optional<LaunchConfig> check_launch;  // the CUDA reference's launch for this case
  bool confirm_launch = false;               // one more fresh launch after timing, timed alone
  std::string checked_dump;                  // directory: the checked launches' inputs and outputs
  // Expected outputs of checked launches given as files instead of a CUDA reference.
  std::vector<CheckedExpected> checked_expected;

  // Whether any buffer carries timed_input or timed_expected (the timed check launch).
  bool has_timed_check() const noexcept;
  // Whether any buffer carries expected (device-side compare after validation).
  bool has_expected() const noexcept;
  // Whether any buffer carries expected or timed_expected (the answer lists "compares").
  bool has_compare() const noexcept;
  // Whether any buffer carries a fresh spec.
  bool has_fresh() const noexcept;
  // Whether any buffer's input or timed input is drawn on the device (input_draw,
  // timed_input_draw): needs the support module's ko_fill_<dtype>.
  bool has_input_draws() const noexcept;
  // Whether any buffer carries keep_expected (the answer lists "kept").
  bool has_keep_expected() const noexcept;
  // Whether launches of this case are checked against the CUDA reference (checked_launches,
  // or the confirm launch with a check_launch).
  bool has_reference_checks() const noexcept;
  // Whether launches of this case are checked against expected values given up front
  // (checked_expected), and whether the confirm launch is among them.
  bool has_expected_checks() const noexcept { return !checked_expected.empty(); }
  bool confirm_expected() const noexcept;
};

struct Request {
  RequestOp op = RequestOp::run;
  int device = 0;
  std::string support_module;  // CUBIN of kernelopt_mcp/support/*.cu (ko_compare_*, ko_spin, ...);
                               // "" = none
  std::string module_path;
  std::string entry;
  std::uint64_t guard_bytes = 65536;
  bool flush_l2 = true;
  std::vector<CaseSpec> cases;
  // Protocol 2 (all optional):
  bool input_cache = false;  // keep input/expected files resident on the device
  std::optional<std::uint64_t> input_cache_bytes;  // default: 30% of device memory
  BaselineSpec baseline;                           // op == baseline
  std::string check_module;  // the validated CUDA reference (CUBIN/PTX) for checked launches
  std::string check_entry;
  // Before each case, one line {"progress": {"case", "index"}} on the answer stream, so the
  // caller can hold each case of a batch to its own deadline and name the case that hung.
  bool progress = false;
};

// Large enough for any real buffer, small enough that bytes + 2 * guard + padding cannot
// overflow 64 bits anywhere downstream.
inline constexpr std::uint64_t max_buffer_bytes = 1ull << 48;
inline constexpr std::uint64_t max_guard_bytes = 16ull << 20;
inline constexpr unsigned max_iterations = 100000;
inline constexpr unsigned max_warmup = 10000;
inline constexpr unsigned max_graph_batch = 1000;
// checked_launches per case (each one runs the CUDA reference and a compare).
inline constexpr std::size_t max_checked_launches = 64;
// Largest m, n or k of a baseline GEMM (a 65536^2 float matrix is 16 GiB).
inline constexpr std::uint64_t max_gemm_dim = 65536;
// Expected files hold float64: one value per element.
inline constexpr std::uint64_t expected_item_bytes = 8;

// Expected values kept on the device (feature "device_expected"): an `expected` or
// `timed_expected` value "kept:KEY" names the copy a buffer's "keep_expected": "KEY" kept, which
// the input cache holds under the same string. KEY: 1..128 characters of [A-Za-z0-9._:-].
inline constexpr std::string_view kept_prefix = "kept:";
inline constexpr std::size_t max_kept_key_chars = 128;
// Whether `value` starts with kept_prefix.
bool is_kept_ref(std::string_view value) noexcept;
// Whether `key` is a valid KEY (without the prefix).
bool valid_kept_key(std::string_view key) noexcept;

// Throws BadRequest naming the offending field.
Request parse_request(std::string_view text);
Request parse_request(const nlohmann::json& doc);

std::size_t scalar_size(ScalarType t) noexcept;
const char* scalar_type_name(ScalarType t) noexcept;
std::optional<ScalarType> scalar_type_from_name(std::string_view name) noexcept;
const char* role_name(BufferRole r) noexcept;

namespace detail {
// Decodes `hex` (case-insensitive, no prefix) into exactly `size` bytes; nullopt when the
// length or a digit is wrong.
std::optional<std::vector<std::uint8_t>> decode_hex(std::string_view hex, std::size_t size);
}  // namespace detail

}  // namespace kernelopt
