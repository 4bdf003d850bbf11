// Whole-file reads and writes for modules, inputs and outputs. Failures throw IoError with
// the path and the OS's reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kernelopt {

std::vector<std::uint8_t> read_file(const std::string& path);
void write_file(const std::string& path, const std::uint8_t* data, std::size_t size);

// Size of a regular file; throws IoError when it cannot be stat'ed or is not a regular file.
std::uint64_t file_size(const std::string& path);

// Everything readable from `fd` until EOF.
std::string read_all_fd(int fd);

// Writes all of `data` to `fd`, retrying on EINTR and short writes. False on failure.
bool write_all_fd(int fd, const std::string& data) noexcept;

}  // namespace kernelopt
