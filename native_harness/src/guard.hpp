// Where a buffer sits inside its allocation, and the byte comparisons that find writes
// outside it. Pure host code: unit-tested without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace kernelopt {

inline constexpr std::uint8_t guard_pattern = 0xCD;
inline constexpr std::uint64_t buffer_alignment = 256;

// [before guard][buffer bytes][slack up to 256 alignment][after guard]
// The slack belongs to the after-guard: a kernel may not write past `bytes`, and the checker
// sees the after-guard as starting right at `bytes`.
struct BufferLayout {
  std::uint64_t bytes = 0;  // what the kernel may touch
  std::uint64_t guard = 0;  // requested guard on each side
  std::uint64_t before_offset = 0;
  std::uint64_t before_bytes = 0;
  std::uint64_t data_offset = 0;   // the pointer the kernel gets: allocation + data_offset
  std::uint64_t after_offset = 0;  // == data_offset + bytes
  std::uint64_t after_bytes = 0;   // slack + guard
  std::uint64_t total_bytes = 0;   // allocation size, never 0
};

// An empty buffer still gets 256 bytes of (after-guard) space, so the kernel receives a
// valid, aligned pointer whose every byte is checked.
BufferLayout make_layout(std::uint64_t bytes, std::uint64_t guard) noexcept;

struct ByteDiff {
  std::uint64_t first_offset = 0;
  std::uint64_t bytes_changed = 0;
};

// nullopt when every byte of `data` equals `pattern`.
std::optional<ByteDiff> find_pattern_changes(const std::uint8_t* data, std::size_t size,
                                             std::uint8_t pattern) noexcept;

// nullopt when the two ranges are byte-identical.
std::optional<ByteDiff> find_differences(const std::uint8_t* actual, const std::uint8_t* expected,
                                         std::size_t size) noexcept;

}  // namespace kernelopt
