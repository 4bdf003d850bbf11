#include "guard.hpp"

#include <cstring>

namespace kernelopt {

BufferLayout make_layout(std::uint64_t bytes, std::uint64_t guard) noexcept {
  BufferLayout l;
  l.bytes = bytes;
  l.guard = guard;
  std::uint64_t padded = (bytes + buffer_alignment - 1) / buffer_alignment * buffer_alignment;
  if (padded == 0) padded = buffer_alignment;
  l.before_offset = 0;
  l.before_bytes = guard;
  l.data_offset = guard;
  l.after_offset = guard + bytes;
  l.after_bytes = (padded - bytes) + guard;
  l.total_bytes = guard + padded + guard;
  return l;
}

namespace {

// Counts the bytes from `start` on where `differs` holds; bytes before `start` are known alike.
template <typename Differs>
std::optional<ByteDiff> count_from(std::size_t start, std::size_t size, Differs differs) noexcept {
  std::optional<ByteDiff> diff;
  for (std::size_t i = start; i < size; ++i) {
    if (differs(i)) {
      if (!diff) diff = ByteDiff{i, 0};
      ++diff->bytes_changed;
    }
  }
  return diff;
}

}  // namespace

// Nothing changed is the common case, checked eight bytes at a time (64 KiB of guard took ~85 us
// byte by byte, a wait's worth several times per case); bytes are counted one by one only from the
// first word that differs.
std::optional<ByteDiff> find_pattern_changes(const std::uint8_t* data, std::size_t size,
                                             std::uint8_t pattern) noexcept {
  std::uint64_t word = 0;
  std::memset(&word, pattern, sizeof word);
  std::size_t i = 0;
  for (; i + sizeof word <= size; i += sizeof word) {
    std::uint64_t w = 0;
    std::memcpy(&w, data + i, sizeof w);
    if (w != word) break;
  }
  return count_from(i, size, [&](std::size_t k) { return data[k] != pattern; });
}

std::optional<ByteDiff> find_differences(const std::uint8_t* actual, const std::uint8_t* expected,
                                         std::size_t size) noexcept {
  if (size == 0 || std::memcmp(actual, expected, size) == 0) return std::nullopt;
  return count_from(0, size, [&](std::size_t k) { return actual[k] != expected[k]; });
}

}  // namespace kernelopt
