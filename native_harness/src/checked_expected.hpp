// Checked launches against expected values given up front (feature "checked_expected",
// PROTOCOL.md "Checked launches against expected values"): where a case has no CUDA reference
// (a problem written in PyTorch, whose reference runs in another process), the caller computes
// the expected outputs of chosen checked launches on exactly the inputs those launches get, and
// the harness compares them on the device as it compares a reference's outputs. For that the
// caller must know which draw each launch gets: planned_draw is the rule, written once, that
// parse_request checks the request against and the tests hold the harness to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "request.hpp"

namespace kernelopt {

// The draw a launch of a case gets (its `in` buffers with `fresh` hold it), as case_runner.cpp
// makes them: draws are numbered in launch order from 0, outside the validation launch and the
// determinism re-run (which see the inputs):
// - with `fresh_timed` (the default) and no `fresh_launches`: one draw before every timed launch:
//   in events mode the `warmup` warm-up launches get 0..warmup-1 and measured sample s gets
//   warmup + s; in graph mode the warm-up launches (at least one when `graph_batch` is omitted:
//   the probe that chooses it) and the untimed upload replay come first, so sample s gets
//   warmup + 1 + s (with `graph_batch`) or max(warmup, 1) + 1 + s (without);
// - with `fresh_launches` F (events mode): draws before the first timed launch and before each
//   listed sample only, so sample s gets the number of launches among {0} and {warmup + f : f in
//   F} up to launch warmup + s, minus one (the last draw made at or before it);
// - with `fresh_timed` false, or no buffer with `fresh`: no measured sample gets a draw;
// - the confirm launch (sample none) gets the draw after the last one made while timed (the
//   number of draws made: 0 with `fresh_timed` false) when the case has a `fresh` buffer, else
//   none. With `timing.adaptive` that number depends on how many samples ran: unknown.
// An `inout` buffer with `fresh` holds the draw only on a launch that drew it (with
// `fresh_launches`, the listed samples and the first timed launch); on the others its input.
struct LaunchDraw {
  bool known = true;                  // false: decided while the case runs (adaptive timing)
  std::optional<std::uint64_t> draw;  // none: the launch's inputs are not drawn
};

// The draw of measured sample `sample` (0-based, adaptive rounds included), or of the confirm
// launch (nullopt), of `spec`. A case without timing has no such launch: {true, nullopt}.
LaunchDraw planned_draw(const CaseSpec& spec, std::optional<std::size_t> sample);

// "draw 27" or "no draw": how a launch's draw is named in messages.
std::string draw_name(std::optional<std::uint64_t> draw);

namespace detail {

// Parses and validates cases[i].checked_expected (`path` is the case's); needs the case's
// args, timing, checked_launches, confirm_launch, check_launch and checked_dump parsed first.
// Throws BadRequest naming the field.
void parse_checked_expected(const nlohmann::json& c, const std::string& path, CaseSpec& spec);

}  // namespace detail
}  // namespace kernelopt
