#include "guard.hpp"

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

std::optional<ByteDiff> find_pattern_changes(const std::uint8_t* data, std::size_t size,
                                             std::uint8_t pattern) noexcept {
  std::optional<ByteDiff> diff;
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] != pattern) {
      if (!diff) diff = ByteDiff{i, 0};
      ++diff->bytes_changed;
    }
  }
  return diff;
}

std::optional<ByteDiff> find_differences(const std::uint8_t* actual, const std::uint8_t* expected,
                                         std::size_t size) noexcept {
  std::optional<ByteDiff> diff;
  for (std::size_t i = 0; i < size; ++i) {
    if (actual[i] != expected[i]) {
      if (!diff) diff = ByteDiff{i, 0};
      ++diff->bytes_changed;
    }
  }
  return diff;
}

}  // namespace kernelopt
